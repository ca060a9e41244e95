"""A job as a graph, end to end: :mod:`tidemark.examples.access_log_graph` (a fan-out of one stage
read by two, a fan-in of a channel and an input topic into a two-input function, a side output
another stage reads, three outputs), each kind of worker the graph adds SIGKILLed once while input
flows; every output, read_committed, must hold exactly what the input implies, each record once.

The kills: the fan-in stage while its barriers are half aligned (one input delivered the barrier,
the other not), its exchange reader after its snapshot, the stage read by two after writing its
channel, and a counting stage (whose side output is ``ip_firsts``' channel) after its sink's ack.
Each kill restores every stage from the newest completed checkpoint, the side output's writer and
reader included. Spark parses the input (a ``SparkStep`` on both stages that read it): the stage
read by two gets rows, and the fan-in's exchange reader forwards rows. (``url_hits`` and ``ip_firsts``, stages reading one channel, fail over as the
stages of ``test_exactly_once.py`` do; a side output's commit recovered after a failure between
the commits of a stage's outputs is ``tests/integration/contracts/test_side_output_writes.py``'s.)

The workers are fused (``--fused-workers``): the fan-in's exchange reader runs in the fan-in's
process, as a lane of its own (its own query on the process's SparkSession), so the reader's
kill, counted on the reader's own snapshots, takes the fan-in with it. (Unfused readers are
killed in ``test_rules_and_enrichment.py``.)"""

from __future__ import annotations

import json

import pytest

from pipeline_support import assert_deaths, killed_at_every_point, pipeline, worker_deaths
from tidemark.examples.verify import EXAMPLES, read_committed, verify_example
from tidemark.local.pipeline import InputFeeder

pytestmark = pytest.mark.timeout(900)

GRAPH = "tidemark.examples.access_log_graph:hit_graph"
KILLS = (
    "0@url_totals@during-alignment:2",  # the exchange's barrier in, url_hits' not yet (or the other way round)
    "1@url_totals.read@after-snapshot:2",  # the reader lane's second snapshot, in url_totals' process
    "2@parse@after-channel-write:3",  # its records visible to both readers, no checkpoint yet
    "3@ip_hits@after-ack:2",  # the job output's transaction pre-committed, not committed
)


def test_a_graph_with_a_fan_out_and_a_fan_in_is_exactly_once_across_a_sigkill_of_every_worker(
        tmp_path, kafka_bootstrap, unique_name):
    job_id, source = unique_name("graph"), unique_name("access-log")
    totals, ips, firsts = unique_name("url-totals"), unique_name("ip-hits"), unique_name("ip-firsts")
    args = {"job_id": job_id, "input_topic": source, "output_topic": totals, "ip_output_topic": ips,
            "ip_firsts_topic": firsts, "spark_step": True}  # Spark parses the input: url_totals.read forwards rows
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000"}) as pipe:
        pipe.create_topic(source, 4)
        job = pipe.start_job(GRAPH, args, faults=KILLS, max_restarts=len(KILLS) + 2, fused=True)
        all_killed = lambda: killed_at_every_point(job, KILLS)  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, source, total=1600, chunk=200, pause_s=1.0, until=all_killed).start()
        records = feeder.join(timeout_s=600)
        expected_totals = EXAMPLES["hit_graph"].expectation(records)
        expected_ips = EXAMPLES["hit_graph_ips"].expectation(records)
        totals_verdict = verify_example("hit_graph", read_committed(kafka_bootstrap, totals, expect=len(expected_totals),
                                                                   timeout_s=240), expected_totals)
        ips_verdict = verify_example("hit_graph_ips", read_committed(kafka_bootstrap, ips, expect=len(expected_ips),
                                                                    timeout_s=60), expected_ips)
        expected_firsts = EXAMPLES["hit_graph_new_ips"].expectation(records)
        firsts_verdict = verify_example("hit_graph_new_ips", read_committed(
            kafka_bootstrap, firsts, expect=len(expected_firsts), timeout_s=60), expected_firsts)
        deaths = worker_deaths(job)
        ready = [json.loads(p.read_text()) for p in (pipe.home / "runs").glob("*/url_totals*.ready")]
        job.stop()
    # the reader's kill is its process's, url_totals; no reader process ever ran
    assert_deaths(deaths, [k.split("@")[1].removesuffix(".read") for k in KILLS])
    assert ready and all(r["stages"] == ["url_totals.read", "url_totals"] for r in ready), ready
    assert totals_verdict.exactly_once, totals_verdict
    assert ips_verdict.exactly_once, ips_verdict
    assert firsts_verdict.exactly_once, firsts_verdict  # through ip_hits' side output, a channel
