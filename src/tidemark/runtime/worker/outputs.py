"""Where a stage's results go: a channel to the next stage, or the job's output topic.

Every output has the same lifecycle, driven by the stage worker:

``recover(items, checkpoint_id)`` once after a restore (the sink's operator-state items of the
restored checkpoint) -> per micro-batch ``write(batch, watermark)`` -> at each checkpoint of this stage
``pre_commit(barrier)``, whose result is snapshotted as operator state -> ``commit(id)`` /
``abort(id)`` when the coordinator announces the checkpoint completed / aborted -> ``close()``.

* :class:`ChannelOutput` writes each micro-batch as one Kafka transaction of records tagged with
  the writer's epoch and task (and, in a job with event time, the record's event time), then,
  when the writer's watermark moved, a watermark record per task into every partition; at
  ``pre_commit`` a barrier per task into every partition, after the checkpoint's data. Records of
  a failed attempt are dropped by the reading stage.
* :class:`TwoPhaseCommitOutput` (exactly-once) keeps results in a write-ahead buffer that is part
  of the checkpoint (pre-commit), and on the completed notification writes every buffer up to
  that checkpoint in one Kafka transaction together with one commit marker per task it commits
  (commit). An aborted checkpoint's buffer stays pending and is committed with the next
  completed one. After a restore, each restored buffer is committed first unless the markers of
  its own task show it committed (:func:`uncommitted_buffers`), so outputs of one stage that run
  in different worker processes, each with its own transactional id and tasks, commit
  independently.
  (librdkafka cannot resume a transaction of a dead producer, which is what Flink's Kafka sink
  does; the write-ahead buffer gives the same guarantee.)
* :class:`AtLeastOnceOutput` writes at once and flushes at ``pre_commit``: after a failure,
  results since the last completed checkpoint are written again.
* :class:`WithSideOutputs` drives a stage's output and its side outputs (``Stage.side_outputs``)
  as one: a side output another stage of the job reads is a :class:`ChannelOutput` of its own
  (records, watermarks and barriers, as the stage's output would be); any other is a
  :class:`TwoPhaseCommitOutput` of its own in exactly-once mode (its buffers, transactional id and
  commit markers named after it), an :class:`AtLeastOnceOutput` otherwise, so each has the
  stage's guarantee on its own.

Every transaction goes through :func:`tidemark.kafka.transactions.run_transaction`, so a broker
outage delays an output (retried commit, or abort and the same records written again) and never
fails the stage or breaks exactly-once.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Producer

from tidemark.clock import now_ms
from tidemark.kafka.clients import produce_all, produce_waiting, producer_config
from tidemark.kafka.commit_markers import (
    CommitMarker,
    SlotCommits,
    commit_query_id,
    ensure_marker_topic,
    marker_partition,
    marker_partition_count,
    newest_commits,
)
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.transactions import TransactionsStarting, run_transaction
from tidemark.operators.lifecycle import split_side_records
from tidemark.protocol import codec
from tidemark.protocol.messages import Barrier
from tidemark.runtime.job.faults import FAULTS
from tidemark.runtime.worker.routing import ChannelPartitioner
from tidemark.runtime.job.records import (
    EVENT_TIME_HEADER,
    INPUT_HEADER,
    barrier_headers,
    channel_headers,
    watermark_headers,
)
from tidemark.runtime.worker.watermarks import WatermarkStatus
from tidemark.types import CheckpointId, Epoch, JobId, OperatorId, TaskId, parse_task_id

_TIMEOUT_S = 30.0
COMMIT_QUEUE_MESSAGES = 1_000_000  # the two-phase-commit producer's local queue (librdkafka's default: 100,000)

OutputRecord = tuple[bytes | None, bytes, int]
"""(key, value, event time in ms) as a function emitted it."""
RoutedRecord = tuple[bytes | None, bytes, int, int | None, str]
"""(key, value, event time, partition or None, input topic): a record an exchange reader forwards
(:mod:`tidemark.runtime.job.physical_plan`), its channel partition already known (None: any;
:data:`EVERY_PARTITION`: a copy into each, a broadcast input's element; :data:`LOCAL_PARTITION`:
none, the fused worker's own key groups, with the decoded value sixth,
:mod:`tidemark.runtime.worker.local_channel`)."""
EVERY_PARTITION = -1
LOCAL_PARTITION = -2
SinkRecord = tuple[bytes | None, bytes]
"""(key, value) as the job's output topic gets it; an operator's output record (its key and value
first, :data:`~tidemark.operators.lifecycle.OutputRecord`) is kept and written as one, unsliced."""


@dataclass(frozen=True, slots=True)
class PendingBuffer:
    """Results of one task between two checkpoints, sealed by checkpoint ``checkpoint_id``.

    Stored in the checkpoint as ``TMP2``, a 4-byte big-endian length and a JSON head (task,
    checkpoint, record count n, and the side output's name for a side output's buffer), then n
    key lengths and n value lengths (little-endian int32; -1: no key), then every key and every
    value, each concatenated: written and read with one
    ``struct`` call and two joins instead of four calls per record. Buffers of checkpoints taken
    before (``TMPB``: length-prefixed key and value per record) are still read."""

    task: TaskId
    checkpoint_id: CheckpointId
    records: tuple[SinkRecord, ...]
    output: str = ""
    """The side output whose buffer it is (:attr:`tidemark.api.Stage.side_outputs`); "": the stage's output."""

    _MAGIC = b"TMP2"
    _MAGIC_V1 = b"TMPB"
    _LEN = struct.Struct(">i")

    def encode(self) -> bytes:
        fields = {"task": self.task, "checkpoint_id": int(self.checkpoint_id), "records": len(self.records)}
        head = json.dumps({**fields, "output": self.output} if self.output else fields).encode()
        keys = [record[0] for record in self.records]
        values = [record[1] for record in self.records]
        lengths = struct.pack(f"<{2 * len(keys)}i", *[-1 if key is None else len(key) for key in keys],
                              *map(len, values))
        return b"".join((self._MAGIC, self._LEN.pack(len(head)), head, lengths,
                         b"".join(key for key in keys if key), b"".join(values)))

    @classmethod
    def decode(cls, data: bytes) -> PendingBuffer:
        data = bytes(data)  # records are bytes whatever the storage handed over
        magic = data[:4]
        if magic not in (cls._MAGIC, cls._MAGIC_V1):
            raise ValueError("not a pending sink buffer")
        try:
            (size,) = cls._LEN.unpack_from(data, 4)
            head = json.loads(data[8:8 + size])
            decode = cls._records if magic == cls._MAGIC else cls._records_v1
            records = decode(data, 8 + size, int(head["records"]))
        except (struct.error, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"truncated pending sink buffer ({type(exc).__name__}: {exc})") from None
        return cls(TaskId(head["task"]), CheckpointId(head["checkpoint_id"]), records, head.get("output", ""))

    @staticmethod
    def _records(data: bytes, pos: int, n: int) -> tuple[SinkRecord, ...]:
        lengths = struct.unpack_from(f"<{2 * n}i", data, pos)
        key_lengths, value_lengths = lengths[:n], lengths[n:]
        pos += 8 * n
        if pos + sum(k for k in key_lengths if k > 0) + sum(value_lengths) != len(data):
            raise ValueError("truncated pending sink buffer")
        keys: list[bytes | None] = []
        for length in key_lengths:
            keys.append(None if length < 0 else data[pos:pos + length])
            pos += max(length, 0)
        values = []
        for length in value_lengths:
            values.append(data[pos:pos + length])
            pos += length
        return tuple(zip(keys, values))

    @classmethod
    def _records_v1(cls, data: bytes, pos: int, n: int) -> tuple[SinkRecord, ...]:
        view = memoryview(data)

        def take(size: int) -> bytes:
            nonlocal pos
            chunk = bytes(view[pos:pos + size])
            if len(chunk) != size:
                raise ValueError("truncated pending sink buffer")
            pos += size
            return chunk

        records: list[SinkRecord] = []
        for _ in range(n):
            klen = cls._LEN.unpack(take(4))[0]
            key = None if klen < 0 else take(klen)
            records.append((key, take(cls._LEN.unpack(take(4))[0])))
        return tuple(records)


class StageOutput(Protocol):
    """See the module docstring for the lifecycle."""

    @property
    def records_out(self) -> int:
        """Records written so far (committed, for the two-phase commit)."""
        ...

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None: ...

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        """``watermark``: the writer's, when it moved (only a channel passes it on)."""
        ...

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]: ...

    def commit(self, checkpoint_id: CheckpointId) -> None: ...

    def abort(self, checkpoint_id: CheckpointId) -> None: ...

    def close(self) -> None: ...


def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes,
             headers: list[tuple[str, bytes]] | None = None, partition: int | None = None) -> None:
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    produce_waiting(producer, topic, **kwargs)


class ChannelOutput:
    """Transactional micro-batches of epoch-tagged records, then barriers (see module docstring).

    ``tasks``: the writer's (each writes the watermark into every partition); ``event_time``: the
    job has event time, so each record carries its own in the ``tidemark-event-time`` header (not
    as the Kafka timestamp: the topic's time-based retention and segment rolling would act on old
    event times)."""

    def __init__(self, client: dict[str, Any], topic: str, partitions: int, transactional_id: str,
                 epoch: Epoch, partitioner: ChannelPartitioner | None = None, *,
                 tasks: Sequence[TaskId] = (), event_time: bool = False, forwards: bool = False) -> None:
        """``forwards``: an exchange reader's output, of :data:`RoutedRecord` s."""
        self.topic = topic
        self.partitions = partitions
        self.epoch = epoch
        self.partitioner = partitioner
        self.tasks = tuple(tasks)
        self.event_time = event_time
        self.forwards = forwards
        self.records_out = 0
        self._producer = Producer(producer_config(client, transactional_id))
        self._wait = broker_wait(client)
        self._start = TransactionsStarting(self._producer, self._wait, _TIMEOUT_S, f"transactions-{topic}")

    def started(self) -> None:
        """Once the output's transactions are initialized (the previous holder of its transactional
        id fenced, its open transaction aborted); raises what initializing raised."""
        self._start.done()

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None:
        """Nothing to do: ``init_transactions`` fences the previous attempt before the first write."""

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        if not any(batch.values()) and watermark is None:
            return

        def records() -> None:
            for task, records in batch.items():
                headers = channel_headers(self.epoch, task)
                if self.forwards:
                    named = {}  # input topic -> the channel headers naming it, built once per batch and topic
                    for routed in records:
                        topic = routed[4]  # type: ignore[misc]
                        if topic not in named:
                            named[topic] = [*headers, (INPUT_HEADER, topic.encode())]
                        record_headers = ([*named[topic], (EVENT_TIME_HEADER, str(routed[2]).encode())]
                                          if self.event_time else named[topic])
                        partition = routed[3]  # type: ignore[misc]
                        for target in (range(self.partitions) if partition == EVERY_PARTITION else (partition,)):
                            _produce(self._producer, self.topic, routed[0], routed[1], record_headers, target)
                    continue
                if self.partitioner is None and not self.event_time:  # the producer partitions
                    produce_all(self._producer, self.topic, records, headers)
                    continue
                for record in records:
                    _produce(self._producer, self.topic, record[0], record[1],
                             [*headers, (EVENT_TIME_HEADER, str(record[2]).encode())] if self.event_time else headers,
                             self._partition(record))
            if watermark is not None:
                for task in self.tasks:
                    headers = watermark_headers(self.epoch, task, watermark)
                    for partition in range(self.partitions):
                        _produce(self._producer, self.topic, None, headers[-1][1], headers, partition)

        self.started()
        run_transaction(self._producer, records, self._wait, f"write to {self.topic}", _TIMEOUT_S)
        self.records_out += sum(len(records) for records in batch.values())
        FAULTS.hit("after-channel-write")

    def _partition(self, record: OutputRecord) -> int | None:
        """Where a record goes: the partitioner's (a record the reading stage cannot key goes to
        partition 0, where that stage dead-letters it), or the producer's default partitioner
        when the reading stage has one worker, no key or other readers besides."""
        if self.partitioner is None:
            return None
        try:
            return self.partitioner(record[0], record[1])
        except Exception:
            return 0

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]:
        def records() -> None:
            for barrier in barriers.values():
                value = codec.encode(barrier)
                for partition in range(self.partitions):
                    _produce(self._producer, self.topic, None, value, barrier_headers(barrier), partition)

        self.started()
        run_transaction(self._producer, records, self._wait, f"write barriers to {self.topic}", _TIMEOUT_S)
        return {}

    def commit(self, checkpoint_id: CheckpointId) -> None:
        """Channel records are already visible; the reading stage aligns on the barriers."""

    def abort(self, checkpoint_id: CheckpointId) -> None:
        """Nothing to undo: the reading stage's checkpoint is aborted as well."""

    def close(self) -> None:
        if self._start.succeeded():
            self._producer.flush(_TIMEOUT_S)


class TwoPhaseCommitOutput:
    """Write-ahead buffers committed on the completed notification (see module docstring)."""

    def __init__(self, client: dict[str, Any], topic: str, job_id: JobId, operator_id: OperatorId,
                 transactional_id: str, marker_topic: str, *, hold_until_commit: bool = False, side: str = "") -> None:
        """``hold_until_commit``: keep every record in the client until the commit, for a broker
        that shows aborted records to read_committed readers once they reached it (Tansu;
        Apache Kafka hides them). ``side``: the side output it writes (its buffers and commit
        markers are its own), "" for the stage's output."""
        self.topic = topic
        self.client = client
        self.marker_topic = marker_topic
        self.side = side
        self.query_id = commit_query_id(job_id, operator_id, side)
        self.transactional_id = transactional_id
        self.records_out = 0
        self.commits = 0
        self._open: dict[TaskId, list[SinkRecord]] = {}
        self._sealed: list[PendingBuffer] = []
        self._marker_partitions = 0  # known once the transactions are started (_marker_topic_ready)
        # held: nothing leaves the client before commit_transaction() flushes
        linger = {"linger.ms": 1000} if hold_until_commit else {}
        # a commit produces a whole checkpoint interval's results at once (about 170,000 records
        # at 85,000 records/s and 2 s): a queue of librdkafka's default 100,000 messages fills,
        # and every record after that waits for deliveries (produce_all)
        self._producer = Producer(producer_config(client, transactional_id, **linger,
                                                  **{"queue.buffering.max.messages": COMMIT_QUEUE_MESSAGES}))
        self._wait = broker_wait(client)
        # fences and aborts the previous attempt, meanwhile the worker starts
        self._start = TransactionsStarting(self._producer, self._wait, _TIMEOUT_S, f"transactions-{topic}",
                                           before=self._marker_topic_ready)

    def started(self) -> None:
        """Once the output's transactions are initialized (the previous holder of its transactional
        id fenced, its open transaction aborted); raises what initializing raised."""
        self._start.done()

    def _marker_topic_ready(self) -> None:
        ensure_marker_topic(self.client, self.marker_topic)
        self._marker_partitions = marker_partition_count(self.client, self.marker_topic)

    @property
    def pending_records(self) -> int:
        return sum(len(b.records) for b in self._sealed) + sum(len(r) for r in self._open.values())

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None:
        """Commit the restored buffers of this output that the markers of their tasks do not show
        committed (``items`` hold the buffers of every output of the stage)."""
        buffers = {(b.task, b.checkpoint_id): b for b in map(PendingBuffer.decode, items) if b.output == self.side}
        if not buffers:
            return
        self.started()  # the previous attempt fenced: its commits are all in the markers
        commits = newest_commits(self.client, self.marker_topic, self.query_id,
                                 {subtask_index(task) for task, _ in buffers}, at_most=int(checkpoint_id),
                                 partitions=self._marker_partitions)
        self._sealed = uncommitted_buffers(buffers.values(), commits)
        self.commit(checkpoint_id)

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        for task, records in batch.items():
            if records:
                self._open.setdefault(task, []).extend(records)  # (key, value, ...): the rest is left unread

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]:
        for task, barrier in barriers.items():
            records = self._open.pop(task, [])
            if records:
                self._sealed.append(PendingBuffer(task, barrier.checkpoint_id, tuple(records), self.side))
        return {task: [b.encode() for b in self._sealed if b.task == task] for task in barriers}

    def commit(self, checkpoint_id: CheckpointId) -> None:
        due = [b for b in self._sealed if b.checkpoint_id <= checkpoint_id]
        if not due:
            return
        self.started()
        count = sum(len(buffer.records) for buffer in due)
        markers = task_commit_markers(self.query_id, checkpoint_id, due, self.transactional_id, now_ms())

        def records() -> None:
            for buffer in due:
                produce_all(self._producer, self.topic, buffer.records)
            for marker in markers:
                _produce(self._producer, self.marker_topic, marker.key, marker.encode(), None,
                         marker_partition(marker.key, self._marker_partitions))
            FAULTS.hit("during-commit")

        run_transaction(self._producer, records, self._wait, f"commit checkpoint {checkpoint_id} to {self.topic}",
                        _TIMEOUT_S)
        FAULTS.hit("after-commit")
        self._sealed = [b for b in self._sealed if b.checkpoint_id > checkpoint_id]
        self.records_out += count
        self.commits += 1

    def abort(self, checkpoint_id: CheckpointId) -> None:
        """The buffer sealed by ``checkpoint_id`` stays pending for the next completed checkpoint."""

    def close(self) -> None:
        if self._start.succeeded():
            self._producer.flush(_TIMEOUT_S)


def subtask_index(task: TaskId) -> int:
    """A task's commit-marker slot: its subtask index (``operator#index``)."""
    return parse_task_id(task)[1]


def task_commit_markers(query_id: str, checkpoint_id: CheckpointId, due: Iterable[PendingBuffer],
                        transactional_id: str, written_at: int) -> list[CommitMarker]:
    """The markers of one commit transaction: one per task whose buffers it commits, in the
    task's slot, with the number of that task's records."""
    records: Counter[TaskId] = Counter()
    for buffer in due:
        records[buffer.task] += len(buffer.records)
    return [CommitMarker(query_id, int(checkpoint_id), subtask_index(task), transactional_id, count, written_at,
                         task=task) for task, count in sorted(records.items(), key=lambda item: subtask_index(item[0]))]


def uncommitted_buffers(buffers: Iterable[PendingBuffer], commits: SlotCommits) -> list[PendingBuffer]:
    """The restored buffers still to commit, in commit order: a buffer of task *t* sealed by
    checkpoint *c* is committed iff *t*'s slot is committed up to *c* or later
    (:meth:`SlotCommits.committed_up_to`; ``commits`` were looked up with the restored checkpoint
    as ``at_most``)."""
    return sorted((b for b in buffers if b.checkpoint_id > commits.committed_up_to(subtask_index(b.task))),
                  key=lambda b: (b.checkpoint_id, b.task))


class AtLeastOnceOutput:
    """Immediate idempotent writes, flushed at each checkpoint (no transactions)."""

    def __init__(self, client: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.records_out = 0
        self._producer = Producer(producer_config(client))
        self._wait = broker_wait(client)

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None:
        """Nothing is buffered in at-least-once mode."""

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        for records in batch.values():
            produce_all(self._producer, self.topic, records)
            self.records_out += len(records)
        self._producer.poll(0)

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]:
        self._wait.deliver(self._producer, f"deliver to {self.topic} at the checkpoint")
        return {}

    def commit(self, checkpoint_id: CheckpointId) -> None:
        pass

    def abort(self, checkpoint_id: CheckpointId) -> None:
        pass

    def close(self) -> None:
        self._producer.flush(_TIMEOUT_S)


class WithSideOutputs:
    """A stage's output and its side outputs (``Stage.side_outputs``), driven as one output: each
    micro-batch's side records (:class:`~tidemark.operators.lifecycle.SideRecord`) go to their
    side output, the rest to the stage's, and the watermark to all (a channel passes it on); each
    checkpoint pre-commits all of them (barriers into channels; buffers in the same operator state,
    each knowing its output), and each commits on its own with its own transactional producer and
    commit markers, so each is exactly-once on its own."""

    def __init__(self, main: StageOutput, sides: Mapping[str, StageOutput]) -> None:
        self.main = main
        self.sides = dict(sides)

    @property
    def records_out(self) -> int:
        return self.main.records_out + sum(side.records_out for side in self.sides.values())

    @property
    def outputs(self) -> list[StageOutput]:
        return [self.main, *self.sides.values()]

    def recover(self, items: Sequence[bytes], checkpoint_id: CheckpointId) -> None:
        for output in self.outputs:
            output.recover(items, checkpoint_id)

    def write(self, batch: Mapping[TaskId, list[OutputRecord]], watermark: WatermarkStatus | None = None) -> None:
        main: dict[TaskId, list[OutputRecord]] = {}
        sides: dict[str, dict[TaskId, list[OutputRecord]]] = {}
        for task, records in batch.items():
            main[task], by_side = split_side_records(records)
            for name, side_records in by_side.items():
                sides.setdefault(name, {})[task] = side_records
        self.main.write(main, watermark)
        for name, side in self.sides.items():  # a side output read by a stage is a channel: the watermark goes on
            side.write(sides.get(name, {}), watermark)

    def pre_commit(self, barriers: Mapping[TaskId, Barrier]) -> dict[TaskId, list[bytes]]:
        items: dict[TaskId, list[bytes]] = {}
        for output in self.outputs:
            for task, task_items in output.pre_commit(barriers).items():
                items.setdefault(task, []).extend(task_items)
        return items

    def commit(self, checkpoint_id: CheckpointId) -> None:
        for output in self.outputs:
            output.commit(checkpoint_id)

    def abort(self, checkpoint_id: CheckpointId) -> None:
        for output in self.outputs:
            output.abort(checkpoint_id)

    def close(self) -> None:
        for output in self.outputs:
            output.close()
