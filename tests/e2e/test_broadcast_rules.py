"""Broadcast state end to end: :mod:`tidemark.examples.fraud_rules` (a rules topic broadcast to a
stage keyed by account, on two workers of two tasks each, so both topics come through its
exchange reader) while
rules change and transactions flow, each worker kind SIGKILLed: the keyed stage while a broadcast
element is half applied (its first task has it, its other not), while timers fire, after its
sink's ack; the exchange reader after writing a broadcast element's copies. The alerts,
read_committed, must be exactly those the two input topics imply, each once.

(What the broadcast state does on a rescale 2 -> 3 -> 2 through savepoints, and that every task
holds the same copy, the test harness shows: ``tests/unit/graph/test_broadcast_state.py``.)"""

from __future__ import annotations

import threading
import time

import pytest

from pipeline_support import pipeline, worker_deaths
from tidemark.examples.fraud_rules import alert_identity, expected_alerts, feed
from tidemark.examples.generator import produce
from tidemark.examples.verify import read_committed
from tidemark.verification.comparison import compare

pytestmark = pytest.mark.timeout(900)

JOB = "tidemark.examples.fraud_rules:fraud_rules"
KILLS = (
    "0@fraud@during-broadcast:2",  # a rule version applied by one task of the worker, not by the other
    "1@fraud.read@after-channel-write:4",  # copies of rules and transactions in the exchange, no checkpoint yet
    "2@fraud@during-timer-firing:40",  # some transactions judged and their alerts emitted, not checkpointed
    "3@fraud@after-ack:2",  # the alerts' transaction pre-committed, not committed
)


def test_fraud_rules_change_while_running_and_the_alerts_are_exactly_once_across_sigkills(
        tmp_path, kafka_bootstrap, unique_name):
    job_id, txns_topic, rules_topic, alerts_topic = (unique_name(n) for n in ("fraud", "txns", "rules", "alerts"))
    args = {"job_id": job_id, "transactions_topic": txns_topic, "rules_topic": rules_topic,
            "output_topic": alerts_topic, "parallelism": 4, "workers": 2}  # two tasks per worker
    written: dict[str, list[bytes]] = {"transactions": [], "rules": []}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000"}) as pipe:
        pipe.create_topic(txns_topic, 4)
        pipe.create_topic(rules_topic, 1)
        job = pipe.start_job(JOB, args, faults=KILLS, max_restarts=len(KILLS) + 2)
        all_killed = lambda: len(job.events("starting attempt")) > len(KILLS) or job.process.poll() is not None  # noqa: E731

        def write() -> None:
            for kind, records in feed(1_500, chunk=100, every=3, more=lambda: not all_killed()):
                produce(kafka_bootstrap, txns_topic if kind == "transactions" else rules_topic, records,
                        4 if kind == "transactions" else 1)
                written[kind].extend(records)
                time.sleep(0.5)

        writer = threading.Thread(target=write, name="fraud-feed", daemon=True)
        writer.start()
        writer.join(timeout=600)
        assert not writer.is_alive(), "the feed did not end"
        expected = expected_alerts(written["transactions"], written["rules"])
        alerts = read_committed(kafka_bootstrap, alerts_topic, expect=len(expected), timeout_s=240)
        deaths = worker_deaths(job)
        job.stop()
    verdict = compare(((alert_identity(a), a) for a in alerts), expected)
    # each kill took worker 0 of its stage (process "<stage>.w0")
    assert sorted(d["stage"] for d in deaths) == sorted(f"{k.split('@')[1]}.w0" for k in KILLS), deaths
    assert verdict.exactly_once, verdict
    assert len({a["version"] for a in expected.values() if a["rule"] == "large"}) > 3  # rule changes applied
