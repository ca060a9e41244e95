"""The coordinator's operator HTTP API under ``/api/v1/`` (reference: docs/api.md).

Lifecycle: :func:`install_api` once while the service is built, before ``ServiceApp.run``; the
views then serve on the service's HTTP port (next to the unauthenticated ``/livez``, ``/openapi.json``,
``/readyz`` and ``/metrics``) for the life of the process, on the event loop that also runs the
:class:`CoordinatorEdge`, so a view reads and drives the coordinators without locks.

Contract of every view: the service chassis's HTTP edge (:mod:`tidemark.chassis.http_edge`) has
already checked the bearer token (401), the body size (413) and the body time (408); until the edge has
caught up with its topics the answer is 503. Errors are JSON ``{"error": message, "status":
code}``: 400 malformed request (body, field, job id, or a path that is not a safe relative path,
resolves outside checkpoint storage or is a savepoint target outside the job's savepoint area),
401, 403 a job reference outside the job catalog, 404 unknown job / checkpoint / request / run
/ stage, state or key of a live state query (:mod:`.state_queries`),
409 the job already runs / the run already exited / a live state query that no running task
answers (the job is not running, or the owning task restores) / a checkpoint newer than a restore's
``newest_seen`` completed / a savepoint target taken by a file, a symlink or a savepoint, 413 a
live state value too large for an answer, 422
a well-formed request that cannot be carried out, 501 runs with ``TIDEMARK_JOBS__LAUNCHER=none``,
503 not caught up, 500 a bug (logged).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import json
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import yaml
from aiohttp import web
from faust.web import Request, Response, View

from tidemark.checkpoint import CheckpointCoordinator, CheckpointStatus, NewerCheckpointCompleted, RestoreRequest
from tidemark.checkpoint.job_state import JobState
from tidemark.checkpoint_store import catalog
from tidemark.checkpoint_store.layout import metadata_path
from tidemark.clock import now_ms
from tidemark.admin.documents import (
    checkpoint_detail_document,
    error_document,
    history_document,
    job_document,
    metadata_document,
    restore_document,
    savepoint_request_document,
)
from tidemark.admin.request_bodies import (
    BadRequest,
    RestoreBody,
    RunBody,
    SavepointBody,
    parse_checkpoint_id,
    parse_job_id,
    parse_request_id,
    parse_run_id,
    parse_state_key,
    parse_state_segment,
)
from tidemark.protocol.messages import SavepointRequest, StateQuery
from tidemark.api import load_job
from tidemark.chassis.app import ServiceApp
from tidemark.chassis.logs import get_logger
from tidemark.services.coordinator.edge import CoordinatorEdge
from tidemark.services.coordinator.runs import JobRun, LaunchRequest, LocalLauncher, run_document
from tidemark.services.coordinator.state_queries import (
    QueryRefused,
    StateQueries,
    answer_document,
    answer_status,
    check_queryable,
    no_answer_message,
)
from tidemark.storage import open_storage
from tidemark.storage.base import CheckpointStorage, InvalidStoragePath, TargetConflict
from tidemark.types import CheckpointId, CheckpointType, JobId

log = get_logger(__name__)
API_PREFIX = "/api/v1"
OPENAPI_PATH = "/openapi.json"
DISCARD_WAIT_S = 30.0  # how long a discard waits for the checkpoint-store to carry it out
_T = TypeVar("_T")
NO_LAUNCHER = ("this coordinator does not run jobs (TIDEMARK_JOBS__LAUNCHER=none); in Kubernetes a job "
               "runs as the Helm chart's worker workload (worker.job in the chart's values)")


class ApiError(Exception):
    """An answer other than success: HTTP ``status`` with ``message`` (and extra headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class OperatorApi:
    """What the views answer, over one edge and the deployment's checkpoint storage."""

    def __init__(self, edge: CoordinatorEdge, storage: CheckpointStorage, token: str | None, *,
                 queries: StateQueries, launcher: LocalLauncher | None = None,
                 job_catalog: tuple[str, ...] = ()) -> None:
        self.edge = edge
        self.storage = storage
        self.launcher = launcher
        self.job_catalog = job_catalog
        self.queries = queries

    def admit(self, request: Request) -> None:
        if not self.edge.live:
            raise ApiError(503, "the coordinator is still replaying its topics; retry shortly")

    async def _in_storage(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    def coordinator(self, job: JobId) -> CheckpointCoordinator:
        found = self.edge.coordinators.get(job)
        if found is None:
            raise ApiError(404, f"unknown job {job!r}")
        return found

    async def _require_known(self, job: JobId) -> None:
        if job not in self.edge.coordinators and not await self._in_storage(
            catalog.job_in_storage, self.storage, job
        ):
            raise ApiError(404, f"unknown job {job!r}")

    # ------------------------------------------------------------------ reads

    def jobs(self) -> dict[str, Any]:
        return {"jobs": [job_document(j, c) for j, c in sorted(self.edge.coordinators.items())]}

    def history(self, job: JobId) -> dict[str, Any]:
        return history_document(job, self.coordinator(job).stats())

    def checkpoint(self, job: JobId, checkpoint_id: CheckpointId) -> dict[str, Any]:
        history = self.coordinator(job).stats().history
        entry = next((e for e in history if e.checkpoint_id == checkpoint_id), None)
        if entry is None:
            raise ApiError(404, f"job {job!r} has no checkpoint {checkpoint_id} in its history "
                                f"(the last {len(history)} checkpoints and savepoints)")
        return checkpoint_detail_document(job, entry)

    async def retained(self, job: JobId, *, savepoints: bool) -> dict[str, Any]:
        await self._require_known(job)
        listing = await self._in_storage(
            lambda: catalog.list_retained(self.storage, job, savepoints=savepoints))
        key = "savepoints" if savepoints else "checkpoints"
        return {"job": job, key: [metadata_document(e.path, e.metadata) for e in listing.entries],
                "unreadable": list(listing.unreadable)}

    async def savepoint_status(self, job: JobId, request_id: str) -> dict[str, Any]:
        coordinator = self.coordinator(job)
        request = self.edge.savepoint_requests.get(request_id)
        if request is None or request.job_id != job:
            raise ApiError(404, f"job {job!r} has no savepoint request {request_id!r}")
        savepoint_id = coordinator.savepoint_id(request_id)
        if savepoint_id is None:
            failure = coordinator.savepoint_failure(request_id)
            status = "PENDING" if failure is None else CheckpointStatus.FAILED.value
            return savepoint_request_document(request, None, status, None, None, failure_reason=failure)
        entry = next((e for e in coordinator.stats().history if e.checkpoint_id == savepoint_id), None)
        if entry is not None:
            return savepoint_request_document(
                request, savepoint_id, entry.status.value, entry, entry.metadata_path)
        path = metadata_path(job, savepoint_id, CheckpointType.SAVEPOINT)
        stored = await self._in_storage(self.storage.exists, path)
        status = CheckpointStatus.COMPLETED.value if stored else "UNKNOWN"
        return savepoint_request_document(request, savepoint_id, status, None, path if stored else None)

    async def query_state(self, job: JobId, stage: str, state_name: str, key: str | int) -> dict[str, Any]:
        """The value of ``key`` in state ``state_name`` of ``stage``, as the worker owning the key
        answers (:mod:`.state_queries`)."""
        coordinator = self.coordinator(job)
        try:
            check_queryable(job, coordinator.status.state, coordinator.registration, stage)
        except QueryRefused as exc:
            raise ApiError(exc.status, exc.message) from None
        registration = coordinator.registration
        assert registration is not None  # check_queryable
        query = StateQuery(job, uuid.uuid4().hex, stage, state_name, json.dumps(key), now_ms())
        answer = await self.queries.ask(query, registration.epoch)
        status = answer_status(answer)
        if answer is None:
            raise ApiError(status, no_answer_message(job, stage))
        if status != 200:
            raise ApiError(status, answer.detail)
        return answer_document(query, key, answer)

    # ------------------------------------------------------------------ requests

    async def trigger_savepoint(self, job: JobId, body: SavepointBody) -> dict[str, Any]:
        self.coordinator(job)
        if body.target is not None:  # the check a worker makes again before it writes there
            await self._in_storage(catalog.check_savepoint_target, self.storage, job, body.target)
        request = SavepointRequest(job_id=job, request_id=uuid.uuid4().hex, stop=body.stop,
                                   requested_at=now_ms(), target_location=body.target, generation=body.generation)
        await self.edge.request_savepoint(request)
        log.info("savepoint requested", job=job, request_id=request.request_id, stop=body.stop)
        return savepoint_request_document(request, None, "PENDING", None, None)

    async def restore(self, job: JobId, body: RestoreBody) -> dict[str, Any]:
        source = await self._in_storage(catalog.resolve_restore_source, self.storage, job,
                                        body.checkpoint_id, body.metadata_path)
        try:
            request = RestoreRequest(uuid.uuid4().hex, source.metadata, source.path,
                                     body.parallelism, now_ms(), newest_seen=body.newest_seen)
        except ValueError as exc:
            raise ApiError(422, str(exc)) from None
        try:
            command = await self.edge.request_restore(request)
        except NewerCheckpointCompleted as exc:
            raise ApiError(409, str(exc)) from None
        log.info("restore requested", job=job, restore_id=command.restore_id,
                 checkpoint_id=command.checkpoint_id, parallelism=command.parallelism)
        return restore_document(command)

    async def discard(self, job: JobId, checkpoint_id: CheckpointId) -> dict[str, Any]:
        """Have the checkpoint-store discard a retained checkpoint or savepoint of a job that is
        not running (the recovery from a corrupted newest checkpoint, docs/operations.md); the
        answer comes once the coordinator folded the discard, with the newest one left."""
        coordinator = self.coordinator(job)
        state = coordinator.status.state
        if state in (JobState.RUNNING, JobState.RESTARTING):
            raise ApiError(409, f"job {job!r} is {state.value}; stop it before discarding its checkpoints")
        if checkpoint_id in coordinator.discarded_by_request:
            raise ApiError(404, f"checkpoint {checkpoint_id} of job {job!r} is discarded already")
        held = await self._in_storage(catalog.find_by_id, self.storage, job, checkpoint_id)
        completed = coordinator.last_completed
        if held is None and (completed is None or completed.checkpoint_id != checkpoint_id):
            raise ApiError(404, f"job {job!r} has no retained checkpoint or savepoint {checkpoint_id}")
        if not await self.edge.request_discard(job, checkpoint_id, DISCARD_WAIT_S):
            raise ApiError(504, f"the checkpoint-store did not discard checkpoint {checkpoint_id} within "
                                f"{DISCARD_WAIT_S:g} s; is it running? The request stays queued for it")
        log.warning("checkpoint discarded by request", job=job, checkpoint_id=checkpoint_id)
        newest = coordinator.last_completed
        return {"job": job, "discarded": checkpoint_id,
                "newest_completed": None if newest is None else newest.checkpoint_id}

    # ------------------------------------------------------------------ runs

    def require_launcher(self) -> LocalLauncher:
        if self.launcher is None:
            raise ApiError(501, NO_LAUNCHER)
        return self.launcher

    def _run(self, run_id: str) -> JobRun:
        run = self.require_launcher().get(run_id)
        if run is None:
            raise ApiError(404, f"unknown run {run_id!r}")
        return run

    def runs(self) -> dict[str, Any]:
        return {"runs": [run_document(r) for r in self.require_launcher().list()]}

    def run(self, run_id: str) -> dict[str, Any]:
        return run_document(self._run(run_id))

    async def submit_run(self, body: RunBody) -> dict[str, Any]:
        """Check the reference, load the job with the arguments, check the restore source, start
        the run (``tidemark jobs run``) and answer its document."""
        launcher = self.require_launcher()
        if body.job not in self.job_catalog:
            raise ApiError(403, f"job {body.job!r} is not in this coordinator's job catalog "
                                f"(TIDEMARK_JOBS__CATALOG): {', '.join(self.job_catalog)}")
        try:
            spec = load_job(body.job, body.args)
        except Exception as exc:  # JobSpecError, or what the job function raises on these args
            raise ApiError(422, f"job {body.job} does not load with these args: {exc}") from None
        try:
            job = parse_job_id(spec.job_id)
        except BadRequest as exc:
            raise ApiError(422, f"job {body.job} has an unusable job id: {exc}") from None
        parallelism = body.parallelism or spec.parallelism
        if parallelism > spec.max_parallelism:
            raise ApiError(422, f"parallelism {parallelism} is above the job's max parallelism {spec.max_parallelism}")
        if body.from_checkpoint is not None or body.metadata_path is not None:
            source = await self._in_storage(catalog.resolve_restore_source, self.storage, job,
                                            body.from_checkpoint, body.metadata_path)
            if parallelism > source.metadata.max_parallelism:
                raise ApiError(422, f"parallelism {parallelism} is above the max parallelism "
                                    f"{source.metadata.max_parallelism} of {source.path}")
        running = launcher.running_for(job)  # no await from here to start: two requests cannot both pass
        if running is not None:
            raise ApiError(409, f"job {job!r} already runs as run {running.run_id} (pid {running.pid}); "
                                f"cancel it first")
        run = launcher.start(LaunchRequest(body.job, body.args, job, parallelism, body.start))
        return run_document(run)

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        if not run.running:
            code = "an unknown code (re-adopted)" if run.exit_code is None else f"code {run.exit_code}"
            raise ApiError(409, f"run {run_id} already exited with {code}")
        self.require_launcher().cancel(run)
        return run_document(run)


# ---------------------------------------------------------------------- views


class _ApiView(View):
    """Admits the request, then maps every failure to a JSON error."""

    api: ClassVar[OperatorApi]

    async def dispatch(self, request: Any) -> Any:
        try:
            self.api.admit(request)
            return await super().dispatch(request)
        except ApiError as exc:
            return self._error(exc.status, exc.message, exc.headers)
        except TargetConflict as exc:  # before InvalidStoragePath, its base
            return self._error(409, str(exc))
        except (BadRequest, InvalidStoragePath) as exc:
            return self._error(400, str(exc))
        except catalog.RestoreSourceNotFound as exc:
            return self._error(404, str(exc))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):  # a path naming no _metadata
            return self._error(404, "no _metadata file at that path")
        except catalog.UnusableRestoreSource as exc:
            return self._error(422, str(exc))
        except web.HTTPException as exc:  # raised by aiohttp itself, e.g. a body over its limit
            return self._error(exc.status, exc.reason)
        except Exception:
            log.exception("operator API request failed", path=str(request.path))
            return self._error(500, "internal error; see the coordinator's log")

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        return self.json(error_document(status, message), status=status, headers=headers)

    async def body(self, request: Any) -> bytes:
        """The request body, at most aiohttp's ``client_max_size`` (1 MiB; else 413)."""
        return bytes(await request.read())


class JobsView(_ApiView):
    async def get(self, request: Request) -> Response:
        return self.json(self.api.jobs())


class CheckpointHistoryView(_ApiView):
    async def get(self, request: Request, job: str) -> Response:
        return self.json(self.api.history(parse_job_id(job)))


class CheckpointView(_ApiView):
    async def get(self, request: Request, job: str, checkpoint_id: str) -> Response:
        return self.json(self.api.checkpoint(parse_job_id(job), parse_checkpoint_id(checkpoint_id)))

    async def delete(self, request: Request, job: str, checkpoint_id: str) -> Response:
        return self.json(await self.api.discard(parse_job_id(job), parse_checkpoint_id(checkpoint_id)))


class RetainedCheckpointsView(_ApiView):
    async def get(self, request: Request, job: str) -> Response:
        return self.json(await self.api.retained(parse_job_id(job), savepoints=False))


class SavepointsView(_ApiView):
    async def get(self, request: Request, job: str) -> Response:
        return self.json(await self.api.retained(parse_job_id(job), savepoints=True))

    async def post(self, request: Request, job: str) -> Response:
        job_id = parse_job_id(job)
        body = SavepointBody.parse(await self.body(request))
        return self.json(await self.api.trigger_savepoint(job_id, body), status=202)


class SavepointRequestView(_ApiView):
    async def get(self, request: Request, job: str, request_id: str) -> Response:
        job_id, rid = parse_job_id(job), parse_request_id(request_id)
        return self.json(await self.api.savepoint_status(job_id, rid))


class RestoreView(_ApiView):
    async def post(self, request: Request, job: str) -> Response:
        job_id = parse_job_id(job)
        body = RestoreBody.parse(await self.body(request))
        return self.json(await self.api.restore(job_id, body), status=202)


class StateView(_ApiView):
    async def get(self, request: Request, job: str, stage: str, name: str) -> Response:
        job_id = parse_job_id(job)
        stage, name = parse_state_segment(stage, "stage"), parse_state_segment(name, "state")
        key = parse_state_key(request.query.get("key"), request.query.get("key_type"))
        return self.json(await self.api.query_state(job_id, stage, name, key))


class RunsView(_ApiView):
    async def get(self, request: Request) -> Response:
        return self.json(self.api.runs())

    async def post(self, request: Request) -> Response:
        self.api.require_launcher()
        body = RunBody.parse(await self.body(request))
        return self.json(await self.api.submit_run(body), status=202)


class RunView(_ApiView):
    async def get(self, request: Request, run_id: str) -> Response:
        return self.json(self.api.run(parse_run_id(run_id)))

    async def delete(self, request: Request, run_id: str) -> Response:
        return self.json(self.api.cancel_run(parse_run_id(run_id)), status=202)


ROUTES: tuple[tuple[str, type[_ApiView]], ...] = (
    ("/jobs", JobsView),
    ("/jobs/{job}/checkpoints", CheckpointHistoryView),
    ("/jobs/{job}/checkpoints/retained", RetainedCheckpointsView),
    ("/jobs/{job}/checkpoints/{checkpoint_id}", CheckpointView),  # after retained: first match wins
    ("/jobs/{job}/savepoints", SavepointsView),
    ("/jobs/{job}/savepoints/requests/{request_id}", SavepointRequestView),
    ("/jobs/{job}/restore", RestoreView),
    ("/jobs/{job}/stages/{stage}/state/{name}", StateView),
    ("/runs", RunsView),
    ("/runs/{run_id}", RunView),
)


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI description of this port (``openapi.yaml`` beside this module)."""
    text = importlib.resources.files(__package__).joinpath("openapi.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def install_api(app: ServiceApp, edge: CoordinatorEdge, token: str | None, storage_url: str, *,
                queries: StateQueries, launcher: LocalLauncher | None = None,
                job_catalog: tuple[str, ...] = ()) -> OperatorApi:
    """Serve the operator API on ``app``'s HTTP port; returns the object behind the views.
    Without a ``launcher`` the ``/runs`` endpoints answer 501; ``queries`` carries the live state
    queries to the jobs' workers."""
    api = OperatorApi(edge, open_storage(storage_url), token, launcher=launcher, job_catalog=job_catalog,
                      queries=queries)
    for path, view in ROUTES:
        bound = type(view.__name__, (view,), {"api": api, "__module__": __name__})
        app.faust.page(f"{API_PREFIX}{path}", name=f"api-{view.__name__}")(bound)

    @app.faust.page(OPENAPI_PATH, name="api-openapi")
    async def openapi(web: Any, request: Any) -> Any:  # public (http_edge.PUBLIC_PATHS): it holds no data
        return web.json(openapi_document())

    return api
