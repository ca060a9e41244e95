"""Which state of a checkpoint a job claims: a renamed or removed stage's state is named, kind by
kind, and refused in one line; an exchange reader's state belongs to its stage."""

from __future__ import annotations

import dataclasses

from tidemark.examples.access_log import top_urls
from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointMetadata,
    SinkTransaction,
    SourceOffset,
    StateFile,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.runtime.job.physical_plan import READER_SUFFIX
from tidemark.runtime.supervisor.state_claims import ALLOW_OPTION, claimed_operators, refusal, unclaimed_state
from tidemark.runtime.job.operator_states import SINK_STATE
from tidemark.state import ListStateDescriptor
from tidemark.state.operator import OperatorStateBackend, snapshot_state_names
from tidemark.storage import open_storage
from tidemark.types import CheckpointId, CheckpointType, JobId, KeyGroup, OperatorId, TaskId


def _file(name: str) -> StateFile:
    return StateFile(f"j/chk-4/{name}", 10, "0" * 64)


def _keyed(operator: str) -> StateHandle:
    return StateHandle(StateHandleKind.KEYED_FULL, OperatorId(operator), KeyGroup(0), KeyGroup(63),
                       (_file("kg-0-63"),), 10, 10)


def _operator_state(operator: str, *names: str) -> StateHandle:
    """A handle whose one file holds ``names`` (as :func:`_names` reads them back)."""
    return StateHandle(StateHandleKind.OPERATOR, OperatorId(operator), KeyGroup(-1), KeyGroup(-1),
                       (_file("|".join(names)),), 10, 10)


def _names(handle: StateHandle) -> list[str]:
    return [n for f in handle.files for n in f.path.rsplit("/", 1)[1].split("|") if n]


def _task(operator: str, index: int = 0, **parts) -> TaskSnapshot:  # noqa: ANN003
    return TaskSnapshot(TaskId(f"{operator}#{index}"), OperatorId(operator), index, KeyGroup(0), KeyGroup(63), **parts)


def _metadata(*tasks: TaskSnapshot, kind: CheckpointType = CheckpointType.SAVEPOINT) -> CheckpointMetadata:
    return CheckpointMetadata(JobId("j"), CheckpointId(4), kind, 0, 0, 128, tasks)


SPEC = top_urls(job_id="j", input_topic="in", output_topic="out")  # stages minute_counts -> top_urls


def test_every_stage_and_its_exchange_reader_are_claimed() -> None:
    assert claimed_operators(SPEC) == {OperatorId(n) for n in (
        "minute_counts", "minute_counts" + READER_SUFFIX, "top_urls", "top_urls" + READER_SUFFIX)}
    metadata = _metadata(_task("minute_counts.read", source_offsets=(SourceOffset("in", 0, 5),)),
                         _task("minute_counts", state_handles=(_keyed("minute_counts"),)),
                         _task("top_urls", state_handles=(_keyed("top_urls"), _operator_state("top_urls", "x"))))
    assert unclaimed_state(metadata, SPEC, _names) == ()


def test_a_renamed_stage_leaves_each_kind_of_its_state_named() -> None:
    first, second = SPEC.stages
    renamed = dataclasses.replace(SPEC, stages=(first, dataclasses.replace(second, name="top_urls_v2")))
    metadata = _metadata(
        _task("minute_counts", state_handles=(_keyed("minute_counts"),), source_offsets=(SourceOffset("in", 0, 5),)),
        _task("top_urls", 0, state_handles=(_keyed("top_urls"), _operator_state("top_urls", "buffer", SINK_STATE.name)),
              source_offsets=(SourceOffset("ch", 0, 7),), sink_transactions=(SinkTransaction("t-0", 3, 1),)),
        _task("top_urls", 1, changelog_ranges=(ChangelogRange("cl", 1, 0, 9),)),
    )
    [unclaimed] = unclaimed_state(metadata, renamed, _names)
    assert unclaimed.operator_id == "top_urls"
    assert unclaimed.state == ("keyed state and timers", "operator state 'buffer'", "output not yet committed",
                               "input positions", "pre-committed output transactions")
    line = refusal(metadata, [unclaimed])
    assert "\n" not in line
    assert line.startswith("savepoint 4 of job j holds state no stage of the job claims: stage 'top_urls' (")
    assert line.endswith(f"start with {ALLOW_OPTION} to drop that state")


def test_an_operator_without_state_is_not_reported_and_several_are_sorted() -> None:
    metadata = _metadata(_task("gone_b", source_offsets=(SourceOffset("in", 1, 1),)), _task("empty"),
                         _task("gone_a", state_handles=(_keyed("gone_a"),)), kind=CheckpointType.CHECKPOINT)
    found = unclaimed_state(metadata, SPEC, _names)
    assert [u.operator_id for u in found] == ["gone_a", "gone_b"]
    assert refusal(metadata, found).startswith(
        "checkpoint 4 of job j holds state no stage of the job claims: stage 'gone_a' (keyed state and timers); "
        "stage 'gone_b' (input positions).")


def test_operator_state_whose_names_cannot_be_read_is_still_named_as_such() -> None:
    metadata = _metadata(_task("gone", state_handles=(_operator_state("gone"),)))
    [unclaimed] = unclaimed_state(metadata, SPEC, lambda handle: ())
    assert unclaimed.state == ("operator state",)


def test_the_names_come_from_the_operator_state_snapshot_itself(tmp_path) -> None:  # noqa: ANN001
    backend = OperatorStateBackend(operator_id="op")
    backend.get_union_list_state(ListStateDescriptor("buffer")).add("x")
    backend.get_list_state(SINK_STATE).add(b"y")
    storage = open_storage(tmp_path.as_uri())
    [handle] = backend.snapshot(CheckpointId(1), storage)
    [ref] = handle.files
    assert snapshot_state_names(storage.read_verified(ref), ref.path) == ["buffer", SINK_STATE.name]


def test_keyed_state_under_another_max_parallelism_is_refused_in_one_line() -> None:
    from tidemark.runtime.supervisor.state_claims import key_group_mismatch

    keyed = _metadata(_task("top_urls", state_handles=(_keyed("top_urls"),)))
    assert key_group_mismatch(keyed, SPEC) is None  # 128, as the job
    other = dataclasses.replace(keyed, max_parallelism=64)
    line = key_group_mismatch(other, SPEC)
    assert line == ("savepoint 4 of job j has max parallelism 64, the job 128: its keyed state is in other key "
                    "groups. Give the job max_parallelism=64, or derive a savepoint with tidemark state transform "
                    "--max-parallelism 128")
    changelog_only = dataclasses.replace(other, tasks=(_task("top_urls", changelog_ranges=(
        ChangelogRange("j.changelog", 0, 0, 5),)),))
    assert key_group_mismatch(changelog_only, SPEC) is not None
    positions_only = dataclasses.replace(other, tasks=(_task("minute_counts", source_offsets=(
        SourceOffset("in", 0, 7),), state_handles=(_operator_state("minute_counts", "seen"),)),))
    assert key_group_mismatch(positions_only, SPEC) is None  # nothing keyed: nothing to look up
