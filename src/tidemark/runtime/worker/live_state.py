"""Live state queries on a stage worker: which of its tasks owns a queried key, and the answer
read from that task's keyed state.

Every worker of a job follows the state-queries topic (its :class:`~tidemark.runtime.job.control.ControlPlane`);
the runner answers the :class:`~tidemark.protocol.messages.StateQuery` records of its stage
between micro-batches and on its ticks (:meth:`tidemark.runtime.worker.runner.StageRunner.handle_control`,
under the runner's lock, so no record is half processed): :func:`answer` returns None for a query
of another stage or a key whose key group another worker owns, which that worker answers. So an
answer reflects the owning task's state after the last micro-batch it processed (and the timers
fired since), not a completed checkpoint: it may hold records whose output is not committed yet.

A state is found by the name its descriptor was registered with (a function registers its
states in ``open``), in the default namespace (a function's own state; a window's contents are
not read). The value is JSON: a value, reducing or aggregating state's value, a list state's
list, a map state's map, written as the stage's default encoder writes records
(:func:`tidemark.api.json_encode`); a value JSON cannot hold is answered as the JSON string of its
``repr`` with ``value_repr`` set; one whose JSON is over :data:`MAX_VALUE_BYTES` is answered
``TOO_LARGE`` without it (an answer is one Kafka record). An empty state (a value state holding only its default, an
empty list or map) is an unknown key. Reading goes through the state's handle as the function
does, so TTL applies as it would there (an expired value is not found).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from tidemark.api import json_encode
from tidemark.clock import now_ms
from tidemark.keygroups import KeyGroupRange, assign_to_key_group
from tidemark.protocol.messages import StateAnswer, StateQuery, StateQueryOutcome
from tidemark.state import KeyedStateBackend
from tidemark.state.descriptors import StateKind
from tidemark.types import Epoch, TaskId

_MISSING = object()
MAX_VALUE_BYTES = 512 * 1024  # well under a Kafka record's default limit (1 MB)


class QueriedTask(Protocol):
    """What a query reads of a task (:class:`~tidemark.runtime.worker.task.StageTask`)."""

    task_id: TaskId
    backend: KeyedStateBackend
    keyed: bool

    @property
    def key_groups(self) -> KeyGroupRange: ...


def owning_task(tasks: Sequence[QueriedTask], key: Any) -> QueriedTask | None:
    """The task of ``tasks`` (one worker's tasks of one stage) whose key groups hold ``key``'s,
    None when another worker's task does."""
    if not tasks:
        return None
    key_group = assign_to_key_group(key, tasks[0].backend.max_parallelism)
    return next((task for task in tasks if key_group in task.key_groups), None)


def answer(query: StateQuery, stage: str, tasks: Sequence[QueriedTask], epoch: Epoch) -> StateAnswer | None:
    """This worker's answer to ``query`` (its ``tasks`` of ``stage`` in attempt ``epoch``), None
    when the query is another stage's or another worker's to answer."""
    if query.stage != stage:
        return None
    try:
        key = json.loads(query.key_json)
        task = owning_task(tasks, key)
    except (ValueError, TypeError):  # not a key (the coordinator sends only strings and integers)
        return None
    if task is None:
        return None

    def reply(outcome: StateQueryOutcome, value_json: str | None = None, value_repr: bool = False,
              detail: str = "") -> StateAnswer:
        return StateAnswer(query.job_id, query.request_id, outcome, task.task_id, epoch, now_ms(),
                           value_json, value_repr, detail)

    if not task.keyed:
        return reply(StateQueryOutcome.UNKNOWN_STATE, detail=f"stage {stage!r} has no key, so no keyed state")
    backend = task.backend
    descriptor = backend.registered_descriptor(query.state_name)
    if descriptor is None:
        known = ", ".join(repr(n) for n in backend.registered_states()) or "none"
        return reply(StateQueryOutcome.UNKNOWN_STATE,
                     detail=f"stage {stage!r} has no keyed state {query.state_name!r} (its states: {known})")
    value = read_value(backend, descriptor, key)
    if value is _MISSING:
        return reply(StateQueryOutcome.UNKNOWN_KEY,
                     detail=f"state {query.state_name!r} of stage {stage!r} holds no value for key {key!r}")
    value_json, value_repr = to_json(value)
    size = len(value_json.encode())
    if size > MAX_VALUE_BYTES:
        return reply(StateQueryOutcome.TOO_LARGE, detail=f"the value of key {key!r} in state {query.state_name!r} is "
                     f"{size} bytes of JSON, more than a live answer carries ({MAX_VALUE_BYTES}); read it from a "
                     f"savepoint with tidemark state read")
    return reply(StateQueryOutcome.FOUND, value_json, value_repr)


def read_value(backend: KeyedStateBackend, descriptor: Any, key: Any) -> Any:
    """The value of ``descriptor``'s state for ``key`` in the default namespace, ``_MISSING``
    when empty; the backend's current key is left as it was."""
    previous = backend.get_current_key()
    backend.set_current_key(key)
    try:
        state = backend.get_state(descriptor)
        state.set_current_namespace(None)
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            return _MISSING if state.is_empty() else state.value()
        if kind is StateKind.LIST:
            return state.get() or _MISSING
        if kind is StateKind.MAP:
            return dict(state.items()) or _MISSING
        value = state.get()  # reducing, aggregating: None when empty
        return _MISSING if value is None else value
    finally:
        if previous is not None:
            backend.set_current_key(previous)


def to_json(value: Any) -> tuple[str, bool]:
    """``value`` as JSON text and False, or the JSON string of its ``repr`` and True when JSON
    cannot hold it."""
    try:
        return json_encode(value).decode(), False
    except (TypeError, ValueError):
        return json.dumps(repr(value)), True
