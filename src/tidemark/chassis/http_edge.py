"""The HTTP edge of every service: bind address, bearer token, size and time limits, error answers.

Lifecycle: :func:`web_options` gives the Faust app its web settings when the app is built;
:func:`install_edge` then adds one aiohttp middleware to the app's web server, before it starts.

Contract, for every request on a service's HTTP port:

* the server listens on ``http_host`` only (``web_bind``; Faust's own default is 0.0.0.0), port
  ``http_port``; Faust's router and table pages are switched off;
* when ``api_token`` is set, every path except :data:`PUBLIC_PATHS` needs
  ``Authorization: Bearer <token>`` (SHA-256 digests compared in constant time) or gets 401 with a
  ``WWW-Authenticate`` challenge; a refused request has no effect;
* browser pages live under :data:`BROWSER_PREFIX`: ``GET <page>?token=<token>`` with the right
  token answers 303 to the same URL without ``token`` and sets the HttpOnly, SameSite=Strict
  session cookie :data:`SESSION_COOKIE` (a value derived from the token, never the token itself);
  that cookie then stands in for the bearer header on GET and HEAD requests (so on the page and on
  the API reads it polls), never on a request that changes something;
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
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
PUBLIC_PATHS = frozenset({"/livez", "/readyz", "/metrics", "/openapi.json"})
BROWSER_PREFIX = "/ui/"
SESSION_COOKIE = "tidemark_session"
COOKIE_METHODS = frozenset({"GET", "HEAD"})
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
        self._session = None if token is None else hmac.new(
            token.encode("utf-8", "surrogateescape"), b"tidemark browser session", hashlib.sha256).hexdigest()

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

    def admit(self, method: str, header: str | None, cookie: str | None) -> None:
        """Like :meth:`check`; without an ``Authorization`` header a GET or HEAD may present the
        browser session cookie instead."""
        if self._session is None or header or cookie is None or method not in COOKIE_METHODS:
            self.check(header)
        elif not hmac.compare_digest(_digest(cookie), _digest(self._session)):
            raise Unauthorized("invalid or outdated session cookie", f'{_CHALLENGE}, error="invalid_token"')

    def session_for(self, token: str) -> str:
        """The session cookie's value for a correct ``token``; else :class:`Unauthorized`."""
        assert self._session is not None, "no token configured"
        if not hmac.compare_digest(_digest(token), self._digest or b""):
            raise Unauthorized("invalid token in ?token=", f'{_CHALLENGE}, error="invalid_token"')
        return self._session


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


def _browser_login(request: web.Request, auth: BearerTokenCheck) -> web.Response | None:
    """``GET /ui/...?token=``: the 303 that sets the session cookie and drops the token from the URL."""
    if (not auth.required or request.method != "GET" or not request.path.startswith(BROWSER_PREFIX)
            or "token" not in request.query):
        return None
    session = auth.session_for(request.query["token"])
    response = web.Response(status=303, headers={
        "Location": str(request.rel_url.without_query_params("token")),
        "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
    response.set_cookie(SESSION_COOKIE, session, path="/", httponly=True, samesite="Strict",
                        secure=request.secure)
    return response


def install_edge(web_app: web.Application, service: str, token: str | None) -> BearerTokenCheck:
    """Add the edge's middleware to ``web_app`` (before the server starts); returns the token check."""
    auth = BearerTokenCheck(token)

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            login = _browser_login(request, auth)
            if login is not None:
                return login
            if request.path not in PUBLIC_PATHS:
                auth.admit(request.method, request.headers.get("Authorization"),
                           request.cookies.get(SESSION_COOKIE))
            if request.body_exists:
                await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)  # cached for the view
            return await handler(request)
        except Unauthorized as exc:
            hint = "; in a browser, open the page once as <page>?token=<token>" \
                if request.path.startswith(BROWSER_PREFIX) else ""
            return error_response(401, exc.message + hint, exc.headers)
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
