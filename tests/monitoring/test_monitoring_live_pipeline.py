"""Every panel of every dashboard returns data from a real Prometheus scraping the running pipeline.

One embedded deployment (the session broker, the four services as processes, ``tidemark jobs run``
of the two-stage access-log example in changelog mode with its supervisor on a fixed metrics port,
so stage i serves its worker metrics on that port + 1 + i) and one real Prometheus scraping all
seven processes every second. The scenario produces every metric the dashboards query:

- input keeps arriving, with a malformed record every ``MALFORMED_EVERY`` (dead letters, in every
  attempt of the job);
- checkpoints every second, retained by the checkpoint-store (checkpoint and store metrics,
  alignment and snapshot times in both stages);
- ``changelog=true`` with a short materialization interval: the materializer materializes, the
  changelog service truncates behind it (materialization, pending and truncation metrics);
- the ``top_urls`` stage of the first attempt kills itself after its third ack; the supervisor
  restores every stage from the newest checkpoint (restore and restart metrics).

Then every PromQL expression of every panel is evaluated through Prometheus's HTTP API (the
``job`` variable set to the job's id) until each returns data; except that an expression reading
only metrics documented as conditional (``*only with event time*``) on a condition the job does
not meet must return none (a job without event time exports no watermark gauges). The access-log
example has event time, so every panel of it must have data.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from metric_catalog import CONDITIONS, load_catalog
from prom_harness import PanelQuery, PrometheusProcess, assert_every_panel_has_data, metric_names
from tidemark.examples.generator import RecordWriter, generate
from tidemark.local.pipeline import LocalPipeline, stage_logs
from tidemark.processes import free_port_block
from tidemark.api import JobSpec, StateBackendKind, load_job

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(600)]

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "tidemark"
TOP_URLS = "tidemark.examples.access_log:top_urls"
STAGES = ("minute_counts", "top_urls")
SERVICES = ("coordinator", "checkpoint-store", "changelog", "materializer")
FAULT = "0@top_urls@after-ack:3"  # attempt 0's second stage dies after its third ack
MALFORMED_EVERY = 499
ENV = {
    "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000",
    "TIDEMARK_RETAINED_CHECKPOINTS": "2",
    "TIDEMARK_MATERIALIZATION__INTERVAL_MS": "2000",
    "TIDEMARK_MATERIALIZATION__JITTER_MS": "300",
    "TIDEMARK_MATERIALIZATION__TICK_MS": "200",
    "TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS": "300",
    "TIDEMARK_CHANGELOG__DEFAULT_PARTITIONS": "2",
}
# Whether a job meets each condition of the metrics table (metric_catalog.CONDITIONS).
JOB_CONDITIONS: dict[str, Callable[[JobSpec], bool]] = {
    "event time": lambda spec: any(stage.event_time is not None for stage in spec.stages),
    "the RocksDB backend": lambda spec: spec.state_backend is StateBackendKind.ROCKSDB,
}


def absent_for(spec: JobSpec) -> Callable[[PanelQuery], bool]:
    """True for a panel query that reads only metrics the job does not export (conditional on a
    condition it does not meet)."""
    assert set(JOB_CONDITIONS) == CONDITIONS, "a condition of the metrics table has no predicate here"
    unmet = {condition for condition, met in JOB_CONDITIONS.items() if not met(spec)}
    absent = {m.name for m in load_catalog() if m.only_with in unmet}
    return lambda query: bool(metric_names(query.expr)) and metric_names(query.expr) <= absent


class Feeder:
    """Writes access-log records (a malformed one every ``MALFORMED_EVERY``) in small transactions
    on a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, chunk: int = 200, pause_s: float = 1.0) -> None:
        self.bootstrap, self.topic, self.chunk, self.pause_s = bootstrap, topic, chunk, pause_s
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitoring-feeder", daemon=True)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            source = generate(10**9, seed=11, malformed_every=MALFORMED_EVERY)
            with RecordWriter(self.bootstrap) as writer:
                while not self._stop.is_set():
                    self.sent += writer.write(self.topic, [next(source) for _ in range(self.chunk)], 4, chunk=self.chunk)
                    self._stop.wait(self.pause_s)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def _wait(condition: Callable[[], object], timeout_s: float, what: str, diagnose: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached within {timeout_s:g}s\n{diagnose()}")
        time.sleep(0.5)


def _diagnostics(pipe: LocalPipeline) -> str:
    parts = [f"--- {name}\n{service.log_tail(15)}" for name, service in pipe.cluster.services.items()]
    for job in pipe.jobs:
        parts.append("--- supervisor\n" + "\n".join(job.log_path.read_text(errors="replace").splitlines()[-25:]))
    for name, text in stage_logs(pipe.home).items():
        parts.append(f"--- {name}\n" + "\n".join(text.splitlines()[-15:]))
    return "\n".join(parts)


def test_every_dashboard_panel_has_data_from_the_live_pipeline(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    prometheus_factory: Callable[[list[str]], PrometheusProcess],
) -> None:
    job_id = unique_name("job")
    args = {"job_id": job_id, "input_topic": unique_name("access-log"), "channel_topic": unique_name("minute-counts"),
            "output_topic": unique_name("top-urls"), "changelog": True}
    with LocalPipeline(tmp_path / "home", kafka_bootstrap, topic_prefix=unique_name("tm"), services=SERVICES,
                       env=ENV) as pipe:
        diagnose = lambda: _diagnostics(pipe)  # noqa: E731
        pipe.create_topic(args["input_topic"], 4)
        feeder = Feeder(kafka_bootstrap, args["input_topic"]).start()
        try:
            port = free_port_block(1 + len(STAGES))  # the supervisor, then stage i on port + 1 + i
            job = pipe.start_job(TOP_URLS, args, faults=(FAULT,), max_restarts=3,
                                 env={"TIDEMARK_HTTP_PORT": str(port)})
            supervisor = f"http://127.0.0.1:{port}"
            # the injected failure, the restore from a checkpoint, and the restored attempt running
            _wait(lambda: job.events("worker failed") or job.process.poll() is not None, 300,
                  "the injected worker failure", diagnose)
            _wait(lambda: job.events("restore issued") and _status(f"{supervisor}/readyz") == 200
                  or job.process.poll() is not None, 240, "the restored attempt running", diagnose)
            assert job.process.poll() is None, diagnose()
            assert len(job.events("worker failed")) == 1, diagnose()
            # what Prometheus's HTTP service discovery gets: the restored attempt's stage workers
            with urllib.request.urlopen(f"{supervisor}/targets", timeout=5) as response:
                listed = sorted(target for group in json.loads(response.read()) for target in group["targets"])
            assert listed == [f"127.0.0.1:{port + 1 + i}" for i in range(len(STAGES))], diagnose()

            targets = [f"127.0.0.1:{pipe.cluster.services[name].port}" for name in SERVICES]
            targets += [f"127.0.0.1:{port + i}" for i in range(1 + len(STAGES))]
            prometheus = prometheus_factory(targets)  # waits until every target was scraped

            try:
                assert_every_panel_has_data(prometheus.url, DASHBOARDS_DIR, job_id, timeout=120.0,
                                            expect_empty=absent_for(load_job(TOP_URLS, args)))
            except AssertionError as error:
                raise AssertionError(f"{error}\n{diagnose()}") from None

            # the supervisor and every stage worker were scraped as themselves, after the restore
            def instances(expr: str) -> list[tuple[str, str]]:
                return sorted((s["metric"]["instance"], s["value"][1]) for s in prometheus.query(expr))

            supervisor_target, stage_targets = targets[len(SERVICES)], targets[len(SERVICES) + 1:]
            assert instances(f'tidemark_job_running{{job="{job_id}"}}') == [(supervisor_target, "1")]
            assert instances(f'tidemark_job_restarts_total{{job="{job_id}"}}') == [(supervisor_target, "1")]
            assert instances(f'tidemark_job_epoch{{job="{job_id}"}} > 1')  # the restored attempt
            restored = instances(f'tidemark_worker_restore_duration_seconds{{job="{job_id}"}} > 0')
            assert [instance for instance, _ in restored] == sorted(stage_targets)
            assert prometheus.query('tidemark_dead_letters_total{service="worker"} > 0')
            assert prometheus.query(f'tidemark_materializations_total{{job="{job_id}",outcome="completed"}} > 0')
            assert job.process.poll() is None, diagnose()
        finally:
            feeder.stop()
