"""The job as it runs: stages, how many worker processes each has, and the keyed exchanges.

A job's stages (:class:`~tidemark.runtime.api.JobSpec`) are what its author wrote. What runs differs
in one place: a **source stage spread over several workers** (``W > 1``) cannot key its own input,
because each of its workers reads only a share of the input partitions
(:mod:`tidemark.runtime.ownership`) while its key groups are spread over all of them. So the
stage ``s`` runs as two:

* ``s.read``, the exchange reader: a source stage with ``W`` workers that reads the input, checks
  that each record decodes and keys (a record that does not is dead-lettered here, with its
  origin), and forwards it unchanged to the exchange topic (``<prefix>.exchange.<job>.<s>``),
  into the partition of its key group; it keeps no keyed state, only its source positions;
* ``s`` itself, now reading the exchange as a channel: its workers read only the partitions of
  their own key groups, align on the reader's barriers and keep the keyed state, under the same
  operator id as before.

Checkpoints taken with ``W = 1`` restore with ``W > 1`` and the other way round: the source
positions are found under either operator (:func:`source_operators`), and the keyed state is
always ``s``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tidemark.runtime.api import JobSpec, KeyedProcessFunction, Stage
from tidemark.types import OperatorId

READER_SUFFIX = ".read"


def workers_per_stage(spec: JobSpec, parallelism: int, default: int | None = None) -> dict[str, int]:
    """Worker processes of each of the author's stages: the stage's own setting, else ``default``
    (``tidemark jobs run --workers``), else the job's; at most ``parallelism``."""
    return {s.name: min(s.workers or default or spec.workers, parallelism) for s in spec.stages}


def reader_workers(spec: JobSpec, workers: Mapping[str, int], input_partitions: Mapping[str, int]) -> dict[str, int]:
    """``workers`` with the exchange readers' counts: their stage's, but no more than the stage's
    input partitions (a reader worker without a partition to read would have nothing to do)."""
    out = dict(workers)
    for stage in spec.stages:
        if spec.upstream_of(stage) is None and workers.get(stage.name, 1) > 1:
            partitions = sum(input_partitions.get(topic, 0) for topic in stage.inputs)
            out[stage.name + READER_SUFFIX] = max(1, min(workers[stage.name], partitions))
    return out


class _Forward(KeyedProcessFunction):
    """Never called: the worker forwards an exchange reader's records itself (runtime.worker)."""

    def process(self, value: Any, ctx: Any) -> None:
        raise AssertionError("an exchange reader forwards records without a function")


def _raw(key: bytes | None, value: bytes | None) -> Any:
    return value


def physical_job(spec: JobSpec, workers: Mapping[str, int], exchange_topic: Callable[[str], str]) -> JobSpec:
    """``spec`` with an exchange reader before every source stage that runs on more than one worker.

    ``workers``: of each stage, by name (the author's stages; an exchange reader's may be given
    too, else it is its stage's: see :func:`reader_workers`)."""
    stages: list[Stage] = []
    for stage in spec.stages:
        count = workers.get(stage.name, 1)
        if spec.upstream_of(stage) is None and count > 1:
            exchange = exchange_topic(stage.name)
            name = stage.name + READER_SUFFIX
            readers = workers.get(name, count)
            stages.append(Stage(name, stage.inputs, key_by=_raw, function=_Forward,
                                output=exchange, decode=_raw, max_records_per_batch=stage.max_records_per_batch,
                                on_error=stage.on_error, workers=readers, event_time=stage.event_time,
                                forwards_to=stage.name))
            stage = dataclasses.replace(stage, inputs=(exchange,))
        stages.append(dataclasses.replace(stage, workers=count))
    return dataclasses.replace(spec, stages=tuple(stages))


def source_operators(stage: Stage) -> tuple[OperatorId, ...]:
    """The operators whose snapshots may hold ``stage``'s source positions: its own, then its
    counterpart in a job run with a different number of workers (the exchange reader of a
    source stage, or the source stage of an exchange reader)."""
    if stage.forwards_to is not None:
        return stage.operator_id, OperatorId(stage.forwards_to)
    return stage.operator_id, OperatorId(stage.name + READER_SUFFIX)
