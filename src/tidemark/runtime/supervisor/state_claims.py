"""Which state of a checkpoint a job claims (Flink: ``allowNonRestoredState``).

A restore hands each stage the state its operator id (the stage's name) holds in the checkpoint
or savepoint. State under an operator id that no stage of the job has (a stage renamed or
removed since) would otherwise be dropped without a word: its keyed state and timers, its operator
state, the positions it had read its inputs to, and output it had written but not yet committed.
:func:`unclaimed_state` lists that state; a start refuses it in one line (:func:`refusal`) unless
it allows non-restored state (``--allow-non-restored-state``), and then drops it and says so.
A stage with no state in the checkpoint (a new one, or a renamed one) starts empty: a source stage
reads its topics from the beginning, a stage fed by a channel reads what its upstream writes from
the restore on (:mod:`tidemark.runtime.worker.alignment` drops other attempts' records).

An exchange reader (``<stage>.read``, :mod:`tidemark.runtime.job.physical_plan`) is claimed by its
stage: a source stage rescaled to one worker reads from the positions its reader held.

Keyed state is claimed by key group, and a key's key group depends on the max parallelism: a
checkpoint written under another max parallelism than the job's holds its keys in other key
groups than the job's tasks look them up in, so a start refuses it (:func:`key_group_mismatch`),
whatever the options: ``tidemark state transform --max-parallelism`` re-partitions it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidemark.protocol.messages import CheckpointMetadata, StateHandle, StateHandleKind, TaskSnapshot
from tidemark.api import JobSpec
from tidemark.runtime.job.physical_plan import READER_SUFFIX
from tidemark.runtime.job.operator_states import CUT_STATE, SINK_STATE, WATERMARK_STATE
from tidemark.start_request import command_line_option
from tidemark.types import OperatorId

ALLOW_OPTION = command_line_option("allow_non_restored_state")

_RUNTIME_STATES = {SINK_STATE.name: "output not yet committed", CUT_STATE.name: "channel positions",
                   WATERMARK_STATE.name: "watermarks"}  # the runtime's own operator state, as an operator knows it
_KEYED_KINDS = (StateHandleKind.KEYED_FULL, StateHandleKind.KEYED_INCREMENTAL, StateHandleKind.MATERIALIZED)


@dataclass(frozen=True, slots=True)
class UnclaimedState:
    """The state of one operator id no stage of the job claims, each kind named (``state``)."""

    operator_id: OperatorId
    state: tuple[str, ...]

    def describe(self) -> str:
        return f"stage {self.operator_id!r} ({', '.join(self.state)})"


def claimed_operators(spec: JobSpec) -> frozenset[OperatorId]:
    """The operator ids whose state the stages of ``spec`` restore."""
    claimed: set[OperatorId] = set()
    for stage in spec.stages:
        claimed.add(stage.operator_id)
        claimed.add(OperatorId(stage.name + READER_SUFFIX))
        if stage.forwards_to is not None:
            claimed.add(OperatorId(stage.forwards_to))
    return frozenset(claimed)


OperatorStateNames = Callable[[StateHandle], Iterable[str]]
"""The names of the operator states an ``OPERATOR`` handle holds (read from its files:
:func:`tidemark.state.operator.snapshot_state_names`)."""


def unclaimed_state(metadata: CheckpointMetadata, spec: JobSpec,
                    operator_states: OperatorStateNames) -> tuple[UnclaimedState, ...]:
    """The state in ``metadata`` that no stage of ``spec`` claims, by operator id (sorted)."""
    claimed = claimed_operators(spec)
    orphans: dict[OperatorId, list[TaskSnapshot]] = {}
    for task in metadata.tasks:
        if task.operator_id not in claimed:
            orphans.setdefault(task.operator_id, []).append(task)
    found = (UnclaimedState(operator, _state_kinds(tasks, operator_states))
             for operator, tasks in sorted(orphans.items()))
    return tuple(unclaimed for unclaimed in found if unclaimed.state)


def _holds_keyed_state(tasks: Iterable[TaskSnapshot]) -> bool:
    return any(t.changelog_ranges or t.materialization or any(h.kind in _KEYED_KINDS for h in t.state_handles)
               for t in tasks)


def _state_kinds(tasks: list[TaskSnapshot], operator_states: OperatorStateNames) -> tuple[str, ...]:
    handles = [h for t in tasks for h in t.state_handles]
    kinds: list[str] = []
    if _holds_keyed_state(tasks):
        kinds.append("keyed state and timers")
    operator_handles = [h for h in handles if h.kind is StateHandleKind.OPERATOR]
    names = sorted({name for h in operator_handles for name in operator_states(h)})
    kinds += [f"operator state {name!r}" for name in names if name not in _RUNTIME_STATES]
    if operator_handles and not names:
        kinds.append("operator state")
    kinds += [_RUNTIME_STATES[name] for name in names if name in _RUNTIME_STATES]
    if any(t.source_offsets for t in tasks):
        kinds.append("input positions")
    if any(t.sink_transactions for t in tasks):
        kinds.append("pre-committed output transactions")
    return tuple(kinds)


def key_group_mismatch(metadata: CheckpointMetadata, spec: JobSpec) -> str | None:
    """The one line refusing ``metadata`` when its max parallelism is not the job's and it holds
    keyed state; None when the job can restore it."""
    if metadata.max_parallelism == spec.max_parallelism:
        return None
    if not _holds_keyed_state(metadata.tasks):
        return None
    kind = "savepoint" if metadata.checkpoint_type.is_savepoint else "checkpoint"
    return (f"{kind} {metadata.checkpoint_id} of job {metadata.job_id} has max parallelism "
            f"{metadata.max_parallelism}, the job {spec.max_parallelism}: its keyed state is in other key groups. "
            f"Give the job max_parallelism={metadata.max_parallelism}, or derive a savepoint with "
            f"tidemark state transform --max-parallelism {spec.max_parallelism}")


def refusal(metadata: CheckpointMetadata, unclaimed: Iterable[UnclaimedState]) -> str:
    """The one line a start refused over ``unclaimed`` state prints."""
    what = "; ".join(u.describe() for u in unclaimed)
    kind = "savepoint" if metadata.checkpoint_type.is_savepoint else "checkpoint"
    return (f"{kind} {metadata.checkpoint_id} of job {metadata.job_id} holds state no stage of the job claims: "
            f"{what}. A stage's state is restored by its name: name the stage as before, or start with "
            f"{ALLOW_OPTION} to drop that state")


__all__ = ["ALLOW_OPTION", "OperatorStateNames", "UnclaimedState", "claimed_operators", "key_group_mismatch",
           "refusal", "unclaimed_state"]
