"""The checkpoints page: one self-contained HTML file (``web/checkpoints.html``, its script and
style inline, nothing fetched from elsewhere) served at :data:`PAGE_PATH` on the coordinator's
HTTP port. In the browser it reads the operator API (jobs, history, one checkpoint's acks,
retained checkpoints and savepoints) every 2 s and redraws; what it shows: docs/operations.md.

Lifecycle: :func:`install_checkpoints_page` once while the service is built.

Access follows the HTTP edge's rules (:mod:`tidemark.chassis.http_edge`): with a token
configured the page, like the API, needs the bearer header or the browser session cookie that
``GET /ui/checkpoints?token=<token>`` sets. The answer carries a Content-Security-Policy that
allows only the page's own inline script and style (by hash) and requests to this origin.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.resources
import re
from typing import Any

from tidemark.chassis.app import ServiceApp

PAGE_PATH = "/ui/checkpoints"
PAGE_FILE = "checkpoints.html"
_INLINE = {"script": re.compile(r"<script>(.*?)</script>", re.S), "style": re.compile(r"<style>(.*?)</style>", re.S)}


def content_security_policy(html: str) -> str:
    """The policy that lets ``html`` run its own inline ``<script>`` and ``<style>`` blocks (by
    SHA-256 hash) and talk to its origin, and nothing else."""
    sources = {}
    for kind, pattern in _INLINE.items():
        digests = [base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode("ascii")
                   for block in pattern.findall(html)]
        sources[kind] = " ".join(f"'sha256-{d}'" for d in digests) or "'none'"
    return (f"default-src 'none'; script-src {sources['script']}; style-src {sources['style']}; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


@functools.cache
def page() -> tuple[str, dict[str, str]]:
    """The page's HTML and the headers it is served with."""
    html = importlib.resources.files(__package__).joinpath("web", PAGE_FILE).read_text(encoding="utf-8")
    return html, {"Content-Security-Policy": content_security_policy(html), "Cache-Control": "no-store",
                  "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}


def install_checkpoints_page(app: ServiceApp) -> None:
    """Serve the page at :data:`PAGE_PATH` on ``app``'s HTTP port."""

    @app.faust.page(PAGE_PATH, name="ui-checkpoints")
    async def checkpoints_page(web: Any, request: Any) -> Any:
        html, headers = page()
        return web.html(html, headers=dict(headers))
