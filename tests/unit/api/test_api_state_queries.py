"""The live state query endpoint's pure parts (:mod:`tidemark.services.coordinator.state_queries`,
:func:`tidemark.admin.request_bodies.parse_state_key`): when a query is asked at all, the HTTP
status of each answer, the document of a found value, and the key parameters."""

from __future__ import annotations

import json

import pytest

from tidemark.admin.request_bodies import BadRequest, parse_state_key, parse_state_segment
from tidemark.checkpoint import plan_assignments
from tidemark.checkpoint.job_state import JobState
from tidemark.protocol.messages import JobRegistration, StateAnswer, StateQuery, StateQueryOutcome
from tidemark.services.coordinator.state_queries import (
    AS_OF,
    QueryRefused,
    answer_document,
    answer_status,
    check_queryable,
    no_answer_message,
    stages_of,
)
from tidemark.types import CheckpointingMode, Epoch, JobId, OperatorId, TaskId

JOB = JobId("counts")
TASKS = plan_assignments((OperatorId("count_hits"), OperatorId("top_urls")), 2, 128)
RUNNING = JobRegistration(JOB, Epoch(2), CheckpointingMode.EXACTLY_ONCE, 128, TASKS, (), 0)


def refusal(state: JobState, registration: JobRegistration | None, stage: str = "count_hits") -> QueryRefused:
    with pytest.raises(QueryRefused) as caught:
        check_queryable(JOB, state, registration, stage)
    return caught.value


def test_a_running_job_is_asked_about_its_stages_only():
    assert stages_of(RUNNING) == ["count_hits", "top_urls"] and stages_of(None) == []
    check_queryable(JOB, JobState.RUNNING, RUNNING, "top_urls")
    unknown = refusal(JobState.RUNNING, RUNNING, "nope")
    assert unknown.status == 404 and "count_hits, top_urls" in unknown.message


@pytest.mark.parametrize("state", [s for s in JobState if s is not JobState.RUNNING])
def test_a_job_without_a_running_attempt_is_a_conflict(state):
    refused = refusal(state, RUNNING)
    assert refused.status == 409 and state.value in refused.message
    if state is JobState.RESTARTING:
        assert "restores" in refused.message


def test_an_attempt_announced_without_tasks_is_a_conflict():
    announced = JobRegistration(JOB, Epoch(3), CheckpointingMode.EXACTLY_ONCE, 128, (), (), 0)
    assert refusal(JobState.RUNNING, announced).status == 409
    assert refusal(JobState.RUNNING, None).status == 409


def answer_of(outcome: StateQueryOutcome, value_json: str | None = None, value_repr: bool = False) -> StateAnswer:
    return StateAnswer(JOB, "r1", outcome, TaskId("count_hits#1"), Epoch(2), 1234, value_json, value_repr)


def test_statuses_are_never_5xx():
    assert answer_status(answer_of(StateQueryOutcome.FOUND, "3")) == 200
    assert answer_status(answer_of(StateQueryOutcome.UNKNOWN_KEY)) == 404
    assert answer_status(answer_of(StateQueryOutcome.UNKNOWN_STATE)) == 404
    assert answer_status(answer_of(StateQueryOutcome.TOO_LARGE)) == 413
    assert {answer_status(answer_of(outcome)) for outcome in StateQueryOutcome} < set(range(200, 500))
    assert answer_status(None) == 409
    assert "restores" in no_answer_message(JOB, "count_hits")


def test_the_document_of_a_found_value_says_what_it_reflects():
    query = StateQuery(JOB, "r1", "count_hits", "hits", json.dumps("/a"), 1000)
    document = answer_document(query, "/a", answer_of(StateQueryOutcome.FOUND, '{"n":[1,2]}'))
    assert document == {"job": JOB, "stage": "count_hits", "state": "hits", "key": "/a", "value": {"n": [1, 2]},
                        "value_repr": False, "task": "count_hits#1", "epoch": 2, "answered_at": 1234, "as_of": AS_OF}
    shown = answer_document(query, "/a", answer_of(StateQueryOutcome.FOUND, '"<Thing>"', True))
    assert shown["value"] == "<Thing>" and shown["value_repr"] is True


def test_keys_are_strings_unless_key_type_says_int():
    assert parse_state_key("/a b", None) == "/a b"
    assert parse_state_key("42", None) == "42"
    assert parse_state_key("42", "str") == "42"
    assert parse_state_key("-42", "int") == -42
    for key, key_type in ((None, None), ("4x", "int"), ("1", "float"), ("x" * 5000, None)):
        with pytest.raises(BadRequest):
            parse_state_key(key, key_type)
    with pytest.raises(BadRequest):
        parse_state_segment("", "stage")
    assert parse_state_segment("hits", "state") == "hits"
