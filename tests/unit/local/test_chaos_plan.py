"""The fault campaign's plan and its recovery figures (tidemark.local.chaos), without processes."""

from __future__ import annotations

import pytest

from tidemark.local.chaos import KILL_KINDS, PAUSE, CampaignReport, Fault, FaultResult, plan_faults, recovery_stats
from tidemark.verification.comparison import Verdict

pytestmark = pytest.mark.unit


def test_every_kind_is_killed_once_before_any_is_killed_again():
    faults = plan_faults(len(KILL_KINDS) + 5, 0, seed=3)
    first = [f.kind for f in faults[:len(KILL_KINDS)]]
    assert sorted(first) == sorted(KILL_KINDS)
    assert all(f.kind in KILL_KINDS for f in faults[len(KILL_KINDS):])
    assert len(faults) == len(KILL_KINDS) + 5


def test_pauses_are_placed_among_the_kills_with_lengths_in_range():
    faults = plan_faults(100, 5, pause_s=(20.0, 60.0), seed=9)
    pauses = [f for f in faults if f.kind == PAUSE]
    assert len(faults) == 105 and len(pauses) == 5
    assert all(20.0 <= f.pause_s <= 60.0 for f in pauses)
    assert {f.kind for f in faults} == {*KILL_KINDS, PAUSE}


def test_the_plan_is_the_seeds():
    assert plan_faults(30, 3, seed=5) == plan_faults(30, 3, seed=5)
    assert plan_faults(30, 3, seed=5) != plan_faults(30, 3, seed=6)


def test_fewer_kills_than_kinds_draws_distinct_kinds():
    kinds = [f.kind for f in plan_faults(3, 0, seed=1)]
    assert len(set(kinds)) == 3


def test_recovery_figures_per_kind_leave_out_faults_not_recovered_from():
    results = [FaultResult(Fault("broker"), 0, ms, "") for ms in (3000, 1000, 2000)]
    results += [FaultResult(Fault("coordinator"), 0, None, "pid 1")]
    (broker,) = recovery_stats(results)
    assert (broker.kind, broker.count, broker.min_s, broker.median_s, broker.max_s) == ("broker", 3, 1.0, 2.0, 3.0)
    report = CampaignReport("heap", results, records=10, verdict=Verdict(2, 2, 0, 0, 0, 0))
    assert not report.passed  # the coordinator's fault was not recovered from
    assert "not recovered" in report.table() and "coordinator (pid 1)" in report.table()
    assert "0 lost, 0 duplicated, 0 wrong" in report.table()


def test_a_campaign_passes_only_with_an_exact_output():
    results = [FaultResult(Fault("broker"), 0, 1000, "")]
    assert CampaignReport("heap", results, verdict=Verdict(2, 2, 0, 0, 0, 0)).passed
    assert not CampaignReport("heap", results, verdict=Verdict(2, 2, 0, 1, 0, 0)).passed
    assert not CampaignReport("heap", results).passed  # never checked


def test_a_process_that_exited_by_itself_fails_the_campaign():
    report = CampaignReport("heap", [FaultResult(Fault("broker"), 0, 1000, "")], verdict=Verdict(2, 2, 0, 0, 0, 0),
                            crashes=["coordinator (exit 1, after fault 1 (broker))"])
    assert not report.passed
    assert "exited without being killed: coordinator (exit 1" in report.table()
