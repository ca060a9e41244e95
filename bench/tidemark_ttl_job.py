"""Tidemark's side of ``bench/bench_ttl.py``: every record a new key, remembered for ``ttl_s``
seconds and never seen again, so only TTL cleanup keeps the state from growing.

One keyed stage (by the record's ``id``) whose function keeps a ``ValueState`` with TTL per key and
emits ``{"id"}`` for the first record of a key (every record here). The benchmark runs it as
``tidemark_ttl_job:first_visits`` with ``bench/`` on the job's ``PYTHONPATH``.
"""

from __future__ import annotations

import functools
from typing import Any

from tidemark.api import JobSpec, KeyedProcessFunction, Stage, StateBackendKind
from tidemark.state import StateTtlConfig, ValueStateDescriptor
from tidemark.types import CheckpointingMode, JobId


def id_of(record: dict[str, Any]) -> str:
    key = record["id"]
    if not isinstance(key, str) or not key:
        raise ValueError(f"record has no id: {record!r}")
    return key


class FirstVisit(KeyedProcessFunction):
    def __init__(self, ttl_s: int) -> None:
        self.descriptor = ValueStateDescriptor("seen", ttl=StateTtlConfig(ttl_seconds=ttl_s))

    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(self.descriptor)

    def process(self, value: Any, ctx: Any) -> None:
        if self.seen.value() is None:
            ctx.emit(ctx.key, {"id": ctx.key})
        self.seen.update(True)


def first_visits(job_id: str = "bench-first-visits", input_topic: str = "visits", output_topic: str = "first-visits",
                 parallelism: int = 4, state_backend: str = "rocksdb", ttl_s: int = 10) -> JobSpec:
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("first_visits", (input_topic,), id_of, functools.partial(FirstVisit, ttl_s), output_topic),),
        mode=CheckpointingMode.EXACTLY_ONCE, parallelism=parallelism, workers=1,
        state_backend=StateBackendKind(state_backend))
