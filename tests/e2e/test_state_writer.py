"""Savepoints written by the state processor start real jobs (issue #36 point 2): the count-per-URL
job started from a savepoint bootstrapped from a table (``tidemark state bootstrap``, JSON lines,
written at another parallelism than the job's) continues each URL's count from the table's value,
exactly once in the read_committed output. Then its stop-with-savepoint is derived with ``tidemark
state transform`` (a Python spec: the stage renamed, its counts mapped, a stage added; then that
stage removed with an option) into a savepoint the job with its stage renamed starts from without
``--allow-non-restored-state``, continuing from the mapped counts; the savepoint still holding
the added stage is refused in one line. (The 1,000,000-key bootstrap is measured by
bench/bench_state_bootstrap.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipeline_support import URL_COUNTS, pipeline, topics_for
from tidemark.examples.generator import URLS, expected_url_counts, generate, produce
from tidemark.examples.verify import read_committed, verify_example
from upgraded_jobs import RENAMED_URL_COUNTS, UPGRADED_ENV

pytestmark = pytest.mark.timeout(600)

SPEC = '''
from tidemark.state import ValueStateDescriptor
from tidemark.state_processor import MapState, RenameStage, SetState, StateData


def add_a_million(url, hits):
    return hits + 1_000_000


def upgrade():
    return [RenameStage("count_hits", "url_hits"), MapState("url_hits", "hits", add_a_million),
            SetState("retired", StateData(ValueStateDescriptor("seen"), [("/old", 1)]))]
'''


def state_command(pipe, *args: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    """``tidemark state ...`` as an operator runs it, on the pipeline's checkpoint storage."""
    storage = (pipe.home / "checkpoints").resolve().as_uri()
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "state", *args, "--storage", storage],
                            env={**os.environ, **pipe.env}, capture_output=True, text=True, timeout=120,
                            cwd=pipe.home)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def expected_counts(records: list[bytes], start: dict[str, int]) -> dict:
    """The output of ``records`` when each URL's count starts at ``start`` (0 if absent)."""
    return {(url, start.get(url, 0) + i): {"url": url, "hits": start.get(url, 0) + i}
            for url, n in expected_url_counts(records).items() for i in range(1, n + 1)}


def test_a_job_continues_from_a_bootstrapped_and_from_a_transformed_savepoint(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    first, second = list(generate(400)), list(generate(200, first=400))
    table = {url: 1000 * (i + 1) for i, url in enumerate(URLS)}
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        produce(kafka_bootstrap, topics.input, first, 4)
        rows = pipe.home / "table.jsonl"
        rows.write_text("".join(json.dumps({"url": url, "hits": hits}) + "\n" for url, hits in table.items())
                        + "".join(json.dumps({"url": f"/archive/{i}", "hits": i}) + "\n" for i in range(5000)))
        (pipe.home / "upgrade.py").write_text(SPEC)
        area = f"{topics.job_id}/savepoints"
        state_command(pipe, "bootstrap", topics.job_id, "--stage", "count_hits", "--state", "hits",
                      "--input", str(rows), "--key-field", "url", "--value-field", "hits", "--parallelism", "3",
                      "--target", f"{area}/from-table")

        job = pipe.start_job(URL_COUNTS, topics.single_stage_args(), from_savepoint=f"{area}/from-table/_metadata")
        output = read_committed(kafka_bootstrap, topics.output, expect=len(first), timeout_s=240)
        bootstrapped = verify_example("url_counts", output, expected_counts(first, table))
        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        stopped = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert stopped["status"] == "COMPLETED", stopped
        assert job.wait(timeout_s=120) == 0
        [attempt] = job.events("starting attempt")

        state_command(pipe, "transform", topics.job_id, "--savepoint", stopped["metadata_path"],
                      "--spec", "upgrade.py:upgrade", "--target", f"{area}/with-retired")
        refused = pipe.start_job(RENAMED_URL_COUNTS, topics.single_stage_args(), from_savepoint=f"{area}/with-retired/_metadata",
                                 env=UPGRADED_ENV)
        refused_code = refused.wait(timeout_s=120)
        refusal = [line for line in refused.log_path.read_text(errors="replace").splitlines()
                   if line.startswith("tidemark jobs run: ")]
        state_command(pipe, "transform", topics.job_id, "--savepoint", f"{area}/with-retired",
                      "--remove-stage", "retired", "--target", f"{area}/upgraded")

        renamed = pipe.start_job(RENAMED_URL_COUNTS, topics.single_stage_args(), from_savepoint=f"{area}/upgraded/_metadata",
                                 env=UPGRADED_ENV)
        produce(kafka_bootstrap, topics.input, second, 4)
        output = read_committed(kafka_bootstrap, topics.output, expect=len(first) + len(second), timeout_s=240)
        counted = {url: table[url] + n for url, n in expected_url_counts(first).items()}
        mapped = {url: 1_000_000 + counted.get(url, hits) for url, hits in table.items()}
        transformed = verify_example("url_counts", output,
                                     {**expected_counts(first, table), **expected_counts(second, mapped)})
        [restored] = renamed.events("starting attempt")
        assert renamed.stop() == 143
    assert attempt["restore"] == f"{area}/from-table/_metadata", attempt
    assert bootstrapped.exactly_once and bootstrapped.records == len(first), bootstrapped
    assert refused_code == 3 and len(refusal) == 1, refusal
    assert "holds state no stage of the job claims: stage 'retired' (keyed state and timers)" in refusal[0], refusal
    assert restored["restore"] == f"{area}/upgraded/_metadata", restored
    assert transformed.exactly_once and transformed.records == len(first) + len(second), transformed
