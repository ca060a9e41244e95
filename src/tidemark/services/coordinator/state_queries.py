"""Live state queries through the coordinator: ``GET /api/v1/jobs/{job}/stages/{stage}/state/{name}?key=...``.

The coordinator never reads a job's state itself: it writes a
:class:`~tidemark.protocol.messages.StateQuery` to the state-queries topic, every worker of the job
reads it between two micro-batches, and the one whose task owns the key's key group writes a
:class:`~tidemark.protocol.messages.StateAnswer` to the state-answers topic
(:mod:`tidemark.runtime.worker.live_state`), which this coordinator follows. A request waits on a
future under its request id, so any number may be in flight; an answer that arrives after its
request gave up, one replayed at the coordinator's start, and one from another attempt than the
registered one (a worker of the attempt before, not yet released during a failover) are dropped.

Lifecycle: ``StateQueries(app)`` while the service is built (it follows the state-answers topic
through :meth:`ServiceApp.follow_log`) -> :meth:`ask` per request, on the service's event loop.

What a reply reflects: the owning task's state after the last micro-batch it processed, not
necessarily a completed checkpoint (its output may not be committed yet; after a failover the
state goes back to the restored checkpoint). The HTTP statuses (:func:`check_queryable`,
:func:`answer_status`): 404 an unknown job, stage, state or key; 409 a job with no running
attempt, or no worker answering within :data:`ANSWER_TIMEOUT_S` (the owning task restores, the
job starts or fails over, or the query could not be written); 413 a value too large for an answer;
never 5xx for any of these.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.chassis.logs import get_logger
from tidemark.checkpoint.job_state import JobState
from tidemark.protocol.messages import JobRegistration, StateAnswer, StateQuery, StateQueryOutcome
from tidemark.types import Epoch

log = get_logger(__name__)
ANSWER_TIMEOUT_S = 5.0
AS_OF = "the owning task's state after its last processed micro-batch, not necessarily a completed checkpoint"


class QueryRefused(Exception):
    """The query cannot be answered: HTTP ``status`` with ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def stages_of(registration: JobRegistration | None) -> list[str]:
    """The stages of a registered attempt (each stage is one operator of the registration's tasks)."""
    return sorted({task.operator_id for task in registration.tasks}) if registration is not None else []


def check_queryable(job: str, state: JobState, registration: JobRegistration | None, stage: str) -> None:
    """Raise :class:`QueryRefused` unless the job runs an attempt with tasks and ``stage`` is one of its stages."""
    if state is not JobState.RUNNING or registration is None or not registration.tasks:
        why = "its next attempt restores" if state is JobState.RESTARTING else "no running attempt holds its state"
        raise QueryRefused(409, f"job {job!r} is {state.value}: {why}; retry once it runs")
    stages = stages_of(registration)
    if stage not in stages:
        raise QueryRefused(404, f"job {job!r} has no stage {stage!r} (its stages: {', '.join(stages)})")


def answer_status(answer: StateAnswer | None) -> int:
    """The HTTP status of a query's answer (None: no worker answered in time)."""
    if answer is None:
        return 409
    return {StateQueryOutcome.FOUND: 200, StateQueryOutcome.TOO_LARGE: 413}.get(answer.outcome, 404)


def no_answer_message(job: str, stage: str) -> str:
    return (f"no worker of stage {stage!r} of job {job!r} answered within {ANSWER_TIMEOUT_S:g} s: the task "
            f"owning the key restores, the job is starting, failing over or not running, or the broker is "
            f"out of reach; retry")


def answer_document(query: StateQuery, key: Any, answer: StateAnswer) -> dict[str, Any]:
    """The 200 document of a found value."""
    assert answer.value_json is not None
    return {"job": query.job_id, "stage": query.stage, "state": query.state_name, "key": key,
            "value": json.loads(answer.value_json), "value_repr": answer.value_repr, "task": answer.task_id,
            "epoch": answer.epoch, "answered_at": answer.answered_at, "as_of": AS_OF}


class StateQueries:
    """The queries in flight of one coordinator (see the module)."""

    def __init__(self, app: ServiceApp, *, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self._pending: dict[str, tuple[asyncio.Future[StateAnswer], Epoch]] = {}
        app.follow_log([app.topics.state_answers], self.on_answer, self._caught_up)

    async def _caught_up(self) -> None:
        """Nothing to rebuild: answers are only ever waited for live."""

    async def on_answer(self, message: Any, raw: RawRecord, replayed: bool) -> None:
        if replayed or not isinstance(message, StateAnswer):
            return
        waiting, epoch = self._pending.get(message.request_id, (None, None))
        if waiting is not None and message.epoch == epoch and not waiting.done():
            waiting.set_result(message)

    async def ask(self, query: StateQuery, epoch: Epoch) -> StateAnswer | None:
        """Publish ``query`` and wait for the answer of a worker of attempt ``epoch`` (the
        registered one); None when none came within the timeout."""
        waiting: asyncio.Future[StateAnswer] = asyncio.get_running_loop().create_future()
        self._pending[query.request_id] = (waiting, epoch)
        try:
            async with asyncio.timeout(self.timeout_s):  # the write too: it waits through a broker outage
                await self.app.publish(self.app.topics.state_queries, query, query.job_id.encode())
                return await waiting
        except TimeoutError:
            return None
        except Exception:  # the query could not be written: nobody answers it
            log.warning("live state query not written", job=query.job_id, request_id=query.request_id, exc_info=True)
            return None
        finally:
            self._pending.pop(query.request_id, None)

    @property
    def in_flight(self) -> int:
        return len(self._pending)
