"""A stage's Spark steps (:class:`tidemark.api.SparkStep`), run by Spark on each micro-batch.

Lifecycle: :class:`StageSteps` is built from the steps of the input topics a worker reads;
``prepare(spark)`` once before the query starts (each step's static tables made and registered as
temporary views, each step checked against the input's schema: a step that does not keep its
rows' origin, changes a Kafka column's type or names a required column it has not is refused in
one line, :class:`SparkStepError`); then ``collect(frame, batch_id)`` in each ``foreachBatch``;
``close()`` when the query has stopped (the cached tables released).

A micro-batch is collected as a :class:`MicroBatch`: the rows of topics without a step as the
source gives them (Arrow, :data:`tidemark.spark.arrow.SOURCE_SCHEMA`), and for each stepped
topic the step's output (one Spark job per topic; the batch is persisted when it takes more than
one). The step may drop rows (a filter, an inner join) and Tidemark still moves the input's
positions past them: the batch's end offsets come from the query's offset log, which Spark writes
before it runs the batch. Rows with a null in a required column carry the names of those
columns in :data:`REJECTED`; when the step did not keep ``value``, their original key, value,
timestamp and headers are looked up in the batch (a second Spark job, only for such rows), so a
dead letter holds the original bytes.

What the step's failures mean: an error in the step's own logic (a Python UDF that raises, a cast
ANSI mode refuses) is the job author's and fails the same way on every attempt:
:func:`step_failure` turns it into a :class:`SparkStepError` that the supervisor reports once;
anything else (an executor lost, a broker outage) stays retryable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tidemark.api import JobSpecError, SparkStep
from tidemark.spark.arrow import SOURCE_SCHEMA
from tidemark.spark.offsets import OffsetFormatError, PartitionOffsets
from tidemark.types import TopicPartition

KAFKA_COLUMNS = tuple(f.name for f in SOURCE_SCHEMA)
"""The input's columns: the record as Kafka gives it (never passed in a row)."""
ORIGIN_COLUMNS = ("topic", "partition", "offset")
"""What every output row of a step keeps: where its record is."""
REJECTED = "_tidemark_rejected"
"""The runtime's column of a stepped output: the required columns that are null (empty: none)."""
INPUT_VIEW = "input"
"""The view a SQL step reads."""


class SparkStepError(JobSpecError):
    """A Spark step that cannot run as written: refused at the start, or failing in its own logic."""


@dataclass
class SteppedRows:
    """One stepped topic's rows of a micro-batch: the step's output and the columns of a row."""

    table: pa.Table
    row_columns: tuple[str, ...]
    originals: pa.Table | None = None  # the rejected rows' original columns, when the step dropped value


@dataclass
class MicroBatch:
    """What a worker processes of one micro-batch with Spark steps."""

    plain: pa.Table | None = None  # rows of topics without a step, as the source gives them
    stepped: list[SteppedRows] = field(default_factory=list)
    ends: dict[TopicPartition, int] | None = None  # the batch's end offsets, when the offset log has them


def apply_step(step: SparkStep, frame: Any) -> Any:
    """The step's output DataFrame of ``frame`` (a SQL step reads it as the view ``input``)."""
    if isinstance(step.transform, str):
        frame.createOrReplaceTempView(INPUT_VIEW)
        return frame.sparkSession.sql(step.transform)
    return step.transform(frame)


def rejected_marker(step: SparkStep) -> Any:
    """The :data:`REJECTED` column: the names of the required columns that are null, null when
    none is (what most rows carry: no string to make, convert and read for them)."""
    from functools import reduce

    from pyspark.sql import functions as F

    nulls = [F.col(c).isNull() for c in step.required]
    return F.when(reduce(lambda a, b: a | b, nulls),
                  F.concat_ws(",", *[F.when(null, F.lit(c)) for c, null in zip(step.required, nulls)]))


class StageSteps:
    """The Spark steps of the input topics one worker reads (see the module)."""

    def __init__(self, stage: str, steps: Mapping[str, SparkStep], topics: tuple[str, ...],
                 timestamped: frozenset[str] = frozenset()) -> None:
        """``steps``: topic -> its step; ``topics``: every topic the worker's query reads;
        ``timestamped``: the stepped topics whose event time is the Kafka timestamp (their step
        must keep the ``timestamp`` column)."""
        self.stage = stage
        self.steps = dict(steps)
        self.timestamped = timestamped
        self.plain_topics = tuple(t for t in topics if t not in self.steps)
        self.row_columns: dict[str, tuple[str, ...]] = {}
        self.keeps_value: dict[str, bool] = {}
        self._cached: list[Any] = []  # the static tables this query cached

    def __bool__(self) -> bool:
        return bool(self.steps)

    def prepare(self, spark: Any) -> None:
        """Make and register the steps' tables, then check each step on the input's schema."""
        for step in self.steps.values():
            for name, make in step.tables:  # type: ignore[misc]
                table = self._call(f"table {name!r}", lambda make=make: make(spark))
                if step.cache_tables:
                    table = table.cache()
                    self._cached.append(table)
                table.createOrReplaceTempView(name)
        empty = spark.createDataFrame([], SOURCE_SCHEMA)
        for topic, step in self.steps.items():
            out = self._call(f"input {topic}", lambda step=step: apply_step(step, empty))
            self.row_columns[topic] = self._check(topic, step, out)
            self.keeps_value[topic] = "value" in out.columns

    def close(self) -> None:
        """Release the cached tables (a session kept for the next attempt makes them again)."""
        for table in self._cached:
            try:
                table.unpersist()
            except Exception:  # a session already stopped
                pass
        self._cached.clear()

    def _call(self, what: str, make: Callable[[], Any]) -> Any:
        try:
            return make()
        except Exception as exc:
            raise SparkStepError(f"stage {self.stage}: the Spark step of {what} fails: {first_line(exc)}") from None

    def _check(self, topic: str, step: SparkStep, out: Any) -> tuple[str, ...]:
        """The row columns of ``out``, or :class:`SparkStepError` naming what is wrong."""
        where = f"stage {self.stage}: the Spark step of input {topic}"
        if not hasattr(out, "schema") or not hasattr(out, "toArrow"):
            raise SparkStepError(f"{where} returns {type(out).__name__}, not a DataFrame")
        columns = out.columns
        missing = [c for c in ORIGIN_COLUMNS if c not in columns]
        if missing:
            raise SparkStepError(f"{where} drops {', '.join(missing)}: keep topic, partition and offset in its "
                                 f"output (each row's origin)")
        types = {f.name: f.dataType for f in out.schema.fields}
        for source in SOURCE_SCHEMA.fields:
            if source.name in types and types[source.name] != source.dataType:
                raise SparkStepError(f"{where} changes column {source.name} to {types[source.name].simpleString()}: "
                                     f"the Kafka columns keep their types; give a new column another name")
        if topic in self.timestamped and "timestamp" not in columns:
            raise SparkStepError(f"{where} drops timestamp, the records' event time (the stage's EventTime has no "
                                 f"timestamp function): keep it in the step's output")
        if REJECTED in columns:
            raise SparkStepError(f"{where} has a column {REJECTED}, a name Tidemark uses")
        if step.required:
            self._call(f"input {topic} (its required columns)", lambda: out.select(rejected_marker(step)).schema)
        rows = tuple(c for c in columns if c not in KAFKA_COLUMNS)
        if not rows and "value" not in columns:
            raise SparkStepError(f"{where} keeps neither value nor a column of its own: the function would get "
                                 f"nothing")
        return rows

    def collect(self, frame: Any, batch_id: int, query_checkpoints: str | None) -> MicroBatch:
        """The micro-batch ``frame`` as the worker processes it (Spark runs the steps here)."""
        from pyspark.sql import functions as F

        jobs = len(self.steps) + (1 if self.plain_topics else 0)
        if jobs > 1:
            frame = frame.persist()
        try:
            batch = MicroBatch(ends=batch_ends(query_checkpoints, batch_id))
            if self.plain_topics:
                batch.plain = frame.filter(F.col("topic").isin(*self.plain_topics)).toArrow()
            for topic, step in self.steps.items():
                rows = frame if jobs == 1 else frame.filter(F.col("topic") == topic)
                batch.stepped.append(self._collect_step(topic, step, rows, frame))
            return batch
        except Exception as exc:
            failure = step_failure(self.stage, exc)
            if failure is not None:
                raise failure from None
            raise
        finally:
            if jobs > 1:
                frame.unpersist()

    def _collect_step(self, topic: str, step: SparkStep, rows: Any, frame: Any) -> SteppedRows:
        out = apply_step(step, rows)
        if step.required:
            out = out.withColumn(REJECTED, rejected_marker(step))
        table = out.toArrow()
        stepped = SteppedRows(table, self.row_columns[topic])
        if step.required and not self.keeps_value[topic]:
            stepped.originals = self._originals(table, frame)
        return stepped

    @staticmethod
    def _originals(table: pa.Table, frame: Any) -> pa.Table | None:
        """The original Kafka columns of the rejected rows (none rejected: None)."""
        import pyarrow.compute as pc

        rejected = table.filter(pc.is_valid(table.column(REJECTED)))
        if rejected.num_rows == 0:
            return None
        wanted = rejected.select(list(ORIGIN_COLUMNS)).to_pylist()
        spark = frame.sparkSession
        keys = spark.createDataFrame([(r["topic"], r["partition"], r["offset"]) for r in wanted],
                                     "topic string, partition int, offset long")
        return frame.join(keys.hint("broadcast"), list(ORIGIN_COLUMNS)).toArrow()


def batch_ends(query_checkpoints: str | None, batch_id: int) -> dict[TopicPartition, int] | None:
    """The end offsets of micro-batch ``batch_id`` from the query's offset log (Spark writes it
    before running the batch: a version line, the batch's metadata, then one line per source);
    None when it is not there or not a Kafka source's."""
    if query_checkpoints is None:
        return None
    try:
        lines = (Path(query_checkpoints) / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
        return dict(PartitionOffsets.from_json(lines[2]).offsets)
    except (OSError, IndexError, OffsetFormatError):
        return None


_USER_SQLSTATE_CLASSES = ("22", "42")  # data exceptions, syntax or access rule violations


def step_failure(stage: str, error: BaseException) -> SparkStepError | None:
    """The :class:`SparkStepError` of a micro-batch's failure that comes from the step's own logic
    (a Python UDF raised, ANSI mode refused a value, the query does not analyze), else None."""
    from pyspark.errors import PySparkException, PythonException

    if isinstance(error, PythonException):
        return SparkStepError(f"stage {stage}: the Spark step fails: {python_error_line(error)}")
    if isinstance(error, PySparkException):
        state = error.getSqlState() or ""
        if state[:2] in _USER_SQLSTATE_CLASSES:
            return SparkStepError(f"stage {stage}: the Spark step fails: {first_line(error)}")
    return None


_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)): (.*)$")


def python_error_line(error: BaseException) -> str:
    """The Python exception a Python worker raised, as ``Type: message``, from the traceback a
    Spark ``PythonException`` holds (its last exception line)."""
    found = [line.strip() for line in str(error).splitlines() if _PYTHON_ERROR.match(line.strip())]
    return found[-1][:500] if found else first_line(error)


def first_line(error: BaseException) -> str:
    """The first line of a (Spark) error's message that says something."""
    for line in str(error).splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "JVM stacktrace", "org.apache", "at ")):
            return line[:500]
    return type(error).__name__
