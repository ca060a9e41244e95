"""A small fault campaign in the suite: every process kind SIGKILLed once in a random order, the
Apache Kafka broker included, and a broker pause, while input flows into the two-stage job; the
read_committed output must be exact, every fault recovered from (a checkpoint triggered after
it completes), no fault but a worker's kill fails the job over (services, the supervisor, the
broker: the workers ride through), and afterwards the checkpoint storage holds exactly the
retained checkpoints' files. ``bench/chaos_campaign.py`` runs the long campaign, in both state modes.

The campaign starts its own embedded broker (it kills and pauses it), so it does not touch the
session's broker, and it runs the same with ``KAFKA_BOOTSTRAP_SERVERS`` set.
"""

from __future__ import annotations

import pytest

from pipeline_support import retention_problems
from tidemark.local.chaos import KILL_KINDS, PAUSE, STAGES, FaultCampaign, plan_faults
from tidemark.local.pipeline import wait_for

pytestmark = pytest.mark.timeout(900)
RETAINED = 3  # the checkpoint-store's default


def test_a_random_kill_of_every_process_kind_and_a_broker_pause_lose_nothing(tmp_path):
    faults = plan_faults(len(KILL_KINDS), 1, pause_s=(10.0, 10.0), seed=20261127)
    with FaultCampaign(tmp_path, "heap", seed=20261127, progress=print) as campaign:
        report = campaign.run(faults, gap_s=(0.2, 1.0))
        if report.verdict is not None:  # retention after it all: a checkpoint in flight at the stop aborts
            assert campaign.job is not None
            campaign.job.stop()
            try:
                wait_for(lambda: not retention_problems(campaign.pipe_home, campaign.job_id, RETAINED), 60,
                         "retention settled")
            except TimeoutError:
                pass
            retention = retention_problems(campaign.pipe_home, campaign.job_id, RETAINED)
    print(report.table())
    assert [r.fault for r in report.results] == faults, report.table()
    assert {r.fault.kind for r in report.results} == {*KILL_KINDS, PAUSE}
    assert not report.unrecovered and not report.crashes, report.table()
    assert report.verdict is not None and report.verdict.exactly_once, report.table()
    assert report.verdict.records == report.verdict.expected_records >= 2
    (supervisor,) = [r for r in report.results if r.fault.kind == "supervisor"]
    assert "its attempt adopted" in supervisor.detail, "the restarted supervisor took over the running attempt"
    failed_over = [(r.fault.kind, r.failovers) for r in report.results if r.fault.kind not in STAGES and r.failovers]
    assert not failed_over, "a service, the supervisor or the broker down fails nothing over"
    assert retention == [], "exactly the newest checkpoints' files are left, all of them"
