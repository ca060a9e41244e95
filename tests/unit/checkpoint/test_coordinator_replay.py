"""A coordinator rebuilt by replaying its topics continues with exactly the same decisions."""

from __future__ import annotations

from checkpoint_support import (
    JOB,
    Step,
    ack,
    decline,
    log_of,
    registration,
    savepoint_request,
    scripted_run,
)

from tidemark.checkpoint import (
    CheckpointCoordinator,
    CheckpointingOptions,
    Command,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    PersistCheckpoint,
    RestoreRequest,
)
from tidemark.checkpoint_store import REJECTED_PREFIX
from tidemark.protocol.messages import CheckpointDiscarded, JobRegistration
from tidemark.types import CheckpointType

OPTS = CheckpointingOptions(interval_ms=20, timeout_ms=60, max_concurrent=2, tolerable_failures=2)


def restore_from_last(coord: CheckpointCoordinator) -> RestoreRequest:
    last = coord.last_completed
    assert last is not None
    path = f"job/chk-{last.checkpoint_id}/_metadata"
    return RestoreRequest("restore-1", last.metadata, path, parallelism=3, requested_at=603)


def workload() -> tuple[CheckpointCoordinator, list[Step]]:
    """Periodic checkpoints with a decline, a timeout, duplicates, a store rejection, a
    savepoint, a restore at a new parallelism and a stop-with-savepoint."""
    registrations: dict[int, JobRegistration] = {0: registration(at=0)}

    def react(command: Command, now: int) -> list[tuple[int, object]]:
        if isinstance(command, EmitTrigger):
            trig = command.trigger
            cid, reg = trig.checkpoint_id, registrations[trig.epoch]
            out: list[tuple[int, object]] = []
            for i, task in enumerate(reg.tasks):
                if cid == 3 and i == 2:
                    out.append((now + 4, decline(cid, task, now + 4, trig.epoch)))
                elif cid in (5, 6) and i == 1:
                    continue  # never acks: 5 times out, 6 is subsumed by 7
                else:
                    out.append((now + 3 + 2 * i, ack(cid, task, now + 3 + 2 * i, trig.epoch)))
                if cid == 7:
                    out.append((now + 30, ack(cid, task, now + 30, trig.epoch)))  # late dup
            return out
        if isinstance(command, PersistCheckpoint):
            cid = command.metadata.checkpoint_id
            if cid == 8:
                reason = f"{REJECTED_PREFIX}missing state files"
                return [(now + 4, CheckpointDiscarded(JOB, cid, now + 4, reason))]
            return [(now + 4, command.metadata)]
        if isinstance(command, EmitRestore):
            registrations[1] = registration(epoch=1, parallelism=3, at=now + 30)
            return [(now + 30, registrations[1])]
        if isinstance(command, EmitCompleted):
            if command.completed.checkpoint_type is CheckpointType.STOP_WITH_SAVEPOINT:
                return [(now + 5, registration(epoch=1, parallelism=3, at=now + 5, finished=True))]
        return []

    initial = [
        (0, "record", registrations[0]),
        (333, "record", savepoint_request("sp-1", 333)),
        (603, "restore", restore_from_last),
        (900, "record", savepoint_request("stop-1", 900, stop=True)),
    ]
    return scripted_run(OPTS, initial, react, until=1_000)


def test_workload_exercises_every_path() -> None:
    coord, steps = workload()
    kinds = {type(c).__name__ for s in steps for c in s.outputs}
    assert kinds >= {"EmitTrigger", "PersistCheckpoint", "EmitCompleted", "EmitAborted", "EmitRestore"}
    reasons = {c.aborted.reason.split(":")[0] for s in steps for c in s.outputs if hasattr(c, "aborted")}
    assert reasons >= {"DECLINED", "TIMEOUT", "STORE_REJECTED", "SUPERSEDED", "SUBSUMED"}
    assert coord.is_finishing and coord.stats().counts.completed >= 10


def _previously_persisted(steps: list[Step]) -> list[PersistCheckpoint]:
    return [c for s in steps for c in s.outputs if isinstance(c, PersistCheckpoint)]


def test_replay_at_every_step_boundary_continues_identically() -> None:
    original, steps = workload()
    for cut in range(0, len(steps) + 1, 3):
        now = steps[cut - 1].now if cut else 0
        rebuilt = CheckpointCoordinator(JOB, OPTS)
        owed = rebuilt.replay(log_of(steps[:cut]), now)
        issued = _previously_persisted(steps[:cut])
        assert all(isinstance(c, PersistCheckpoint) and c in issued for c in owed), (cut, owed)
        for step in steps[cut:]:
            assert step.run(rebuilt) == step.outputs, (cut, step)
    assert rebuilt.stats() == original.stats()
    assert rebuilt.last_completed == original.last_completed
    assert rebuilt.active_epoch == original.active_epoch
    assert rebuilt.is_finishing and rebuilt.consecutive_failures == original.consecutive_failures


def test_crash_after_reading_an_input_but_before_writing_its_outputs() -> None:
    _, steps = workload()
    for k, step in enumerate(steps):
        if step.kind != "record":
            continue
        rebuilt = CheckpointCoordinator(JOB, OPTS)
        owed = rebuilt.replay([*log_of(steps[:k]), step.payload], step.now)
        issued = _previously_persisted(steps[:k])
        assert [c for c in owed if c not in issued] == step.outputs, (k, step)
        for later in steps[k + 1 : k + 40]:
            assert later.run(rebuilt) == later.outputs


def test_replaying_the_log_twice_changes_nothing() -> None:
    original, steps = workload()
    rebuilt = CheckpointCoordinator(JOB, OPTS)
    log = log_of(steps)
    rebuilt.replay(log, steps[-1].now)
    assert rebuilt.replay(log, steps[-1].now) == []
    assert rebuilt.stats() == original.stats()
    assert rebuilt.pending_checkpoint_ids == original.pending_checkpoint_ids


def _split_by_topic(log: list[object]) -> tuple[list[object], list[object], list[object]]:
    acks = [r for r in log if type(r).__name__ in ("TaskAck", "TaskDecline")]
    events = [r for r in log if type(r).__name__ in ("CheckpointMetadata", "CheckpointDiscarded")]
    control = [r for r in log if r not in acks and r not in events]
    return control, acks, events


def test_replay_of_topics_read_one_after_another_reaches_the_same_state() -> None:
    original, steps = workload()
    control, acks, events = _split_by_topic(log_of(steps))
    for order in ([control, acks, events], [control, events, acks], [events, control, acks]):
        rebuilt = CheckpointCoordinator(JOB, OPTS)
        assert rebuilt.replay([r for topic in order for r in topic], steps[-1].now) == []
        assert rebuilt.last_completed == original.last_completed
        assert rebuilt.stats().counts == original.stats().counts
        assert rebuilt.consecutive_failures == original.consecutive_failures
        assert rebuilt.pending_checkpoint_ids == original.pending_checkpoint_ids
        assert (rebuilt.active_epoch, rebuilt.is_finishing) == (original.active_epoch, True)
        assert rebuilt.savepoint_id("sp-1") == original.savepoint_id("sp-1") is not None
