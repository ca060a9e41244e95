"""A small blocking client of the coordinator's operator API (what the CLI and the supervisor use).

Lifecycle: ``CoordinatorClient(url, token)`` keeps one ``requests`` session (pooled keep-alive
connections); every method is one API call with a connect and read timeout of ``timeout_s``,
returns the decoded JSON document, and raises :class:`ApiError` for an HTTP error status (with the
server's message), an unreachable coordinator (``status`` None), or a response that is not JSON.
With ``wait_unavailable_s`` the session's urllib3 ``Retry`` waits about that long while the
coordinator refuses connections or answers 503 (a restart, replaying its log) before it fails;
a request that reached the coordinator and got no answer is never sent twice.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any
from urllib.parse import quote, urlparse

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

DEFAULT_URL = "http://127.0.0.1:9400"
TERMINAL_SAVEPOINT_STATES = frozenset({"COMPLETED", "FAILED", "UNKNOWN"})
RETRY_PAUSE_S = 1.0  # the longest pause between two attempts while the coordinator is unavailable


class ApiError(Exception):
    """The request failed; ``status`` is the HTTP status, or None when there was no answer."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message if status is None else f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


def availability_retry(wait_s: float) -> Retry:
    """Retry refused connections and 503 answers for about ``wait_s`` (pauses up to
    :data:`RETRY_PAUSE_S`, or the server's ``Retry-After``), any method: in both cases the
    coordinator did nothing. Read errors are not retried (the request may have been acted on)."""
    attempts = math.ceil(wait_s / RETRY_PAUSE_S) + 1
    return Retry(total=attempts, connect=attempts, status=attempts, read=0, other=0, redirect=0,
                 status_forcelist=frozenset({503}), allowed_methods=None, backoff_factor=RETRY_PAUSE_S / 2,
                 backoff_max=RETRY_PAUSE_S, respect_retry_after_header=True, raise_on_status=False)


def _reason(exc: requests.RequestException) -> str:
    """The innermost cause of a failed connection, e.g. ``Connection refused``."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        inner = getattr(cause, "reason", None)
        cause = inner if isinstance(inner, BaseException) else (cause.__cause__ or cause.__context__)
    return str(exc)


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
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"
        retry = availability_retry(wait_unavailable_s) if wait_unavailable_s > 0 else Retry(0, read=False)
        for scheme in ("http://", "https://"):
            self.session.mount(scheme, HTTPAdapter(max_retries=retry))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """``method`` ``/api/v1{path}`` with a JSON ``body``; the decoded JSON answer."""
        try:
            response = self.session.request(method, f"{self.url}/api/v1{path}", json=body,
                                            timeout=self.timeout_s, allow_redirects=False)
        except requests.RequestException as exc:
            raise ApiError(None, f"cannot reach the coordinator at {self.url}: {_reason(exc)}") from None
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

    def savepoints(self, job: str) -> Any:
        return self.request("GET", f"/jobs/{_segment(job)}/savepoints")

    def trigger_savepoint(self, job: str, *, stop: bool = False, target: str | None = None) -> Any:
        body: dict[str, Any] = {"stop": stop}
        if target is not None:
            body["target"] = target
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
                savepoint_path: str | None = None) -> Any:
        body = {"checkpoint_id": checkpoint_id, "savepoint_path": savepoint_path,
                "parallelism": parallelism}
        return self.request("POST", f"/jobs/{_segment(job)}/restore", body)

    def submit_run(self, reference: str, *, args: dict[str, Any] | None = None,
                   parallelism: int | None = None, from_checkpoint: int | None = None,
                   from_savepoint: str | None = None, fresh: bool = False, force: bool = False) -> Any:
        """Start a run of the catalog job ``reference`` (``POST /runs``) with the start options of
        ``tidemark jobs run``; its run document."""
        body = {"job": reference, "args": args or {}, "parallelism": parallelism,
                "from_checkpoint": from_checkpoint, "from_savepoint": from_savepoint,
                "fresh": fresh, "force": force}
        return self.request("POST", "/runs", body)

    def runs(self) -> Any:
        return self.request("GET", "/runs")

    def run(self, run_id: str) -> Any:
        return self.request("GET", f"/runs/{_segment(run_id)}")

    def cancel_run(self, run_id: str) -> Any:
        return self.request("DELETE", f"/runs/{_segment(run_id)}")
