"""bench/bench_vs_quix.py's own logic: output verification and the table; the Quix app compiles.

The benchmark itself is never run by the tests (benchmarks are not timed assertions), and the Quix
app imports Quix Streams, which only the benchmark's own environment has: it is compiled here, not
imported."""

from __future__ import annotations

import importlib.util
import py_compile
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench():
    """The benchmark module, loaded from its file once (``bench/`` is not a package)."""
    if "bench_vs_quix" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_vs_quix", BENCH / "bench_vs_quix.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_vs_quix"] = module  # before running it: its dataclass looks itself up there
        spec.loader.exec_module(module)
    return sys.modules["bench_vs_quix"]


def test_quix_app_compiles(tmp_path: Path) -> None:
    assert Path(py_compile.compile(str(BENCH / "quix_count_per_url.py"), cfile=str(tmp_path / "app.pyc"),
                                   doraise=True)).exists()


def test_requirements_pin_one_exact_quix_version() -> None:
    version = _bench().quix_version()
    assert version.startswith("3.28.") and version.count(".") == 2


def test_a_correct_output_has_no_problems() -> None:
    output = [{"url": "/a", "hits": 1}, {"url": "/b", "hits": 1}, {"url": "/a", "hits": 2}]
    assert _bench().problems_of(output, {"/a": 2, "/b": 1}) == []


def test_a_short_count_and_a_duplicate_are_reported() -> None:
    output = [{"url": "/a", "hits": 1}, {"url": "/a", "hits": 1}, {"url": "/b", "hits": 1}]
    problems = _bench().problems_of(output, {"/a": 2, "/b": 1})
    assert problems[0] == "/a: last hits 1 != 2 in the input"
    assert any("duplicates" in p for p in problems) and any("missing" in p for p in problems)


def test_a_url_not_in_the_input_is_reported() -> None:
    problems = _bench().problems_of([{"url": "/x", "hits": 1}], {})
    assert problems[0] == "/x: in the output, not in the input"


def test_table_gives_min_median_max_the_first_result_and_the_ratios_per_input_kind() -> None:
    bench = _bench()

    def run(system: str, first_s: float, last_s: float, at_first: int, inputs: str = "unkeyed") -> object:
        return bench.Run(system, 1000, bench.Clocks(first_s, last_s, at_first), [], inputs)

    runs = [run("tidemark", 5.0, 10.0, 0), run("tidemark", 3.0, 5.0, 600), run("tidemark", 3.0, 4.0, 0),
            run("quix", 1.0, 2.0, 0), run("quix", 1.0, 2.0, 500), run("quix", 1.0, 2.0, 1000),
            run("tidemark", 2.0, 4.0, 0, "keyed"), run("quix", 0.5, 1.0, 0, "keyed")]
    lines = bench.table(runs)
    # tidemark, launch -> last: 1000/10, /5, /4; first result 3, 3, 5 s
    assert lines[1].split()[:2] == ["unkeyed", "tidemark"]
    assert lines[1].split("  ")[-1].strip() == "3.0 / 3.0 / 5.0"
    assert lines[1].split()[-9:-5] == ["3", "100", "200", "250"]
    assert lines[2].split()[-4:] == ["3", "200", "200", "1,000"]  # first -> last: 1000/5, 400/2, 1000/1
    # quix's third run committed everything at once: no steady rate, left out of that clock
    assert lines[4].split()[-4:] == ["2", "500", "750", "1,000"]
    assert lines[5].split()[:2] == ["keyed", "tidemark"] and lines[5].split()[-9:-5] == ["1", "250", "250", "250"]
    assert lines[-4].endswith("unkeyed input, launch -> last result: 0.40")  # 200 / 500
    assert lines[-3].endswith("unkeyed input, first -> last result: 0.27")  # 200 / 750
    assert lines[-2].endswith("keyed input, launch -> last result: 0.25")  # 250 / 1000
    assert lines[-1].endswith("keyed input, first -> last result: 0.25")  # 500 / 2000


def test_no_steady_rate_when_the_first_commit_held_every_result() -> None:
    bench = _bench()
    runs = [bench.Run(system, 1000, bench.Clocks(1.0, 2.0, 1000), []) for system in ("tidemark", "quix")]
    lines = bench.table(runs)
    assert lines[2].split()[-4:] == ["0", "n/a", "n/a", "n/a"]
    assert lines[-1].endswith("first -> last result: n/a")
