"""The one HTTP server of a job's processes, the supervisor and each stage worker: ``/livez``,
``/readyz`` and ``/metrics`` (Prometheus text of the process's registry), on a daemon thread.

Lifecycle: ``serve_health(host, port, ready)`` starts the server and returns it; it lives as long
as the process (``shutdown()`` stops it). ``ready`` is called per ``/readyz`` request (supervisor:
an attempt is registered and running; stage worker: its streaming query has started). Services
do not use this module: they serve the same paths from their Faust web server
(:mod:`tidemark.chassis.app`).

A process that starts worker processes (the supervisor with local workers, a worker host) passes
``targets``: the metrics port of each of its worker processes that runs now, by process name.
``/targets`` serves them in the format of Prometheus's HTTP service discovery
(``http_sd_configs``), one target group per process at the host name the request was sent to
(the workers listen on the same host as this server), so Prometheus scrapes exactly the ports
that are served: none between attempts or after the job ended, and as many as the job has.
Called per request, on the server's thread: ``targets`` must not block.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def target_groups(host: str, ports: Mapping[str, int]) -> list[dict[str, object]]:
    """Prometheus HTTP service discovery groups: one per worker process, ``host:port``, with its
    name as the meta label ``__meta_tidemark_process`` (seen on the Targets page, not stored)."""
    return [{"targets": [f"{host}:{port}"], "labels": {"__meta_tidemark_process": name}}
            for name, port in sorted(ports.items(), key=lambda item: item[1])]


def request_host(header: str | None) -> str:
    """The host part of a request's ``Host`` header (``worker:9404`` -> ``worker``, ``[::1]:9404``
    -> ``[::1]``); this machine's name without one."""
    if not header:
        return socket.gethostname()
    if header.startswith("[") and "]" in header:  # an IPv6 address
        return header[:header.index("]") + 1]
    if header.count(":") == 1:
        return header.partition(":")[0]
    return header


def serve_health(host: str, port: int, ready: Callable[[], bool],
                 targets: Callable[[], Mapping[str, int]] | None = None) -> ThreadingHTTPServer:
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
            elif path == "/targets" and targets is not None:
                groups = target_groups(request_host(self.headers.get("Host")), targets())
                self._send(200, json.dumps(groups).encode(), "application/json")
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
