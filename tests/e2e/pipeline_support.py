"""Shared set-up of the end-to-end pipeline tests: one deployment per test on the session broker."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from tidemark.examples.generator import expected_top_urls, expected_url_counts
from tidemark.examples.verify import Verdict, read_committed, verify_top_urls, verify_url_counts
from tidemark.kafka.clients import consumer_config
from tidemark.local.pipeline import JobRun, LocalPipeline, wait_for
from tidemark.processes import paused
from tidemark.protocol import codec
from tidemark.protocol.dead_letters import DeadLetter

TOP_URLS = "tidemark.examples.access_log:top_urls"
URL_COUNTS = "tidemark.examples.access_log:url_counts"


@dataclass
class Topics:
    job_id: str
    input: str
    channel: str
    output: str

    def args(self, **extra: Any) -> dict[str, Any]:
        return {"job_id": self.job_id, "input_topic": self.input, "channel_topic": self.channel,
                "output_topic": self.output, **extra}

    def single_stage_args(self, **extra: Any) -> dict[str, Any]:
        return {"job_id": self.job_id, "input_topic": self.input, "output_topic": self.output, **extra}


def topics_for(unique_name: Callable[[str], str]) -> Topics:
    return Topics(unique_name("job"), unique_name("access-log"), unique_name("minute-counts"),
                  unique_name("top-urls"))


def pipeline(tmp_path: Path, bootstrap: str, unique_name: Callable[[str], str], *, standby: bool = False,
             env: dict[str, str] | None = None, **kwargs: Any) -> LocalPipeline:
    """Jobs here run without warm standbys unless ``standby``: each would cost a JVM start for
    nothing in a test that fails over little (the SIGKILL tests at every fault point use them).
    The jobs of one test process share idle workers (runtime.placement.idle_workers): a test's
    job takes the worker processes the test before it left, their SparkSessions started."""
    idle = {"TIDEMARK_IDLE_WORKERS__DIR": str(tmp_path.parent / "idle-workers"), "TIDEMARK_IDLE_WORKERS__MAX": "6"}
    return LocalPipeline(tmp_path / "home", bootstrap, topic_prefix=unique_name("tm"), standby=standby,
                         env={**idle, **(env or {})}, **kwargs)


def stage_pids(home: Path, process: str = "*") -> dict[str, int]:
    """The pid of each stage worker process matching ``process`` (a name or a glob, e.g.
    ``top_urls.w*``, ``top_urls.epoch-2``) that has its query running, by its ready file's name."""
    return {path.name: json.loads(path.read_text())["pid"] for path in (home / "runs").glob(f"*/{process}.ready")}


@contextlib.contextmanager
def stopped(*pids: int) -> Iterator[None]:
    """The processes ``pids`` stopped (SIGSTOP) for the block and continued after it; one that
    died meanwhile (a failover killed it) is passed over."""
    with contextlib.ExitStack() as stack:
        for pid in pids:
            stack.enter_context(paused(pid))
        yield


def killed_at_every_point(job: JobRun, kills: tuple[str, ...]) -> bool:
    """Whether every attempt ``kills`` plans a SIGKILL for is behind the job (an attempt started
    after each), or the job ended: until then its input keeps flowing."""
    return len(job.events("starting attempt")) > len(kills) or job.process.poll() is not None


def worker_deaths(job: JobRun) -> list[dict[str, Any]]:
    """Every worker process the supervisor saw die, in order: after its attempt registered
    ("worker failed") or before ("worker died while starting": with processes restoring in place,
    a fault point can be reached before the slowest process of the attempt has started). Each
    must be a SIGKILL, a fault point's: a worker that exited on an error fails the test (the job
    would recover from it, so the output alone would not show it)."""
    deaths = [e for e in job.log_events() if e.get("event") in ("worker failed", "worker died while starting")]
    errors = [e for e in deaths if e.get("code") != -9]
    assert not errors, f"workers exited on an error, not a fault point's SIGKILL:\n{described(errors)}"
    return deaths


def described(deaths: list[dict[str, Any]], lines: int = 25) -> str:
    """Each death and the end of its worker's log (what it did last: the fault point's line, or
    the error), for a failure message that says more than the exit status."""
    out = []
    for death in deaths:
        path = Path(death.get("log_file") or "/nonexistent")
        tail = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
        out.append(f"{death}\n  " + "\n  ".join(tail))
    return "\n".join(out)


def assert_deaths(deaths: list[dict[str, Any]], expected: list[str]) -> None:
    """The workers that died are the processes ``expected`` names (one per planned kill), no other."""
    assert sorted(d["stage"] for d in deaths) == sorted(expected), (
        f"died: {sorted(d['stage'] for d in deaths)}, planned: {sorted(expected)}\n{described(deaths)}")


def verify_two_stage(bootstrap: str, topics: Topics, records: list[bytes], timeout_s: float) -> Verdict:
    """The windowed job's output: each minute the input closes, once, with its final top URLs
    (the last minutes close when the input partitions turn idle)."""
    expected = expected_top_urls(records)
    assert len(expected) >= 2, f"the input closes {len(expected)} minutes: too few for the check to say much"
    output = read_committed(bootstrap, topics.output, expect=len(expected), timeout_s=timeout_s)
    return verify_top_urls(output, expected)


def verify_single_stage(bootstrap: str, topics: Topics, records: list[bytes], timeout_s: float) -> Verdict:
    output = read_committed(bootstrap, topics.output, expect=len(records), timeout_s=timeout_s)
    return verify_url_counts(output, expected_url_counts(records))


def retention_problems(home: Path, job_id: str, retained: int) -> list[str]:
    """What is wrong with the job's files in checkpoint storage after a run: not exactly
    ``retained`` checkpoints, a file of a retained checkpoint/savepoint missing, or a private
    file of a checkpoint that is no longer retained still present."""
    from tidemark.checkpoint_store.store import state_files
    from tidemark.checkpoint_store.catalog import list_retained
    from tidemark.storage import open_storage

    storage = open_storage((home / "checkpoints").resolve().as_uri())
    checkpoints = list_retained(storage, job_id, savepoints=False).entries
    savepoints = list_retained(storage, job_id, savepoints=True).entries
    problems = [] if len(checkpoints) == retained else [f"{len(checkpoints)} checkpoints retained, not {retained}"]
    referenced = {f.path for e in (*checkpoints, *savepoints) for f in state_files(e.metadata)}
    referenced |= {e.path for e in (*checkpoints, *savepoints)}
    present = set(storage.list(f"{job_id}/"))
    problems += [f"missing: {p}" for p in sorted(referenced - present)]
    problems += [f"not deleted: {p}" for p in sorted(present - referenced)]
    return problems


def processes_mentioning(marker: str) -> list[str]:
    """Processes (``"pid: command line"``) whose working directory, command line or environment
    mentions ``marker`` (a test's scratch directory): what a test must not leave running."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker in cwd or marker.encode() in cmdline or marker.encode() in environ:
            found.append(f"{proc.name}: {cmdline[:200].decode(errors='replace')}")
    return found


class Milestone:
    """Input keeps flowing until ``reached``: set once the event under test is behind the job
    and it completed two more checkpoints after it."""

    def __init__(self) -> None:
        self.reached = False

    def __call__(self) -> bool:
        return self.reached

    def after_two_more_checkpoints(self, pipe, job_id: str) -> None:
        done = pipe.completed_checkpoints(job_id)
        wait_for(lambda: pipe.completed_checkpoints(job_id) >= done + 2, 300, "2 more completed checkpoints")
        self.reached = True


def dead_letters(bootstrap: str, topic: str, want: set[tuple[str, int, int]] | int,
                 timeout_s: float) -> list[DeadLetter]:
    """The dead letters on ``topic``, read until those of every origin in ``want`` (topic,
    partition, offset), or of ``want`` origins, came or ``timeout_s`` passed."""
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, f"dlq-reader-{time.time_ns()}",
                                        **{"auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + timeout_s
    try:
        def enough() -> bool:
            seen = {(d.origin_topic, d.origin_partition, d.origin_offset) for d in letters}
            return len(seen) >= want if isinstance(want, int) else want <= seen

        while time.monotonic() < deadline and not enough():
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                letters.append(codec.decode(message.value()))
    finally:
        consumer.close()
    return letters
