"""The start rules are written once (tidemark.start_request) and every surface checks them there:
the value is valid by construction, and each surface names the options its own way."""

from __future__ import annotations

import dataclasses

import pytest

from tidemark.start_request import StartRequest, StartRuleError, command_line_option


@pytest.mark.parametrize("fields, api, command_line", [
    ({"from_checkpoint": 3, "from_savepoint": "j/savepoints/sp-3"},
     "give at most one of from_checkpoint and from_savepoint",
     "give at most one of --from-checkpoint and --from-savepoint"),
    ({"fresh": True, "from_checkpoint": 3},
     "fresh starts with empty state; it cannot be combined with from_checkpoint or from_savepoint",
     "--fresh starts with empty state; it cannot be combined with --from-checkpoint or --from-savepoint"),
    ({"start_id": "rev-1"}, "start_id only applies with fresh", "--start-id only applies with --fresh"),
    ({"fresh": True, "start_id": "a b"}, "start_id must be 1-128 letters", "--start-id must be 1-128 letters"),
])
def test_a_broken_rule_is_named_in_the_spelling_of_the_surface(fields, api, command_line) -> None:
    with pytest.raises(StartRuleError, match=api):
        StartRequest(**fields)
    with pytest.raises(StartRuleError, match=api):
        StartRequest.of(**fields)
    with pytest.raises(StartRuleError, match=command_line):
        StartRequest.of(spell=command_line_option, **fields)


@pytest.mark.parametrize("start, options", [
    (StartRequest(), []),
    (StartRequest(7, force=True), ["--from-checkpoint", "7", "--force"]),
    (StartRequest(from_savepoint="j/savepoints/sp-2"), ["--from-savepoint", "j/savepoints/sp-2"]),
    (StartRequest(fresh=True, start_id="rev-1"), ["--fresh", "--start-id", "rev-1"]),
    (StartRequest(from_savepoint="j/sp", allow_non_restored_state=True),
     ["--from-savepoint", "j/sp", "--allow-non-restored-state"]),
])
def test_a_start_becomes_the_options_of_jobs_run(start: StartRequest, options: list[str]) -> None:
    assert start.command_line() == options
    assert start.names_source == (start.from_checkpoint is not None or start.from_savepoint is not None)


def test_a_start_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        StartRequest().fresh = True  # type: ignore[misc]


@pytest.mark.parametrize("start", [StartRequest(), StartRequest(7, force=True), StartRequest(from_savepoint="j/sp"),
                                   StartRequest(fresh=True, force=True),
                                   StartRequest(from_savepoint="j/sp", allow_non_restored_state=True)])
def test_a_start_goes_through_its_api_fields_and_back(start: StartRequest) -> None:
    fields = start.api_fields()
    assert set(fields) == {"from_checkpoint", "from_savepoint", "fresh", "force", "allow_non_restored_state"}
    assert StartRequest.from_api_fields(fields) == start


def test_a_run_record_written_before_a_field_existed_takes_its_default() -> None:
    old = {"from_checkpoint": "4", "from_savepoint": None, "fresh": False, "force": True}
    assert StartRequest.from_api_fields(old) == StartRequest(4, force=True)
