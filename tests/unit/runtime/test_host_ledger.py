"""The supervisor's view of its worker hosts (runtime.placement.hosted_workers.HostLedger): placement, RUNs,
states, and when a host counts as restarted or lost."""

from __future__ import annotations

from pathlib import Path

from tidemark.protocol.messages import HostedProcess, HostReport, ProcessPhase
from tidemark.protocol import codec
from tidemark.runtime.placement.hosted_workers import HostLedger, host_of, hosted_attempt, run_assignment
from tidemark.runtime.job.attempt import Assignment, Attempt, process_name
from tidemark.runtime.placement.pool import Launch
from tidemark.types import Epoch, JobId

JOB = JobId("job")
WORKERS = {"counts.read": 2, "counts": 2, "top": 2}


def launches(epoch: int = 3) -> list[Launch]:
    out = []
    for stage, count in WORKERS.items():
        for worker in range(count):
            attempt = Attempt("pkg:job", stage, Epoch(epoch), 4, Path("/runs"), {"a": 1}, "chk-7/_metadata",
                              WORKERS, worker)
            out.append(Launch(process_name(stage, worker, count), Assignment(attempt, None, None)))
    return out


def report(host: str, incarnation: str = "i1", epoch: int = 3, *processes: HostedProcess) -> HostReport:
    return HostReport(JOB, host, incarnation, Epoch(epoch), processes, 0)


def delivering(ledger: HostLedger, until: float) -> None:
    """The supervisor's heartbeats come back every second up to ``until``."""
    t = 0.0
    while t <= until:
        ledger.on_echo(t)
        t += 1.0


def test_worker_w_of_a_stage_and_of_its_exchange_reader_share_host_stage_w() -> None:
    placed = {launch.name: host_of(launch) for launch in launches()}
    assert placed == {"counts.read.w0": "counts/0", "counts.read.w1": "counts/1", "counts.w0": "counts/0",
                      "counts.w1": "counts/1", "top.w0": "top/0", "top.w1": "top/1"}


def test_a_run_goes_once_to_each_host_that_reports_and_the_others_are_waited_for() -> None:
    ledger = HostLedger()
    ledger.new_attempt(Epoch(3), launches())
    assert ledger.waiting_for(0.0) == ["counts/0", "counts/1", "top/0", "top/1"]
    ledger.on_report(report("counts/0", epoch=0), 0.0)
    ledger.on_report(report("top/1", epoch=0), 0.0)
    assert ledger.runs_due(0.5) == ["counts/0", "top/1"]
    assert ledger.runs_due(0.6) == []  # once
    assert ledger.waiting_for(0.6) == ["counts/1", "top/0"]
    ledger.on_report(report("counts/1", epoch=0), 10.0)
    assert ledger.runs_due(20.0) == []  # its report is stale: it may be restarting
    assert "counts/1" in ledger.waiting_for(20.0)


def test_states_follow_the_reports_of_the_attempt() -> None:
    ledger = HostLedger()
    ledger.new_attempt(Epoch(3), launches())
    for host in ("counts/0", "counts/1", "top/0", "top/1"):
        ledger.on_report(report(host, epoch=2), 0.0)  # still the older attempt
    ledger.runs_due(0.0)
    assert {s.phase for s in ledger.states(0.1).values()} == {ProcessPhase.STARTING}
    ledger.on_report(report("counts/0", "i1", 3, HostedProcess("counts.read.w0", ProcessPhase.PROCESSING),
                            HostedProcess("counts.w0", ProcessPhase.EXITED, 3, "input topic 'x' does not exist")),
                     0.2)
    states = ledger.states(0.3)
    assert states["counts.read.w0"].phase is ProcessPhase.PROCESSING
    assert (states["counts.w0"].exit_code, states["counts.w0"].reason) == (3, "input topic 'x' does not exist")
    assert states["top.w1"].phase is ProcessPhase.STARTING


def test_a_restarted_host_has_lost_its_processes() -> None:
    ledger = HostLedger()
    ledger.new_attempt(Epoch(3), launches())
    ledger.on_report(report("top/0", "first"), 0.0)
    ledger.runs_due(0.0)
    ledger.on_report(report("top/0", "second", 0), 5.0)  # the pod restarted
    state = ledger.states(5.0)["top.w0"]
    assert state.exited and state.exit_code == -9 and "top/0 restarted" in state.reason
    ledger.new_attempt(Epoch(4), launches(4))  # the next attempt goes to the new incarnation
    assert "top/0" in ledger.runs_due(5.5)
    assert not ledger.states(5.5)["top.w0"].exited


def test_silence_fails_a_host_only_while_the_topic_delivers() -> None:
    ledger = HostLedger(silence_s=15.0)
    ledger.new_attempt(Epoch(3), launches())
    ledger.on_report(report("top/1"), 0.0)
    ledger.runs_due(0.0)
    assert not ledger.states(40.0)["top.w1"].exited  # no heartbeat came back: a broker outage, maybe
    delivering(ledger, 12.0)
    assert not ledger.states(12.0)["top.w1"].exited  # delivering, but not for 15 s yet
    delivering(ledger, 16.0)
    state = ledger.states(16.0)["top.w1"]
    assert state.exited and "top/1 lost: no report for 16s" in state.reason
    ledger.on_echo(40.0)  # after a gap: delivering again only from now on
    ledger.on_report(report("top/1"), 40.0)
    assert not ledger.states(41.0)["top.w1"].exited


def test_a_run_carries_the_attempt_and_each_launch() -> None:
    placed = [launch for launch in launches() if host_of(launch) == "counts/1"]
    run = run_assignment(JOB, "counts/1", Epoch(3), placed, standby=False)
    assert (run.job_ref, run.job_args, run.parallelism, run.restore_path) == ("pkg:job", '{"a": 1}', 4,
                                                                                "chk-7/_metadata")
    assert run.workers == WORKERS and run.standby is False
    assert [(launch.stage, launch.worker) for launch in run.launches] == [("counts.read", 1), ("counts", 1)]


def test_a_fused_launch_reaches_its_host_as_the_attempt_the_supervisor_planned() -> None:
    """Worker w of a stage with its exchange reader's worker w as a second lane: one process on
    host ``counts/w``, which runs the same attempt (both lanes) from the RUN, through its bytes."""
    attempt = Attempt("pkg:job", "counts", Epoch(3), 4, Path("/runs"), {"a": 1}, "chk-7/_metadata", WORKERS, 1,
                      fused="counts.read")
    fused = Launch(attempt.process, Assignment(attempt, "counts.read=after-ack:2", None))
    assert host_of(fused) == "counts/1"
    run = codec.decode(codec.encode(run_assignment(JOB, "counts/1", Epoch(3), [fused], standby=True)))
    (placed,) = run.launches
    assert (placed.stage, placed.worker, placed.fault, placed.fused) == ("counts", 1, "counts.read=after-ack:2",
                                                                          "counts.read")
    hosted = hosted_attempt(run, placed, Path("/runs"))
    assert hosted == attempt and [lane.stage for lane in hosted.lanes()] == ["counts.read", "counts"]
