"""The operator API client over real HTTP: errors, the bearer token, and waiting while the
coordinator is unavailable (503 or refused connections) without ever sending a request twice
that may have been acted on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.processes import free_port


class _Coordinator:
    """A real HTTP server answering from a script: one (status, body, delay_s[, headers]) per request."""

    def __init__(self, answers: list[tuple], port: int = 0) -> None:
        self.answers = answers
        self.seen: list[tuple[str, str, str | None, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
                status, document, delay_s, *headers = outer.answers.pop(0) if outer.answers else (200, {}, 0.0)
                time.sleep(delay_s)
                raw = json.dumps(document).encode()
                self.send_response(status)
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def coordinator() -> Iterator[_Coordinator]:
    server = _Coordinator([])
    yield server
    server.close()


def test_answers_errors_and_the_token(coordinator) -> None:
    coordinator.answers += [(200, {"jobs": []}, 0.0), (400, {"error": "stop must be true or false", "status": 400}, 0.0)]
    client = CoordinatorClient(coordinator.url + "/", "s3cret-token-0123456789")
    assert client.jobs() == {"jobs": []}
    with pytest.raises(ApiError) as caught:
        client.trigger_savepoint("a b", stop=True)
    assert (caught.value.status, caught.value.message) == (400, "stop must be true or false")
    assert coordinator.seen[0][:3] == ("GET", "/api/v1/jobs", "Bearer s3cret-token-0123456789")
    assert coordinator.seen[1][1] == "/api/v1/jobs/a%20b/savepoints" and json.loads(coordinator.seen[1][3]) == {"stop": True}


def test_without_waiting_a_503_fails_at_once(coordinator) -> None:
    coordinator.answers.append((503, {"error": "replaying", "status": 503}, 0.0))
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(coordinator.url).jobs()
    assert (caught.value.status, caught.value.message, len(coordinator.seen)) == (503, "replaying", 1)


def test_waiting_rides_out_503_answers_also_for_posts(coordinator) -> None:
    coordinator.answers += [(503, {"error": "replaying"}, 0.0)] * 2 + [(202, {"epoch": 4}, 0.0)]
    client = CoordinatorClient(coordinator.url, wait_unavailable_s=10)
    assert client.restore("j", parallelism=2, checkpoint_id=7) == {"epoch": 4}
    assert [request[0] for request in coordinator.seen] == ["POST"] * 3


def test_waiting_gives_up_with_the_last_answer(coordinator) -> None:
    coordinator.answers += [(503, {"error": "replaying"}, 0.0)] * 10
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(coordinator.url, wait_unavailable_s=0.5).jobs()
    assert caught.value.status == 503 and time.monotonic() - started < 5


def test_waiting_rides_out_refused_connections() -> None:
    port = free_port()
    started: list[_Coordinator] = []
    timer = threading.Timer(0.5, lambda: started.append(_Coordinator([(200, {"jobs": [1]}, 0.0)], port)))
    timer.start()
    try:
        assert CoordinatorClient(f"http://127.0.0.1:{port}", wait_unavailable_s=20).jobs() == {"jobs": [1]}
    finally:
        timer.join()
        for server in started:
            server.close()


def test_a_request_without_an_answer_is_not_sent_again(coordinator) -> None:
    coordinator.answers.append((202, {}, 0.8))
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(coordinator.url, timeout_s=0.2, wait_unavailable_s=10).restore("j", parallelism=1,
                                                                                          checkpoint_id=1)
    assert caught.value.status is None and "timed out" in caught.value.message
    time.sleep(0.8)
    assert len(coordinator.seen) == 1


def test_waiting_takes_the_servers_retry_after_but_not_past_the_wait(coordinator) -> None:
    coordinator.answers += [(503, {"error": "replaying"}, 0.0, {"Retry-After": "0"}),
                            (503, {"error": "replaying"}, 0.0, {"Retry-After": "30"})] + [(503, {"error": "replaying"}, 0.0)] * 5
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(coordinator.url, wait_unavailable_s=1).jobs()
    elapsed = time.monotonic() - started
    assert caught.value.status == 503 and 0.9 < elapsed < 3 and len(coordinator.seen) == 3


def test_without_waiting_a_refused_connection_fails_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(url).jobs()
    assert caught.value.status is None and "Connection refused" in caught.value.message
    assert time.monotonic() - started < 2


def test_a_get_without_an_answer_is_not_sent_again_either(coordinator) -> None:
    coordinator.answers.append((200, {"jobs": []}, 0.8))
    with pytest.raises(ApiError) as caught:
        CoordinatorClient(coordinator.url, timeout_s=0.2, wait_unavailable_s=10).jobs()
    assert caught.value.status is None and "timed out" in caught.value.message
    time.sleep(0.8)
    assert len(coordinator.seen) == 1
