"""A real headless Chromium (Debian's ``chromium`` package, installed by
scripts/install-system-deps.sh) driven over the DevTools protocol: one page that stays open, so a
test can watch it update without reloading it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from tidemark.processes import die_with_parent

WINDOW = (1280, 900)


class BrowserError(AssertionError):
    pass


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class HeadlessChromium:
    """``with HeadlessChromium(profile_dir) as browser: browser.navigate(url) ...``"""

    def __init__(self, profile_dir: Path, window: tuple[int, int] = WINDOW) -> None:
        self.profile_dir = profile_dir
        self.window = window
        self._loop = asyncio.new_event_loop()
        self._http: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._next_id = 0

    def __enter__(self) -> HeadlessChromium:
        binary = chromium_binary()
        if binary is None:
            raise BrowserError("chromium not found: run scripts/install-system-deps.sh")
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        (self.profile_dir / "DevToolsActivePort").unlink(missing_ok=True)  # a previous browser's
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                   "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
                   f"--user-data-dir={self.profile_dir}", f"--window-size={self.window[0]},{self.window[1]}",
                   "about:blank"]
        with open(self.profile_dir / "chromium.log", "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                             preexec_fn=die_with_parent, start_new_session=True)
        try:
            self._loop.run_until_complete(self._connect(self._page_socket_url()))
            self._call("Page.enable")
            self._call("Emulation.setDeviceMetricsOverride", width=self.window[0], height=self.window[1],
                       deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._http is not None:
            self._loop.run_until_complete(self._http.close())
        self._loop.close()
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(10)

    # ------------------------------------------------------------------ DevTools protocol

    def _page_socket_url(self) -> str:
        active = self.profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (active.exists() and active.read_text().strip()):
            assert self._process is not None
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not open its DevTools port; see {self.profile_dir}/chromium.log")
            time.sleep(0.1)
        port = int(active.read_text().split()[0])
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                pages = [t for t in json.load(answer) if t["type"] == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
            if time.monotonic() > deadline:
                raise BrowserError("chromium has no page target")
            time.sleep(0.1)

    async def _connect(self, url: str) -> None:
        self._http = aiohttp.ClientSession()
        self._socket = await self._http.ws_connect(url, max_msg_size=64 * 1024 * 1024)

    async def _send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self._socket is not None
        self._next_id += 1
        call_id = self._next_id
        await self._socket.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(await asyncio.wait_for(self._socket.receive_str(), 60))
            if message.get("id") == call_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def _call(self, method: str, **params: Any) -> dict[str, Any]:
        return self._loop.run_until_complete(self._send(method, params))

    # ------------------------------------------------------------------ what tests use

    def navigate(self, url: str) -> None:
        """Load ``url`` and wait until its document has loaded."""
        self._call("Page.navigate", url=url)
        self.wait_until("document.readyState === 'complete' && location.href !== 'about:blank'", 30)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self._call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout_s: float) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"not true within {timeout_s} s: {expression}")
            time.sleep(0.25)

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, written to ``path``."""
        data = base64.b64decode(self._call("Page.captureScreenshot", format="png")["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data
