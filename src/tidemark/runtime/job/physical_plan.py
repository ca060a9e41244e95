"""The job as it runs: stages, how many worker processes each has, and the keyed exchanges.

A job's stages (:class:`~tidemark.api.JobSpec`) are what its author wrote. What runs differs
in two cases: a **keyed stage reading the job's input topics on several workers** (``W > 1``)
cannot key its own input, because each of its workers reads only a share of the input partitions
(:mod:`tidemark.runtime.job.ownership`) while its key groups are spread over all of them; and a
**stage reading input topics and other stages' outputs** checkpoints on the channels' barriers,
which its input topics do not carry. So the stage ``s`` runs as two:

* ``s.read``, the exchange reader: a source stage with ``W`` workers that reads the input topics,
  checks that each record decodes and keys as its input of ``s`` says (a record that does not is
  dead-lettered here, with its origin), tells its event time, and forwards it unchanged to the
  exchange topic (``<prefix>.exchange.<job>.<s>``), into the partition of its key group, naming
  the topic it came from (``tidemark-input``); it keeps no keyed state, only its source positions;
* ``s`` itself, now reading the exchange as a channel (with its other channels, if any): its
  workers read only the partitions of their own key groups, align on the barriers of every
  channel and keep the keyed state, under the same operator id as before.

A keyed stage whose input topics are all declared co-partitioned (``Input(co_partitioned=True)``:
written into the partition of each record's key group, as a channel is) needs no exchange when
their partitions divide among its workers by key group (:func:`tidemark.runtime.job.ownership.co_partitioned_reads`):
each worker then reads the partitions of its own key groups directly, one process per worker.
:func:`reader_workers` decides it from the partition counts and the parallelism, leaving out the
stage's reader, and :func:`physical_job` follows: a co-partitioned stage is read through an
exchange only when ``workers`` names its reader (partitions that do not divide: a rescale to such
a parallelism or number of workers reads through the exchange again).

Checkpoints taken with ``W = 1`` restore with ``W > 1`` and the other way round, with or without
the exchange: the source positions are found under either operator (:func:`source_operators`), and
the keyed state is always ``s``'s.

Only the stages of the running job that read its input topics (source stages, exchange readers)
read with Spark; the others read their channels in process and start no JVM (:func:`reads_with_spark`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tidemark.api import Input, JobSpec, KeyedProcessFunction, Stage, load_job
from tidemark.kafka.topics import TopicNames
from tidemark.runtime.job.ownership import co_partitioned_reads
from tidemark.types import OperatorId

if TYPE_CHECKING:
    from tidemark.runtime.job.attempt import Attempt

READER_SUFFIX = ".read"


def workers_per_stage(spec: JobSpec, parallelism: int, default: int | None = None) -> dict[str, int]:
    """Worker processes of each of the author's stages: the stage's own setting, else ``default``
    (``tidemark jobs run --workers``), else the job's; at most ``parallelism``."""
    return {s.name: min(s.workers or default or spec.workers, parallelism) for s in spec.stages}


def reader_workers(spec: JobSpec, workers: Mapping[str, int], input_partitions: Mapping[str, int],
                   parallelism: int) -> dict[str, int]:
    """``workers`` with the exchange readers' counts (none for a stage whose co-partitioned inputs
    its workers read directly, see the module): their stage's, but no more than the input
    partitions they read (a reader worker without a partition to read would have nothing to do); a
    stage without a key, whose workers divide its partitions, likewise gets no more workers than
    it has partitions (a channel's: the job's ``output_partitions``), and one with a broadcast
    input, whose workers each read a share of every channel, no more than a channel's."""
    out = dict(workers)
    channels = {topic for s in spec.stages for topic in s.output_topics}
    for stage in spec.stages:
        count = workers.get(stage.name, 1)
        plain = _plain_inputs(spec, stage)
        if _exchanged(spec, stage, count) and not _divides(spec, stage, count, input_partitions, parallelism):
            out[stage.name + READER_SUFFIX] = max(1, min(count, sum(input_partitions.get(t, 0) for t in plain)))
        elif not stage.keyed:
            partitions = sum(spec.output_partitions if i.topic in channels else input_partitions.get(i.topic, 0)
                             for i in stage.input_list)
            out[stage.name] = max(1, min(count, partitions))
        if not stage.keyed and stage.broadcast_side is not None:  # each worker reads some of every channel
            out[stage.name] = min(out.get(stage.name, count), spec.output_partitions)
    return out


class _Forward(KeyedProcessFunction):
    """Never called: the worker forwards an exchange reader's records itself (runtime.worker)."""

    def process(self, value: Any, ctx: Any) -> None:
        raise AssertionError("an exchange reader forwards records without a function")


def _raw(key: bytes | None, value: bytes | None) -> Any:
    return value


def _as_is(value: Any) -> Any:
    """An exchange reader's own key: never used, each of its inputs keys as its stage's does."""
    return value


def physical_job(spec: JobSpec, workers: Mapping[str, int], exchange_topic: Callable[[str], str]) -> JobSpec:
    """``spec`` with an exchange reader before every stage that reads the job's input topics
    through an exchange: a keyed one on more than one worker, and one that reads other stages'
    outputs too (its input topics then come as a channel like the others, aligned with them).

    ``workers``: of each stage, by name (the author's stages; an exchange reader's may be given
    too, else it is its stage's: see :func:`reader_workers`)."""
    stages: list[Stage] = []
    for stage in spec.stages:
        count = workers.get(stage.name, 1)
        if _exchanged(spec, stage, count) and not (co_partitioned(spec, stage) and
                                                   stage.name + READER_SUFFIX not in workers):
            exchange = exchange_topic(stage.name)
            name = stage.name + READER_SUFFIX
            readers = workers.get(name, count)
            plain = _plain_inputs(spec, stage)
            # the reader checks each record decodes and keys as its stage will, and tells its event time;
            # it runs an input's Spark step and forwards the step's rows (runtime.worker.inputs)
            inputs = tuple(Input(i.topic, stage.decode_of(i), stage.key_of(i), stage.event_time_of(i), i.broadcast,
                                 spark_step=stage.spark_step_of(i))
                           for i in stage.input_list if i.topic in plain)
            stages.append(Stage(name, inputs, key_by=_as_is if stage.keyed else None, function=_Forward,
                                output=exchange, decode=_raw, max_records_per_batch=stage.max_records_per_batch,
                                on_error=stage.on_error, workers=readers, event_time=stage.event_time,
                                forwards_to=stage.name))
            stage = dataclasses.replace(stage, exchange=exchange, exchanged=plain)
        stages.append(dataclasses.replace(stage, workers=count))
    return dataclasses.replace(spec, stages=tuple(stages))


def _plain_inputs(spec: JobSpec, stage: Stage) -> tuple[str, ...]:
    """The job's input topics ``stage`` reads (not other stages' outputs)."""
    outputs = {topic for s in spec.stages for topic in s.output_topics}
    return tuple(i.topic for i in stage.input_list if i.topic not in outputs)


def _exchanged(spec: JobSpec, stage: Stage, workers: int) -> bool:
    """A stage reads its input topics through an exchange when it is keyed or has a broadcast
    input and runs on more than one worker, or reads other stages' outputs too; a stage without a
    key and without channels does not need one: each worker's tasks take the records of its own
    partitions. (A broadcast input on several workers goes through the exchange so that its
    elements come between the same barriers to every worker: every task's broadcast state is the
    same at each checkpoint, runtime.worker.inputs.)"""
    plain = _plain_inputs(spec, stage)
    if not plain or stage.exchange is not None:
        return False
    return len(plain) < len(stage.input_list) or (workers > 1 and (stage.keyed or stage.broadcast_side is not None))


def co_partitioned(spec: JobSpec, stage: Stage) -> bool:
    """A keyed stage that reads only the job's input topics, each declared co-partitioned."""
    plain = _plain_inputs(spec, stage)
    return (stage.keyed and stage.broadcast_side is None and len(plain) == len(stage.input_list)
            and all(i.co_partitioned for i in stage.input_list))


def _divides(spec: JobSpec, stage: Stage, workers: int, input_partitions: Mapping[str, int], parallelism: int) -> bool:
    """``stage`` is co-partitioned and each of its inputs' partitions divide among its workers."""
    return co_partitioned(spec, stage) and all(
        co_partitioned_reads(input_partitions.get(i.topic, 0), parallelism, workers, spec.max_parallelism) is not None
        for i in stage.input_list)


def source_operators(stage: Stage) -> tuple[OperatorId, ...]:
    """The operators whose snapshots may hold ``stage``'s source positions: its own, then its
    counterpart in a job run with a different number of workers (the exchange reader of a
    source stage, or the source stage of an exchange reader)."""
    if stage.forwards_to is not None:
        return stage.operator_id, OperatorId(stage.forwards_to)
    return stage.operator_id, OperatorId(stage.name + READER_SUFFIX)


def running_job(attempt: Attempt, topics: TopicNames) -> JobSpec:
    """The job of ``attempt`` as its workers run it (:func:`physical_job`), its exchanges named by ``topics``."""
    written = load_job(attempt.job_ref, attempt.job_args)
    return physical_job(written, attempt.workers, lambda stage: topics.exchange(written.job_id, stage))


def reads_with_spark(attempt: Attempt) -> bool:
    """Whether a lane of ``attempt`` reads the job's input, with a streaming query: a source stage,
    or a fused worker (its exchange reader's lane). A stage that reads only channels reads them in
    process (:mod:`tidemark.runtime.worker.channel_reader`) and needs no SparkSession, nor does its
    warm standby. (Which stages read channels does not depend on the exchanges' topic names.)"""
    if attempt.fused is not None:
        return True
    spec = running_job(attempt, TopicNames("tidemark"))
    return spec.is_source(spec.stage(attempt.stage))
