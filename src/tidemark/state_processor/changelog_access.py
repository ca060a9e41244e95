"""The changelog readers a changelog-backed checkpoint is read with, over the job's Kafka.

:func:`kafka_changelog` gives the :data:`~.task_restore.ChangelogReaders` of a Kafka client
configuration (the settings every Tidemark process reads, ``KAFKA_BOOTSTRAP_SERVERS``...): the
reader of a task's ranges is built when a changelog-backed task is read, with its topic's
partition count asked of the broker once per topic; nothing connects before.
"""

from __future__ import annotations

from typing import Any

from tidemark.changelog.reader import ChangelogReader
from tidemark.protocol.messages import TaskSnapshot
from tidemark.state_processor.source import StateSourceError
from tidemark.state_processor.task_restore import ChangelogReaders


def kafka_changelog(client: dict[str, Any], max_parallelism: int) -> ChangelogReaders:
    """Changelog readers over the Kafka of ``client`` (librdkafka settings)."""
    partitions: dict[str, int] = {}

    def reader(task: TaskSnapshot) -> ChangelogReader:
        topic = task.changelog_ranges[0].topic
        if topic not in partitions:
            partitions[topic] = _partition_count(client, topic)
        return ChangelogReader(client, partitions=partitions[topic], max_parallelism=max_parallelism)

    return reader


def _partition_count(client: dict[str, Any], topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(client).list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise StateSourceError(f"changelog topic {topic!r} is not in Kafka at {client.get('bootstrap.servers')}")
    return len(meta.partitions)


def settings_changelog(max_parallelism: int) -> ChangelogReaders:
    """:func:`kafka_changelog` over the Kafka of this process's settings, resolved on first use."""
    readers: list[ChangelogReaders] = []

    def reader(task: TaskSnapshot) -> ChangelogReader:
        if not readers:
            from tidemark.config.settings import TidemarkSettings, load_settings
            from tidemark.kafka.clients import base_config

            readers.append(kafka_changelog(base_config(load_settings(TidemarkSettings)), max_parallelism))
        return readers[0](task)

    return reader
