"""A small blocking client of the coordinator's operator API (what the CLI and the supervisor use).

Lifecycle: ``CoordinatorClient(url, token)`` keeps one ``httpx2.Client`` (pooled keep-alive
connections); every method is one API call with a timeout of ``timeout_s`` for connecting and for
each read and write, returns the decoded JSON document, and raises :class:`ApiError` for an HTTP
error status (with the server's message), an unreachable coordinator (``status`` None), or a
response that is not JSON. With ``wait_unavailable_s`` the call waits about that long while the
coordinator refuses connections or answers 503 (a restart, replaying its log) before it fails;
a request that reached the coordinator and got no answer is never sent twice.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote, urlparse

import httpx2
import tenacity

from tidemark.admin import DEFAULT_URL
from tidemark.chassis.logs import get_logger
from tidemark.start_request import StartRequest

log = get_logger(__name__)
TERMINAL_SAVEPOINT_STATES = frozenset({"COMPLETED", "FAILED", "UNKNOWN"})
RETRY_PAUSE_S = 1.0  # the longest pause between two attempts while the coordinator is unavailable
# Failures before anything was sent (no connection): sending again cannot repeat an action.
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout)


class ApiError(Exception):
    """The request failed; ``status`` is the HTTP status, or None when there was no answer."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


def unavailable_pause(attempt: int, retry_after: str | None = None) -> float:
    """The pause after failed attempt number ``attempt`` (1, 2, ...) of an unavailable
    coordinator: the server's ``Retry-After`` seconds when it sent them, else half of
    :data:`RETRY_PAUSE_S` after the first attempt and all of it after later ones."""
    if retry_after is not None:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            pass  # an HTTP date: the coordinator sends none, so the default pause
    return RETRY_PAUSE_S / 2 if attempt == 1 else RETRY_PAUSE_S


def _unavailable(response: httpx2.Response) -> bool:
    return response.status_code == 503


def _last_outcome(state: tenacity.RetryCallState) -> Any:
    """The last try's answer, or its error raised."""
    assert state.outcome is not None
    return state.outcome.result()


def _reason(exc: httpx2.RequestError) -> str:
    """The innermost cause of a failed connection, e.g. ``Connection refused``."""
    if isinstance(exc, httpx2.TimeoutException):
        return "timed out"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


class CoordinatorClient:
    """Calls ``/api/v1/`` of one coordinator."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, *,
                 timeout_s: float = 10.0, wait_unavailable_s: float = 0.0) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"coordinator URL must be http(s)://host:port, got {url!r}")
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout_s = timeout_s
        self.wait_unavailable_s = wait_unavailable_s
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.http = httpx2.Client(headers=headers, timeout=timeout_s, follow_redirects=False)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                params: dict[str, str] | None = None) -> Any:
        """``method`` ``/api/v1{path}`` with a JSON ``body`` (and the query ``params``); the decoded JSON answer.

        A refused (or timed-out) connection and a 503 answer are tried again until
        ``wait_unavailable_s`` has passed: in both cases the coordinator did nothing, whatever
        the method. Any other failure (e.g. no answer in time) is final."""
        url = f"{self.url}/api/v1{path}"
        try:
            response = self._retrying()(self.http.request, method, url, json=body, params=params)
        except httpx2.RequestError as exc:
            raise ApiError(None, f"cannot reach the coordinator at {self.url}: {_reason(exc)}") from None
        return self._result(response)

    def _retrying(self) -> tenacity.Retrying:
        """Tries while the coordinator is unavailable (see :meth:`request`), with the pauses of
        :func:`unavailable_pause`, the last one shortened to end ``wait_unavailable_s`` after the
        first try; then the last answer is returned, or the last error raised."""
        wait_s = self.wait_unavailable_s

        def pause(state: tenacity.RetryCallState) -> float:
            response = _last_outcome(state) if state.outcome is not None and not state.outcome.failed else None
            retry_after = None if response is None else response.headers.get("Retry-After")
            return max(0.0, min(unavailable_pause(state.attempt_number, retry_after),
                                wait_s - (state.seconds_since_start or 0.0)))

        def first_retry(state: tenacity.RetryCallState) -> None:
            if state.attempt_number == 1:
                log.info("coordinator not available; retrying", url=self.url, wait_s=wait_s)

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(NOT_SENT) | tenacity.retry_if_result(_unavailable),
            stop=tenacity.stop_after_delay(wait_s), wait=pause, before_sleep=first_retry,
            retry_error_callback=_last_outcome,
        )

    def _result(self, response: httpx2.Response) -> Any:
        if response.status_code >= 400:
            raise ApiError(response.status_code, self._error_message(response.status_code, response.content))
        return self._decode(response.status_code, response.content)

    @staticmethod
    def _decode(status: int, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(status, f"response is not JSON: {raw[:200]!r}") from None

    @staticmethod
    def _error_message(status: int, raw: bytes) -> str:
        try:
            document = json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace").strip()[:500] or f"HTTP {status}"
        if isinstance(document, dict) and isinstance(document.get("error"), str):
            return document["error"]
        return json.dumps(document)[:500]

    # ------------------------------------------------------------------ endpoints

    def jobs(self) -> Any:
        return self.request("GET", "/jobs")

    def history(self, job: str) -> Any:
        return self.request("GET", f"/jobs/{_segment(job)}/checkpoints")

    def retained_checkpoints(self, job: str) -> Any:
        return self.request("GET", f"/jobs/{_segment(job)}/checkpoints/retained")

    def discard_checkpoint(self, job: str, checkpoint_id: int) -> Any:
        return self.request("DELETE", f"/jobs/{_segment(job)}/checkpoints/{_segment(checkpoint_id)}")

    def savepoints(self, job: str) -> Any:
        return self.request("GET", f"/jobs/{_segment(job)}/savepoints")

    def trigger_savepoint(self, job: str, *, stop: bool = False, target: str | None = None,
                          generation: int | None = None) -> Any:
        body: dict[str, Any] = {"stop": stop}
        if target is not None:
            body["target"] = target
        if generation is not None:
            body["generation"] = generation
        return self.request("POST", f"/jobs/{_segment(job)}/savepoints", body)

    def savepoint_status(self, job: str, request_id: str) -> Any:
        return self.request("GET", f"/jobs/{_segment(job)}/savepoints/requests/{_segment(request_id)}")

    def wait_for_savepoint(self, job: str, request_id: str, *, timeout_s: float = 300.0,
                           poll_s: float = 0.5) -> Any:
        """Poll until the request is COMPLETED, FAILED or UNKNOWN; ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.savepoint_status(job, request_id)
            if status.get("status") in TERMINAL_SAVEPOINT_STATES:
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"savepoint request {request_id} still {status.get('status')} after {timeout_s:g}s")
            time.sleep(poll_s)

    def restore(self, job: str, *, parallelism: int, checkpoint_id: int | None = None,
                savepoint_path: str | None = None, newest_seen: int | None = None) -> Any:
        """``newest_seen``: refused with HTTP 409 when a newer checkpoint completed (docs/api.md)."""
        body: dict[str, Any] = {"checkpoint_id": checkpoint_id, "savepoint_path": savepoint_path,
                                "parallelism": parallelism}
        if newest_seen is not None:
            body["newest_seen"] = newest_seen
        return self.request("POST", f"/jobs/{_segment(job)}/restore", body)

    def state_value(self, job: str, stage: str, state: str, key: str, *, key_type: str | None = None) -> Any:
        """A key's value of a named keyed state of a running job, as the worker owning the key
        answers (``key_type``: ``str``, the default, or ``int``, as the stage's ``key_by`` gives keys)."""
        params = {"key": key} if key_type is None else {"key": key, "key_type": key_type}
        return self.request("GET", f"/jobs/{_segment(job)}/stages/{_segment(stage)}/state/{_segment(state)}",
                            params=params)

    def submit_run(self, reference: str, *, args: dict[str, Any] | None = None,
                   parallelism: int | None = None, start: StartRequest = StartRequest()) -> Any:
        """Start a run of the catalog job ``reference`` (``POST /runs``) with the start options of
        ``tidemark jobs run``; its run document."""
        body = {"job": reference, "args": args or {}, "parallelism": parallelism, **start.api_fields()}
        return self.request("POST", "/runs", body)

    def runs(self) -> Any:
        return self.request("GET", "/runs")

    def run(self, run_id: str) -> Any:
        return self.request("GET", f"/runs/{_segment(run_id)}")

    def cancel_run(self, run_id: str) -> Any:
        return self.request("DELETE", f"/runs/{_segment(run_id)}")
