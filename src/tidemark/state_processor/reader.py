"""The Python reader of a checkpoint's or savepoint's state.

``StateReader(source)`` (or :meth:`StateReader.open`) reads, for one stage:

* :meth:`~StateReader.read`: the rows of one named keyed state (:class:`~.rows.StateRow`), or
  :meth:`~StateReader.read_states` of all of them;
* :meth:`~StateReader.timers`: its timers (:class:`~.rows.TimerRow`);
* :meth:`~StateReader.operator_state`: its operator state as each old subtask snapshotted it;

and :meth:`~StateReader.source_positions` the snapshot's source positions. Keyed views go one
old task at a time (:meth:`~StateReader.partitions`, or a key-group range of one; a partition can be read alone,
which is how the Spark source reads them in parallel): each is restored into a scratch backend by
:func:`~.task_restore.restored_task` and its entries decoded, so no process holds more than one
task's state. A changelog-backed task needs ``changelog`` (a reader of the job's changelog ranges).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import CheckpointMetadata, StateHandleKind, TaskSnapshot
from tidemark.state.operator import read_snapshot
from tidemark.state.timer_queue import is_timer_state, queue_name_of
from tidemark.state_processor.handle_headers import read_handle_header
from tidemark.state_processor.rows import (
    EntryDecoder,
    OperatorStateRow,
    SourcePositionRow,
    StateRow,
    TimerRow,
    decode_rows,
    operator_rows,
)
from tidemark.state_processor.source import StateSource, UnknownState, open_source
from tidemark.state_processor.task_restore import ChangelogReaders, restored_task
from tidemark.storage.base import CheckpointStorage


@dataclass(frozen=True, slots=True)
class ReadPartition:
    """One old task of a stage: the unit a keyed view is read in (a Spark input partition)."""

    stage: str
    task: str
    subtask_index: int
    key_group_start: int
    key_group_end: int

    @property
    def key_groups(self) -> KeyGroupRange:
        return KeyGroupRange(self.key_group_start, self.key_group_end)


class StateReader:
    """Reads the state of one checkpoint or savepoint (see the module docstring)."""

    def __init__(self, source: StateSource, *, changelog: ChangelogReaders | None = None) -> None:
        self.source = source
        self.changelog = changelog

    @classmethod
    def open(cls, storage: CheckpointStorage, job: str, *, checkpoint_id: int | None = None,
             path: str | None = None, changelog: ChangelogReaders | None = None) -> StateReader:
        return cls(open_source(storage, job, checkpoint_id=checkpoint_id, path=path), changelog=changelog)

    @property
    def metadata(self) -> CheckpointMetadata:
        return self.source.metadata

    def partitions(self, stage: str, max_key_groups: int | None = None) -> list[ReadPartition]:
        """The old tasks of ``stage``, in subtask order (``UnknownStage`` if none); with
        ``max_key_groups``, each cut into consecutive key-group ranges of at most that many (each
        read restores only its range of the old task)."""
        if max_key_groups is not None and max_key_groups < 1:
            raise ValueError(f"max_key_groups must be at least 1, got {max_key_groups}")
        partitions = []
        for t in self.source.tasks(stage):
            step = max_key_groups or (t.key_group_end - t.key_group_start + 1)
            for start in range(t.key_group_start, t.key_group_end + 1, step):
                end = min(start + step - 1, t.key_group_end)
                partitions.append(ReadPartition(stage, t.task_id, t.subtask_index, start, end))
        return partitions

    def state_metas(self, stage: str) -> list[dict[str, Any]] | None:
        """The definitions of the keyed states (timers left out) the first of ``stage``'s tasks
        with state files records, by name; ``None`` when no task has any (a changelog-backed stage
        records its states in the changelog)."""
        for task in self.source.tasks(stage):
            keyed = [h for h in task.state_handles if h.kind is not StateHandleKind.OPERATOR]
            if keyed:
                header = read_handle_header(keyed[0], self.source.storage)
                return sorted((m for m in header.states if not is_timer_state(m["name"])), key=lambda m: m["name"])
        return None

    def state_names(self, stage: str) -> list[str] | None:
        """The names of :meth:`state_metas`."""
        metas = self.state_metas(stage)
        return None if metas is None else [m["name"] for m in metas]

    def check_state(self, stage: str, state: str) -> None:
        """``UnknownState`` when ``stage``'s snapshot records no keyed state ``state``."""
        names = self.state_names(stage)
        if names is not None and state not in names:
            raise UnknownState(f"stage {stage!r} has no keyed state {state!r} in {self.source.path}; "
                               f"its states: {', '.join(names) or 'none'}")

    def read(self, stage: str, state: str, partition: ReadPartition | None = None) -> Iterator[StateRow]:
        """The rows of keyed state ``state`` of ``stage``: every old task's, or ``partition``'s."""
        self.check_state(stage, state)
        for task in self._tasks(stage, partition):
            for _, row in self._task_rows(task, lambda name: name == state, partition):
                yield row

    def read_states(self, stage: str, partition: ReadPartition | None = None) -> Iterator[tuple[str, StateRow]]:
        """``(state name, row)`` of every keyed state of ``stage`` (timers left out), each old task
        restored once: every old task's, or ``partition``'s."""
        for task in self._tasks(stage, partition):
            yield from self._task_rows(task, lambda name: not is_timer_state(name), partition)

    def timers(self, stage: str, partition: ReadPartition | None = None) -> Iterator[TimerRow]:
        """The timers of ``stage``: every old task's, or ``partition``'s, domain by domain."""
        for task in self._tasks(stage, partition):
            for name, row in self._task_rows(task, is_timer_state, partition):
                yield TimerRow(row.key, row.namespace, queue_name_of(name), int(row.user_key), row.key_group, row.task)

    def operator_state(self, stage: str) -> Iterator[OperatorStateRow]:
        """Every old subtask's operator state of ``stage``, in subtask order, as it snapshotted it
        (before any redistribution)."""
        for task in self.source.tasks(stage):
            for handle in task.state_handles:
                if handle.kind is StateHandleKind.OPERATOR:
                    for ref in handle.files:
                        header, states = read_snapshot(self.source.storage.read_verified(ref), ref.path)
                        yield from operator_rows(header, states)

    def source_positions(self, stage: str | None = None) -> Iterator[SourcePositionRow]:
        """The next offset to read of each source partition, by old task (of ``stage`` only, when given)."""
        for task in self.source.metadata.tasks:
            if stage is None or task.operator_id == stage:
                for o in task.source_offsets:
                    yield SourcePositionRow(task.operator_id, task.task_id, o.topic, o.partition, o.offset)

    # ------------------------------------------------------------------ one task

    def _tasks(self, stage: str, partition: ReadPartition | None) -> list[TaskSnapshot]:
        tasks = self.source.tasks(stage)
        if partition is None:
            return tasks
        return [t for t in tasks if t.task_id == partition.task]

    def _task_rows(self, task: TaskSnapshot, wanted: Callable[[str], bool],
                   partition: ReadPartition | None) -> Iterator[tuple[str, StateRow]]:
        key_groups = None if partition is None else partition.key_groups
        with restored_task(self.source.metadata, task, self.source.storage, key_groups=key_groups,
                           changelog=self.changelog) as snapshot:
            decoders = {m["name"]: EntryDecoder(m) for m in snapshot.states if wanted(m["name"])}
            yield from decode_rows(snapshot.entries(), decoders, task.task_id)
