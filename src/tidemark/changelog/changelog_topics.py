"""Which changelog topics a job attempt needs: one per operator its registration declares
changelog-enabled (``JobRegistration.changelog_operators``, v2), each partitioned as
:func:`~tidemark.changelog.partitioning.changelog_topic` says."""

from __future__ import annotations

from tidemark.changelog.partitioning import changelog_topic
from tidemark.kafka.topics import TopicNames, TopicSpec
from tidemark.protocol.messages import JobRegistration


def changelog_partition_count(registration: JobRegistration, default_partitions: int) -> int:
    """The partitions of the job's changelog topics: the requested count (or, when it is 0,
    ``default_partitions``), clipped to ``[1, max_parallelism]``."""
    requested = registration.changelog_partitions or default_partitions
    return max(1, min(requested, registration.max_parallelism))


def changelog_specs(registration: JobRegistration, names: TopicNames,
                    default_partitions: int) -> list[TopicSpec]:
    """The specs of every changelog topic ``registration`` needs (create with ``ensure_topics``;
    a worker may do so too, it is idempotent)."""
    partitions = changelog_partition_count(registration, default_partitions)
    return [changelog_topic(names, registration.job_id, operator, partitions)
            for operator in dict.fromkeys(registration.changelog_operators)]
