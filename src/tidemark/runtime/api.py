"""The job API: what a user writes to run a stateful job on Tidemark.

A job is a chain of *stages*. Each stage is one PySpark Structured Streaming query (one worker
process) that reads Kafka, keys every record, routes it by key group to one of ``parallelism``
tasks and runs the stage's :class:`KeyedProcessFunction` there with keyed state. A stage writes
to a Kafka topic; when a later stage of the same job reads that topic, the topic is a *channel*
(records carry the writer's epoch and task, barriers follow each checkpoint's data), otherwise it
is the job's *output*, written by the two-phase-commit sink.

Lifecycle of a function instance (one per task): constructed by the stage's factory ->
``open(ctx)`` once, after any restore and before the first record (register state here) ->
``process(value, ctx)`` per record, with the record's key current -> ``close()`` at the end of
the attempt. Instances never outlive an attempt; everything that must survive lives in state.

Example (the seed's access-log job)::

    class CountHits(KeyedProcessFunction):
        def open(self, ctx):
            self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))

        def process(self, value, ctx):
            self.hits.update(self.hits.value() + 1)
            ctx.emit(ctx.key, {"url": ctx.key, "hits": self.hits.value()})
"""

from __future__ import annotations

import enum
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidemark.state.keygroups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from tidemark.types import CheckpointingMode, JobId, OperatorId


class StateContext(Protocol):
    """What ``open`` may register: keyed state of the task's backend."""

    def get_state(self, descriptor: Any) -> Any: ...


class ProcessContext(Protocol):
    """What ``process`` sees: the current key, the record's time and an output collector."""

    key: Any
    timestamp_ms: int

    def emit(self, key: Any, value: Any) -> None: ...


class KeyedProcessFunction(ABC):
    """User code of one stage (Flink: KeyedProcessFunction). See the module lifecycle."""

    def open(self, ctx: StateContext) -> None:  # noqa: B027 - optional hook
        """Register state; called once per attempt, after restore."""

    @abstractmethod
    def process(self, value: Any, ctx: ProcessContext) -> None:
        """Handle one record of the current key; emit results with ``ctx.emit``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; state is not touched after this."""


class StateBackendKind(str, enum.Enum):
    HEAP = "heap"
    ROCKSDB = "rocksdb"


def json_decode(key: bytes | None, value: bytes | None) -> Any:
    """Default record decoder: the value is one JSON document."""
    if value is None:
        raise ValueError("record has no value")
    return json.loads(value)


def json_encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def key_encode(key: Any) -> bytes:
    return key if isinstance(key, bytes) else str(key).encode()


@dataclass(frozen=True)
class Stage:
    """One stage: source topic(s), keying, the function and the topic it writes."""

    name: str  # the operator id; stable across restarts and rescaling
    inputs: tuple[str, ...]  # Kafka topics read; another stage's output makes a channel
    key_by: Callable[[Any], Any]
    function: Callable[[], KeyedProcessFunction]
    output: str  # Kafka topic written
    decode: Callable[[bytes | None, bytes | None], Any] = json_decode
    encode_value: Callable[[Any], bytes] = json_encode
    encode_key: Callable[[Any], bytes] = key_encode
    max_records_per_batch: int = 20_000

    @property
    def operator_id(self) -> OperatorId:
        return OperatorId(self.name)


@dataclass(frozen=True)
class JobSpec:
    """A job: its stages in data-flow order, checkpointing mode and defaults."""

    job_id: JobId
    stages: tuple[Stage, ...]
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    parallelism: int = 2
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    state_backend: StateBackendKind = StateBackendKind.HEAP
    output_partitions: int = 4
    changelog: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a job needs at least one stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        check_max_parallelism(self.max_parallelism)
        if not 1 <= self.parallelism <= self.max_parallelism:
            raise ValueError(f"parallelism must be in 1..{self.max_parallelism}, got {self.parallelism}")

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"job {self.job_id} has no stage {name!r}; stages: {[s.name for s in self.stages]}")

    def upstream_of(self, stage: Stage) -> Stage | None:
        """The stage of this job whose output ``stage`` reads (a channel), if any."""
        for other in self.stages:
            if other.output in stage.inputs and other is not stage:
                return other
        return None

    def is_channel(self, stage: Stage) -> bool:
        """True when a later stage of this job reads ``stage``'s output."""
        return any(stage.output in other.inputs for other in self.stages if other is not stage)


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
        try:
            spec = target(**(args or {}))
        except TypeError as exc:
            raise JobSpecError(f"{reference}{tuple(sorted(args or {}))}: {exc}") from None
    else:
        spec = target
    if not isinstance(spec, JobSpec):
        raise JobSpecError(f"{reference} is a {type(spec).__name__}, not a JobSpec")
    return spec
