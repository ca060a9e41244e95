"""The ``tidemark-state`` Python data source: a checkpoint's or savepoint's state as a DataFrame.

Lifecycle: :func:`register` once per SparkSession; ``spark.read.format("tidemark-state")
.options(...).load()`` then plans on the driver (the ``_metadata`` and one header of the stage's
files are read there, so a wrong path, stage or state fails before any task runs) and reads on
the executors: one input partition per old task of the stage, each restored and read by the
Python reader (:mod:`tidemark.state_processor.reader`), so the old tasks are read in parallel and
no process holds more than one of them.

Options: ``job`` (required), ``checkpoint`` (a retained id) or ``savepoint`` (a ``_metadata``
path or its directory, relative to checkpoint storage), ``storage`` (the checkpoint storage URL;
default: the settings', ``TIDEMARK_CHECKPOINT_STORAGE_URL``), ``view`` (``state``, the default;
``timers``, ``operator_state``, ``source_positions``, ``metadata``), ``stage`` and, for the state
view, ``state``; ``key_groups_per_partition`` cuts each old task of a keyed view into partitions
of at most that many key groups (more, smaller partitions than old tasks). A changelog-backed checkpoint is read from the job's Kafka, as the executors'
settings name it (``KAFKA_BOOTSTRAP_SERVERS``).

Columns: see :data:`SCHEMAS`. Keys, namespaces and user keys are JSON text
(:func:`tidemark.state_processor.json_compatible`), and so are values, except a state whose
serializer records an Avro schema (``AvroSerializer``, ``DataclassSerializer``): its ``value``
column has the schema's Spark type (:mod:`tidemark.spark.avro_types`; a list state's, an array of
it), unless the option ``typed_values`` is ``false`` or the schema has no Spark type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import ArrayType, DataType, IntegerType, StringType, StructField, StructType

from tidemark.spark.avro_types import spark_type
from tidemark.state.descriptors import StateKind
from tidemark.state.serializers import SCHEMA_SERIALIZER_IDS
from tidemark.state_processor.changelog_access import settings_changelog
from tidemark.state_processor.metadata_view import inspect_checkpoint
from tidemark.state_processor.reader import ReadPartition, StateReader
from tidemark.state_processor.source import StateSourceError, open_source

FORMAT = "tidemark-state"
SCHEMAS = {
    "state": "key STRING, namespace STRING, user_key STRING, value STRING, key_group INT, task STRING",
    "timers": "key STRING, namespace STRING, domain STRING, timestamp BIGINT, key_group INT, task STRING",
    "operator_state": "state STRING, mode STRING, subtask INT, key STRING, value STRING",
    "source_positions": "stage STRING, task STRING, topic STRING, partition INT, offset BIGINT",
    "metadata": ("stage STRING, task STRING, subtask INT, key_group_start INT, key_group_end INT, "
                 "handles STRING, files INT, shared_files INT, size_bytes BIGINT, changelog_ranges INT"),
}
_KEYED_VIEWS = ("state", "timers")

# The JVM options of a session that reads large state (``SessionOptions(java_options=...)``).
# Only rows pass through the JVM, each garbage at once; with G1's defaults a longer read touches
# more of the heap G1 committed at the start (the committed sizes are the same for 100 MB and
# 1 GB of state), so the JVM's resident set follows the read's length. A serial collector with a
# fixed 64 MiB young generation reuses the same pages: the resident set stays flat
# (``bench/bench_state_read.py``).
READ_JAVA_OPTIONS = "-XX:+UseSerialGC -Xmn64m"


@dataclass(frozen=True)
class StateOptions:
    """The data source's options, checked (``StateSourceError`` names the wrong one)."""

    storage: str
    job: str
    checkpoint_id: int | None
    savepoint: str | None
    view: str
    stage: str | None
    state: str | None
    typed_values: bool = True
    key_groups_per_partition: int | None = None

    @classmethod
    def parse(cls, options: dict[str, str]) -> StateOptions:
        view = options.get("view", "state")
        if view not in SCHEMAS:
            raise StateSourceError(f"option view: {view!r} is not one of {', '.join(SCHEMAS)}")
        if not options.get("job"):
            raise StateSourceError("option job is required")
        if ("checkpoint" in options) == ("savepoint" in options):
            raise StateSourceError("give exactly one of the options checkpoint (an id) and savepoint (a path)")
        try:
            checkpoint_id = int(options["checkpoint"]) if "checkpoint" in options else None
        except ValueError:
            raise StateSourceError(f"option checkpoint: not an id: {options['checkpoint']!r}") from None
        if view not in ("metadata", "source_positions") and not options.get("stage"):
            raise StateSourceError(f"the {view} view needs the option stage")
        if view == "state" and not options.get("state"):
            raise StateSourceError("the state view needs the option state")
        typed = options.get("typed_values", "true").lower()
        if typed not in ("true", "false"):
            raise StateSourceError(f"option typed_values: true or false, not {typed!r}")
        per_partition = options.get("key_groups_per_partition")
        if per_partition is not None and (not per_partition.isdigit() or int(per_partition) < 1):
            raise StateSourceError(f"option key_groups_per_partition: a positive number, not {per_partition!r}")
        return cls(options.get("storage") or _default_storage(), options["job"], checkpoint_id,
                   options.get("savepoint"), view, options.get("stage"), options.get("state"), typed == "true",
                   None if per_partition is None else int(per_partition))

    def reader(self) -> StateReader:
        from tidemark.storage import open_storage

        source = open_source(open_storage(self.storage), self.job, checkpoint_id=self.checkpoint_id,
                             path=self.savepoint)
        return StateReader(source, changelog=settings_changelog(source.metadata.max_parallelism))


def _default_storage() -> str:
    from tidemark.config.settings import TidemarkSettings, load_settings

    return load_settings(TidemarkSettings).resolved_storage_url


@dataclass(frozen=True)
class TaskPartition(InputPartition):
    """One old task of the stage (a keyed view), or the whole view (``part`` None)."""

    part: ReadPartition | None


class TidemarkStateDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType | str:
        options = StateOptions.parse(dict(self.options))
        value_type = typed_value_type(options)
        if value_type is None:
            return SCHEMAS[options.view]
        text = StringType()
        return StructType([StructField("key", text), StructField("namespace", text), StructField("user_key", text),
                           StructField("value", value_type), StructField("key_group", IntegerType()),
                           StructField("task", text)])  # SCHEMAS["state"] with a typed value

    def reader(self, schema: StructType) -> DataSourceReader:
        options = StateOptions.parse(dict(self.options))
        return StateDataSourceReader(options, typed_value_type(options) is not None)


def typed_value_type(options: StateOptions) -> DataType | None:
    """The Spark type of the ``value`` column of the state view when the state's serializer has an
    Avro schema with one (see the module docstring); ``None``: JSON text."""
    if options.view != "state" or not options.typed_values:
        return None
    meta = next((m for m in options.reader().state_metas(options.stage) or () if m["name"] == options.state), None)  # type: ignore[arg-type]
    if meta is None or meta["value_serializer"]["id"] not in SCHEMA_SERIALIZER_IDS:
        return None
    value_type = spark_type(meta["value_serializer"]["config"]["schema"])
    if value_type is None or meta["kind"] != StateKind.LIST.value:
        return value_type
    return ArrayType(value_type, containsNull=True)


class StateDataSourceReader(DataSourceReader):
    def __init__(self, options: StateOptions, typed_values: bool = False) -> None:
        self.options = options
        self.typed_values = typed_values

    def partitions(self) -> list[InputPartition]:
        options = self.options
        reader = options.reader()  # a wrong path fails here, on the driver
        if options.view not in _KEYED_VIEWS:
            if options.stage is not None:
                reader.partitions(options.stage)  # and an unknown stage
            return [TaskPartition(None)]
        if options.view == "state":
            reader.check_state(options.stage, options.state)  # type: ignore[arg-type]
        return [TaskPartition(p) for p in reader.partitions(options.stage, options.key_groups_per_partition)]  # type: ignore[arg-type]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        options, part = self.options, partition.part  # type: ignore[attr-defined]
        reader = options.reader()
        if options.view == "state":
            for row in reader.read(options.stage, options.state, part):  # type: ignore[arg-type]
                j = row.to_json()
                value = row.value if self.typed_values else _text(j["value"])
                yield _text(j["key"]), _text(j["namespace"]), _text(j["user_key"]), value, row.key_group, row.task
        elif options.view == "timers":
            for timer in reader.timers(options.stage, part):  # type: ignore[arg-type]
                j = timer.to_json()
                yield _text(j["key"]), _text(j["namespace"]), timer.domain, timer.timestamp, timer.key_group, timer.task
        elif options.view == "operator_state":
            for item in reader.operator_state(options.stage):  # type: ignore[arg-type]
                j = item.to_json()
                yield item.state, item.mode, item.subtask, _text(j["key"]), _text(j["value"])
        elif options.view == "source_positions":
            for position in reader.source_positions(options.stage):
                yield position.stage, position.task, position.topic, position.partition, position.offset
        else:
            yield from _metadata_rows(reader)


def _metadata_rows(reader: StateReader) -> Iterator[tuple[Any, ...]]:
    for stage in inspect_checkpoint(reader.source).stages:
        for t in stage.tasks:
            yield (stage.stage, t.task, t.subtask_index, t.key_group_start, t.key_group_end,
                   ",".join(h.kind for h in t.handles), sum(len(h.files) for h in t.handles), t.shared_files,
                   t.size_bytes, len(t.changelog_ranges))


def _text(value: Any) -> str | None:
    """A JSON-compatible value as JSON text; None (no namespace, no user key) stays null."""
    return None if value is None else json.dumps(value, sort_keys=True)


def write_parquet(options: dict[str, str], output: Path, spark: SparkSession | None = None) -> int:
    """Write this data source's rows for ``options`` to the Parquet directory ``output`` with
    ``spark`` (default: a local session, stopped afterwards); how many rows."""
    from tidemark.spark.session import spark_session

    session = spark or spark_session()
    try:
        register(session)
        session.read.format(FORMAT).options(**options).load().write.mode("overwrite").parquet(str(output))
        return int(session.read.parquet(str(output)).count())
    finally:
        if spark is None:
            session.stop()


def register(spark: SparkSession) -> None:
    """Make ``format("tidemark-state")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(TidemarkStateDataSource)


__all__ = ["FORMAT", "READ_JAVA_OPTIONS", "SCHEMAS", "StateOptions", "TidemarkStateDataSource", "register", "write_parquet"]
