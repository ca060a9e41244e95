"""Every record that crosses a process boundary, as immutable dataclasses.

Each top-level message (:data:`MESSAGE_TYPES`, which also lists
:class:`~tidemark.protocol.dead_letters.DeadLetter`) has one Avro schema in ``schemas/`` (named
``tidemark.protocol.<Name>``) and is encoded by :mod:`tidemark.protocol.codec` in the Confluent wire format. Nested records
(``StateHandle``, ``SourceOffset``...) are Avro sub-records of the messages that carry them.

Timestamps are ``int`` milliseconds since the epoch (Avro ``timestamp-millis``); byte payloads
(state keys and values) are opaque ``bytes`` serialized by the state serializers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tidemark.protocol.dead_letters import DeadLetter
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

# --------------------------------------------------------------------------- nested records


class StateHandleKind(str, enum.Enum):
    KEYED_FULL = "KEYED_FULL"  # canonical full snapshot of a key-group range
    KEYED_INCREMENTAL = "KEYED_INCREMENTAL"  # native RocksDB SST set, some files shared
    OPERATOR = "OPERATOR"  # operator state (list / union / broadcast)
    MATERIALIZED = "MATERIALIZED"  # snapshot written by the materializer


@dataclass(frozen=True, slots=True)
class StateFile:
    """One file in checkpoint storage, addressed relative to the storage root."""

    path: str
    size_bytes: int
    sha256: str
    shared: bool = False  # True: owned by the shared-state registry, reference-counted


@dataclass(frozen=True, slots=True)
class StateHandle:
    """The state of one task for one checkpoint (or one part of it)."""

    kind: StateHandleKind
    operator_id: OperatorId
    key_group_start: KeyGroup
    key_group_end: KeyGroup  # inclusive; -1 and -1 for OPERATOR handles
    files: tuple[StateFile, ...]
    state_size_bytes: int  # full size of the state this handle restores
    checkpointed_size_bytes: int  # bytes newly written by this checkpoint


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """Next offset to read in one source partition (Flink: split state)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class ChangelogRange:
    """Half-open offset range ``[start_offset, end_offset)`` of one changelog partition."""

    topic: str
    partition: int
    start_offset: SequenceNumber
    end_offset: SequenceNumber


@dataclass(frozen=True, slots=True)
class SinkTransaction:
    """A pre-committed Kafka transaction, committed when its checkpoint completes."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TaskTimings:
    """Per-task checkpoint timings in milliseconds (Flink: SubtaskStateStats)."""

    alignment_ms: int = 0
    sync_ms: int = 0
    async_ms: int = 0
    processed_bytes: int = 0


@dataclass(frozen=True, slots=True)
class MaterializationRef:
    """Points a checkpoint at the materialized snapshot its changelog ranges start after."""

    materialization_id: MaterializationId
    checkpoint_id: CheckpointId  # the completed checkpoint the materialization folded up to


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """Everything one task contributed to a completed checkpoint."""

    task_id: TaskId
    operator_id: OperatorId
    subtask_index: int
    key_group_start: KeyGroup
    key_group_end: KeyGroup
    state_handles: tuple[StateHandle, ...] = ()
    source_offsets: tuple[SourceOffset, ...] = ()
    changelog_ranges: tuple[ChangelogRange, ...] = ()
    sink_transactions: tuple[SinkTransaction, ...] = ()
    materialization: MaterializationRef | None = None


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    """Which key groups a (new) subtask owns after a restore."""

    task_id: TaskId
    operator_id: OperatorId
    subtask_index: int
    key_group_start: KeyGroup
    key_group_end: KeyGroup


# --------------------------------------------------------------------------- control topic


@dataclass(frozen=True, slots=True)
class CheckpointTrigger:
    """Coordinator -> sources: start checkpoint ``checkpoint_id`` (control topic)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    mode: CheckpointingMode
    triggered_at: int
    epoch: Epoch = Epoch(0)
    target_location: str | None = None  # savepoints only: directory inside checkpoint storage


@dataclass(frozen=True, slots=True)
class CheckpointCompleted:
    """Coordinator -> everyone: the checkpoint is complete; commit side effects (control)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    completed_at: int
    metadata_path: str
    epoch: Epoch = Epoch(0)


@dataclass(frozen=True, slots=True)
class CheckpointAborted:
    """Coordinator -> everyone: the checkpoint is abandoned; abort side effects (control)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    reason: str
    aborted_at: int
    epoch: Epoch = Epoch(0)


@dataclass(frozen=True, slots=True)
class SavepointRequest:
    """Operator -> coordinator: take a savepoint, optionally stopping the job (control).

    ``generation`` (v2): the deployment generation that asked (the chart's release revision); a
    stop-with-savepoint with one suspends the job for that generation
    (:mod:`tidemark.runtime.supervisor.suspension`)."""

    job_id: JobId
    request_id: str
    stop: bool
    requested_at: int
    target_location: str | None = None
    format: str = "CANONICAL"  # CANONICAL (backend-independent) or NATIVE
    generation: int | None = None


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """Coordinator -> job supervisor: attempt ``epoch`` failed (more consecutive checkpoint
    failures than tolerated); its supervisor fails the job over (control)."""

    job_id: JobId
    epoch: Epoch
    reason: str
    failed_at: int


@dataclass(frozen=True, slots=True)
class RestoreCommand:
    """Coordinator -> workers: restore from a checkpoint or savepoint (control)."""

    job_id: JobId
    restore_id: str
    checkpoint_id: CheckpointId
    is_savepoint: bool
    metadata_path: str
    parallelism: int
    max_parallelism: int
    assignments: tuple[TaskAssignment, ...]
    epoch: Epoch
    issued_at: int


@dataclass(frozen=True, slots=True)
class JobRegistration:
    """Worker -> coordinator: a job attempt is running with these tasks (control topic).

    The coordinator waits for an ack from every task of the newest registered epoch; a
    registration with a higher epoch supersedes the older attempt (its pending checkpoints abort).
    ``finished`` marks a job attempt that ended (stop-with-savepoint or end of input).
    ``changelog_operators`` (v2) are the operators whose keyed state runs in changelog mode: the
    changelog service creates their topics with ``changelog_partitions`` partitions (0: the
    service's default). ``outcome`` and ``reason`` (v3) say how a finished attempt ended:
    ``FINISHED``, ``CANCELLED``, ``RESTARTING`` or ``FAILED`` (:mod:`tidemark.checkpoint.job_state`;
    empty: running, or finished for writers before v3). ``workers`` (v4) is the worker process
    of each entry of ``tasks`` (same order and length): its index among the workers of the task's
    stage; empty means every task runs in worker 0 (:mod:`tidemark.checkpoint.task_workers`).
    """

    job_id: JobId
    epoch: Epoch
    mode: CheckpointingMode
    max_parallelism: int
    tasks: tuple[TaskAssignment, ...]
    source_tasks: tuple[TaskId, ...]  # tasks that receive triggers and inject barriers
    registered_at: int
    finished: bool = False
    changelog_operators: tuple[OperatorId, ...] = ()
    changelog_partitions: int = 0
    outcome: str = ""
    reason: str = ""
    workers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SupervisorHeartbeat:
    """Job supervisor -> coordinator: the supervisor of ``job_id`` is alive, about every second
    while it runs (control topic). ``epoch`` is the attempt it runs or prepares (0 before its
    first); ``supervisor`` names the process, ``<host>:<pid>``. The coordinator reports a job whose
    supervisor went silent as not running (:mod:`tidemark.checkpoint.liveness`)."""

    job_id: JobId
    epoch: Epoch
    supervisor: str
    sent_at: int


# --------------------------------------------------------------------------- acks topic


@dataclass(frozen=True, slots=True)
class TaskAck:
    """Task -> coordinator: this task's part of checkpoint ``checkpoint_id`` is durable (acks)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    task: TaskSnapshot
    timings: TaskTimings
    acked_at: int
    epoch: Epoch = Epoch(0)


@dataclass(frozen=True, slots=True)
class TaskDecline:
    """Task -> coordinator: this task cannot take checkpoint ``checkpoint_id`` (acks)."""

    job_id: JobId
    checkpoint_id: CheckpointId
    task_id: TaskId
    reason: str
    declined_at: int
    epoch: Epoch = Epoch(0)


# --------------------------------------------------------------------------- data topics


@dataclass(frozen=True, slots=True)
class Barrier:
    """Written by an upstream task into every partition it writes, after the checkpoint's data.

    Travels in data topics; a record is a barrier when it carries the ``tidemark-barrier``
    header, whose value is this record's encoding.
    """

    job_id: JobId
    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    mode: CheckpointingMode
    upstream_task: TaskId
    emitted_at: int
    epoch: Epoch = Epoch(0)


BARRIER_HEADER = "tidemark-barrier"


# --------------------------------------------------------------------------- checkpoint events


@dataclass(frozen=True, slots=True)
class CheckpointMetadata:
    """A completed checkpoint or savepoint: the event the checkpoint-store persists."""

    job_id: JobId
    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    triggered_at: int
    completed_at: int
    max_parallelism: int
    tasks: tuple[TaskSnapshot, ...]
    epoch: Epoch = Epoch(0)
    state_size_bytes: int = 0
    checkpointed_size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointDiscarded:
    """Checkpoint-store: a checkpoint (or deleted savepoint) left retention; files released."""

    job_id: JobId
    checkpoint_id: CheckpointId
    discarded_at: int
    reason: str
    released_files: tuple[str, ...] = ()


# --------------------------------------------------------------------------- worker hosts


class HostAction(str, enum.Enum):
    RUN = "RUN"  # start the launches of the epoch, after killing an older epoch's processes
    STOP = "STOP"  # SIGTERM the epoch's processes (the supervisor was stopped)
    KILL = "KILL"  # the attempt failed over: the host releases its processes for the next RUN (runtime.worker.process)
    HEARTBEAT = "HEARTBEAT"  # the supervisor is alive (host ""; every host reads it)


@dataclass(frozen=True, slots=True)
class HostLaunch:
    """One worker process a host runs: worker ``worker`` of ``stage`` (as the job runs), and of the
    exchange reader ``fused`` when the process runs it as a second lane (a fused worker)."""

    stage: str
    worker: int
    fault: str | None = None  # testing: TIDEMARK_FAULT of the process (runtime.job.faults)
    fused: str | None = None  # the exchange reader fused into the process (Attempt.fused)


@dataclass(frozen=True, slots=True)
class HostAssignment:
    """Job supervisor -> worker host ``host`` (``<stage>/<n>``): run, stop or kill the processes
    of attempt ``epoch`` placed there, or the supervisor's heartbeat (worker-hosts)."""

    job_id: JobId
    host: str
    epoch: Epoch
    action: HostAction
    job_ref: str = ""
    job_args: str = "{}"  # a JSON object
    parallelism: int = 0
    restore_path: str | None = None
    workers: dict[str, int] = field(default_factory=dict)  # worker processes of each stage as it runs
    launches: tuple[HostLaunch, ...] = ()
    standby: bool = True
    issued_at: int = 0


class ProcessPhase(str, enum.Enum):
    STARTING = "STARTING"  # restoring its state, starting its query
    READY = "READY"  # its query started
    PROCESSING = "PROCESSING"  # it processed records of the attempt
    EXITED = "EXITED"


@dataclass(frozen=True, slots=True)
class HostedProcess:
    """Where one worker process of a host's attempt is."""

    name: str
    phase: ProcessPhase
    exit_code: int | None = None
    reason: str = ""  # why it cannot run (exit status 3, runtime.job.start_errors), one line
    log: str = ""  # its log on the host


@dataclass(frozen=True, slots=True)
class HostReport:
    """Worker host -> job supervisor, every second and on every change (worker-hosts): alive, as
    ``incarnation`` (new at each start of the host), running attempt ``epoch``'s ``processes``."""

    job_id: JobId
    host: str
    incarnation: str
    epoch: Epoch
    processes: tuple[HostedProcess, ...]
    reported_at: int


# --------------------------------------------------------------------------- state changelogs


class StateChangeOp(str, enum.Enum):
    PUT = "PUT"  # value of (state, key, namespace[, user_key]) is now ``value``
    DELETE = "DELETE"  # remove (state, key, namespace[, user_key])
    CLEAR = "CLEAR"  # remove every entry of (state, key, namespace)
    ADD = "ADD"  # list state: append ``value``


@dataclass(frozen=True, slots=True)
class StateChange:
    """One mutation of keyed state, appended to the operator's changelog topic."""

    job_id: JobId
    task_id: TaskId
    key_group: KeyGroup
    state_name: str
    op: StateChangeOp
    key: bytes
    namespace: bytes = b""
    user_key: bytes | None = None
    value: bytes | None = None
    timestamp: int = 0
    epoch: Epoch = Epoch(0)


class MaterializationStatus(str, enum.Enum):
    STARTED = "STARTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class MaterializationEvent:
    """Materializer -> changelog service and workers: a materialization's progress."""

    job_id: JobId
    task_id: TaskId
    operator_id: OperatorId
    materialization_id: MaterializationId
    status: MaterializationStatus
    checkpoint_id: CheckpointId  # completed checkpoint folded up to
    covered_ranges: tuple[ChangelogRange, ...]  # everything before end_offset is folded in
    state_handles: tuple[StateHandle, ...] = ()
    at: int = 0
    error: str | None = None


# --------------------------------------------------------------------------- live state queries


@dataclass(frozen=True, slots=True)
class StateQuery:
    """Coordinator -> the job's stage workers (state-queries): read the value of state
    ``state_name`` of ``key`` in ``stage``; only the worker whose task owns the key's key group
    answers, between two micro-batches (:mod:`tidemark.runtime.worker.live_state`)."""

    job_id: JobId
    request_id: str
    stage: str
    state_name: str
    key_json: str  # the key as JSON (a string key "\"/a\"", an int key "42")
    asked_at: int


class StateQueryOutcome(str, enum.Enum):
    FOUND = "FOUND"  # value_json holds the value
    UNKNOWN_STATE = "UNKNOWN_STATE"  # the stage's tasks registered no keyed state of that name
    UNKNOWN_KEY = "UNKNOWN_KEY"  # the state holds no value for the key
    TOO_LARGE = "TOO_LARGE"  # the value's JSON is larger than an answer carries (live_state.MAX_VALUE_BYTES)


@dataclass(frozen=True, slots=True)
class StateAnswer:
    """Stage worker -> coordinator (state-answers): the answer to the :class:`StateQuery`
    ``request_id``, read from task ``task_id`` of attempt ``epoch`` after its last processed
    micro-batch."""

    job_id: JobId
    request_id: str
    outcome: StateQueryOutcome
    task_id: TaskId
    epoch: Epoch
    answered_at: int
    value_json: str | None = None  # FOUND: the value as JSON
    value_repr: bool = False  # value_json is the JSON string of repr(value): the value is not JSON
    detail: str = ""  # why not FOUND, for humans


MESSAGE_TYPES: tuple[type, ...] = (
    CheckpointTrigger,
    CheckpointCompleted,
    CheckpointAborted,
    SavepointRequest,
    RestoreCommand,
    AttemptFailed,
    JobRegistration,
    SupervisorHeartbeat,
    HostAssignment,
    HostReport,
    TaskAck,
    TaskDecline,
    Barrier,
    CheckpointMetadata,
    CheckpointDiscarded,
    StateChange,
    MaterializationEvent,
    StateQuery,
    StateAnswer,
    DeadLetter,
)
"""Top-level messages, each with its own schema (and schema id) in ``schemas/``."""
