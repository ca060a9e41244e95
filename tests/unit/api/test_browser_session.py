"""The HTTP edge's browser session: ``GET /ui/...?token=`` signs a browser in with an HttpOnly,
SameSite=Strict cookie that stands in for the bearer header on GET and HEAD requests only.
Exercised through the real middleware on an in-process aiohttp server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tidemark.chassis.http_edge import SESSION_COOKIE, BearerTokenCheck, Unauthorized, install_edge

TOKEN = "browser-session-token-0a1b2c3d"


def edge_app(token: str | None) -> web.Application:
    app = web.Application()
    install_edge(app, "test", token)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="the page", content_type="text/html")

    async def read(request: web.Request) -> web.Response:
        return web.json_response({"read": True})

    async def change(request: web.Request) -> web.Response:
        return web.json_response({"changed": True}, status=202)

    app.router.add_get("/ui/page", page)
    app.router.add_get("/api/v1/thing", read)
    app.router.add_post("/api/v1/thing", change)
    return app


def run(token: str | None, scenario: Callable[[TestClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with TestClient(TestServer(edge_app(token))) as client:
            return await scenario(client)
    return asyncio.run(main())


def test_the_token_in_the_page_url_sets_a_strict_http_only_cookie_and_leaves_the_url() -> None:
    async def scenario(client: TestClient) -> None:
        response = await client.get(f"/ui/page?job=orders&token={TOKEN}", allow_redirects=False)
        assert response.status == 303
        assert response.headers["Location"] == "/ui/page?job=orders"
        set_cookie = response.headers["Set-Cookie"]
        assert set_cookie.startswith(f"{SESSION_COOKIE}=")
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/" in set_cookie
        assert TOKEN not in set_cookie  # a value derived from the token, never the token
        assert response.headers["Cache-Control"] == "no-store"
        followed = await client.get("/ui/page?job=orders")
        assert followed.status == 200 and await followed.text() == "the page"
        api_read = await client.get("/api/v1/thing")
        assert api_read.status == 200 and await api_read.json() == {"read": True}
        change = await client.post("/api/v1/thing", json={})  # the cookie never authorizes a change
        assert change.status == 401 and "missing bearer token" in (await change.json())["error"]
        with_header = await client.post("/api/v1/thing", json={}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert with_header.status == 202

    run(TOKEN, scenario)


def test_without_token_or_cookie_the_page_answers_401_with_the_sign_in_hint() -> None:
    async def scenario(client: TestClient) -> None:
        response = await client.get("/ui/page")
        body = await response.json()
        assert response.status == 401 and body["status"] == 401
        assert "?token=" in body["error"] and 'Bearer realm="tidemark"' in response.headers["WWW-Authenticate"]
        assert (await client.get("/api/v1/thing")).status == 401

    run(TOKEN, scenario)


def test_a_wrong_token_in_the_url_is_refused_and_not_echoed() -> None:
    async def scenario(client: TestClient) -> None:
        wrong = "not-the-token-but-long-enough"
        response = await client.get(f"/ui/page?token={wrong}", allow_redirects=False)
        text = await response.text()
        assert response.status == 401 and "invalid token" in text and wrong not in text
        assert "Set-Cookie" not in response.headers
        assert (await client.get(f"/api/v1/thing?token={TOKEN}")).status == 401  # only pages sign in

    run(TOKEN, scenario)


def test_a_cookie_of_another_token_is_refused() -> None:
    async def scenario(client: TestClient) -> None:
        other = BearerTokenCheck("another-token-of-another-deployment").session_for(
            "another-token-of-another-deployment")
        client.session.cookie_jar.update_cookies({SESSION_COOKIE: other})
        response = await client.get("/ui/page")
        assert response.status == 401 and "outdated session cookie" in (await response.json())["error"]

    run(TOKEN, scenario)


def test_without_a_configured_token_the_page_is_open_and_the_url_token_ignored() -> None:
    async def scenario(client: TestClient) -> None:
        response = await client.get("/ui/page?token=anything", allow_redirects=False)
        assert response.status == 200 and "Set-Cookie" not in response.headers

    run(None, scenario)


def test_session_for_checks_the_token() -> None:
    check = BearerTokenCheck(TOKEN)
    session = check.session_for(TOKEN)
    assert session == BearerTokenCheck(TOKEN).session_for(TOKEN) and TOKEN not in session
    with pytest.raises(Unauthorized):
        check.session_for(TOKEN + "x")
    check.admit("GET", None, session)
    check.admit("HEAD", None, session)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        with pytest.raises(Unauthorized):
            check.admit(method, None, session)
    with pytest.raises(Unauthorized):  # a header, when sent, is what counts
        check.admit("GET", "Bearer wrong-token", session)
