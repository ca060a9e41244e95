"""The broker as a fault: the two-stage access-log job rides through a broker outage.

The test starts its own Apache Kafka broker (it kills and pauses it), the four services and the
job, and keeps input arriving throughout. The broker is SIGKILLed and restarted on the same log
directory and port; once checkpoints complete again it is paused with SIGSTOP for 20 s and resumed
with SIGCONT (one pipeline for both outages: each costs the setup's JVM starts otherwise).
Afterwards: no Tidemark process exited (no failover: one attempt, no worker failure), every
process logged that it was waiting for the broker and that it was back, checkpoints completed
after each outage, and the read_committed output is exact record by record.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline_support import TOP_URLS, pipeline, stage_pids, stopped, topics_for, verify_two_stage
from tidemark.broker.embedded import EmbeddedBroker
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, json_events, wait_for
from tidemark.processes import pid_alive

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")),
                       reason="KAFKA_BOOTSTRAP_SERVERS names an external cluster: these tests kill their own "
                              "embedded broker and cannot kill or pause an external one"),
]

SERVICES = ("coordinator", "checkpoint-store", "changelog", "materializer")
WAITING = "waiting for the broker"
BACK = "broker is back"
PAUSE_S = 20.0
MAX_CLIENT_LINES = 100  # Kafka client libraries' own log lines per process over the whole test


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    own = EmbeddedBroker(tmp_path / "broker", engine_name="kafka")
    own.start(tie_to_parent=True)
    try:
        yield own
    finally:
        own.stop()


def kill_and_restart(broker: EmbeddedBroker) -> None:
    before = broker.status()
    assert before.running and before.pid is not None
    os.kill(before.pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(before.pid), timeout_s=10, what="the killed broker gone")
    time.sleep(5.0)  # an outage, not only a restart
    broker.stop()  # reaps the killed process and drops its record; the log directory stays
    after = broker.start(tie_to_parent=True)
    assert after.port == before.port, (before, after)


def pause_and_resume(broker: EmbeddedBroker) -> None:
    status = broker.status()
    assert status.running and status.pid is not None
    with stopped(status.pid):
        time.sleep(PAUSE_S)


def process_logs(pipe: LocalPipeline, job: JobRun) -> dict[str, str]:
    """Every Tidemark process's log: the services, the supervisor, the stage workers."""
    logs = {name: service.log_path for name, service in pipe.cluster.services.items()}
    logs["supervisor"] = job.log_path
    logs.update({path.stem: path for path in sorted((pipe.home / "runs").glob("*/*.log"))})
    return {name: path.read_text(errors="replace") for name, path in logs.items()}


def run_through_outages(tmp_path: Path, broker: EmbeddedBroker, unique_name: Callable[[str], str],
                        outages: tuple[Callable[[EmbeddedBroker], None], ...]) -> None:
    bootstrap = broker.status().bootstrap_servers
    assert bootstrap
    topics = topics_for(unique_name)
    done = False
    with pipeline(tmp_path, bootstrap, unique_name, services=SERVICES,
                  env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2500"}) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, topics.args(), max_restarts=3)
        feeder = InputFeeder(bootstrap, topics.input, total=2000, chunk=200, pause_s=1.0,
                             until=lambda: done).start()
        before = wait_for(lambda: pipe.completed_checkpoints(topics.job_id), timeout_s=240,
                          what="a completed checkpoint")
        services = {name: s.process for name, s in pipe.cluster.services.items()}
        workers = stage_pids(pipe.home)
        assert len(workers) == 2, workers
        attempts_before = len(job.events("starting attempt"))
        outage_s, after = 0.0, before
        for outage in outages:
            started = time.monotonic()
            outage(broker)
            outage_s += time.monotonic() - started
            completed = after
            after = wait_for(lambda: (n := pipe.completed_checkpoints(topics.job_id)) >= completed + 2 and n,
                             timeout_s=150, what=f"checkpoints after the outage ({outage.__name__})")
        done = True
        records = feeder.join(timeout_s=120)
        verdict = verify_two_stage(bootstrap, topics, records, timeout_s=120)
        exited = {name: p.returncode for name, p in services.items() if p.poll() is not None}
        exited |= {name: "gone" for name, pid in workers.items() if not pid_alive(pid)}
        if job.process.poll() is not None:
            exited["supervisor"] = job.process.returncode
        logs = process_logs(pipe, job)
        attempts = job.events("starting attempt")[attempts_before:]
        job.stop()
    assert not exited, exited
    assert not attempts, attempts  # no global failover since the outage began
    assert after > before, (before, after)
    said = {name: {e.get("event") for e in json_events(text)} for name, text in logs.items()}
    assert set(said) >= {*SERVICES, "supervisor", "minute_counts", "top_urls"}, sorted(said)
    silent = sorted(name for name, events in said.items() if WAITING not in events or BACK not in events)
    assert not silent, f"no '{WAITING}' / '{BACK}' in the logs of {silent}"
    for name, text in logs.items():  # once per outage, then every 10 s: not a flood
        waiting = [e for e in json_events(text) if e.get("event") == WAITING]
        assert len(waiting) <= outage_s / 10 + 3 * len(outages), (name, len(waiting), outage_s)
        assert all(e.get("bootstrap") == bootstrap for e in waiting), (name, waiting[:1])
        client_lines = [line for line in text.splitlines() if line.startswith("%")]  # librdkafka's own
        client_lines += [e for e in json_events(text) if str(e.get("logger")).startswith("aiokafka")]
        assert len(client_lines) <= MAX_CLIENT_LINES, (name, len(client_lines), client_lines[:5])
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def test_broker_killed_and_restarted_then_paused_for_20s_mid_run(tmp_path, broker, unique_name):
    run_through_outages(tmp_path, broker, unique_name, (kill_and_restart, pause_and_resume))
