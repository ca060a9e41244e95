"""The coordinator's checkpoints page in a real headless Chromium, against a running two-stage job
on a deployment with an API token: what the rendered page shows matches the JSON API, the page
keeps updating while it stays open, and it answers nothing without the token.

Set ``CHECKPOINTS_PAGE_SCREENSHOT=docs/images/checkpoints-page.png`` to also write the screenshot
the docs show."""

from __future__ import annotations

import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from browser_support import HeadlessChromium, chromium_binary
from pipeline_support import TOP_URLS, pipeline, topics_for
from tidemark.examples.generator import generate, produce
from tidemark.local.pipeline import wait_for
from tidemark.admin.render import format_bytes, format_duration

pytestmark = pytest.mark.timeout(900)

TOKEN = "checkpoints-page-token-7f3e9a1c5b"

DOM = """(() => {
  const rows = selector => [...document.querySelectorAll(selector)];
  const cells = tr => [...tr.cells].map(c => c.textContent);
  const ids = selector => rows(selector).map(e => Number(e.dataset.checkpointId));
  const stored = selector => rows(selector).map(tr => ({id: Number(tr.dataset.checkpointId), cells: cells(tr),
                                                        path: tr.nextElementSibling.textContent}));
  return {
    status: document.getElementById("status").textContent,
    jobs: rows("#jobs tbody tr").map(tr => ({job: tr.dataset.job, cells: cells(tr)})),
    title: document.getElementById("job-title").textContent,
    history: rows("#history tbody tr").map(tr => ({id: Number(tr.dataset.checkpointId), cells: cells(tr)})),
    duration_points: ids("#duration-chart svg circle"),
    size_points: ids("#size-chart svg circle"),
    lines: rows(".chart svg polyline").length,
    acks_of: Number(document.getElementById("acks").dataset.checkpointId),
    acks_title: document.getElementById("acks-title").textContent,
    acks: rows("#acks tbody tr").map(tr => ({task: tr.dataset.taskId, cells: cells(tr)})),
    retained: stored("#retained tbody tr.entry"),
    savepoints: stored("#savepoints tbody tr.entry"),
  };
})()"""
NEWEST_COMPLETED = ("Math.max(0, ...[...document.querySelectorAll('#history tbody tr[data-status=COMPLETED]')]"
                    ".map(tr => Number(tr.dataset.checkpointId)))")


def http_get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_checkpoints_page_shows_a_running_job_and_follows_it(tmp_path: Path, kafka_bootstrap: str,
                                                                unique_name: Any) -> None:
    if chromium_binary() is None:
        pytest.fail("`chromium` is not installed: run scripts/install-system-deps.sh (Debian's chromium package)")
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        produce(kafka_bootstrap, topics.input, list(generate(3000, seed=21)), 4)
        job = pipe.start_job(TOP_URLS, topics.args(parallelism=2))
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 2, 300, "2 completed checkpoints")
        client = pipe.client()
        page = f"{pipe.coordinator_url}/ui/checkpoints"

        status, refusal = http_get(page)  # no token: no page
        assert status == 401 and "?token=" in refusal["error"]
        assert http_get(f"{page}?token=wrong-{TOKEN}")[0] == 401

        with HeadlessChromium(tmp_path / "chromium") as browser:
            browser.navigate(page)  # not signed in yet: the edge's refusal, not the page
            assert "missing bearer token" in browser.evaluate("document.body.innerText")

            browser.navigate(f"{page}?token={TOKEN}")  # signs in, lands on the page without the token
            assert browser.evaluate("location.href") == page
            browser.wait_until("document.querySelectorAll('#history tbody tr[data-status=COMPLETED]').length >= 2 "
                               "&& document.querySelectorAll('#acks tbody tr').length > 0", 60)
            browser.evaluate("window.sameDocument = true")
            shown = browser.evaluate(DOM)
            jobs = {j["job"]: j for j in client.jobs()["jobs"]}
            history = {c["id"]: c for c in client.history(topics.job_id)["checkpoints"]}

            # the job and its state
            (row,) = shown["jobs"]
            assert row["job"] == topics.job_id and row["cells"][1] == jobs[topics.job_id]["state"] == "RUNNING"
            assert shown["title"] == f"Job {topics.job_id}" and shown["status"].startswith("updated")

            # the history rows are the API's checkpoints, with their durations, sizes, alignment, acks
            ids = [r["id"] for r in shown["history"]]
            assert ids == sorted(ids, reverse=True)
            lowest = max(min(ids), min(history))
            assert {i for i in ids if i >= lowest} == {i for i in history if lowest <= i <= max(ids)}
            completed = [r for r in shown["history"] if r["cells"][2] == "COMPLETED"]
            assert len(completed) >= 2
            for r in completed:
                api = history[r["id"]]
                assert api["status"] == "COMPLETED" and r["cells"][0] == str(api["id"])
                assert r["cells"][1] == api["type"] == "CHECKPOINT"
                assert r["cells"][4] == format_duration(api["duration_ms"])
                assert r["cells"][5] == format_bytes(api["checkpointed_size_bytes"])
                assert r["cells"][6] == format_bytes(api["full_size_bytes"])
                assert r["cells"][7] == format_duration(api["alignment_ms"])
                assert r["cells"][8] == f"{api['num_tasks']}/{api['num_tasks']}"
            assert any(history[r["id"]]["full_size_bytes"] > 0 for r in completed)

            # the chart: one point per completed checkpoint, oldest first, in both series
            completed_ids = sorted(r["id"] for r in completed)
            assert shown["duration_points"] == shown["size_points"] == completed_ids and shown["lines"] == 2

            # the acks of the newest completed checkpoint, one row per task, as the API has them
            detail = client.request("GET", f"/jobs/{topics.job_id}/checkpoints/{shown['acks_of']}")
            assert shown["acks_of"] == completed_ids[-1]
            assert [a["task"] for a in shown["acks"]] == [a["task_id"] for a in detail["acks"]]
            assert len(shown["acks"]) == detail["checkpoint"]["num_tasks"] >= 4  # 2 stages x 2 tasks
            for row_shown, ack in zip(shown["acks"], detail["acks"]):
                assert row_shown["cells"][1:4] == [format_duration(ack["alignment_ms"]),
                                                   format_duration(ack["sync_ms"]), format_duration(ack["async_ms"])]
            assert shown["retained"] and all(r["path"] == f"{topics.job_id}/chk-{r['id']}/_metadata"
                                             for r in shown["retained"])
            assert {r["id"] for r in shown["retained"]} <= set(history) | {
                c["id"] for c in client.retained_checkpoints(topics.job_id)["checkpoints"]}

            # it updates while open: a newer checkpoint, then a savepoint, appear without a reload
            newest = completed_ids[-1]
            browser.wait_until(f"{NEWEST_COMPLETED} > {newest}", 60)
            request = client.trigger_savepoint(topics.job_id)
            savepoint = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
            assert savepoint["status"] == "COMPLETED", savepoint
            browser.wait_until(f"[...document.querySelectorAll('#savepoints tbody tr.entry')]"
                               f".some(tr => tr.dataset.checkpointId === '{savepoint['savepoint_id']}')", 30)
            assert browser.evaluate("window.sameDocument") is True
            later = browser.evaluate(DOM)
            assert max(r["id"] for r in later["history"]) > newest

            # the session cookie reads, but never changes anything
            assert browser.evaluate(f"fetch('/api/v1/jobs/{topics.job_id}/savepoints', {{method: 'POST'}})"
                                    ".then(r => r.status)") == 401
            assert browser.evaluate("document.cookie") == ""  # HttpOnly: not visible to scripts

            screenshot = browser.screenshot(tmp_path / "checkpoints-page.png")
            assert png_size(screenshot) == (1280, 900)
            if os.environ.get("CHECKPOINTS_PAGE_SCREENSHOT"):
                Path(os.environ["CHECKPOINTS_PAGE_SCREENSHOT"]).write_bytes(screenshot)
        job.stop()
    assert TOKEN not in (tmp_path / "home" / "logs" / "coordinator.log").read_text(errors="replace")
