"""Typed identifiers shared by every part of Tidemark.

They are ``typing.NewType`` wrappers: free at run time, but they let a reader (and mypy) tell a
checkpoint id from an offset or a key group from a subtask index.
"""

from __future__ import annotations

import enum
from typing import NamedTuple, NewType

JobId = NewType("JobId", str)
"""Name of a streaming job; one set of topics and one checkpoint history per job."""

OperatorId = NewType("OperatorId", str)
"""Stable id of a stateful operator inside a job (survives rescaling and restarts)."""

TaskId = NewType("TaskId", str)
"""One parallel instance of an operator: ``f"{operator_id}#{subtask_index}"``."""

CheckpointId = NewType("CheckpointId", int)
"""Monotonically increasing per job; savepoints draw from the same sequence."""

KeyGroup = NewType("KeyGroup", int)
"""Atomic unit of keyed state redistribution, ``0 <= kg < max_parallelism``."""

SequenceNumber = NewType("SequenceNumber", int)
"""Position in a state changelog (the Kafka offset of the change record)."""

Epoch = NewType("Epoch", int)
"""Attempt number of a task or job; bumped on every restore so stale work can be fenced."""

MaterializationId = NewType("MaterializationId", int)
"""Monotonically increasing per task; identifies one materialized snapshot."""

class TopicPartition(NamedTuple):
    """A Kafka partition: hashable, a dictionary key, equal to the plain ``(topic, partition)``
    tuple. confluent-kafka's class of the same name also carries an offset and is what its clients
    take; a module using both imports that one as ``KafkaTopicPartition``. A loop over records builds
    the plain tuple as a key instead (0.05 µs, the named tuple 0.24 µs): it equals and hashes the same."""

    topic: str
    partition: int


class Channel(NamedTuple):
    """One input of a stage that reads a channel topic: a partition of it as one upstream task
    writes it. Barriers are aligned and watermarks kept per channel."""

    topic: str
    partition: int
    task: TaskId


def task_id(operator_id: str, subtask_index: int) -> TaskId:
    """The canonical id of subtask ``subtask_index`` of ``operator_id``."""
    if subtask_index < 0:
        raise ValueError(f"subtask_index must be >= 0, got {subtask_index}")
    return TaskId(f"{operator_id}#{subtask_index}")


def parse_task_id(value: str) -> tuple[OperatorId, int]:
    """Split a task id into its operator id and subtask index."""
    operator, sep, index = value.rpartition("#")
    if not sep or not operator or not index.isdigit():
        raise ValueError(f"not a task id (expected 'operator#index'): {value!r}")
    return OperatorId(operator), int(index)


class CheckpointType(str, enum.Enum):
    """What a trigger asks for (Flink: CheckpointType / SavepointType)."""

    CHECKPOINT = "CHECKPOINT"
    SAVEPOINT = "SAVEPOINT"
    STOP_WITH_SAVEPOINT = "STOP_WITH_SAVEPOINT"

    @property
    def is_savepoint(self) -> bool:
        return self is not CheckpointType.CHECKPOINT


class OperatorStateMode(str, enum.Enum):
    """How an operator state is redistributed when a job restores at another parallelism
    (Flink: ``OperatorStateHandle.Mode``)."""

    SPLIT_DISTRIBUTE = "SPLIT_DISTRIBUTE"  # list state: the elements spread over the new subtasks, each once
    UNION = "UNION"  # union list state: every new subtask gets every element
    BROADCAST = "BROADCAST"  # identical on every subtask: every new subtask gets one copy


class CheckpointingMode(str, enum.Enum):
    """Barrier handling at tasks with several inputs."""

    EXACTLY_ONCE = "EXACTLY_ONCE"  # aligned barriers
    AT_LEAST_ONCE = "AT_LEAST_ONCE"  # no alignment
