"""bench/bench_windows.py's own logic: the windows each system must close, output verification,
the steady clock and the tables; its Tidemark job loads, and the Quix app compiles.

The benchmark itself is never run by the tests (benchmarks are not timed assertions), and the Quix
app imports Quix Streams, which only the benchmark's own environment has: it is compiled here, not
imported."""

from __future__ import annotations

import importlib.util
import json
import py_compile
import sys
from pathlib import Path
from typing import Any

from tidemark.examples.generator import expected_sliding_counts, generate

BENCH = Path(__file__).resolve().parents[2] / "bench"
T0 = 1_767_225_600_000  # a minute's start


def _bench() -> Any:
    """The benchmark module, loaded from its file once (``bench/`` is not a package)."""
    if "bench_windows" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_windows", BENCH / "bench_windows.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_windows"] = module  # before running it: its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules["bench_windows"]


def _records(*rows: tuple[str, int]) -> list[bytes]:
    return [json.dumps({"ts": T0 + ts, "url": url, "ip": "10.0.0.1"}).encode() for url, ts in rows]


def test_quix_app_compiles(tmp_path: Path) -> None:
    assert Path(py_compile.compile(str(BENCH / "quix_tumbling_count_per_url.py"), cfile=str(tmp_path / "app.pyc"),
                                   doraise=True)).exists()


def test_the_tidemark_job_is_one_keyed_tumbling_stage() -> None:
    _bench()  # puts bench/ on the path, as the job's PYTHONPATH does for its processes
    from tidemark.api import load_job

    job = load_job("tidemark_windowed_counts:tumbling_url_counts",
                   {"job_id": "bw-test", "input_topic": "in", "output_topic": "out"})
    [stage] = job.stages
    assert stage.window is not None and stage.window.assigner.size_ms == 60_000
    assert stage.event_time is not None and stage.event_time.max_out_of_orderness_ms == 1000
    assert job.state_backend.value == "rocksdb" and job.mode.value == "EXACTLY_ONCE"


def test_tidemark_windows_agree_with_the_generators_sliding_counts() -> None:
    records = list(generate(5000))
    counts = _bench().WindowCounts.of(records)
    expected = counts.closed_by_watermark()
    independent = expected_sliding_counts(records, size_ms=60_000, slide_ms=60_000)
    assert {window: row["hits"] for window, row in expected.items()} == independent
    assert all(row["end"] == row["start"] + 60_000 for row in expected.values())


def test_quix_closes_a_urls_windows_a_grace_before_its_newest_record() -> None:
    counts = _bench().WindowCounts.of(_records(("/a", 0), ("/a", 30_000), ("/a", 121_000), ("/b", 10_000),
                                               ("/b", 60_500)) + [b'{"ts": "malformed'])
    assert counts.closed_per_key(grace_ms=1000) == {
        ("/a", T0): {"url": "/a", "start": T0, "end": T0 + 60_000, "hits": 2}}  # /b: 60_500 < 60_000 + 1000
    assert counts.closed_per_key(grace_ms=500) == {
        ("/a", T0): {"url": "/a", "start": T0, "end": T0 + 60_000, "hits": 2},
        ("/b", T0): {"url": "/b", "start": T0, "end": T0 + 60_000, "hits": 1}}
    # Tidemark: the watermark reaches 121_000 - 1001, so both first minutes close, /a's third does not
    assert set(counts.closed_by_watermark()) == {("/a", T0), ("/b", T0), ("/b", T0 + 60_000)}


def test_window_problems_find_duplicates_gaps_and_wrong_counts() -> None:
    bench = _bench()
    expected = bench.WindowCounts.of(_records(("/a", 0), ("/a", 1), ("/b", 2), ("/a", 200_000))).closed_by_watermark()
    right = [{"url": "/a", "start": T0, "end": T0 + 60_000, "hits": 2},
             {"url": "/b", "start": T0, "end": T0 + 60_000, "hits": 1}]
    assert bench.window_problems(right, expected) == []
    wrong = [right[0], right[0], {**right[1], "hits": 3}, {**right[1], "start": T0 + 60_000}]
    problems = bench.window_problems(wrong, expected)
    assert problems[0].startswith("4 records (expected 2): 1 duplicates, 0 missing, 1 wrong values, 1 unexpected")
    missing = bench.window_problems(right[:1], expected)
    assert "1 missing" in missing[0]


def test_late_records_are_read_from_the_quix_apps_last_line() -> None:
    bench = _bench()
    log = "quix: running\nquix: late records dropped 3 (the latest by 70 ms)\n"
    assert bench.late_records(log) == (3, 70)
    assert bench.late_records("quix: running\n") == (0, 0)


def _run(system: str, first_s: float, last_s: float, at_first: int, results: int = 100,
         state_bytes: int | None = None) -> Any:
    bench = _bench()
    return bench.WindowRun(system, 1000, sys.modules["bench_vs_quix"].Clocks(first_s, last_s, at_first), [], results=results,
                           state_bytes=state_bytes)


def test_the_steady_clock_counts_the_input_the_later_results_stand_for() -> None:
    assert _run("tidemark", 1.0, 3.0, 20).steady == 1000 * 80 / 100 / 2.0  # 80% of the results in 2 s
    assert _run("tidemark", 1.0, 1.0, 100).steady != _run("tidemark", 1.0, 1.0, 100).steady  # NaN: all at once
    assert _run("tidemark", 1.0, 4.0, 0).end_to_end == 250.0


def test_the_tumbling_table_gives_the_ratio_of_the_medians() -> None:
    bench = _bench()
    runs = [_run("tidemark", 1.0, 2.0, 0), _run("tidemark", 1.0, 5.0, 0), _run("tidemark", 1.0, 4.0, 0),
            _run("quix", 1.0, 5.0, 0), _run("quix", 1.0, 10.0, 0), _run("quix", 1.0, 8.0, 0)]
    lines = bench.table(runs, by_inputs=False)
    assert lines[1].split()[:1] == ["tidemark"] and lines[1].split()[-9:-5] == ["3", "200", "250", "500"]  # 1000 / 5, / 4, / 2
    assert lines[-2].endswith("launch -> last result: 2.00")  # 250 / 125


def test_the_sessions_table_gives_the_state_at_the_end() -> None:
    bench = _bench()
    runs = [_run("sessions", 1.0, 2.0, 0, state_bytes=3_000_000), _run("sessions", 1.0, 4.0, 0, state_bytes=None),
            _run("sessions", 1.0, 5.0, 0, state_bytes=1_000_000)]
    lines = bench.sessions_table(runs)
    assert lines[1].split()[-4:] == ["3", "200", "250", "500"]
    assert lines[3].split()[-7:] == ["2", "1.0", "MB", "2.0", "MB", "3.0", "MB"]  # the run without a size left out
