"""How a stage's streaming query reads Kafka: one interface, two sources.

A stage worker says *what* it reads (:class:`ReadSelection`: its partitions, subscribed or
assigned, the restored positions, the batch size); a :class:`StageSource` says *how*: the Spark
format, its options, and what the session needs for it. Both produce the same rows (``key``,
``value``, ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``), read_committed,
so :func:`tidemark.runtime.job.records.records_of` reads either.

* :class:`SparkKafkaSource` (``format("kafka")``, Spark's own connector,
  :mod:`tidemark.spark.kafka_connector`): offsets are planned in the driver's JVM and partitions
  are read by the executors' Java consumers, with no Python process per query or per partition
  read. Faster to a query's first batch and per record (``bench/bench_kafka_source.py``); the
  default (``spark.source: auto``).
* :class:`TidemarkKafkaSource` (``format("tidemark-kafka")``, Tidemark's Python data source,
  ``docs/concepts/kafka-io.md``): kept for the Tansu engine, whose gaps (aborted records visible,
  short high watermarks) the Python source's offset planning allows for, and for
  ``spark.source: tidemark-kafka``.

A broker outage must not fail a query (``docs/concepts/kafka-io.md``): the Python source waits
for the broker in every call; the connector gets timeouts and retries long enough to wait
through an outage of several minutes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config, java_security, kafka_security, resolve_bootstrap
from tidemark.spark.offsets import PartitionOffsets
from tidemark.types import TopicPartition

EARLIEST = -2  # Spark's connector: "earliest" for one partition in a startingOffsets JSON
OUTAGE_PATIENCE_MS = 300_000  # how long the connector's Kafka calls wait through a broker outage
OFFSET_RETRY_MS = 250  # the connector's pause between two failed offset lookups of the driver
# The Java clients' reconnect and retry backoffs grow to 1 s by default: once the broker is back
# after an outage, a client waited up to that long for its next try (half of it on average).
CLIENT_BACKOFF_MAX_MS = 250
# The broker holds a fetch that finds nothing visible yet for up to fetch.max.wait.ms (500 ms by
# default). A read_committed range of transactional records ends at a commit marker, so every task
# of a micro-batch made one such fetch and waited 500 ms: a batch of 250 records on 4 partitions
# took 1.2 s instead of 0.23 s. The executors fetch only the planned ranges, so a short wait costs
# no polling while a stage is idle.
FETCH_MAX_WAIT_MS = 20


@dataclass(frozen=True)
class ReadSelection:
    """What one stage worker's query reads, and from where."""

    topics: tuple[str, ...]
    partitions: tuple[TopicPartition, ...] = ()  # every partition the worker reads, as known at the start
    assigned: bool = False  # False: subscribe to ``topics`` (partitions added later are read too)
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)  # restored; others from earliest
    max_records: int = 100_000  # records (or offsets) per micro-batch at most (Stage.max_records_per_batch's default)

    def partition_options(self) -> dict[str, str]:
        """``assign`` (JSON, topic -> partitions) or ``subscribe``: the same option in both sources."""
        if not self.assigned:
            return {"subscribe": ",".join(self.topics)}
        assign: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            assign.setdefault(topic, []).append(partition)
        return {"assign": json.dumps(assign)}


class StageSource(Protocol):
    """How a stage's query reads Kafka (see the module docstring)."""

    format: str

    def session_conf(self) -> dict[str, str]:
        """Spark settings the session needs for this source (jars)."""
        ...

    def prepare(self, spark: Any) -> None:
        """Make ``format`` readable in the started ``spark``, before its first ``readStream``."""
        ...

    def options(self, selection: ReadSelection) -> dict[str, str]:
        """The ``readStream`` options reading ``selection``."""
        ...


class TidemarkKafkaSource:
    """Tidemark's Python data source (``tidemark-kafka``); librdkafka settings."""

    format = "tidemark-kafka"

    def __init__(self, client: Mapping[str, Any]) -> None:
        self.client = dict(client)

    def session_conf(self) -> dict[str, str]:
        return {}

    def prepare(self, spark: Any) -> None:
        """Registers the Python data source: about 0.9 s, which a session reading with the
        connector does not spend."""
        from tidemark.spark.datasource import register

        register(spark)

    def options(self, selection: ReadSelection) -> dict[str, str]:
        options = {f"kafka.{k}": str(v) for k, v in self.client.items()}
        options.update(selection.partition_options())
        options["startingOffsets"] = (json.dumps(PartitionOffsets.of(selection.positions.items()).to_json())
                                      if selection.positions else "earliest")
        options.update({"maxRecordsPerTrigger": str(selection.max_records), "isolationLevel": "read_committed"})
        return options


class SparkKafkaSource:
    """Spark's own Kafka connector (``kafka``); Java client settings."""

    format = "kafka"

    def __init__(self, bootstrap: str, security: Mapping[str, str], jars: list[str]) -> None:
        self.bootstrap = bootstrap
        self.security = dict(security)
        self.jars = jars

    def session_conf(self) -> dict[str, str]:
        return {"spark.jars": ",".join(self.jars)}

    def prepare(self, spark: Any) -> None:
        """Nothing: the jars came with the session."""

    def options(self, selection: ReadSelection) -> dict[str, str]:
        options = {"kafka.bootstrap.servers": self.bootstrap,
                   **{f"kafka.{k}": v for k, v in self.security.items()},
                   "kafka.isolation.level": "read_committed",
                   "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
                   "includeHeaders": "true",
                   "maxOffsetsPerTrigger": str(selection.max_records),
                   # wait through a broker outage instead of failing the query
                   "kafka.default.api.timeout.ms": str(OUTAGE_PATIENCE_MS),
                   "kafka.request.timeout.ms": "30000",
                   "kafka.reconnect.backoff.max.ms": str(CLIENT_BACKOFF_MAX_MS),
                   "kafka.retry.backoff.max.ms": str(CLIENT_BACKOFF_MAX_MS),
                   "kafkaConsumer.pollTimeoutMs": str(OUTAGE_PATIENCE_MS),
                   # the driver's offset lookups: tried again every 250 ms once the broker is back
                   # (not up to 5 s later), as long in all as before
                   "fetchOffset.numRetries": str(OUTAGE_PATIENCE_MS // OFFSET_RETRY_MS),
                   "fetchOffset.retryIntervalMs": str(OFFSET_RETRY_MS)}
        options.update(selection.partition_options())
        options["startingOffsets"] = self._starting(selection)
        return options

    @staticmethod
    def _starting(selection: ReadSelection) -> str:
        """The connector needs an offset for every partition once one is given: the others start
        at the earliest (``-2``), as with the Python source."""
        if not selection.positions:
            return "earliest"
        offsets = {key: EARLIEST for key in selection.partitions}
        offsets.update(selection.positions)
        return json.dumps(PartitionOffsets.of(offsets.items()).to_json())


def source_kind(settings: TidemarkSettings) -> str:
    """``kafka`` or ``tidemark-kafka``: ``spark.source``, where ``auto`` is the connector except
    on the Tansu engine."""
    chosen = settings.spark.source
    if chosen == "auto":
        return "tidemark-kafka" if settings.broker_engine == "tansu" else "kafka"
    return chosen


def stage_source(settings: TidemarkSettings, bootstrap: str | None = None) -> StageSource:
    """The source stage queries use under ``settings`` (fetches the connector's jars the first time)."""
    if source_kind(settings) == "tidemark-kafka":
        return TidemarkKafkaSource(base_config(settings, bootstrap))
    from tidemark.spark.kafka_connector import connector_jars  # imports pyspark; fetches with Maven once

    return SparkKafkaSource(bootstrap or resolve_bootstrap(settings), java_security(kafka_security(settings)),
                            [str(jar) for jar in connector_jars()])
