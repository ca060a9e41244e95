"""Avro bodies of protocol messages on the codec's hot paths: the compiled functions vs fastavro.

Run: ``.venv/bin/python bench/bench_avro_encoding.py [--rounds 7] [--seconds 0.3]``. Single
process. Each row is :meth:`tidemark.protocol.codec.Codec.encode` / ``decode`` of one message,
whole messages per second: the 5-byte wire header, the plan lookup, the checks on the input
bytes and the dataclass on both ends included. Only the functions that write and read the Avro
body change between rows (each codec's plans are filled, then their body functions replaced):

* ``avro package``: :mod:`tidemark.protocol.avro_reference` on datums from
  :mod:`tidemark.protocol.datum` (the codec's fallback and the golden tests' reference);
* ``fastavro schemaless``: ``schemaless_writer``/``schemaless_reader`` on a ``parse_schema``d
  schema, through ``BytesIO``, on the same datums;
* ``fastavro direct``: fastavro's Cython entry points under those, ``_write.write_data`` appending
  straight to the codec's ``bytearray`` and ``_read._read_data`` from a ``BytesIO``, on the same
  datums: the least a codec on fastavro would pay;
* ``compiled (codec)``: the codec as it is, its functions generated for each message and schema
  (:mod:`tidemark.protocol.avro_compiled`).

Both fastavro rows leave out the int range checks the codec makes (fastavro writes a 40-bit value
into an Avro ``int``), so they are upper bounds. Every encoder is first checked to write the
codec's bytes and to read them back to the message. Messages, by hot path: ``StateChange`` (one
per state change on the changelog, read back at every changelog restore and materialization; one
with an 8 KiB value), ``Barrier`` (a header of every barrier record, read by every downstream
task), ``TaskAck`` (one per task and checkpoint), ``CheckpointMetadata`` of 64 tasks (one per
checkpoint, read at every restore).

Rates are per second of the process's CPU time (single-threaded work: on a shared machine,
time spent waiting for a core does not count). Rounds interleave the encoders; the table gives
min / median / max messages per second over the rounds and the ratios of medians to the avro
package and to the compiled codec.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro._read import _read_data
from fastavro._write import write_data

from tidemark.protocol import codec
from tidemark.protocol.avro_compiled import Reader, Writer
from tidemark.protocol.avro_reference import ReferenceReader, ReferenceWriter
from tidemark.protocol.datum import record_plan
from tidemark.protocol.schemas import NAMESPACE, load_catalog, strip_logical_types

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "protocol"))
from golden_cases import CASES  # noqa: E402

Body = tuple[Writer, Reader]


def _messages() -> dict[str, Any]:
    change = CASES["StateChange-sample0"]
    return {
        "StateChange": change,
        "StateChange 8 KiB value": dataclasses.replace(change, value=bytes(8192)),
        "Barrier": CASES["Barrier-sample0"],
        "TaskAck": CASES["TaskAck-sample0"],
        "CheckpointMetadata": CASES["CheckpointMetadata-many-tasks"],
    }


def _newest(message: Any) -> Any:
    return load_catalog().newest(f"{NAMESPACE}.{type(message).__name__}")


def avro_package(message: Any) -> Body:
    version, plan = _newest(message), record_plan(type(message))
    writer, reader = ReferenceWriter(version.physical), ReferenceReader(version.physical, version.physical)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        datum, left = reader.read(data, pos)
        return plan.from_avro(datum), len(data) - left

    return (lambda m, out: writer.write(plan.to_avro(m), out)), read


def _fastavro_schema(message: Any) -> tuple[Any, dict[str, Any]]:
    named: dict[str, Any] = {}
    return parse_schema(strip_logical_types(_newest(message).schema_json), named), named


def fastavro_schemaless(message: Any) -> Body:
    (schema, _), plan = _fastavro_schema(message), record_plan(type(message))

    def write(m: Any, out: bytearray) -> None:
        body = io.BytesIO()
        schemaless_writer(body, schema, plan.to_avro(m))
        out += body.getbuffer()

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        body = io.BytesIO(data)
        body.seek(pos)
        return plan.from_avro(schemaless_reader(body, schema, None)), body.tell()

    return write, read


def fastavro_direct(message: Any) -> Body:
    (schema, named), plan = _fastavro_schema(message), record_plan(type(message))
    options: dict[str, Any] = {}

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        body = io.BytesIO(data)
        body.seek(pos)
        return plan.from_avro(_read_data(body, schema, named, None, options)), body.tell()

    return (lambda m, out: write_data(out, plan.to_avro(m), schema, named, "", options)), read


BODIES: dict[str, Callable[[Any], Body] | None] = {
    "avro package": avro_package,
    "fastavro schemaless": fastavro_schemaless,
    "fastavro direct": fastavro_direct,
    "compiled (codec)": None,  # the codec's own functions
}


def codec_with(message: Any, body: Callable[[Any], Body] | None) -> codec.Codec:
    """A local codec whose plans for ``message`` write and read bodies with ``body``."""
    local = codec.Codec.local()
    wire = local.encode(message)
    local.decode(wire)
    if body is not None:
        write, read = body(message)
        cls, schema_id = type(message), codec.schema_id_of(wire)
        local._encode_plans[cls] = dataclasses.replace(local._encode_plans[cls], write=write)
        local._decode_plans[schema_id] = dataclasses.replace(local._decode_plans[schema_id], read=read)
    return local


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second of this process's CPU time, over about ``seconds`` of it."""
    calls, started = 0, time.process_time()
    while (elapsed := time.process_time() - started) < seconds:
        for _ in range(32):
            fn()
        calls += 32
    return calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.3, help="CPU seconds per encoder, operation and round")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")
    print(f"{'message':<24} {'encoder':<20} {'bytes':>6} {'op':<6} "
          f"{'min/s':>10} {'median/s':>10} {'max/s':>10} {'x avro':>7} {'x codec':>7}")
    for label, message in _messages().items():
        codecs = {name: codec_with(message, body) for name, body in BODIES.items()}
        wire = codecs["compiled (codec)"].encode(message)
        for name, each in codecs.items():
            assert each.encode(message) == wire, f"{label}: {name} writes other bytes"
            assert each.decode(wire) == message, f"{label}: {name} does not read the message back"
        rates: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, each in codecs.items():
                rates.setdefault((name, "encode"), []).append(rate(lambda c=each: c.encode(message), args.seconds))
                rates.setdefault((name, "decode"), []).append(rate(lambda c=each: c.decode(wire), args.seconds))
        for op in ("encode", "decode"):
            avro = statistics.median(rates[("avro package", op)])
            compiled = statistics.median(rates[("compiled (codec)", op)])
            for name in BODIES:
                runs = rates[(name, op)]
                median = statistics.median(runs)
                print(f"{label:<24} {name:<20} {len(wire):>6} {op:<6} {min(runs):>10,.0f} {median:>10,.0f} "
                      f"{max(runs):>10,.0f} {median / avro:>6.1f}x {median / compiled:>6.2f}x")


if __name__ == "__main__":
    main()
