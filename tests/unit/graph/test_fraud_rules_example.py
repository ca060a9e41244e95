"""The fraud-rules example (#35 point 6) on the test harness: whatever the interleaving of rules
and transactions a worker sees, its alerts and its side output of cleared transactions are what
:func:`expected_alerts` and :func:`expected_cleared` compute from the two inputs alone, across a
savepoint and a rescale; and its rule changes take effect from their time."""

from __future__ import annotations

import json
import random

import pytest

from tidemark.examples.fraud_rules import (
    CLEARED,
    HISTORY,
    MAX_WINDOW_MS,
    RULES,
    alert_identity,
    expected_alerts,
    expected_cleared,
    feed,
    fraud_rules,
)
from tidemark.testing import KeyedProcessFunctionHarness

pytestmark = pytest.mark.unit


def _stream(total: int, seed: int) -> tuple[list[tuple[int, bytes]], list[bytes], list[bytes]]:
    """The feed as one record stream (input number, record), each transaction chunk shuffled
    within itself and the rules sometimes late in wall order but never behind the watermark."""
    rng = random.Random(seed)
    stream, txns, rules = [], [], []
    for kind, records in feed(total, chunk=60, every=2):
        if kind == "rules":
            rules.extend(records)
            stream.extend((1, r) for r in records)
        else:
            txns.extend(records)
            shuffled = list(records)
            rng.shuffle(shuffled)
            stream.extend((0, r) for r in shuffled)
    return stream, txns, rules


def _run(harness: KeyedProcessFunctionHarness, stream: list[tuple[int, bytes]]) -> None:
    """As the stage's worker does: the watermark trails what was read by the out-of-orderness bound."""
    largest = 0
    for side, record in stream:
        harness.process_record(None, record, input=side, timestamp_ms=json.loads(record)["ts"])
        if side == 0:
            largest = max(largest, json.loads(record)["ts"])
            harness.advance_watermark(largest - 2_001 - 60 * 250)  # a chunk out of order at most


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_the_alerts_are_what_the_inputs_imply_across_a_savepoint_and_a_rescale(backend: str) -> None:
    stream, txns, rules = _stream(1_200, seed=3)
    job = fraud_rules()
    cut = len(stream) // 2
    with KeyedProcessFunctionHarness.for_stage(job, "fraud", parallelism=2, state_backend=backend) as first:
        _run(first, stream[:cut])
        out = first.output_values()
        cleared = [r.decoded() for r in first.side_output(CLEARED)]
        snapshot = first.snapshot()
    restored = KeyedProcessFunctionHarness.for_stage(job, "fraud", parallelism=3, state_backend=backend)
    with restored.restore(snapshot):
        assert len({json.dumps(s, sort_keys=True) for s in restored.broadcast_state(RULES)}) == 1
        _run(restored, stream[cut:])
        restored.advance_watermark(json.loads(rules[-1])["ts"])  # the inputs idle: the last version's time
        out += restored.output_values()
        cleared += [r.decoded() for r in restored.side_output(CLEARED)]
    assert {c["id"]: c for c in cleared} == expected_cleared(txns, rules) and len(cleared) == len(set(
        c["id"] for c in cleared)), "a transaction cleared twice, or not as the inputs imply"
    expected = expected_alerts(txns, rules)
    got = {alert_identity(a): a for a in out}
    assert len(got) == len(out), "an alert twice"
    assert got == expected
    assert {a["rule"] for a in expected.values()} == {"large", "burst", "mid"}
    assert len({a["version"] for a in expected.values() if a["rule"] == "large"}) > 3  # rule changes applied


def test_history_is_trimmed_on_every_account_by_the_broadcast_side() -> None:
    stream, txns, rules = _stream(600, seed=5)
    with KeyedProcessFunctionHarness.for_stage(fraud_rules(), "fraud", parallelism=2) as harness:
        _run(harness, stream)
        harness.advance_watermark(json.loads(rules[-1])["ts"])
        harness.process_record(None, rules[-1], input=1)  # a rule change after the watermark moved on
        accounts = {json.loads(t)["account"] for t in txns}
        horizon = json.loads(rules[-1])["ts"] - MAX_WINDOW_MS
        assert all(t > horizon for a in accounts for t in harness.state(HISTORY, a).get())
