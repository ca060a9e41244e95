"""Wiring one attempt of a stage worker: everything before its query starts.

:func:`bootstrap` loads the job (its physical plan: :mod:`tidemark.runtime.job.physical_plan`),
makes sure its topics exist, finds the partitions this worker reads
(:mod:`tidemark.runtime.job.ownership`), opens the control plane (before anything can trigger),
builds the tasks (one per key-group range, :mod:`tidemark.runtime.worker.tasks`) and the clock,
restores them from the attempt's checkpoint or savepoint if it has one (state, operator state,
source positions, pending sink buffers, the channel cut, watermarks:
:mod:`tidemark.runtime.worker.restore`), creates the output (a channel, the exactly-once sink or
the at-least-once one) and recovers it, opens every task's operator, and returns the
:class:`~tidemark.runtime.worker.runner.StageRunner` with every part in place. A corrupted
checkpoint is logged and raised (the supervisor will not restore it again).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import cast

from confluent_kafka.admin import AdminClient

from tidemark.broker.engine import tansu_selected
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.checkpoint_store.metadata_codec import MetadataFormatError
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import base_config
from tidemark.kafka.metadata import TopicNotFoundError, list_partitions, metadata_consumer
from tidemark.kafka.topics import TopicNames, TopicSpec
from tidemark.operators.time import StageTime
from tidemark.runtime.worker.alignment import BarrierAligner
from tidemark.api import SparkStep, Stage
from tidemark.runtime.worker.consumer_lag import ConsumerLag
from tidemark.runtime.job.control import ControlPlane
from tidemark.runtime.job.metrics import RESTORE_DURATION, init_worker_metrics
from tidemark.runtime.worker.outputs import (
    AtLeastOnceOutput,
    ChannelOutput,
    StageOutput,
    TwoPhaseCommitOutput,
    WithSideOutputs,
)
from tidemark.runtime.job.ownership import (channel_partitions_of, co_partitioned_reads, input_partitions_of,
                                            owned_key_groups, subtasks_of)
from tidemark.runtime.job.physical_plan import co_partitioned, running_job, source_operators
from tidemark.runtime.worker.record_errors import FunctionFailed, RecordFailures
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.routing import ChannelPartitioner, KeyGroupRouter, KeyPartitioner
from tidemark.runtime.job.attempt import Attempt
from tidemark.runtime.worker.checkpoint import SnapshotThread, StageCheckpointer
from tidemark.runtime.worker.inputs import ChannelInput, RecordPath, SourceInput
from tidemark.runtime.worker.local_channel import LocalChannel, LocalSplitOutput
from tidemark.runtime.worker.restore import RestoredStage, restore_stage
from tidemark.runtime.worker.runner import StageRunner
from tidemark.runtime.worker.tasks import ChangelogTarget, build_stage_tasks, worker_rocksdb_memory
from tidemark.runtime.worker.clock import StageClock
from tidemark.runtime.worker.task import StageTask
from tidemark.chassis.logs import get_logger
from tidemark.kafka.transactions import fence_transactional_ids
from tidemark.spark.spark_step import StageSteps
from tidemark.spark.stage_source import ReadSelection
from tidemark.state.timers import Timer
from tidemark.storage import open_storage
from tidemark.storage.base import CorruptStateFile
from tidemark.types import Channel, CheckpointId, CheckpointingMode, TopicPartition

log = get_logger(__name__)


def bootstrap(settings: TidemarkSettings, attempt: Attempt, local: LocalChannel | None = None) -> StageRunner:
    """The attempt wired and restored (see the module); what it opened is closed if it fails.
    ``local``: a fused worker's local channel (:mod:`tidemark.runtime.worker.local_channel`), given
    to both lanes, the exchange reader's first: the reader's records of the worker's own key groups
    go into it, and the keyed stage reads it as one more channel per reader task, when the keyed
    stage has no broadcast input (its elements keep the exchange)."""
    wiring = _Wiring(settings, attempt, local)
    try:
        return wiring.runner()
    except BaseException:
        wiring.close()
        raise


def read_selection(runner: StageRunner) -> ReadSelection:
    """What the runner's query reads and from where: the restored positions (partitions not named
    start at the earliest), else the earliest; subscribed with one worker, assigned with more."""
    stage = runner.stage
    return ReadSelection(stage.topics, tuple(runner.read_partitions), assigned=(stage.workers or 1) > 1,
                         positions=dict(runner.positions), max_records=stage.max_records_per_batch)


def read_steps(runner: StageRunner) -> StageSteps:
    """The Spark steps of the job's input topics the runner's query reads (a source stage's, or an
    exchange reader's: it forwards the steps' rows; the stage reading the exchange runs none)."""
    stage = runner.stage
    steps: dict[str, SparkStep] = {}
    if isinstance(runner.input, SourceInput):
        steps = {i.topic: step for i in stage.input_list
                 if i.topic in stage.topics and (step := stage.spark_step_of(i)) is not None}
    timestamped = frozenset(topic for topic in steps if (time := stage.event_time_of(
        next(i for i in stage.input_list if i.topic == topic))) is not None and time.timestamp is None)
    return StageSteps(stage.name, steps, stage.topics, timestamped)


class _Wiring:
    """The parts of one attempt, as :func:`bootstrap` puts them together."""

    def __init__(self, settings: TidemarkSettings, attempt: Attempt, local: LocalChannel | None = None) -> None:
        self.settings = settings
        self.attempt = attempt
        self.topics = topics = TopicNames(settings.topic_prefix)
        self.spec = running_job(attempt, topics)
        self.stage = self.spec.stage(attempt.stage)
        self.upstreams = self.spec.upstreams_of(self.stage)
        self.job = self.spec.job_id
        self.workers = self.stage.workers or 1
        self.subtasks = subtasks_of(attempt.worker, attempt.parallelism, self.workers)
        # the reader lane takes the local channel when its stage can use it; the stage lane when the reader did
        used = local is not None and (bool(local.tasks) if self.upstreams else self._forwards_locally())
        self.local_channel = local if used else None
        self.client = base_config(settings)
        self.storage = open_storage(settings.resolved_storage_url)
        self.metadata = metadata_consumer(self.client)  # topic metadata and watermarks, for the attempt's life
        self.local = ((settings.state_dir or settings.home / "state") / self.job / self.stage.name
                      / f"epoch-{attempt.epoch}" / f"worker-{attempt.worker}")
        self.failures = RecordFailures(self.client, topics, self.job, self.stage.on_error,
                                       settings.dead_letter_max_bytes)
        self.opened: list[Callable[[], None]] = [self.metadata.close, self.failures.close]
        """How to close what the wiring opened so far, should it fail before the runner owns it."""

    def runner(self) -> StageRunner:
        spec, stage, attempt = self.spec, self.stage, self.attempt
        if not self.upstreams:  # a missing input topic stops the job before Spark starts (runtime.job.start_errors)
            list_partitions(self.metadata, stage.topics)
        self._ensure_topics()
        reads = self._read_partitions()
        init_worker_metrics(self.job)
        control = ControlPlane(self.client, self.topics, self.job, materializations=spec.changelog)
        self.opened.append(control.close)
        started = time.monotonic()
        shutil.rmtree(self.local, ignore_errors=True)
        time_ = StageTime()  # the watermark and clock the tasks share
        tasks = build_stage_tasks(spec, stage, attempt.parallelism, self.local, self._changelog(), self.subtasks,
                                  time_, self._timer_failed, worker_rocksdb_memory(self.settings.rocksdb))
        self.opened.extend(task.close for task in tasks)
        if self.local_channel is not None and not self.upstreams:  # the reader: the keyed lane reads its tasks
            self.local_channel.tasks = tuple(task.task_id for task in tasks)
        clock = StageClock(self.job, stage, attempt.worker, spec.event_time_of(stage), tasks, time_, self.client,
                           reads=reads, channels=self._channels(reads) if self.upstreams else None)
        self.opened.append(clock.close)
        restored = self._restore(tasks, reads) if attempt.restore_path else None
        if restored is not None:
            clock.restore(restored.watermark_items)
        output = self._output(tasks, clock)
        self.opened.append(output.close)
        output.recover(restored.sink_items if restored else [],
                       restored.metadata.checkpoint_id if restored else CheckpointId(0))
        for task in tasks:
            task.open()
        positions = dict(restored.positions) if restored else {}
        path = RecordPath(stage, tasks, KeyGroupRouter(spec.max_parallelism, [t.key_groups for t in tasks],
                                                       complete=self.workers == 1), clock, self.failures,
                          self._broadcast_copies(reads))
        lag = ConsumerLag(self.client, self.metadata, self.job, stage.name, stage.topics)
        input_: SourceInput | ChannelInput
        if not self.upstreams:
            input_ = SourceInput(path, positions, lambda: lag.unread(positions), stage.forwards_to is not None,
                                 self._partitioner(stage.output) if stage.forwards_to else None,
                                 self._local_route() if self.local_channel is not None else None)
        else:
            aligner = BarrierAligner(spec.mode, attempt.epoch, self._channels(reads), restored.cut if restored else {})
            input_ = ChannelInput(path, positions, aligner, attempt.epoch)
        checkpointer = StageCheckpointer(self.job, stage.name, stage.operator_id, spec.mode, attempt.epoch, tasks,
                                         output, self.storage, control, SnapshotThread(stage.name))
        RESTORE_DURATION.labels(self.job).set(time.monotonic() - started if restored else 0)
        return StageRunner(self.job, stage, attempt, tasks, input_, output, control, clock, checkpointer,
                           self.failures, lag, positions, reads, restored.metadata if restored else None, self.local)

    def close(self) -> None:
        """Close what was opened, last first; the local state files go too."""
        for close in reversed(self.opened):
            try:
                close()
            except Exception as exc:  # the failure being raised matters more
                log.warning("closing a part of a failed start failed", job=self.job, stage=self.stage.name,
                            error=f"{type(exc).__name__}: {exc}")
        shutil.rmtree(self.local, ignore_errors=True)

    def _ensure_topics(self) -> None:
        admin = AdminClient(dict(self.client))
        partitions = self.spec.output_partitions
        channels = [topic for topic in self.stage.topics if self.spec.writer_of(topic) is not None]
        for topic in (*self.stage.output_topics, *channels, self.stage.late_output):
            if topic is not None:
                ensure_topics(admin, [TopicSpec(topic, partitions)])

    def _restore(self, tasks: list[StageTask], reads: list[TopicPartition]) -> RestoredStage:
        path = self.attempt.restore_path or ""
        try:
            metadata = read_metadata(self.storage, path)
            if metadata.job_id != self.job:
                raise ValueError(f"{path} belongs to job {metadata.job_id}, not {self.job}")
            restored = restore_stage(metadata, self.stage.operator_id, tasks, self.storage,
                                     source_operators(self.stage), set(reads))
        except (CorruptStateFile, MetadataFormatError) as exc:  # the supervisor will not restore it again
            log.error("restore failed: checkpoint corrupted", job=self.job, stage=self.stage.name, checkpoint=path,
                      error=str(exc))
            raise
        log.info("restored", job=self.job, stage=self.stage.name, checkpoint=metadata.checkpoint_id,
                 epoch=self.attempt.epoch, positions=len(restored.positions), pending_buffers=len(restored.sink_items),
                 rebased=restored.rebased)
        return restored

    # ------------------------------------------------------------------ the output

    def _transactional_id(self, worker: int) -> str:
        """Worker 0's is the stage's (as with one worker), the others' get ``.w<n>``."""
        base = f"{self.topics.prefix}.{self.job}.{self.stage.name}"
        return base if worker == 0 else f"{base}.w{worker}"

    def _fence_orphans(self) -> None:
        """Abort what workers of an earlier attempt with more workers left open: worker ``w`` fences
        the ids of ``w + W``, ``w + 2W``, ... below the parallelism (no live worker has them; an open
        transaction would hold the readers of the output back until the broker times it out; ids of
        workers beyond an earlier, larger parallelism are left to that timeout)."""
        if self.spec.mode is CheckpointingMode.AT_LEAST_ONCE and not any(
                map(self.spec.is_channel_topic, self.stage.output_topics)):
            return  # the at-least-once sink is not transactional
        ids = [txid for w in range(self.attempt.worker + self.workers, self.attempt.parallelism, self.workers)
               for txid in (self._transactional_id(w), *self._side_transactional_ids(w).values())]
        if ids:  # in the background: it only unblocks readers sooner, and must not delay the start
            threading.Thread(target=fence_transactional_ids, args=(self.client, ids), name="fence-orphans",
                             daemon=True).start()

    def _side_transactional_ids(self, worker: int) -> dict[str, str]:
        """Each transactional side output's id in worker ``worker``: the output's, ``.side.<name>``
        added (a side output another stage reads is a channel, transactional in either mode; the
        others, like the sink, only in exactly-once mode)."""
        exactly_once = self.spec.mode is CheckpointingMode.EXACTLY_ONCE
        return {name: f"{self._transactional_id(worker)}.side.{name}"
                for name, topic in self.stage.side_output_topics.items()
                if exactly_once or self.spec.is_channel_topic(topic)}

    def _output(self, tasks: list[StageTask], clock: StageClock) -> StageOutput:
        """The stage's output, with its side outputs when it has any."""
        self._fence_orphans()
        main = self._main_output(tasks, clock)
        if self.local_channel is not None and not self.upstreams:
            main = LocalSplitOutput(main, self.local_channel)
        if not self.stage.side_outputs:
            return main
        txids = self._side_transactional_ids(self.attempt.worker)
        sides: dict[str, StageOutput] = {}
        for name, topic in self.stage.side_output_topics.items():
            if self.spec.is_channel_topic(topic):
                sides[name] = self._channel_output(topic, txids[name], tasks, clock)
            elif name in txids:
                sides[name] = TwoPhaseCommitOutput(self.client, topic, self.job, self.stage.operator_id, txids[name],
                                                   self.topics.sink_commits, hold_until_commit=tansu_selected(),
                                                   side=name)
            else:
                sides[name] = AtLeastOnceOutput(self.client, topic)
        return WithSideOutputs(main, sides)

    def _channel_output(self, topic: str, txid: str, tasks: list[StageTask], clock: StageClock) -> ChannelOutput:
        """The stage's output or a side output that another stage reads."""
        forwards = self.stage.forwards_to is not None  # an exchange reader's records come routed
        return ChannelOutput(self.client, topic, self._partitions(topic), txid, self.attempt.epoch,
                             None if forwards else cast(ChannelPartitioner | None, self._partitioner(topic)),
                             tasks=[t.task_id for t in tasks], event_time=clock.has_watermark, forwards=forwards)

    def _main_output(self, tasks: list[StageTask], clock: StageClock) -> StageOutput:
        spec, stage = self.spec, self.stage
        txid = self._transactional_id(self.attempt.worker)
        if spec.is_channel(stage):
            return self._channel_output(stage.output, txid, tasks, clock)
        if spec.mode is CheckpointingMode.EXACTLY_ONCE:
            return TwoPhaseCommitOutput(self.client, stage.output, self.job, stage.operator_id, txid,
                                        self.topics.sink_commits, hold_until_commit=tansu_selected())
        return AtLeastOnceOutput(self.client, stage.output)

    def _timer_failed(self, timer: Timer, error: Exception) -> None:
        """``on_timer`` raised: the stage's error policy, with the timer as the record's origin."""
        origin = InputRecord(f"<{timer.domain.value} timer>", -1, timer.timestamp, timer.timestamp,
                             self.stage.encode_key(timer.key), None)
        self.failures.record_failed(origin, FunctionFailed(f"on_timer: {type(error).__name__}: {error}"))

    # ------------------------------------------------------------------ topics and partitions

    def _changelog(self) -> ChangelogTarget | None:
        if not self.spec.changelog:
            return None
        topic = self.topics.changelog(self.job, self.stage.name)
        return ChangelogTarget(self.client, topic, self._changelog_partitions(topic), self.attempt.epoch, self.storage)

    def _changelog_partitions(self, topic: str, timeout_s: float = 120.0) -> int:
        """Partitions of the stage's changelog topic, which the changelog service creates when the
        supervisor announces the attempt; waits for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._partitions(topic)
            except TopicNotFoundError:
                if time.monotonic() > deadline:
                    raise TopicNotFoundError(f"changelog topic {topic} was not created within {timeout_s:g}s: "
                                             "is the changelog service running?") from None
                time.sleep(0.5)

    def _partitions(self, topic: str) -> int:
        return len(list_partitions(self.metadata, [topic]))

    def _read_partitions(self) -> list[TopicPartition]:
        """The input partitions this worker reads (runtime.job.ownership): all of them with one worker;
        a share of them in a source stage's worker or a stage's without a key; the partitions of
        its own key groups in a keyed channel stage's; every partition of a broadcast input."""
        partitions = sorted(list_partitions(self.metadata, self.stage.topics))
        if self.workers == 1:
            return partitions
        if self.stage.broadcast_side is not None and not self.stage.keyed:
            # each channel shared by itself, so that every worker reads some of the exchange's
            # partitions (their copies of the broadcast elements, physical_plan.reader_workers)
            # and all of a broadcast channel
            broadcast = self.stage.broadcast_topics
            return sorted(tp for topic in sorted({t for t, _ in partitions})
                          for tp in ([tp for tp in partitions if tp.topic == topic] if topic in broadcast else
                                     input_partitions_of(self.attempt.worker, self.workers,
                                                         [tp for tp in partitions if tp.topic == topic])))
        if not self.upstreams and co_partitioned(self.spec, self.stage):
            return self._co_partitioned_reads(partitions)
        if not self.upstreams or not self.stage.keyed:
            return input_partitions_of(self.attempt.worker, self.workers, partitions)
        max_parallelism = self.spec.max_parallelism
        owned = owned_key_groups(self.attempt.worker, self.attempt.parallelism, self.workers, max_parallelism)
        counts = Counter(topic for topic, _ in partitions)
        mine = {topic for topic in counts if self._partitioned_for_me(topic)}  # else every partition, keys filtered
        return [TopicPartition(topic, p) for topic in sorted(counts)
                for p in (channel_partitions_of(owned, max_parallelism, counts[topic]) if topic in mine
                          else range(counts[topic]))]

    def _co_partitioned_reads(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The partitions of a co-partitioned input this worker's key groups are in (the supervisor
        planned it so: they divide among the workers, runtime.job.physical_plan)."""
        counts = Counter(topic for topic, _ in partitions)
        reads = []
        for topic in sorted(counts):
            divided = co_partitioned_reads(counts[topic], self.attempt.parallelism, self.workers,
                                           self.spec.max_parallelism)
            if divided is None:
                raise RuntimeError(f"input {topic}'s {counts[topic]} partitions no longer divide among "
                                   f"{self.workers} workers by key group (its partitions changed since the attempt "
                                   f"was planned)")
            reads.extend(TopicPartition(topic, p) for p in divided[self.attempt.worker])
        return reads

    def _partitioned_for_me(self, topic: str) -> bool:
        """Whether the stage writing ``topic`` puts each record into the partition of this keyed
        stage's key group: this stage's exchange reader does, and a stage this one alone reads
        (:meth:`_partitioner`); a stage read by several writes where the producer puts it."""
        writer = cast(Stage, self.spec.writer_of(topic))
        if topic in self.stage.broadcast_topics:
            return False  # every worker reads a broadcast input whole
        return writer.forwards_to == self.stage.name or self.spec.readers_of_topic(topic, writer) == (self.stage,)

    def _partitioner(self, topic: str) -> KeyPartitioner | None:
        """How this stage partitions its channel ``topic`` (its output or a side output): by the
        key groups of the stage reading it when that one is its only reader, keyed and on several
        workers; else the producer's partitioner. An exchange reader's partitioner only places
        keys: it keys each record itself."""
        readers = self.spec.readers_of_topic(topic, self.stage)
        if len(readers) != 1 or (readers[0].workers or 1) == 1 or not readers[0].keyed:
            return None
        if topic in readers[0].broadcast_topics:
            return None  # a broadcast input: every worker of its reader reads every partition
        max_parallelism, partitions = self.spec.max_parallelism, self._partitions(topic)
        if self.stage.forwards_to is not None:
            return KeyPartitioner(max_parallelism, partitions)
        return ChannelPartitioner(readers[0], topic, max_parallelism, partitions)

    def _broadcast_copies(self, reads: list[TopicPartition]) -> dict[str, int]:
        """Where this worker takes the copies of broadcast elements its exchange reader writes into
        every partition of the exchange: the first partition of it that it reads."""
        stage = self.stage
        if stage.exchange is None or not stage.broadcast_topics & set(stage.exchanged):
            return {}
        return {stage.exchange: min(p for topic, p in reads if topic == stage.exchange)}

    def _channels(self, reads: list[TopicPartition]) -> set[Channel]:
        """Every (partition, writing task) this worker reads: of each channel, the tasks of the
        stage writing it."""
        writers = {topic: s.operator_id for s in self.spec.stages for topic in s.output_topics}
        tasks = {topic: [a.task_id for a in plan_assignments((writers[topic],), self.attempt.parallelism,
                                                             self.spec.max_parallelism)]
                 for topic in {topic for topic, _ in reads}}
        channels = {Channel(topic, partition, task) for topic, partition in reads for task in tasks[topic]}
        return channels | (self.local_channel.channels if self.local_channel is not None else set())

    # ------------------------------------------------------------------ a fused worker's local channel

    def _forwards_locally(self) -> bool:
        """Whether this exchange reader hands the records of its worker's own key groups to the
        keyed stage in the process: a keyed stage without broadcast inputs (module docstring)."""
        keyed = self.spec.stage(self.stage.forwards_to) if self.stage.forwards_to else None
        return keyed is not None and keyed.keyed and not keyed.broadcast_topics

    def _local_route(self) -> KeyGroupRouter:
        """The key groups of the fused keyed worker (the reader's worker index is its)."""
        keyed = self.spec.stage(cast(str, self.stage.forwards_to))
        owned = owned_key_groups(self.attempt.worker, self.attempt.parallelism, keyed.workers or 1,
                                 self.spec.max_parallelism)
        return KeyGroupRouter(self.spec.max_parallelism, [owned], complete=False)
