"""Sample messages of every protocol type, JSON views of messages, and hypothesis strategies.

Shared by the protocol tests and by ``tests/golden/generate.py``.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import typing
from typing import Any

from hypothesis import strategies as st

from tidemark.protocol import messages as m
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

T0 = 1_763_700_000_000  # a fixed instant, milliseconds since the epoch
JOB = JobId("clicks-per-user")

FILES = (
    m.StateFile("shared/op-a/000012.sst", 4_194_304, "9f" * 32, shared=True),
    m.StateFile("chk-42/op-a/MANIFEST", 512, "0a" * 32),
)
HANDLE = m.StateHandle(m.StateHandleKind.KEYED_INCREMENTAL, OperatorId("op-a"), KeyGroup(0), KeyGroup(63),
                       FILES, 8_388_608, 4_195_000)
OPERATOR_HANDLE = m.StateHandle(m.StateHandleKind.OPERATOR, OperatorId("src"), KeyGroup(-1), KeyGroup(-1), (), 0, 0)
RANGE = m.ChangelogRange("tidemark.clicks.changelog.op-a", 3, SequenceNumber(1_000), SequenceNumber(1_250))
SNAPSHOT = m.TaskSnapshot(
    TaskId("op-a#0"), OperatorId("op-a"), 0, KeyGroup(0), KeyGroup(63),
    state_handles=(HANDLE, OPERATOR_HANDLE),
    source_offsets=(m.SourceOffset("clicks", 0, 981_223), m.SourceOffset("clicks", 1, 2**40)),
    changelog_ranges=(RANGE,),
    sink_transactions=(m.SinkTransaction("tidemark-clicks-op-a-0", 4_001, 7),),
    materialization=m.MaterializationRef(MaterializationId(5), CheckpointId(40)),
)
BARE_SNAPSHOT = m.TaskSnapshot(TaskId("op-b#3"), OperatorId("op-b"), 3, KeyGroup(96), KeyGroup(127))
ASSIGNMENTS = (
    m.TaskAssignment(TaskId("op-a#0"), OperatorId("op-a"), 0, KeyGroup(0), KeyGroup(63)),
    m.TaskAssignment(TaskId("op-a#1"), OperatorId("op-a"), 1, KeyGroup(64), KeyGroup(127)),
)
WORKER_TWO_TASK = m.TaskAssignment(TaskId("op-a#2"), OperatorId("op-a"), 2, KeyGroup(128), KeyGroup(191))

SAMPLES: dict[type, tuple[Any, ...]] = {
    m.CheckpointTrigger: (
        m.CheckpointTrigger(JOB, CheckpointId(42), CheckpointType.CHECKPOINT, CheckpointingMode.EXACTLY_ONCE, T0),
        m.CheckpointTrigger(JOB, CheckpointId(43), CheckpointType.SAVEPOINT, CheckpointingMode.AT_LEAST_ONCE, T0 + 1,
                            Epoch(3), "savepoints/sp-43"),
    ),
    m.CheckpointCompleted: (
        m.CheckpointCompleted(JOB, CheckpointId(42), CheckpointType.CHECKPOINT, T0 + 900, "chk-42/_metadata", Epoch(1)),
    ),
    m.CheckpointAborted: (
        m.CheckpointAborted(JOB, CheckpointId(44), "declined by op-a#0: disk full", T0 + 5, Epoch(1)),
    ),
    m.SavepointRequest: (
        m.SavepointRequest(JOB, "req-1", False, T0),
        m.SavepointRequest(JOB, "req-2", True, T0, "savepoints/final", "NATIVE"),
        m.SavepointRequest(JOB, "req-3", True, T0, generation=7),
    ),
    m.RestoreCommand: (
        m.RestoreCommand(JOB, "restore-7", CheckpointId(42), False, "chk-42/_metadata", 2, 128, ASSIGNMENTS,
                         Epoch(4), T0 + 10),
    ),
    m.AttemptFailed: (
        m.AttemptFailed(JOB, Epoch(4), "2 consecutive checkpoint failures exceed the tolerable 1", T0 + 20),
    ),
    m.JobRegistration: (
        m.JobRegistration(JOB, Epoch(4), CheckpointingMode.EXACTLY_ONCE, 128, ASSIGNMENTS, (TaskId("op-a#0"),), T0),
        m.JobRegistration(JOB, Epoch(5), CheckpointingMode.AT_LEAST_ONCE, 128, (), (), T0, finished=True),
        m.JobRegistration(JOB, Epoch(6), CheckpointingMode.EXACTLY_ONCE, 128, ASSIGNMENTS, (TaskId("op-a#0"),), T0,
                          changelog_operators=(OperatorId("op-a"),), changelog_partitions=8),
        m.JobRegistration(JOB, Epoch(7), CheckpointingMode.EXACTLY_ONCE, 128, (), (), T0, finished=True,
                          outcome="FAILED", reason="input topic 'orders' does not exist"),
        m.JobRegistration(JOB, Epoch(8), CheckpointingMode.EXACTLY_ONCE, 192, (*ASSIGNMENTS, WORKER_TWO_TASK),
                          (TaskId("op-a#0"), TaskId("op-a#1"), TaskId("op-a#2")), T0, workers=(0, 0, 1)),
    ),
    m.SupervisorHeartbeat: (
        m.SupervisorHeartbeat(JOB, Epoch(4), "worker-7:4242", T0 + 29),
        m.SupervisorHeartbeat(JOB, Epoch(0), "", T0),
    ),
    m.HostAssignment: (
        m.HostAssignment(JOB, "minute_counts/1", Epoch(4), m.HostAction.RUN, "pkg.jobs:top_urls", '{"parallelism": 4}', 4,
                         "chk-42/_metadata", {"minute_counts.read": 2, "minute_counts": 2, "top_urls": 2},
                         (m.HostLaunch("top_urls", 1), m.HostLaunch("minute_counts", 1, "after-ack:2", "minute_counts.read")),
                         True, T0 + 30),
        m.HostAssignment(JOB, "", Epoch(4), m.HostAction.HEARTBEAT, issued_at=T0 + 31),
        m.HostAssignment(JOB, "top_urls/0", Epoch(4), m.HostAction.KILL, standby=False, issued_at=T0 + 32),
    ),
    m.HostReport: (
        m.HostReport(JOB, "minute_counts/1", "3f2a9c", Epoch(4),
                     (m.HostedProcess("minute_counts.read.w1", m.ProcessPhase.PROCESSING, log="/runs/a.log"),
                      m.HostedProcess("minute_counts.w1", m.ProcessPhase.EXITED, 3, "input topic 'x' does not exist",
                                      "/runs/b.log")), T0 + 33),
        m.HostReport(JOB, "top_urls/0", "77e1d0", Epoch(0), (), T0 + 34),
    ),
    m.TaskAck: (
        m.TaskAck(JOB, CheckpointId(42), SNAPSHOT, m.TaskTimings(12, 3, 250, 65_536), T0 + 400, Epoch(1)),
        m.TaskAck(JOB, CheckpointId(42), BARE_SNAPSHOT, m.TaskTimings(), T0 + 401),
    ),
    m.TaskDecline: (
        m.TaskDecline(JOB, CheckpointId(44), TaskId("op-a#0"), "checkpoint storage unavailable", T0 + 3, Epoch(1)),
    ),
    m.Barrier: (
        m.Barrier(JOB, CheckpointId(42), CheckpointType.STOP_WITH_SAVEPOINT, CheckpointingMode.EXACTLY_ONCE,
                  TaskId("src#0"), T0 + 1, Epoch(1)),
    ),
    m.CheckpointMetadata: (
        m.CheckpointMetadata(JOB, CheckpointId(42), CheckpointType.CHECKPOINT, T0, T0 + 900, 128,
                             (SNAPSHOT, BARE_SNAPSHOT), Epoch(1), 8_388_608, 4_195_000),
    ),
    m.CheckpointDiscarded: (
        m.CheckpointDiscarded(JOB, CheckpointId(40), T0 + 1_000, "subsumed", ("chk-40/op-a/MANIFEST",)),
        m.CheckpointDiscarded(JOB, CheckpointId(41), T0 + 1_001, "subsumed"),
    ),
    m.StateChange: (
        m.StateChange(JOB, TaskId("op-a#0"), KeyGroup(17), "clicks", m.StateChangeOp.PUT, b"user-17",
                      value=b"\x00\x00\x00\x2a", timestamp=T0, epoch=Epoch(1)),
        m.StateChange(JOB, TaskId("op-a#0"), KeyGroup(17), "last-seen", m.StateChangeOp.DELETE, b"user-17",
                      b"window-5", b"\xff\x00", None, T0 + 2, Epoch(1)),
        m.StateChange(JOB, TaskId("op-a#1"), KeyGroup(64), "events", m.StateChangeOp.CLEAR, b""),
    ),
    m.MaterializationEvent: (
        m.MaterializationEvent(JOB, TaskId("op-a#0"), OperatorId("op-a"), MaterializationId(6),
                               m.MaterializationStatus.COMPLETED, CheckpointId(42), (RANGE,), (HANDLE,), T0 + 2_000),
        m.MaterializationEvent(JOB, TaskId("op-a#0"), OperatorId("op-a"), MaterializationId(7),
                               m.MaterializationStatus.FAILED, CheckpointId(43), (), at=T0, error="upload failed"),
    ),
    m.StateQuery: (
        m.StateQuery(JOB, "q-1", "count_hits", "hits", '"/products/7"', T0 + 3_000),
        m.StateQuery(JOB, "q-2", "top_urls", "hits_per_minute", "29000000", T0),
    ),
    m.StateAnswer: (
        m.StateAnswer(JOB, "q-1", m.StateQueryOutcome.FOUND, TaskId("count_hits#1"), Epoch(3), T0 + 3_020, "412"),
        m.StateAnswer(JOB, "q-2", m.StateQueryOutcome.UNKNOWN_KEY, TaskId("top_urls#0"), Epoch(3), T0 + 3_021,
                      detail="state 'hits_per_minute' holds no value for key 29000000"),
        m.StateAnswer(JOB, "q-3", m.StateQueryOutcome.FOUND, TaskId("op-a#0"), Epoch(1), T0, '"<Thing 1>"', True),
        m.StateAnswer(JOB, "q-4", m.StateQueryOutcome.TOO_LARGE, TaskId("op-a#1"), Epoch(1), T0,
                      detail="the value's JSON is 2097152 bytes, more than 524288"),
    ),
    DeadLetter: (
        DeadLetter("tidemark.clicks.acks", 2, 77_001, T0, b"k", b"\x00\x00\x00\x00\x99garbage",
                     {"tidemark-barrier": b"\x01"}, "unknown-schema-id", "schema id 153 is not known",
                     "coordinator", T0 + 1),
        DeadLetter("tidemark.clicks.control", 0, 5, None, None, None),
        DeadLetter("access-log", 3, 12, T0, b"k", b"{\"url\":", {}, "malformed-input", "JSONDecodeError",
                     "worker", T0 + 2, {"value": 999_000}, {"value": "ab" * 32}),
    ),
}


def to_jsonable(value: Any) -> Any:
    """A JSON view of a message: dataclasses as dicts, enums by value, bytes as base64."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@type": type(value).__name__,
                **{f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return {"@bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- hypothesis

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_INT32_FIELDS = {"partition", "subtask_index", "key_group", "key_group_start", "key_group_end", "changelog_partitions",
                 "parallelism", "max_parallelism", "producer_epoch", "origin_partition", "workers", "worker",
                 "exit_code"}


def _strategy(hint: Any, field_name: str) -> st.SearchStrategy[Any]:
    while hasattr(hint, "__supertype__"):
        hint = hint.__supertype__
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return message_strategy(hint)
    if origin in (typing.Union, __import__("types").UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | _strategy(inner, field_name)
    if origin is tuple:
        return st.lists(_strategy(typing.get_args(hint)[0], field_name), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), _strategy(typing.get_args(hint)[1], field_name), max_size=3)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return _INT32 if field_name in _INT32_FIELDS else _INT64
    if hint is bytes:
        return st.binary(max_size=40)
    if hint is str:
        return st.text(max_size=20)
    raise TypeError(f"no strategy for {hint!r}")


def message_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Arbitrary valid instances of a message dataclass (every field drawn)."""
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _strategy(hints[f.name], f.name) for f in dataclasses.fields(cls)})


any_message = st.sampled_from(m.MESSAGE_TYPES).flatmap(message_strategy)
