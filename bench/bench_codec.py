"""Codec throughput: encode, decode and round trips per second for StateChange and TaskAck.

Run: ``.venv/bin/python bench/bench_codec.py [--seconds 0.5] [--repeats 5]``. Prints one table;
each figure is the best of ``--repeats`` runs (the machine is shared, the best run is the least
disturbed one). The "naive avro" rows encode/decode the same datum with a fresh, unmodified
``avro.io.DatumWriter``/``DatumReader`` per record (schema already parsed), i.e. what using the
library directly costs; the "codec" rows are :class:`tidemark.protocol.codec.Codec`, dataclass
conversion included.
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

import avro.io

from tidemark.protocol import codec
from tidemark.protocol import messages as m
from tidemark.protocol.datum import to_datum
from tidemark.protocol.schemas import load_catalog
from tidemark.types import (
    CheckpointId,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

STATE_CHANGE = m.StateChange(JobId("clicks-per-user"), TaskId("count#3"), KeyGroup(77), "clicks",
                             m.StateChangeOp.PUT, b"user-000123456", b"", None, b"\x00" * 8,
                             1_763_700_000_000, Epoch(2))
TASK_ACK = m.TaskAck(
    JobId("clicks-per-user"), CheckpointId(1_042),
    m.TaskSnapshot(
        TaskId("count#3"), OperatorId("count"), 3, KeyGroup(96), KeyGroup(127),
        state_handles=(m.StateHandle(
            m.StateHandleKind.KEYED_INCREMENTAL, OperatorId("count"), KeyGroup(96), KeyGroup(127),
            tuple(m.StateFile(f"shared/count/{i:06d}.sst", 4_000_000 + i, f"{i:064x}", shared=True)
                  for i in range(4)), 16_000_000, 4_000_000),),
        source_offsets=(m.SourceOffset("clicks", 3, 987_654_321),),
        changelog_ranges=(m.ChangelogRange("changelog.count", 3, SequenceNumber(10_000), SequenceNumber(12_500)),),
        sink_transactions=(m.SinkTransaction("tidemark-count-3", 9_001, 4),),
        materialization=m.MaterializationRef(MaterializationId(17), CheckpointId(1_040)),
    ),
    m.TaskTimings(3, 12, 180, 1_048_576), 1_763_700_000_500, Epoch(2))


def rate(fn: Callable[[], object], seconds: float, repeats: int) -> float:
    """Best calls-per-second of ``fn`` over ``repeats`` runs of about ``seconds`` each."""
    batch, best = 64, 0.0
    for _ in range(repeats):
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(batch):
                fn()
            calls += batch
        best = max(best, calls / elapsed)
    return best


def naive(message: object) -> tuple[Callable[[], bytes], Callable[[], object]]:
    schema = load_catalog().newest(f"tidemark.protocol.{type(message).__name__}").physical
    datum = to_datum(message)

    def encode() -> bytes:
        out = io.BytesIO()
        avro.io.DatumWriter(schema).write(datum, avro.io.BinaryEncoder(out))
        return out.getvalue()

    body = encode()
    return encode, lambda: avro.io.DatumReader(schema, schema).read(avro.io.BinaryDecoder(io.BytesIO(body)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    local = codec.Codec.local()
    print(f"{'message':<12} {'path':<11} {'bytes':>6} {'encode/s':>10} {'decode/s':>10} {'round trip/s':>13}")
    for message in (STATE_CHANGE, TASK_ACK):
        data = local.encode(message)
        assert local.decode(data) == message
        enc, dec = (lambda: local.encode(message)), (lambda: local.decode(data))
        naive_enc, naive_dec = naive(message)
        for path, e, d in (("naive avro", naive_enc, naive_dec), ("codec", enc, dec)):
            e_rate, d_rate = rate(e, args.seconds, args.repeats), rate(d, args.seconds, args.repeats)
            both = rate(lambda e=e, d=d: (e(), d()), args.seconds, args.repeats)
            print(f"{type(message).__name__:<12} {path:<11} {len(data):>6} {e_rate:>10,.0f} {d_rate:>10,.0f} {both:>13,.0f}")


if __name__ == "__main__":
    main()
