"""Broadcast state and a stream-table join end to end, two jobs in one pipeline while their inputs
change, each kind of their workers SIGKILLed; every output, read_committed, must be exactly what
its input topics imply (computed without the jobs' code), each record once.

* :mod:`tidemark.examples.fraud_rules`: a rules topic broadcast to a stage keyed by account, on two
  workers of two tasks each (so both topics come through its exchange reader), rules changing
  while transactions flow. Killed: the keyed stage while a broadcast element is half applied (its
  first task has it, its other not) and while timers fire; the exchange reader (a process of its
  own here, ``--no-fused-workers``) after writing a broadcast element's copies. Its side output of cleared transactions (the ones that broke no
  rule) must be exact too: a side output is committed with the stage's guarantee.
* :mod:`tidemark.examples.url_owners`: the access log joined with a compacted topic of URL
  owners, owners changing and leaving while records flow. Killed: the join while it fires (events
  joined and emitted, not checkpointed).

(A sink's pre-committed transaction across a SIGKILL after its ack, the same for every stage, is
the SIGKILL tests' of ``test_job_graph.py`` and ``test_changelog_exactly_once.py``.)

(What the broadcast state does on a rescale 2 -> 3 -> 2 through savepoints, and that every task
holds the same copy, the test harness shows: ``tests/unit/graph/test_broadcast_state.py``.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from pipeline_support import assert_deaths, killed_at_every_point, pipeline, worker_deaths
from tidemark.examples import fraud_rules, url_owners
from tidemark.examples.generator import RecordWriter, generate
from tidemark.examples.verify import read_committed
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.verification.comparison import compare

pytestmark = pytest.mark.timeout(900)

FRAUD_KILLS = (
    "0@fraud@during-broadcast:2",  # a rule version applied by one task of the worker, not by the other
    "1@fraud.read@after-channel-write:4",  # copies of rules and transactions in the exchange, no checkpoint yet
    "2@fraud@during-timer-firing:40",  # some transactions judged and their alerts emitted, not checkpointed
)
ENRICH_KILLS = (
    "0@enrich@during-timer-firing:60",  # some records joined and emitted, not checkpointed
)


def _write_in_background(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_rules_and_an_enrichment_change_while_running_and_both_outputs_are_exactly_once_across_sigkills(
        tmp_path, kafka_bootstrap, unique_name):
    fraud_id, txns, rules, alerts, cleared = (unique_name(n) for n in ("fraud", "txns", "rules", "alerts", "cleared"))
    enrich_id, log, owners, enriched = (unique_name(n) for n in ("enrich", "access-log", "owners", "by-owner"))
    written: dict[str, list] = {"transactions": [], "rules": [], "records": [], "owners": []}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000"}) as pipe:
        pipe.create_topic(txns, 4)
        pipe.create_topic(rules, 1)
        pipe.create_topic(log, 4)
        ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(owners, 1, url_owners.COMPACTED)])
        fraud = pipe.start_job("tidemark.examples.fraud_rules:fraud_rules", {
            "job_id": fraud_id, "transactions_topic": txns, "rules_topic": rules, "output_topic": alerts,
            "cleared_topic": cleared, "parallelism": 4, "workers": 2}, faults=FRAUD_KILLS, max_restarts=len(FRAUD_KILLS) + 2,
            fused=False)  # its exchange readers as processes of their own (fused ones: test_job_graph.py)
        enrich = pipe.start_job("tidemark.examples.url_owners:url_owners", {
            "job_id": enrich_id, "input_topic": log, "owners_topic": owners, "output_topic": enriched},
            faults=ENRICH_KILLS, max_restarts=len(ENRICH_KILLS) + 2)
        more = lambda: not (killed_at_every_point(fraud, FRAUD_KILLS)  # noqa: E731
                            and killed_at_every_point(enrich, ENRICH_KILLS))

        def write_fraud() -> None:
            with RecordWriter(kafka_bootstrap) as writer:
                for kind, records in fraud_rules.feed(1_500, chunk=100, every=3, more=more):
                    writer.write(txns if kind == "transactions" else rules, records,
                                 4 if kind == "transactions" else 1)
                    written[kind].extend(records)
                    time.sleep(1.0)  # a write a second: each write is a micro-batch in every stage it reaches

        def write_enrichment() -> None:  # each owner change before the records of its time
            first = 0
            with RecordWriter(kafka_bootstrap) as writer:
                while first < 1_500 or more():
                    part = list(generate(100, 3, per_minute=250, first=first))
                    if first // 100 % 2 == 0:
                        ahead = json.loads(next(generate(1, 3, per_minute=250, first=first + 200)))["ts"]
                        changes = url_owners.owner_changes(first // 200, ahead)
                        url_owners.write_owners(writer, owners, changes)
                        written["owners"].extend(changes)
                    writer.write(log, part, 4)
                    written["records"].extend(part)
                    first += 100
                    time.sleep(1.0)  # a write a second: each write is a micro-batch in every stage it reaches
                last = json.loads(written["records"][-1])["ts"]  # a row past every record: once idle,
                url_owners.write_owners(writer, owners, [("/sentinel", {"owner": "none"}, last + 3_600_000)])
                # the watermark passes them all

        writers = [_write_in_background(write_fraud), _write_in_background(write_enrichment)]
        for writer in writers:
            writer.join(timeout=600)
        assert not any(w.is_alive() for w in writers), "a feed did not end"
        expected_alerts = fraud_rules.expected_alerts(written["transactions"], written["rules"])
        expected_enriched = url_owners.expected_enriched(written["records"], written["owners"])
        expected_cleared = fraud_rules.expected_cleared(written["transactions"], written["rules"])
        got_alerts = read_committed(kafka_bootstrap, alerts, expect=len(expected_alerts), timeout_s=240)
        got_cleared = read_committed(kafka_bootstrap, cleared, expect=len(expected_cleared), timeout_s=120)
        got_enriched = read_committed(kafka_bootstrap, enriched, expect=len(expected_enriched), timeout_s=120)
        deaths = worker_deaths(fraud) + worker_deaths(enrich)
        fraud.stop()
        enrich.stop()
    alerts_verdict = compare(((fraud_rules.alert_identity(a), a) for a in got_alerts), expected_alerts)
    cleared_verdict = compare(((c["id"], c) for c in got_cleared), expected_cleared)
    enriched_verdict = compare(((r["ts"], r) for r in got_enriched), expected_enriched)
    assert alerts_verdict.exactly_once, alerts_verdict
    assert cleared_verdict.exactly_once, cleared_verdict  # the side output, read_committed, across the kills
    assert enriched_verdict.exactly_once, enriched_verdict
    # each kill took worker 0 of its stage (process "<stage>.w0" when the stage has several, else "<stage>")
    assert_deaths(deaths, [f"{k.split('@')[1]}.w0" for k in FRAUD_KILLS] + [k.split("@")[1] for k in ENRICH_KILLS])
    assert len({a["version"] for a in expected_alerts.values() if a["rule"] == "large"}) > 3  # rules changed
    owners_seen = [r["owner"] for r in expected_enriched.values()]
    assert owners_seen.count(None) > 10 and len(set(owners_seen)) > 3  # owners set, changed and gone
