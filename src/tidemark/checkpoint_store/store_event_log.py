"""The checkpoint-store's event log: ``CheckpointMetadata`` and ``CheckpointDiscarded`` records.

The store's state is a fold of this log (see ``CompletedCheckpointStore.fold``). In the service
the log is the checkpoint-events Kafka topic; :class:`InMemoryCheckpointEventLog` keeps it in a
list for single-process use and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata

CheckpointEvent = CheckpointMetadata | CheckpointDiscarded


@runtime_checkable
class CheckpointEventLog(Protocol):
    """Append-only, ordered log of checkpoint events.

    Lifecycle: ``append`` returns only once the events are durable and in order after every
    event appended before; there is no close. Readers (a restarting store) read it from the
    start through their own consumer, not through this port.
    """

    def append(self, events: Sequence[CheckpointEvent]) -> None: ...


class InMemoryCheckpointEventLog:
    """A list-backed log; ``events`` is everything appended, in order."""

    def __init__(self) -> None:
        self.events: list[CheckpointEvent] = []

    def append(self, events: Sequence[CheckpointEvent]) -> None:
        self.events.extend(events)
