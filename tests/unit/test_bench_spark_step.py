"""bench/bench_spark_step.py's own logic: the worker's CPU between the clocks, the table, the
profile's summary, and that both variants run the same job but for its Spark step.

The benchmark itself is never run by the tests (benchmarks are not timed assertions)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench() -> Any:
    """The benchmark module, loaded from its file once (``bench/`` is not a package)."""
    if "bench_spark_step" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench_spark_step", BENCH / "bench_spark_step.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_spark_step"] = module  # before running it: its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules["bench_spark_step"]


def _run(variant: str, last_s: float, python_s: float, jvm_s: float, first_s: float = 1.0, at_first: int = 0,
         first_cpu: tuple[float, float] = (0.0, 0.0), records: int = 1_000_000) -> Any:
    bench = _bench()
    clocks = sys.modules["bench_vs_quix"].Clocks(first_s, last_s, at_first)
    return bench.StepRun(variant, records, clocks, [], at_first=bench.Sample(first_s, *first_cpu, 0.0),
                         at_last=bench.Sample(last_s, python_s, jvm_s, 0.0), peak_python_kib=1024 * 600,
                         peak_jvm_kib=1024 * 800)


def test_cpu_at_interpolates_between_samples_and_holds_outside_them() -> None:
    bench = _bench()
    samples = [bench.Sample(1.0, 2.0, 10.0, 0.0), bench.Sample(2.0, 4.0, 12.0, 1.0)]
    assert bench.cpu_at(samples, 1.5) == bench.Sample(1.5, 3.0, 11.0, 0.5)
    assert bench.cpu_at(samples, 0.2) == samples[0] and bench.cpu_at(samples, 9.0) == samples[1]
    assert bench.cpu_at([], 3.0) == bench.Sample(3.0, 0.0, 0.0, 0.0)


def test_cpu_per_million_records_over_the_run_and_between_the_first_and_last_result() -> None:
    run = _run("step", last_s=41.0, python_s=12.0, jvm_s=20.0, at_first=200_000, first_cpu=(4.0, 8.0))
    assert run.cpu_per_million("python") == 12.0 and run.cpu_per_million("jvm") == 20.0
    assert run.steady_cpu_per_million("python") == 8.0 / 800_000 * 1e6
    assert run.steady_cpu_per_million("jvm") == 12.0 / 800_000 * 1e6
    everything_at_once = _run("step", last_s=1.0, python_s=1.0, jvm_s=1.0, at_first=1_000_000)
    assert math.isnan(everything_at_once.steady_cpu_per_million("python"))


def test_table_gives_min_median_max_per_variant_and_the_ratio_of_the_medians() -> None:
    bench = _bench()
    runs = [_run("python", 10.0, 10.0, 8.0), _run("python", 20.0, 11.0, 8.0), _run("python", 25.0, 12.0, 9.0),
            _run("step", 20.0, 9.0, 16.0), _run("step", 40.0, 10.0, 17.0), _run("step", 50.0, 11.0, 18.0)]
    lines = bench.table(runs)
    rate = [line for line in lines if line.startswith("records/s launch -> last result")]
    assert rate[0].split()[-4:] == ["3", "40,000", "50,000", "100,000"]  # 1 M records in 25, 20, 10 s
    assert rate[1].split()[-5:] == ["3", "20,000", "25,000", "50,000", "0.50"]  # 25,000 / 50,000
    python_cpu = [line for line in lines if line.startswith("Python CPU-s / M records (run)")]
    assert python_cpu[1].split()[-5:] == ["3", "9.0", "10.0", "11.0", "0.91"]  # 10 / 11
    jvm_cpu = [line for line in lines if line.startswith("JVM CPU-s / M records (run)")]
    assert jvm_cpu[1].split()[-1] == "2.12"  # 17 / 8
    steady = [line for line in lines if line.startswith("records/s first -> last result")]
    assert steady[1].split()[-1] != "n/a"


def test_a_variant_without_figures_shows_na() -> None:
    lines = _bench().table([_run("python", 10.0, 1.0, 1.0)])
    step = [line for line in lines if line.startswith("records/s launch -> last result") and " step " in line]
    assert step[0].split()[-5:] == ["0", "n/a", "n/a", "n/a", "n/a"]


def test_both_variants_run_the_same_job_but_for_the_spark_step_and_rounds_alternate_the_order() -> None:
    bench = _bench()
    options = argparse.Namespace(parallelism=4, state_backend="rocksdb")
    python, step = (bench.job_args(v, "r1", "in", "out", options) for v in ("python", "step"))
    assert python.pop("spark_step") is False and step.pop("spark_step") is True
    assert python.pop("job_id") != step.pop("job_id") and python == step
    assert python["mode"] == "EXACTLY_ONCE" and python["workers"] == 1
    assert bench.round_order(0) == ("python", "step") and bench.round_order(1) == ("step", "python")


RAW = """\
thread (10): MainThread;run (tidemark/cli.py:1);sleep (time.py:2) 5
thread (11): batches-count_hits_0;feed (tidemark/runtime/worker/inputs.py:237);json_decode (tidemark/api.py:468) 30
thread (11): batches-count_hits_0;feed (tidemark/runtime/worker/inputs.py:237);RecordPath._keyed (tidemark/runtime/worker/inputs.py:114) 20
thread (11): batches-count_hits_0;feed (tidemark/runtime/worker/inputs.py:228);stepped_records (tidemark/runtime/job/records.py:155);__init__ (<string>:2) 10
thread (11): batches-count_hits_0;CountHits.process (tidemark/examples/access_log.py:115);ValueState.update (tidemark/state/handles.py:50) 25
thread (11): batches-count_hits_0;CountHits.process (tidemark/examples/access_log.py:115);EmittingContext.emit (udf.py:46);encoded (udf.py:33);json_encode (tidemark/api.py:494) 15
thread (12): Thread-4 (run);call (py4j/clientserver.py:1);on_batch (tidemark/runtime/worker/query.py:170);toArrow (pyspark/sql/pandas/conversion.py:499) 8
not a stack line
"""


def test_a_profile_is_summarized_by_thread_part_of_the_record_path_and_own_samples() -> None:
    bench = _bench()
    profile = bench.Profile.parse(RAW.splitlines())
    assert profile.total == 113
    assert profile.threads() == {"MainThread": 5, "batches-count_hits_0": 100, "Thread-4 (run)": 8}
    assert profile.processing_thread() == "batches-count_hits_0"
    parts = profile.parts("batches-count_hits_0")
    assert parts == {"decode (orjson)": 30, "record path and operator (own time)": 20,
                     "Arrow -> records (columns, rows, InputRecord)": 10, "state (RocksDB value state)": 25,
                     "output encoding (json_encode)": 15}
    assert profile.own("batches-count_hits_0").most_common(1) == [("json_decode (api.py)", 30)]
    assert profile.foreach_batch("batches-count_hits_0") == 8
    summary = bench.profile_summary("python", profile)
    assert summary[0].startswith("python: 113 samples")
    assert any(line.strip() == "30.0%  decode (orjson)" for line in summary)
    assert summary[-1].endswith("8 samples (7%)")
