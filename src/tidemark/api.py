"""The job API: what a user writes to run a stateful job on Tidemark.

A job is a chain of *stages*. Each stage is one PySpark Structured Streaming query (one worker
process) that reads Kafka, keys every record, routes it by key group to one of ``parallelism``
tasks and runs the stage's :class:`KeyedProcessFunction` there with keyed state. A stage without a
key (``key_by=None``, Flink's non-keyed operators) runs a :class:`ProcessFunction` on each task
over the records of the input partitions the task reads, with operator state only (a
:class:`CheckpointedFunction`): sinks, buffers, source-like functions. A stage writes
to a Kafka topic; when a later stage of the same job reads that topic, the topic is a *channel*
(records carry the writer's epoch and task, barriers follow each checkpoint's data), otherwise it
is the job's *output*, written by the two-phase-commit sink.

Lifecycle of a function instance (one per task): constructed by the stage's factory ->
``initialize_state(ctx)`` once, after any restore (a :class:`CheckpointedFunction` only) ->
``open(ctx)`` once, before the first record (register keyed state here) -> ``process(value,
ctx)`` per record, with the record's key current, and ``on_timer`` per timer due ->
``snapshot_state(ctx)`` at each checkpoint (a :class:`CheckpointedFunction`) ->
``notify_checkpoint_complete(id)`` / ``notify_checkpoint_aborted(id)`` as checkpoints end (a
:class:`CheckpointListener`) -> ``close()`` at the end of the attempt. Instances never outlive an
attempt; everything that must survive lives in state.

Example (the seed's access-log job)::

    class CountHits(KeyedProcessFunction):
        def open(self, ctx):
            self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))

        def process(self, value, ctx):
            self.hits.update(self.hits.value() + 1)
            ctx.emit(ctx.key, {"url": ctx.key, "hits": self.hits.value()})
"""

from __future__ import annotations

import datetime
import decimal
import difflib
import enum
import functools
import importlib
import inspect
import json
import operator
import re
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from tidemark.keygroups import DEFAULT_MAX_PARALLELISM, assign_to_key_group, check_max_parallelism
from tidemark.runtime.job.ownership import channel_partition
from tidemark.types import CheckpointingMode, JobId, OperatorId
from tidemark.windows.functions import Windowed


NO_WATERMARK = -(2**63)
"""The watermark before any (Flink: ``Long.MIN_VALUE``): no event time has passed yet."""


class StateContext(Protocol):
    """What ``open`` may register: keyed state of the task's backend."""

    def get_state(self, descriptor: Any) -> Any: ...


class TimerService(Protocol):
    """The current key's timers and the task's clocks (Flink: ``TimerService``), from
    ``ctx.timer_service()`` in ``process`` and ``on_timer``.

    A timer is state: it is checkpointed with the key's other state, moves with its key group on
    rescale, and a second registration of the same key and time is the same timer. An event-time
    timer fires when the stage's watermark reaches its time, a processing-time timer when the wall
    clock does (between micro-batches too, without new input); either calls ``on_timer`` with the
    timer's key current."""

    def register_event_time_timer(self, timestamp_ms: int) -> None: ...

    def register_processing_time_timer(self, timestamp_ms: int) -> None: ...

    def delete_event_time_timer(self, timestamp_ms: int) -> None: ...

    def delete_processing_time_timer(self, timestamp_ms: int) -> None: ...

    def current_watermark(self) -> int:
        """The stage's event-time watermark (ms); :data:`NO_WATERMARK` before the first."""
        ...

    def current_processing_time(self) -> int:
        """The wall clock (ms since the epoch)."""
        ...


class ProcessContext(Protocol):
    """What ``process`` sees: the current key, the record's event time (``timestamp_ms``: the
    stage's :class:`EventTime` extractor's, else the Kafka record's timestamp), an output
    collector and the timer service."""

    key: Any
    timestamp_ms: int

    def emit(self, key: Any, value: Any) -> None: ...

    def output(self, tag: OutputTag | str, value: Any, key: Any = None) -> None:
        """Write ``value`` (and ``key``, if given) to the side output ``tag`` names (one of the
        stage's ``side_outputs``), encoded as the stage encodes its records, with the stage's
        delivery guarantee (Flink: ``ctx.output(outputTag, value)``)."""
        ...

    def timer_service(self) -> TimerService: ...


class OnTimerContext(ProcessContext, Protocol):
    """What ``on_timer`` sees: as ``process``, with ``timestamp_ms`` the timer's time and
    ``time_domain`` ``"event-time"`` or ``"processing-time"``."""

    time_domain: str


class ProcessFunction(ABC):
    """User code of a stage without a key (Flink: ProcessFunction): ``process`` per record, no
    keyed state and no timers (``ctx.key`` is None); operator state through
    :class:`CheckpointedFunction`. See the module lifecycle."""

    def open(self, ctx: StateContext) -> None:  # noqa: B027 - optional hook
        """Register state; called once per attempt, after restore."""

    @abstractmethod
    def process(self, value: Any, ctx: ProcessContext) -> None:
        """Handle one record; emit results with ``ctx.emit``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; state is not touched after this."""


class KeyedProcessFunction(ProcessFunction):
    """User code of a keyed stage (Flink: KeyedProcessFunction): ``process`` runs with the
    record's key current (``ctx.key``), with keyed state and timers. See the module lifecycle."""

    @abstractmethod
    def process(self, value: Any, ctx: ProcessContext) -> None:
        """Handle one record of the current key; emit results with ``ctx.emit``."""

    def on_timer(self, timestamp_ms: int, ctx: OnTimerContext) -> None:  # noqa: B027 - optional hook
        """A timer of the current key fired (see :class:`TimerService`); emit like ``process``.
        Never runs at the same time as ``process``."""


class CoProcessFunction(ABC):
    """User code of a stage without a key over two inputs (Flink: ``CoProcessFunction``):
    ``process_element1`` per record of the stage's first input, ``process_element2`` per record of
    its second; operator state through :class:`CheckpointedFunction`. See the module lifecycle."""

    def open(self, ctx: StateContext) -> None:  # noqa: B027 - optional hook
        """Register state; called once per attempt, after restore."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: ProcessContext) -> None:
        """Handle one record of the first input."""

    @abstractmethod
    def process_element2(self, value: Any, ctx: ProcessContext) -> None:
        """Handle one record of the second input."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; state is not touched after this."""


class KeyedCoProcessFunction(CoProcessFunction):
    """User code of a keyed stage over two inputs (Flink: ``KeyedCoProcessFunction``): each input
    keyed by its own ``key_by`` into one key space, ``process_element1`` / ``process_element2`` run
    with the record's key current and share that key's state and timers; ``on_timer`` as in a
    :class:`KeyedProcessFunction`."""

    def on_timer(self, timestamp_ms: int, ctx: OnTimerContext) -> None:  # noqa: B027 - optional hook
        """A timer of the current key fired; emit like ``process_element1``."""


class ReadOnlyBroadcastState(Protocol):
    """A broadcast state as ``process_element`` and ``on_timer`` see it (Flink's
    ``ReadOnlyBroadcastState``): read, never written, so that every task's copy stays the same."""

    def get(self, key: Any) -> Any: ...

    def contains(self, key: Any) -> bool: ...

    def keys(self) -> Any: ...

    def values(self) -> Any: ...

    def items(self) -> Any: ...

    def is_empty(self) -> bool: ...


class ReadOnlyBroadcastContext(ProcessContext, Protocol):
    """What a broadcast function's ``process_element`` sees: a :class:`ProcessContext` (the key
    and timers in a keyed stage) and the broadcast states, read-only."""

    def get_broadcast_state(self, descriptor: Any) -> ReadOnlyBroadcastState: ...


class BroadcastContext(Protocol):
    """What ``process_broadcast_element`` sees (Flink's ``BroadcastProcessFunction.Context``): no
    key (the element goes to every task), the broadcast states to write, the element's event time,
    the clocks, an output collector and, in a keyed stage, every key's state of the task
    (:meth:`apply_to_keyed_state`)."""

    timestamp_ms: int

    def emit(self, key: Any, value: Any) -> None: ...

    def output(self, tag: OutputTag | str, value: Any, key: Any = None) -> None:
        """As :meth:`ProcessContext.output`; every task gets a broadcast element, so each writes its own."""
        ...

    def get_broadcast_state(self, descriptor: Any) -> Any:
        """The broadcast state of ``descriptor`` (a :class:`~tidemark.state.BroadcastStateDescriptor`),
        read-write: every task applies the same elements in the same order, so every copy is the same."""
        ...

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """Call ``function(key, state)`` for every key of this task that holds state of
        ``descriptor`` (Flink's ``applyToKeyedState``), with ``state`` that key's; a keyed stage only."""
        ...

    def current_watermark(self) -> int: ...

    def current_processing_time(self) -> int: ...


class BroadcastProcessFunction(ABC):
    """User code of a stage without a key over a broadcast input (Flink's
    ``BroadcastProcessFunction``): the stage's first input is its own (its records go to one task
    each), its second a broadcast input (:attr:`Input.broadcast`: every record to every task).
    ``process_broadcast_element`` writes the broadcast state, ``process_element`` reads it. Mix in
    :class:`CheckpointedFunction` / :class:`CheckpointListener` as for one input."""

    def open(self, ctx: StateContext) -> None:  # noqa: B027 - optional hook
        """Register state; called once per attempt, after restore."""

    @abstractmethod
    def process_element(self, value: Any, ctx: ReadOnlyBroadcastContext) -> None:
        """Handle one record of the first input, with the broadcast states read-only."""

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastContext) -> None:
        """Handle one record of the broadcast input, on every task; update the broadcast states.
        What it does must depend on the element and the broadcast states only, so that every task
        ends with the same states."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; state is not touched after this."""


class KeyedBroadcastProcessFunction(BroadcastProcessFunction):
    """User code of a keyed stage over a broadcast input (Flink's ``KeyedBroadcastProcessFunction``):
    ``process_element`` runs with the record's key current (keyed state, timers) and reads the
    broadcast states; ``process_broadcast_element`` writes them and may visit every key's state
    of the task (``ctx.apply_to_keyed_state``); ``on_timer`` as in a :class:`KeyedProcessFunction`,
    with the broadcast states read-only."""

    def on_timer(self, timestamp_ms: int, ctx: OnTimerContext) -> None:  # noqa: B027 - optional hook
        """A timer of the current key fired; emit like ``process_element``."""


def two_inputs(function: Any) -> bool:
    """Whether a stage's function (its class or factory) takes two inputs."""
    return isinstance(function, type) and issubclass(function, (CoProcessFunction, BroadcastProcessFunction))


def takes_broadcast(function: Any) -> bool:
    """Whether a stage's function (its class or factory) takes a broadcast input."""
    return isinstance(function, type) and issubclass(function, BroadcastProcessFunction)


class FunctionInitializationContext(Protocol):
    """What :meth:`CheckpointedFunction.initialize_state` gets (Flink:
    ``FunctionInitializationContext``): whether the task was restored and from which checkpoint or
    savepoint, the task's operator state (redistributed on rescale by its kind) and, the stage being
    keyed, its keyed state. Operator state names starting with ``tidemark_`` are the runtime's."""

    def is_restored(self) -> bool:
        """True when the task's state came from a checkpoint or savepoint (also when it held none
        of this function's)."""
        ...

    @property
    def restored_checkpoint_id(self) -> int | None:
        """The id of the checkpoint or savepoint restored; None on a fresh start."""
        ...

    @property
    def subtask_index(self) -> int:
        """This task's index among the stage's, ``0 .. parallelism - 1`` (Flink's
        ``getIndexOfThisSubtask``): a name for what the task owns outside (a transaction id, say)."""
        ...

    @property
    def parallelism(self) -> int:
        """How many tasks the stage runs in this attempt."""
        ...

    def get_list_state(self, descriptor: Any) -> Any:
        """Even-split list state (Flink: ``getListState``): on a restore at another parallelism
        the old tasks' lists are concatenated and each new task gets a contiguous share, each item
        once."""
        ...

    def get_union_list_state(self, descriptor: Any) -> Any:
        """Union list state (Flink: ``getUnionListState``): after a restore every task has every
        old task's items."""
        ...

    def get_broadcast_state(self, descriptor: Any) -> Any:
        """Broadcast map state (Flink: ``getBroadcastState``): the same map on every task; a
        restore gives each new task one old copy."""
        ...

    def get_state(self, descriptor: Any) -> Any:
        """Keyed state, as ``open``'s ``ctx.get_state``."""
        ...


class FunctionSnapshotContext(Protocol):
    """What :meth:`CheckpointedFunction.snapshot_state` gets (Flink: ``FunctionSnapshotContext``)."""

    @property
    def checkpoint_id(self) -> int: ...

    @property
    def checkpoint_timestamp_ms(self) -> int:
        """When the task took the snapshot."""


class CheckpointedFunction(ABC):
    """A function with state of its own to checkpoint (Flink: ``CheckpointedFunction``), mixed
    into a :class:`KeyedProcessFunction`. ``initialize_state`` runs once per attempt, after the
    restore and before ``open``; ``snapshot_state`` at every checkpoint and savepoint of the task,
    before its state is written: what it puts into the context's operator state by then is in
    that checkpoint."""

    @abstractmethod
    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Register operator (and keyed) state; read what was restored."""

    @abstractmethod
    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Bring operator state up to date for checkpoint ``ctx.checkpoint_id``."""


class CheckpointListener(ABC):
    """A function told when its checkpoints complete or abort (Flink: ``CheckpointListener``):
    commit to an external system on ``notify_checkpoint_complete`` (each task's function hears of
    each completed checkpoint once in a run without failures; after a failover, what the
    restored state holds is what is left to commit). A notification may be missed (a failover
    between the completion and the notification): a later one covers every checkpoint before it."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` (or savepoint) completed: every task has its snapshot."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        """Checkpoint ``checkpoint_id`` was aborted: drop what was prepared for it."""


class StateBackendKind(str, enum.Enum):
    HEAP = "heap"
    ROCKSDB = "rocksdb"


class RocksDBProfile(str, enum.Enum):
    """Predefined RocksDB options (Flink's ``PredefinedOptions``; what each sets:
    ``tidemark.state.rocksdb.options.PROFILES``)."""

    DEFAULT = "default"
    SPINNING_DISK = "spinning-disk"
    SPINNING_DISK_HIGH_MEMORY = "spinning-disk-high-memory"
    FLASH_SSD = "flash-ssd"


@dataclass(frozen=True)
class RocksDBConfig:
    """How a job's RocksDB state is tuned (``state_backend=ROCKSDB``): a predefined ``profile``,
    then, for each state (one column family each), ``options_factory(state_name, options)``, which
    may change the ``rocksdict.Options`` of that state's column family (compression, block sizes,
    write buffers, ...). The memory every RocksDB database of a worker process shares is the
    worker's setting (``TIDEMARK_ROCKSDB__MEMORY_BYTES``), not the job's."""

    profile: RocksDBProfile = RocksDBProfile.DEFAULT
    options_factory: Callable[[str, Any], None] | None = None


class ErrorPolicy(str, enum.Enum):
    """What a stage does with a record it cannot handle: one that does not decode, whose key
    cannot be computed or encoded, whose Tidemark headers are malformed, or whose
    ``process`` raised (see :mod:`tidemark.runtime.worker.record_errors`)."""

    DEAD_LETTER = "dead-letter"  # publish it with its origin and the error, count it, go on (default)
    SKIP = "skip"  # count it (tidemark_worker_records_skipped_total) and go on
    FAIL = "fail"  # fail the attempt; the supervisor restores from the newest checkpoint


class LateRecords(str, enum.Enum):
    """What a stage does with a record behind its watermark (event time at or before it)."""

    DROP = "drop"  # count it (tidemark_worker_late_records_total{action="dropped"}) and go on
    SIDE_OUTPUT = "side-output"  # write it, with its origin, to the stage's late_output topic, and count it
    PROCESS = "process"  # hand it to ``process`` like any other record


_SIDE_OUTPUT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # no '.': ``<stage>.read``, ``.w<n>``, ``.side.<name>``


def is_stage_name(name: str) -> bool:
    """Whether ``name`` can name a stage: 1-64 letters, digits, '_' or '-', not starting with either."""
    return _STAGE_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class OutputTag:
    """A side output of a stage, by name (Flink: ``OutputTag``): a function writes to it with
    ``ctx.output(tag, value)``, and the stage's ``side_outputs`` maps the name to the topic it
    goes to. A plain name works as well as a tag; a tag declared once reads better in a job's code.
    Names: a letter or digit, then letters, digits, ``_``, ``.`` or ``-`` (at most 64)."""

    name: str

    def __post_init__(self) -> None:
        check_side_output_name(self.name)


def check_side_output_name(name: Any) -> None:
    if not isinstance(name, str) or not _SIDE_OUTPUT_NAME.fullmatch(name):
        raise ValueError(f"side output name {name!r}: a letter or digit, then letters, digits, '_', '.' or '-' "
                         f"(at most 64)")


@dataclass(frozen=True)
class EventTime:
    """How a source stage tells event time and makes watermarks (Flink: ``WatermarkStrategy``
    with bounded out-of-orderness and idleness).

    Each input partition's watermark is its largest event time so far minus
    ``max_out_of_orderness_ms`` minus one; the stage's is the minimum over its partitions that
    are not idle. A partition without records for ``idle_timeout_ms`` is idle (None: never) and
    stops holding the watermark back; when every partition is idle the watermark is the largest
    of theirs. Watermarks never go back, travel through channels to the next stages, and are
    checkpointed with the stage's position."""

    timestamp: Callable[[Any], int] | None = None  # event time (ms) of a decoded value; None: the Kafka timestamp
    max_out_of_orderness_ms: int = 0
    idle_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if self.max_out_of_orderness_ms < 0:
            raise ValueError(f"max_out_of_orderness_ms must be at least 0, got {self.max_out_of_orderness_ms}")
        if self.idle_timeout_ms is not None and self.idle_timeout_ms <= 0:
            raise ValueError(f"idle_timeout_ms must be positive or None, got {self.idle_timeout_ms}")


def json_decode(key: bytes | None, value: bytes | None) -> Any:
    """Default record decoder: the value is one JSON document (parsed by orjson; what it refuses
    and Python's ``json`` takes, such as ``NaN`` or integers beyond 64 bits, by ``json``, whose
    error a malformed value raises)."""
    if value is None:
        raise ValueError("record has no value")
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)


def _json_default(value: Any) -> Any:
    """What JSON has no type for and a Spark row holds: a ``Decimal`` as its digits (a string,
    exact), a date or time in ISO 8601, a ``timedelta`` in seconds."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_json_default)  # one, not one per call


def json_encode(value: Any) -> bytes:
    """Default value encoder: compact JSON with sorted keys, in UTF-8 (orjson; ``NaN`` and the
    infinities, which JSON has not, become ``null``; dates and times in ISO 8601, a ``Decimal`` as
    a string of its digits). What orjson cannot write (integers beyond 64 bits, keys that are not
    strings) is written by Python's ``json``."""
    try:
        return orjson.dumps(value, default=_json_default, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return _JSON.encode(value).encode()


def key_partition(key: Any, partitions: int, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """The partition of a topic of ``partitions`` partitions that a producer writes a record of
    ``key`` into so that the topic is co-partitioned with a job keyed by ``key`` (``Input(...,
    co_partitioned=True)``; ``max_parallelism``: the job's): the partition of the key's key group,
    as Tidemark's own channels partition."""
    return channel_partition(assign_to_key_group(key, max_parallelism), max_parallelism, partitions)


def key_encode(key: Any) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode()


KeyBy = Callable[[Any], Any] | str
"""How a record's value gives its key: a function of the value, or the name of a column (the
value's item of that name: a Spark step's row, or a JSON object's field)."""


def column_key(name: str) -> Callable[[Any], Any]:
    """The key function of a ``key_by`` that names a column."""
    if not name:
        raise ValueError("key_by names a column, got an empty name")
    return operator.itemgetter(name)


@dataclass(frozen=True)
class SparkStep:
    """A transformation Spark runs on each micro-batch of an input's records before the stage's
    function sees them (docs/concepts/spark-step.md): ``transform`` is a function ``DataFrame ->
    DataFrame`` or a Spark SQL query over the view ``input``. Its input has the Kafka columns
    ``key``, ``value`` (binary), ``topic``, ``partition``, ``offset``, ``timestamp`` and
    ``headers``; its output keeps ``topic``, ``partition`` and ``offset`` (each row's origin: the
    positions, dead letters and exactly-once need it) and adds the columns the function gets: each
    row reaches the function as a dict of the output's other columns (no per-record decoding in
    Python). A row with a null in one of the ``required`` columns (a dotted path reaches into a
    struct: ``r.url``) is dead-lettered with its original bytes and its origin instead (``from_json``
    gives nulls for what it cannot parse). ``tables``: static DataFrames to join with, each made
    once per query by its function of the SparkSession and registered as a temporary view of its
    name (a Parquet or CSV table, a JDBC table); ``cache_tables`` keeps them in Spark's memory."""

    transform: Callable[[Any], Any] | str
    required: tuple[str, ...] = ()
    tables: typing.Mapping[str, Callable[[Any], Any]] | tuple[tuple[str, Callable[[Any], Any]], ...] = ()
    cache_tables: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.transform, str):
            if not self.transform.strip():
                raise ValueError("SparkStep: the SQL query is empty")
        elif not callable(self.transform):
            raise ValueError(f"SparkStep: transform is a function of a DataFrame or a SQL query, got "
                             f"{type(self.transform).__name__}")
        if isinstance(self.required, str):
            object.__setattr__(self, "required", (self.required,))
        given = self.tables
        pairs = tuple(sorted(given.items() if isinstance(given, typing.Mapping) else given, key=lambda p: p[0]))
        for name, make in pairs:
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name == "input":
                raise ValueError(f"SparkStep: a table's name is a SQL identifier other than 'input', got {name!r}")
            if not callable(make):
                raise ValueError(f"SparkStep: table {name!r} is made by a function of the SparkSession")
        object.__setattr__(self, "tables", pairs)


@dataclass(frozen=True)
class Input:
    """One input of a stage: a Kafka topic, either the job's input or another stage's output (a
    channel), with how its records decode, key and tell event time when that differs from the
    stage's (None: the stage's ``decode``, ``key_by`` and ``event_time``). A stage's inputs are
    numbered in order: a two-input function's first input is ``inputs[0]``.

    ``broadcast``: every record goes to every task of the stage (Flink's broadcast stream), the
    second input of a :class:`BroadcastProcessFunction` or :class:`KeyedBroadcastProcessFunction`;
    it has no key.

    ``co_partitioned``: the job's input topic is already partitioned by the stage's key groups:
    its producer put each record into ``key_partition(key, partitions)`` of its key (the one the
    stage's ``key_by`` gives), as a Tidemark stage's channel is. A keyed stage on several workers
    then reads it without the exchange: each worker reads the partitions of its own key groups
    (docs/concepts/runtime.md, "Co-partitioned input"); a record found in another partition than
    its key's is dead-lettered with its origin.

    ``spark_step``: a :class:`SparkStep` Spark runs on this input's records before the function
    (None: the stage's); its rows reach the function instead of ``decode``'s values."""

    topic: str
    decode: Callable[[bytes | None, bytes | None], Any] | None = None
    key_by: KeyBy | None = None
    event_time: EventTime | None = None
    broadcast: bool = False
    co_partitioned: bool = False
    spark_step: SparkStep | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"an input names a topic, got {self.topic!r}")
        if self.broadcast and self.key_by is not None:
            raise ValueError(f"input {self.topic}: a broadcast input goes to every task, so it has no key_by")
        if self.broadcast and self.co_partitioned:
            raise ValueError(f"input {self.topic}: a broadcast input goes to every task, so it is not co-partitioned")


@dataclass(frozen=True)
class Stage:
    """One stage: source topic(s), keying, the function and the topic it writes."""

    name: str  # the operator id; stable across restarts and rescaling
    inputs: tuple[str | Input, ...]  # topics read (a name: an Input with the stage's defaults); another stage's output makes a channel
    key_by: KeyBy | None  # None: a stage without a key (operator state only), unless its inputs key; a str: a column
    function: Callable[[], ProcessFunction | CoProcessFunction | BroadcastProcessFunction] | Windowed  # keyed functions in a keyed stage, or its windows
    output: str  # Kafka topic written
    decode: Callable[[bytes | None, bytes | None], Any] = json_decode
    encode_value: Callable[[Any], bytes] = json_encode
    encode_key: Callable[[Any], bytes] = key_encode
    # per micro-batch of a worker (offsets with Spark's Kafka connector): a batch costs Spark about
    # 100 ms of CPU whatever its size, so a backlog goes fastest in large batches; a source stage
    # checkpoints between two batches (docs/concepts/runtime.md, "Throughput of a worker")
    max_records_per_batch: int = 100_000
    on_error: ErrorPolicy = ErrorPolicy.DEAD_LETTER
    workers: int | None = None  # worker processes of this stage; None: the job's (JobSpec.workers)
    event_time: EventTime | None = None  # a source stage's watermarks; a channel stage gets its upstream's
    late_records: LateRecords = LateRecords.DROP  # records behind the watermark (only with one)
    late_output: str | None = None  # the topic of late records, with LateRecords.SIDE_OUTPUT
    # side output name -> the topic it writes (ctx.output(OutputTag(name), value)), committed with the
    # stage's delivery guarantee: given as a mapping, kept as (name, topic) pairs in name order
    side_outputs: typing.Mapping[str, str] | tuple[tuple[str, str], ...] = ()
    forwards_to: str | None = None  # set by runtime.job.physical_plan on a source stage's exchange reader
    exchange: str | None = None  # set by runtime.job.physical_plan: the topic its exchange reader forwards into
    exchanged: tuple[str, ...] = ()  # set with ``exchange``: the input topics read through it
    spark_step: SparkStep | None = None  # run by Spark on its inputs' records first (an Input's own overrides it)

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str):
            raise ValueError(f"stage {self.name}: inputs is a tuple of topics or Inputs, got the string {self.inputs!r}")
        inputs = tuple(i if isinstance(i, Input) else Input(i) for i in self.inputs)
        object.__setattr__(self, "inputs", inputs)
        if not inputs:
            raise ValueError(f"stage {self.name}: reads nothing: give it inputs (topics or other stages' outputs)")
        topics = [i.topic for i in inputs]
        if len(set(topics)) != len(topics):
            raise ValueError(f"stage {self.name}: reads a topic twice: {sorted({t for t in topics if topics.count(t) > 1})}")
        for key_by in (self.key_by, *(i.key_by for i in inputs)):
            if isinstance(key_by, str) and not key_by:
                raise ValueError(f"stage {self.name}: key_by names a column, got an empty name")
        if self.key_by is None and any(i.key_by is not None for i in inputs):
            unkeyed = [i.topic for i in inputs if i.key_by is None and not i.broadcast]
            if unkeyed:
                raise ValueError(f"stage {self.name}: a keyed stage keys every input: give key_by to the stage or to "
                                 f"input(s) {unkeyed}")
        if two_inputs(self.function) and len(inputs) != 2:
            raise ValueError(f"stage {self.name}: {self.function.__name__} takes two inputs, the stage has "  # type: ignore[union-attr]
                             f"{len(inputs)}")
        broadcast = [i.topic for i in inputs if i.broadcast]
        if self.forwards_to is None and takes_broadcast(self.function) and [i.broadcast for i in inputs] != [False, True]:
            raise ValueError(f"stage {self.name}: {self.function.__name__} reads its own input first and a "  # type: ignore[union-attr]
                             f"broadcast input second: inputs=(topic, Input(rules_topic, broadcast=True)), got "
                             f"broadcast inputs {broadcast}")
        if self.forwards_to is None and broadcast and not takes_broadcast(self.function):
            raise ValueError(f"stage {self.name}: broadcast input(s) {broadcast} go to a BroadcastProcessFunction or "
                             f"KeyedBroadcastProcessFunction (process_broadcast_element)")
        self._check_side_outputs(topics)
        if (self.late_records is LateRecords.SIDE_OUTPUT) != (self.late_output is not None):
            raise ValueError(f"stage {self.name}: late_output names the topic of late_records=side-output, "
                             f"and only then (late_records={self.late_records.value}, late_output={self.late_output!r})")
        if self.window is not None and not self.keyed:
            raise ValueError(f"stage {self.name}: windows are per key: give key_by")
        if self.window is not None and self.late_records is LateRecords.PROCESS:
            raise ValueError(f"stage {self.name}: a windowed stage takes records behind the watermark as long as "
                             f"their windows allow (Windowed.allowed_lateness_ms); late_records says where the "
                             f"later ones go: drop or side-output, not process")

    def _check_side_outputs(self, inputs: list[str]) -> None:
        given = self.side_outputs
        pairs = tuple(sorted((given.items() if isinstance(given, typing.Mapping) else given)))
        object.__setattr__(self, "side_outputs", pairs)
        for name, topic in pairs:
            check_side_output_name(name)
            if not isinstance(topic, str) or not topic:
                raise ValueError(f"stage {self.name}: side output {name!r} names a topic, got {topic!r}")
        topics = [topic for _, topic in pairs]
        taken: dict[str | None, str] = {self.output: "its output", self.late_output: "its late_output",
                                        **{t: "one of its inputs" for t in inputs}}
        for name, topic in pairs:
            if topic in taken or topics.count(topic) > 1:
                raise ValueError(f"stage {self.name}: side output {name!r} writes {topic}, which is "
                                 f"{taken.get(topic, 'another side output')}: give each side output a topic of its own")

    @property
    def output_topics(self) -> tuple[str, ...]:
        """Every topic it writes: its output, then its side outputs' in name order."""
        return (self.output, *self.side_output_topics.values())

    @functools.cached_property
    def side_output_topics(self) -> dict[str, str]:
        """Side output name -> its topic (kept: ``ctx.output`` looks a name up for each record)."""
        pairs = typing.cast("tuple[tuple[str, str], ...]", self.side_outputs)  # since __post_init__
        return dict(pairs)

    @property
    def operator_id(self) -> OperatorId:
        return OperatorId(self.name)

    @property
    def keyed(self) -> bool:
        return self.key_by is not None or any(i.key_by is not None for i in self.input_list)

    @property
    def broadcast_side(self) -> int | None:
        """The index of the stage's broadcast input, if it has one."""
        return next((n for n, i in enumerate(self.input_list) if i.broadcast), None)

    @property
    def broadcast_topics(self) -> frozenset[str]:
        """The topics of its broadcast inputs (read whole by every worker, or through its exchange)."""
        return frozenset(i.topic for i in self.input_list if i.broadcast)

    @property
    def input_list(self) -> tuple[Input, ...]:
        """``inputs``, every one an :class:`Input` (as ``__post_init__`` made them)."""
        return self.inputs  # type: ignore[return-value]

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics its worker reads: its inputs', the exchange in place of those read through it."""
        own = tuple(i.topic for i in self.input_list if i.topic not in self.exchanged)
        return (self.exchange, *own) if self.exchange is not None else own

    def decode_of(self, item: Input) -> Callable[[bytes | None, bytes | None], Any]:
        return item.decode or self.decode

    def key_of(self, item: Input) -> Callable[[Any], Any] | None:
        key_by = None if item.broadcast else item.key_by or self.key_by
        return column_key(key_by) if isinstance(key_by, str) else key_by

    def spark_step_of(self, item: Input) -> SparkStep | None:
        return item.spark_step or self.spark_step

    def event_time_of(self, item: Input) -> EventTime | None:
        return item.event_time or self.event_time

    @property
    def window(self) -> Windowed | None:
        """The stage's windows, when its function is a :class:`~tidemark.windows.Windowed`."""
        return self.function if isinstance(self.function, Windowed) else None


@dataclass(frozen=True)
class JobSpec:
    """A job: its stages (a directed acyclic graph: a stage reads the job's input topics and other
    stages' outputs, several stages may read one), checkpointing mode and defaults."""

    job_id: JobId
    stages: tuple[Stage, ...]
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    parallelism: int = 2
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    state_backend: StateBackendKind = StateBackendKind.HEAP
    output_partitions: int = 4
    changelog: bool = False
    rocksdb: RocksDBConfig = RocksDBConfig()  # with state_backend=ROCKSDB: its profile and options per state
    workers: int = 1  # worker processes per stage, 1..parallelism (Stage.workers overrides it)

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a job needs at least one stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        check_max_parallelism(self.max_parallelism)
        if not 1 <= self.parallelism <= self.max_parallelism:
            raise ValueError(f"parallelism must be in 1..{self.max_parallelism}, got {self.parallelism}")
        for where, workers in [("workers", self.workers), *((f"stage {s.name}: workers", s.workers)
                                                          for s in self.stages if s.workers is not None)]:
            if workers < 1:
                raise ValueError(f"{where} must be at least 1, got {workers}")
        self._check_graph()
        for stage in self.stages:
            if stage.window is not None and stage.window.needs_watermarks and self.event_time_of(stage) is None:
                raise ValueError(f"stage {stage.name}: event-time windows (and event-time triggers) go by the "
                                 f"watermark: give the stage reading the job's input event_time=EventTime(...), or "
                                 f"use processing_time=True")

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"job {self.job_id} has no stage {name!r}; stages: {[s.name for s in self.stages]}")

    def writer_of(self, topic: str) -> Stage | None:
        """The stage of this job that writes ``topic`` (its output or a side output's), if one does."""
        return next((stage for stage in self.stages if topic in stage.output_topics), None)

    def upstreams_of(self, stage: Stage) -> tuple[Stage, ...]:
        """The stages of this job whose outputs or side outputs ``stage`` reads (its channels), in
        its topics' order, each once."""
        writers = {topic: other for other in self.stages for topic in other.output_topics}
        found = (writers[t] for t in stage.topics if t in writers and writers[t] is not stage)
        return tuple({s.name: s for s in found}.values())

    def readers_of(self, stage: Stage) -> tuple[Stage, ...]:
        """The stages of this job that read ``stage``'s output."""
        return self.readers_of_topic(stage.output, stage)

    def readers_of_topic(self, topic: str, writer: Stage | None = None) -> tuple[Stage, ...]:
        """The stages of this job that read ``topic`` (besides ``writer``)."""
        return tuple(other for other in self.stages if other is not writer and topic in other.topics)

    def input_topics(self) -> list[str]:
        """The job's input topics: what its stages read that no stage of it writes."""
        outputs = {topic for s in self.stages for topic in s.output_topics}
        return sorted({i.topic for s in self.stages for i in s.input_list if i.topic not in outputs})

    def is_source(self, stage: Stage) -> bool:
        """True when ``stage`` reads only the job's input topics (no other stage's output)."""
        return not self.upstreams_of(stage)

    def is_channel(self, stage: Stage) -> bool:
        """True when another stage of this job reads ``stage``'s output."""
        return bool(self.readers_of(stage))

    def is_channel_topic(self, topic: str) -> bool:
        """True when a stage of this job writes ``topic`` (an output or a side output) and another reads it."""
        writer = self.writer_of(topic)
        return writer is not None and bool(self.readers_of_topic(topic, writer))

    def event_time_of(self, stage: Stage) -> EventTime | None:
        """Whether and how ``stage``'s records tell event time: a source stage's strategy (its
        own, or its first input's), else the first of its upstreams' (watermarks travel through
        channels; a job's stages all have event time or none, :meth:`_check_graph`)."""
        seen: set[str] = set()
        while stage.name not in seen:
            seen.add(stage.name)
            upstreams = self.upstreams_of(stage)
            if not upstreams:
                return next((t for t in map(stage.event_time_of, stage.input_list) if t is not None), None)
            stage = upstreams[0]
        return None

    def _check_graph(self) -> None:
        """A directed acyclic graph: one writer per output, no cycle, event time on every path or none."""
        writers: dict[str, str] = {}
        for stage in self.stages:
            for topic in stage.output_topics:
                if topic in writers:
                    raise ValueError(f"stages {writers[topic]} and {stage.name} both write {topic}: give each its own "
                                     f"output topic (a stage reads several by listing them in its inputs)")
                writers[topic] = stage.name
        for stage in self.stages:
            if stepped := [i.topic for i in stage.input_list if i.spark_step is not None and i.topic in writers]:
                raise ValueError(f"stage {stage.name}: a Spark step runs on the job's input topics, and {stepped[0]} "
                                 f"is stage {writers[stepped[0]]}'s output: give that stage the step instead")
            if own := [i.topic for i in stage.input_list if i.topic in stage.output_topics]:
                raise ValueError(f"stage {stage.name} reads its own output {own[0]}: a job is a graph without cycles")
        state = {s.name: 0 for s in self.stages}  # 0 unseen, 1 on the path, 2 done

        def visit(stage: Stage, path: list[str]) -> None:
            state[stage.name] = 1
            for upstream in self.upstreams_of(stage):
                if state[upstream.name] == 1:
                    cycle = path[path.index(upstream.name):] + [upstream.name]
                    raise ValueError(f"stages {' -> '.join(reversed(cycle))} form a cycle: a job is a graph "
                                     f"without cycles")
                if state[upstream.name] == 0:
                    visit(upstream, [*path, upstream.name])
            state[stage.name] = 2

        for stage in self.stages:
            if state[stage.name] == 0:
                visit(stage, [stage.name])
        for stage in self.stages:
            if self.is_source(stage):
                timed = [i.topic for i in stage.input_list if stage.event_time_of(i) is not None]
                untimed = [i.topic for i in stage.input_list if stage.event_time_of(i) is None]
            else:
                timed = [u.name for u in self.upstreams_of(stage) if self.event_time_of(u) is not None]
                untimed = [u.name for u in self.upstreams_of(stage) if self.event_time_of(u) is None]
                for item in stage.input_list:
                    if item.topic not in writers:  # a job's input read with the channels (through an exchange)
                        (timed if stage.event_time_of(item) is not None else untimed).append(item.topic)
            if timed and untimed:
                raise ValueError(f"stage {stage.name}: inputs {timed} have event time and {untimed} not: its "
                                 f"watermark is the smallest of its inputs', so give every input event_time or none")


class JobSpecError(ValueError):
    """A job reference does not name a JobSpec."""


def load_job(reference: str, args: dict[str, Any] | None = None) -> JobSpec:
    """The :class:`JobSpec` at ``"package.module:attribute"``: a JobSpec, or a function called
    with ``args`` as keyword arguments that returns one (so one job can be parameterized)."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise JobSpecError(f"expected 'package.module:attribute', got {reference!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise JobSpecError(f"cannot import {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise JobSpecError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if isinstance(target, JobSpec):
        if args:
            raise JobSpecError(f"{reference} is a JobSpec and takes no arguments, got {sorted(args)}")
        spec = target
    elif callable(target):
        check_job_args(reference, target, args or {})
        try:
            spec = target(**(args or {}))
        except TypeError as exc:
            raise JobSpecError(f"{reference}{tuple(sorted(args or {}))}: {exc}") from None
    else:
        spec = target
    if not isinstance(spec, JobSpec):
        raise JobSpecError(f"{reference} is a {type(spec).__name__}, not a JobSpec")
    for stage in spec.stages:
        if not _STAGE_NAME.fullmatch(stage.name):
            raise JobSpecError(f"{reference}: stage name {stage.name!r} must be 1-64 letters, digits, '_' or '-' "
                               f"(Tidemark names its processes and transactions after a stage with '.' suffixes)")
    return spec


_JSON_TYPES: dict[Any, tuple[str, tuple[type, ...]]] = {
    int: ("an integer", (int,)),
    float: ("a number", (int, float)),
    str: ("a string", (str,)),
    bool: ("true or false", (bool,)),
    list: ("a JSON list", (list,)),
    tuple: ("a JSON list", (list,)),
    dict: ("a JSON object", (dict,)),
}


def _expected(annotation: Any) -> list[str] | None:
    """What ``annotation`` accepts from JSON, as phrases; None when any value may do."""
    origin = typing.get_origin(annotation)
    if annotation is type(None) or annotation is None:
        return ["null"]
    if origin is typing.Literal:
        return [json.dumps(v) for v in typing.get_args(annotation)]
    if origin in (typing.Union, types.UnionType):
        phrases: list[str] = []
        for member in typing.get_args(annotation):
            more = _expected(member)
            if more is None:
                return None
            phrases.extend(more)
        return phrases
    found = _JSON_TYPES.get(origin or annotation)
    return None if found is None else [found[0]]


def _accepts(annotation: Any, value: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is type(None) or annotation is None:
        return value is None
    if origin is typing.Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(member, value) for member in typing.get_args(annotation))
    found = _JSON_TYPES.get(origin or annotation)
    if found is None:
        return True
    if isinstance(value, bool) and bool not in found[1]:
        return False  # JSON true is no integer here
    return isinstance(value, found[1])


def check_job_args(reference: str, function: Callable[..., Any], args: dict[str, Any]) -> None:
    """Check ``args`` (decoded JSON) against the job function's signature before calling it:
    unknown names (with the closest one), missing required ones, and values of the wrong JSON
    type for the parameter's annotation (or its default's type). Raises :class:`JobSpecError`."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to check against: the call will say
        return
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # an annotation that does not evaluate: check by defaults only
        hints = {}
    named = {name: p for name, p in signature.parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    open_ended = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    for name, value in args.items():
        parameter = named.get(name)
        if parameter is None:
            if open_ended:
                continue
            close = difflib.get_close_matches(name, list(named), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise JobSpecError(f"{reference} has no argument {name!r}{hint} (arguments: {', '.join(named) or 'none'})")
        if name in hints:
            annotation = hints[name]
        elif parameter.default is not parameter.empty and parameter.default is not None:
            annotation = type(parameter.default)
        else:
            continue
        if not _accepts(annotation, value):
            expected = " or ".join(_expected(annotation) or ["another value"])
            raise JobSpecError(f"{reference}: argument {name!r} must be {expected}, got {json.dumps(value)}")
    missing = [name for name, p in named.items() if p.default is p.empty and name not in args]
    if missing:
        raise JobSpecError(f"{reference} needs the argument(s) {', '.join(missing)} in --job-args")
