"""The local channel of a fused worker: its exchange reader's records of the worker's own key
groups, handed to the keyed stage in the process instead of through the exchange topic (Flink's
local input channel beside its remote ones).

A fused worker (:meth:`~tidemark.runtime.job.attempt.Attempt.lanes`) runs a keyed stage's worker
``w`` and the exchange reader ``w`` that reads its share of the input. The reader's output is a
:class:`LocalSplitOutput`: the records it routes to a key group of worker ``w``
(:data:`~tidemark.runtime.worker.outputs.LOCAL_PARTITION`) go into the :class:`LocalChannel`,
the others into the exchange as before. Every reader task is one more channel of the keyed
stage, ``(LOCAL_TOPIC, 0, task)``, which the barrier aligner treats as any other:

* **in order per task**: a task's records, then its watermark (when it moved), then its barrier
  ``n`` once its data for checkpoint ``n`` is in (the reader's pre-commit), as the exchange carries
  them; the records carry the attempt's epoch;
* **never persisted**: the keyed stage's checkpoint leaves the local channels out of its cut and
  its positions (:class:`~tidemark.runtime.worker.inputs.ChannelInput`), so a restore in any
  layout reads the same records again from the reader's positions, which are exactly those after
  its barrier ``n``; a local record never outlives the process, nor the keyed state it went into
  (one lane's failure ends both);
* **processed on the keyed stage's own thread**: a push schedules a drain on the keyed lane's
  processing thread (``on_push``), never runs it on the reader's (which may be inside a
  stop-with-savepoint's pre-commit);
* **bounded**: a push of records waits while the channel holds ``capacity`` records or more
  (not when it is empty: one batch is always taken), until the keyed lane drained them or the
  channel is closed; barriers and watermarks never wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

from tidemark.protocol.messages import Barrier
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.outputs import LOCAL_PARTITION, OutputRecord, StageOutput
from tidemark.runtime.worker.watermarks import WatermarkStatus
from tidemark.types import Channel, CheckpointId, Epoch, TaskId

LOCAL_TOPIC = "<local>"  # never a Kafka topic's name: a local channel is never mistaken for a partition
LOCAL_CAPACITY = 200_000  # records waiting in a local channel at most: two batches of Stage's default size


class LocalChannelClosed(RuntimeError):
    """The fused worker's attempt is ending: nothing is handed over any more."""


class LocalChannel:
    """Records, watermarks and barriers of the reader's tasks, in order per task, waiting for the
    keyed lane to take them (:meth:`drain`). Thread-safe: pushed by the reader lane, drained by
    the keyed lane."""

    def __init__(self, epoch: Epoch, capacity: int) -> None:
        self.epoch = epoch
        self.capacity = max(1, capacity)
        self.tasks: tuple[TaskId, ...] = ()  # the reader's, once its lane is wired (none: not used)
        self.on_push: Callable[[], None] = lambda: None  # schedules a drain on the keyed lane's thread
        self._items: list[InputRecord] = []
        self._records = 0  # data records among _items
        self._offsets: dict[TaskId, int] = {}
        self._drain_due = False
        self._closed = False
        self._changed = threading.Condition()

    @property
    def channels(self) -> set[Channel]:
        """The keyed stage's channels this one adds: one per reader task."""
        return {Channel(LOCAL_TOPIC, 0, task) for task in self.tasks}

    def push_records(self, task: TaskId, routed: Sequence[tuple[Any, ...]]) -> None:
        """Records of ``task`` routed here by the reader's forwarder: ``(key, value, stamp,
        LOCAL_PARTITION, input topic, decoded value)``; waits while the channel is full."""
        if not routed:
            return
        with self._changed:
            while self._records and self._records + len(routed) > self.capacity and not self._closed:
                self._changed.wait(0.5)
            self._check_open()
            offset, n = self._offsets.get(task, 0), len(routed)
            keys, values, stamps, _, origins, rows = zip(*routed)  # column by column, in C (as records_of)
            nothing = repeat(None)
            self._items.extend(map(InputRecord, repeat(LOCAL_TOPIC), repeat(0), range(offset, offset + n), stamps,
                                   keys, values, repeat(self.epoch), repeat(task), nothing, nothing, stamps, origins,
                                   nothing, nothing, rows))
            self._offsets[task] = offset + n
            self._records += n
        self._pushed()

    def push_watermark(self, status: WatermarkStatus) -> None:
        """The reader's watermark moved: after its records, on every task's channel."""
        self._push_marks(lambda task, offset: InputRecord(LOCAL_TOPIC, 0, offset, 0, None, None, self.epoch, task,
                                                          watermark=status))

    def push_barriers(self, barriers: Mapping[TaskId, Barrier]) -> None:
        """Each task's barrier, after its data for the checkpoint."""
        self._push_marks(lambda task, offset: InputRecord(LOCAL_TOPIC, 0, offset, 0, None, None, self.epoch, task,
                                                          barrier=barriers[task]), barriers)

    def _push_marks(self, make: Callable[[TaskId, int], InputRecord], tasks: Any = None) -> None:
        with self._changed:
            self._check_open()
            for task in tasks if tasks is not None else self.tasks:
                offset = self._offsets.get(task, 0)
                self._items.append(make(task, offset))
                self._offsets[task] = offset + 1
        self._pushed()

    def _check_open(self) -> None:
        if self._closed:
            raise LocalChannelClosed("the fused worker's attempt is ending")

    def _pushed(self) -> None:
        with self._changed:
            due, self._drain_due = not self._drain_due, True
        if due:
            self.on_push()

    def drain(self) -> list[InputRecord]:
        """Everything pushed so far, in order (on the keyed lane's thread); a waiting push goes on."""
        with self._changed:
            items, self._items, self._records, self._drain_due = self._items, [], 0, False
            self._changed.notify_all()
        return items

    def close(self) -> None:
        """The attempt ends: a waiting push and every later one raise :class:`LocalChannelClosed`."""
        with self._changed:
            self._closed = True
            self._items, self._records = [], 0
            self._changed.notify_all()


class LocalSplitOutput:
    """The exchange reader's output in a fused worker: records routed to
    :data:`~tidemark.runtime.worker.outputs.LOCAL_PARTITION` go into the local channel, the others
    into the exchange; the watermark and the barriers into both (the exchange first: a failed
    write raises before anything went local)."""

    def __init__(self, exchange: StageOutput, local: LocalChannel) -> None:
        self.exchange = exchange
        self.local = local

    @property
    def records_out(self) -> int:
        return self.exchange.records_out

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None:
        self.exchange.recover(items, checkpoint_id)

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        remote: dict[TaskId, list[OutputRecord]] = {}
        local: dict[TaskId, list[Any]] = {}
        for task, records in batch.items():
            remote[task] = [r for r in records if r[3] != LOCAL_PARTITION]  # type: ignore[misc]
            if len(remote[task]) != len(records):
                local[task] = [r for r in records if r[3] == LOCAL_PARTITION]  # type: ignore[misc]
        self.exchange.write({task: records for task, records in remote.items() if records}, watermark)
        for task, records in local.items():
            self.local.push_records(task, records)
        if watermark is not None:
            self.local.push_watermark(watermark)

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]:
        items = self.exchange.pre_commit(barriers)
        self.local.push_barriers(barriers)
        return items

    def commit(self, checkpoint_id: CheckpointId) -> None:
        self.exchange.commit(checkpoint_id)

    def abort(self, checkpoint_id: CheckpointId) -> None:
        self.exchange.abort(checkpoint_id)

    def close(self) -> None:
        self.exchange.close()
