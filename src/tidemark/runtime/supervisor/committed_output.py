"""Whether a job's output already holds committed results (the guard of an empty start).

Lifecycle: ``committed_output(client, topics, spec)`` once, when the supervisor is about to start a
job with empty state (``tidemark jobs run --fresh``, or a start that finds no retained checkpoint
or savepoint). Starting empty over results that are already committed writes them a second time,
so the supervisor refuses unless told to (``--force``).

The check is cheap and reads only Kafka: in exactly-once mode the newest commit marker of each
output stage's sink on ``<prefix>.sink-commits`` (one per task and committed checkpoint, written
in the same transaction as the results, see :mod:`tidemark.runtime.worker.outputs`), and of each
side output's, over the slots of
every task of the stage (the job's parallelism, and any other slot of the stage met by the same
backward read, e.g. of a larger parallelism before a rescale); in at-least-once mode, where
results are written at once, whether the output topic holds any record.
"""

from __future__ import annotations

from typing import Any

from tidemark.kafka.metadata import metadata_consumer, topic_partitions, watermark_offsets
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.topics import TopicNames
from tidemark.api import JobSpec
from tidemark.kafka.commit_markers import commit_query_id, newest_commits
from tidemark.types import CheckpointingMode

_ANY_CHECKPOINT = 2**62
_TIMEOUT_S = 10.0


def newest_committed_checkpoint(client: dict[str, Any], topics: TopicNames, spec: JobSpec) -> int:
    """The newest checkpoint id whose results an exactly-once output stage committed (0: none);
    a failover that falls back to an older checkpoint must not restore below it
    (:mod:`tidemark.runtime.supervisor.restore_source`)."""
    if spec.mode is not CheckpointingMode.EXACTLY_ONCE:
        return 0
    markers = topics.sink_commits
    consumer = metadata_consumer(client, "read_uncommitted")
    try:
        partitions = topic_partitions(consumer, markers, _TIMEOUT_S)
    finally:
        consumer.close()
    if not partitions:
        return 0
    found = (newest_commits(client, markers, query_id, range(spec.parallelism), at_most=_ANY_CHECKPOINT,
                            partitions=len(partitions))
             for query_id in sink_query_ids(spec))
    return max((commits.newest_batch for commits in found), default=0)


def sink_query_ids(spec: JobSpec) -> list[str]:
    """The commit-marker query ids of the job's sinks: each output stage's, each side output's
    that no stage of the job reads."""
    return [*(commit_query_id(spec.job_id, stage.operator_id) for stage in spec.stages if not spec.is_channel(stage)),
            *(commit_query_id(spec.job_id, stage.operator_id, side) for stage in spec.stages
              for side, topic in stage.side_output_topics.items() if not spec.is_channel_topic(topic))]


def committed_output(client: dict[str, Any], topics: TopicNames, spec: JobSpec) -> str | None:
    """What committed results the job's output holds (one line), or None when it holds none."""
    outputs = [topic for stage in spec.stages for topic in stage.output_topics if not spec.is_channel_topic(topic)]
    if spec.mode is CheckpointingMode.EXACTLY_ONCE:
        newest = newest_committed_checkpoint(client, topics, spec)
        return (f"output topic {', '.join(outputs)} holds results of job {spec.job_id} committed up to "
                f"checkpoint {newest}") if newest else None
    consumer = metadata_consumer(client, "read_uncommitted")
    wait = broker_wait(client)  # a partition just created may have no leader yet: waited through
    try:
        for topic in outputs:
            held = sum(high - low for low, high in (
                wait.call(f"watermarks of {topic}/{p}",
                          lambda p=p: watermark_offsets(consumer, topic, p, timeout_s=_TIMEOUT_S))
                for p in topic_partitions(consumer, topic, _TIMEOUT_S)))
            if held > 0:
                return f"output topic {topic} holds {held} records"
        return None
    finally:
        consumer.close()
