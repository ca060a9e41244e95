"""Avro encoding of protocol messages: the avro package vs fastavro vs the codec's compiled functions.

Run: ``.venv/bin/python bench/bench_avro_encoding.py [--rounds 7] [--seconds 0.3]``. Single
process. Every encoder works on the SAME schemas (the newest version of each record, logical
types dropped) and is first checked to produce the same bytes; each row counts whole messages
per second, dataclass conversion and the 5-byte wire header included:

* ``avro package``: the codec before this change (:mod:`tidemark.protocol.avro_reference` on
  datums from :mod:`tidemark.protocol.datum`), still the reference and the slow-path decoder;
* ``fastavro``: ``schemaless_writer``/``schemaless_reader`` with a schema from ``parse_schema``;
* ``compiled (codec)``: :class:`tidemark.protocol.codec.Codec`, whose functions are compiled for
  each message and schema (:mod:`tidemark.protocol.avro_compiled`).

Rounds interleave the encoders (the machine is shared); the table gives min / median / max
records per second over the rounds and the ratio of medians to the avro package.
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

from tidemark.protocol import codec
from tidemark.protocol.avro_reference import ReferenceReader, ReferenceWriter
from tidemark.protocol.datum import record_plan
from tidemark.protocol.schema_ids import LocalSchemaIds
from tidemark.protocol.schemas import NAMESPACE, load_catalog, strip_logical_types

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "protocol"))
from golden_cases import CASES  # noqa: E402

Pair = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


def _messages() -> dict[str, Any]:
    change = CASES["StateChange-sample0"]
    return {
        "StateChange": change,
        "StateChange 8 KiB value": dataclasses.replace(change, value=bytes(8192)),
        "Barrier": CASES["Barrier-sample0"],
        "TaskAck": CASES["TaskAck-sample0"],
    }


def avro_package(message: Any) -> Pair:
    full_name = f"{NAMESPACE}.{type(message).__name__}"
    version = load_catalog().newest(full_name)
    header = codec.wire_header(LocalSchemaIds.from_dir().writer_id(full_name))
    plan, writer = record_plan(type(message)), ReferenceWriter(version.physical)
    reader = ReferenceReader(version.physical, version.physical)

    def encode(m: Any) -> bytes:
        out = bytearray(header)
        writer.write(plan.to_avro(m), out)
        return bytes(out)

    return encode, lambda data: plan.from_avro(reader.read(data, codec.HEADER_SIZE)[0])


def fastavro(message: Any) -> Pair:
    full_name = f"{NAMESPACE}.{type(message).__name__}"
    schema = parse_schema(strip_logical_types(load_catalog().newest(full_name).schema_json), named_schemas={})
    header = codec.wire_header(LocalSchemaIds.from_dir().writer_id(full_name))
    plan = record_plan(type(message))

    def encode(m: Any) -> bytes:
        out = io.BytesIO()
        out.write(header)
        schemaless_writer(out, schema, plan.to_avro(m))
        return out.getvalue()

    def decode(data: bytes) -> Any:
        body = io.BytesIO(data)
        body.seek(codec.HEADER_SIZE)
        return plan.from_avro(schemaless_reader(body, schema, None))

    return encode, decode


def compiled(message: Any) -> Pair:
    local = codec.Codec.local()
    return local.encode, local.decode


ENCODERS = {"avro package": avro_package, "fastavro": fastavro, "compiled (codec)": compiled}


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second over about ``seconds``."""
    calls, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(32):
            fn()
        calls += 32
    return calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.3, help="per encoder, operation and round")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")
    print(f"{'message':<24} {'encoder':<17} {'bytes':>6} {'op':<6} "
          f"{'min/s':>10} {'median/s':>10} {'max/s':>10} {'x avro':>7}")
    for label, message in _messages().items():
        pairs = {name: make(message) for name, make in ENCODERS.items()}
        data = {name: encode(message) for name, (encode, _) in pairs.items()}
        assert len(set(data.values())) == 1, f"{label}: the encoders disagree"
        wire = data["avro package"]
        for name, (_, decode) in pairs.items():
            assert decode(wire) == message, f"{label}: {name} does not read the message back"
        rates: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, (encode, decode) in pairs.items():
                rates.setdefault((name, "encode"), []).append(rate(lambda e=encode: e(message), args.seconds))
                rates.setdefault((name, "decode"), []).append(rate(lambda d=decode: d(wire), args.seconds))
        for op in ("encode", "decode"):
            base = statistics.median(rates[("avro package", op)])
            for name in ENCODERS:
                runs = rates[(name, op)]
                print(f"{label:<24} {name:<17} {len(wire):>6} {op:<6} {min(runs):>10,.0f} "
                      f"{statistics.median(runs):>10,.0f} {max(runs):>10,.0f} {statistics.median(runs) / base:>6.1f}x")


if __name__ == "__main__":
    main()
