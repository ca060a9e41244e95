"""``tidemark topics create|list|describe``: the topics of the Kafka every Tidemark process uses.

A job's input topic must exist before the job starts (the broker does not create topics on
demand); the job creates its channel and output topics itself. Exit status: see
:mod:`tidemark.admin.kafka_connection`.
"""

from __future__ import annotations

import re
from typing import Any

import typer
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import consumer_config
from tidemark.kafka.reachability import short_reason
from tidemark.kafka.topics import TopicSpec
from tidemark.exit_codes import EXIT_FAILED, EXIT_USAGE
from tidemark.admin.kafka_connection import fail, kafka_client
from tidemark.admin.render import table

topics_app = typer.Typer(help="Kafka topics: create a job's input topic, list, describe.", no_args_is_help=True)

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names


def _config_pairs(pairs: list[str], command: str) -> dict[str, str]:
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(command, f"--config: expected key=value, e.g. retention.ms=86400000, got {pair!r}", EXIT_USAGE)
        config[key.strip()] = value.strip()
    return config


def _partition_count(admin: AdminClient, topic: str) -> int | None:
    meta = admin.list_topics(topic, timeout=10).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return len(meta.partitions)


@topics_app.command("create")
def topics_create(
    name: str = typer.Argument(..., help="The topic's name."),
    partitions: int = typer.Option(1, "--partitions", min=1, max=10_000, help="Number of partitions."),
    config: list[str] = typer.Option([], "--config", help="A topic setting as key=value (repeatable), "
                                     "e.g. --config retention.ms=86400000."),
    if_not_exists: bool = typer.Option(False, "--if-not-exists", help="Leave a topic that exists as it is, "
                                       "whatever its partition count (a deployment's start step)."),
) -> None:
    """Create a topic; nothing to do when it exists with this partition count (exit 1 when it has another,
    unless --if-not-exists)."""
    if not TOPIC_NAME.match(name):
        fail("topics create", f"invalid topic name {name!r}: use 1-249 of A-Z a-z 0-9 . _ -", EXIT_USAGE)
    settings, client = kafka_client("topics create")
    admin = AdminClient(client)
    spec = TopicSpec(name, partitions, _config_pairs(config, "topics create"))
    try:
        created = ensure_topics(admin, [spec], replication_factor=settings.kafka.replication_factor)
        existing = _partition_count(admin, name)
    except KafkaException as exc:
        fail("topics create", f"{name}: {short_reason(exc)}", EXIT_FAILED)
    if created:
        typer.echo(f"created topic {name} ({partitions} partitions)")
    elif existing == partitions or if_not_exists:
        typer.echo(f"topic {name} exists ({existing} partitions)")
    else:
        fail("topics create", f"topic {name} exists with {existing} partitions, not {partitions}", EXIT_FAILED)


@topics_app.command("list")
def topics_list(all_topics: bool = typer.Option(False, "--all", help="Include Kafka's internal topics (__*).")
                ) -> None:
    """Topics with their partition counts."""
    _, client = kafka_client("topics list")
    try:
        topics = AdminClient(client).list_topics(timeout=10).topics
    except KafkaException as exc:
        fail("topics list", short_reason(exc), EXIT_FAILED)
    rows = [(name, len(meta.partitions)) for name, meta in sorted(topics.items())
            if all_topics or not name.startswith("__")]
    typer.echo(table(("TOPIC", "PARTITIONS"), rows))


def _offsets(client: dict[str, Any], topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    consumer = Consumer(consumer_config(client, None))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
    finally:
        consumer.close()


def _overrides(admin: AdminClient, topic: str) -> dict[str, str]:
    """The topic's settings that differ from the broker's defaults."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return {name: entry.value for name, entry in sorted(entries.items())
            if not entry.is_default and entry.value is not None and not entry.is_sensitive}


@topics_app.command("describe")
def topics_describe(name: str = typer.Argument(..., help="The topic's name.")) -> None:
    """Partitions (leader, replicas, start and end offsets) and the settings that are not the broker's defaults."""
    _, client = kafka_client("topics describe")
    admin = AdminClient(client)
    try:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None or not meta.partitions:
            fail("topics describe", f"unknown topic {name!r} (`tidemark topics list` lists them)", EXIT_USAGE)
        offsets = _offsets(client, name, sorted(meta.partitions))
        overrides = _overrides(admin, name)
    except KafkaException as exc:
        fail("topics describe", f"{name}: {short_reason(exc)}", EXIT_FAILED)
    rows = [(p, meta.partitions[p].leader, ",".join(map(str, meta.partitions[p].replicas)), *offsets[p])
            for p in sorted(meta.partitions)]
    typer.echo(f"topic {name}: {len(rows)} partitions, {sum(high - low for _, _, _, low, high in rows)} records "
               "(end minus start offsets)")
    typer.echo(table(("PARTITION", "LEADER", "REPLICAS", "START", "END"), rows))
    for key, value in overrides.items():
        typer.echo(f"  {key}={value}")


def install(app: typer.Typer) -> None:
    app.add_typer(topics_app, name="topics")
