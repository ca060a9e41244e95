"""The one HTTP server of a job's processes, the supervisor and each stage worker: ``/livez``,
``/readyz`` and ``/metrics`` (Prometheus text of the process's registry), on a daemon thread.

Lifecycle: ``serve_health(host, port, ready)`` starts the server and returns it; it lives as long
as the process (``shutdown()`` stops it). ``ready`` is called per ``/readyz`` request (supervisor:
an attempt is registered and running; stage worker: its streaming query has started). Services
do not use this module: they serve the same paths from their Faust web server
(:mod:`tidemark.chassis.app`).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def serve_health(host: str, port: int, ready: Callable[[], bool]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.partition("?")[0]
            if path == "/livez":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                ok = ready()
                self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
            elif path == "/metrics":
                self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet access log
            return

    server = (_Server6 if ":" in host else _Server)((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    return server
