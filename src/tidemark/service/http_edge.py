"""The HTTP edge of every service: bind address, bearer token, size and time limits, error answers.

Lifecycle: :func:`web_options` gives the Faust app its web settings when the app is built;
:func:`install_edge` then adds one aiohttp middleware to the app's web server, before it starts.

Contract, for every request on a service's HTTP port:

* the server listens on ``http_host`` only (``web_bind``; Faust's own default is 0.0.0.0), port
  ``http_port``; Faust's router and table pages are switched off;
* when ``api_token`` is set, every path except :data:`PUBLIC_PATHS` needs
  ``Authorization: Bearer <token>`` (SHA-256 digests compared in constant time) or gets 401 with a
  ``WWW-Authenticate`` challenge; a refused request has no effect;
* a client has :data:`HEADER_TIMEOUT_S` to send its request line and headers (aiohttp's
  keep-alive timer, which also closes idle keep-alive connections) and :data:`BODY_TIMEOUT_S` to
  send its body, else the connection is closed (a body timeout answers 408 first); a body over
  :data:`MAX_BODY_BYTES` gets 413;
* errors are JSON ``{"error": message, "status": code}``; an exception escaping a view is a bug:
  logged, answered 500 without details.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tidemark.config.settings import TidemarkSettings
from tidemark.service.logs import get_logger

log = get_logger(__name__)
PUBLIC_PATHS = frozenset({"/livez", "/readyz", "/metrics", "/openapi.json"})
MAX_BODY_BYTES = 1024 * 1024
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0
_CHALLENGE = 'Bearer realm="tidemark"'


class Unauthorized(Exception):
    """401: ``message`` and the ``WWW-Authenticate`` header to send."""

    def __init__(self, message: str, challenge: str) -> None:
        super().__init__(message)
        self.message = message
        self.headers = {"WWW-Authenticate": challenge}


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class BearerTokenCheck:
    """Checks ``Authorization`` headers against the configured token; no token: allow all."""

    def __init__(self, token: str | None) -> None:
        self._digest = None if token is None else _digest(token)

    @property
    def required(self) -> bool:
        return self._digest is not None

    def check(self, header: str | None) -> None:
        """Return when allowed; else raise :class:`Unauthorized` saying what is wrong."""
        if self._digest is None:
            return
        if not header:
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'", _CHALLENGE)
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'",
                               f'{_CHALLENGE}, error="invalid_request"')
        if not hmac.compare_digest(_digest(credentials.strip()), self._digest):
            raise Unauthorized("invalid bearer token", f'{_CHALLENGE}, error="invalid_token"')


def web_options(settings: TidemarkSettings) -> dict[str, Any]:
    """Keyword arguments of ``faust.App`` for the service's web server."""
    return {
        "web_host": settings.http_host,
        "web_bind": settings.http_host,
        "web_port": settings.http_port,
        "web_in_thread": False,
        "web_router_enabled": False,
        "web_tables_enabled": False,
        "web_application_options": {
            "client_max_size": MAX_BODY_BYTES,
            # lingering: how long an unread rest of a body is drained after the answer
            "handler_args": {"keepalive_timeout": HEADER_TIMEOUT_S, "lingering_time": 1.0},
        },
    }


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def install_edge(web_app: web.Application, service: str, token: str | None) -> BearerTokenCheck:
    """Add the edge's middleware to ``web_app`` (before the server starts); returns the token check."""
    auth = BearerTokenCheck(token)

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if request.path not in PUBLIC_PATHS:
                auth.check(request.headers.get("Authorization"))
            if request.body_exists:
                await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)  # cached for the view
            return await handler(request)
        except Unauthorized as exc:
            return error_response(401, exc.message, exc.headers)
        except asyncio.TimeoutError:
            log.warning("slow client dropped: body not received in time", service=service,
                        timeout_s=BODY_TIMEOUT_S, peer=request.remote)
            response = error_response(408, f"request body not received within {BODY_TIMEOUT_S:g} s")
            response.force_close()
            return response
        except web.HTTPException as exc:  # aiohttp's own: 404, 405, 413 ...
            if exc.status < 400:
                raise
            return error_response(exc.status, exc.reason, {k: v for k, v in exc.headers.items()
                                                            if k.lower() == "allow"})
        except Exception:
            log.exception("HTTP request failed", service=service, path=request.path)
            return error_response(500, f"internal error; see the {service} log")

    web_app.middlewares.append(edge)
    if not auth.required:
        log.warning("HTTP port runs without authentication: set TIDEMARK_API_TOKEN", service=service)
    return auth
