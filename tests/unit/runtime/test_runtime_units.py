"""The worker runtime's pure parts: barrier alignment, write-ahead buffers, key-group routing."""

from __future__ import annotations

import json
import struct

import pytest

from tidemark.protocol.messages import Barrier
from tidemark.runtime.worker.alignment import Aligned, BarrierAligner, Cancelled, Process
from tidemark.runtime.worker.outputs import PendingBuffer
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.routing import KeyGroupRouter
from tidemark.keygroups import compute_key_group_range, compute_operator_index_for_key_group, \
    assign_to_key_group
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, TaskId

T0, T1 = TaskId("up#0"), TaskId("up#1")
CHANNELS = {("ch", p, t) for p in (0, 1) for t in (T0, T1)}


def barrier(p: int, offset: int, task: TaskId, cid: int = 1, epoch: int = 1) -> InputRecord:
    b = Barrier(JobId("j"), CheckpointId(cid), CheckpointType.CHECKPOINT, CheckpointingMode.EXACTLY_ONCE, task, 0,
                Epoch(epoch))
    return InputRecord("ch", p, offset, 0, None, b"", Epoch(epoch), task, b)


def data(p: int, offset: int, task: TaskId, epoch: int = 1) -> InputRecord:
    return InputRecord("ch", p, offset, 0, None, b"x", Epoch(epoch), task)


# p0 delivers barrier 1 of both upstream tasks, then data; p1 delivers its barriers later
SEQUENCE = [data(0, 0, T0), barrier(0, 1, T0), barrier(0, 2, T1), data(0, 3, T0), data(0, 4, T1),
            data(1, 0, T0), barrier(1, 1, T0), barrier(1, 2, T1), data(1, 3, T1)]


def feed(aligner: BarrierAligner, records: list[InputRecord]) -> list:
    return [action for record in records for action in aligner.feed(record, 0)]


def test_exactly_once_holds_records_after_a_barrier_until_every_channel_delivered_it():
    actions = feed(BarrierAligner(CheckpointingMode.EXACTLY_ONCE, Epoch(1), CHANNELS), SEQUENCE)
    order = [(a.record.partition, a.record.offset) if isinstance(a, Process) else "cp" for a in actions]
    assert order == [(0, 0), (1, 0), "cp", (0, 3), (0, 4), (1, 3)]
    aligned = next(a for a in actions if isinstance(a, Aligned))
    assert aligned.held == 2 and aligned.overtaken == 0
    assert aligned.resume_offsets() == {("ch", 0): 2, ("ch", 1): 2}


def test_at_least_once_processes_past_early_barriers_and_counts_them():
    actions = feed(BarrierAligner(CheckpointingMode.AT_LEAST_ONCE, Epoch(1), CHANNELS), SEQUENCE)
    order = [(a.record.partition, a.record.offset) if isinstance(a, Process) else "cp" for a in actions]
    assert order == [(0, 0), (0, 3), (0, 4), (1, 0), "cp", (1, 3)]
    aligned = next(a for a in actions if isinstance(a, Aligned))
    assert aligned.held == 0 and aligned.overtaken == 2 and aligned.alignment_ms == 0


def test_a_restored_cut_and_other_epochs_are_skipped():
    cut = {("ch", 0, T0): 3, ("ch", 0, T1): 1}
    aligner = BarrierAligner(CheckpointingMode.EXACTLY_ONCE, Epoch(2), CHANNELS, cut)
    records = [data(0, 2, T1, epoch=2), data(0, 3, T0, epoch=2), data(0, 4, T0, epoch=1), data(0, 5, T0, epoch=2)]
    processed = [a.record.offset for a in feed(aligner, records) if isinstance(a, Process)]
    assert processed == [2, 5] and aligner.dropped_stale == 2


def test_a_newer_barrier_cancels_an_unfinished_alignment_and_releases_its_records():
    aligner = BarrierAligner(CheckpointingMode.EXACTLY_ONCE, Epoch(1), CHANNELS)
    actions = feed(aligner, [barrier(0, 1, T0, cid=1), data(0, 2, T0), barrier(1, 1, T0, cid=2)])
    assert [type(a) for a in actions] == [Cancelled, Process]
    assert aligner.aligning == 2


def encode_v1(buffer: PendingBuffer) -> bytes:
    """A buffer as checkpoints taken before ``TMP2`` hold it (``TMPB``: per record, a big-endian
    key length, -1 for none, the key, the value length and the value)."""
    head = json.dumps({"task": buffer.task, "checkpoint_id": int(buffer.checkpoint_id),
                       "records": len(buffer.records)}).encode()
    parts = [b"TMPB", struct.pack(">i", len(head)), head]
    for key, value in buffer.records:
        parts += [struct.pack(">i", -1 if key is None else len(key)), key or b"", struct.pack(">i", len(value)), value]
    return b"".join(parts)


def test_pending_buffers_round_trip_with_empty_and_missing_keys():
    buffer = PendingBuffer(TaskId("s#1"), CheckpointId(7), ((None, b""), (b"k", b"v" * 1000), (b"", b"x")))
    assert PendingBuffer.decode(buffer.encode()) == buffer
    assert PendingBuffer.decode(encode_v1(buffer)) == buffer  # buffers of checkpoints taken before TMP2
    empty = PendingBuffer(TaskId("s#0"), CheckpointId(1), ())
    assert PendingBuffer.decode(empty.encode()) == empty


@pytest.mark.parametrize("encode", [PendingBuffer.encode, encode_v1])
def test_a_damaged_pending_buffer_is_refused_not_misread(encode):
    data = encode(PendingBuffer(TaskId("s#1"), CheckpointId(7), ((b"k", b"value"), (None, b"v2"))))
    for cut in (len(data) - 1, 12, 6):
        with pytest.raises(ValueError, match="truncated|not a pending"):
            PendingBuffer.decode(data[:cut])
    with pytest.raises(ValueError, match="not a pending"):
        PendingBuffer.decode(b"XXXX" + data[4:])


def test_the_router_sends_every_key_to_the_task_owning_its_key_group():
    max_p, p = 128, 3
    router = KeyGroupRouter(max_p, [compute_key_group_range(max_p, p, i) for i in range(p)])
    for key in [f"/url/{i}" for i in range(500)] + list(range(100)):
        expected = compute_operator_index_for_key_group(max_p, p, assign_to_key_group(key, max_p))
        assert router.task_index(key) == expected
