"""A headless chromium driven over the DevTools protocol, for tests/test_web.py.

Debian's chromium, started with --remote-debugging-port=0: it writes the port it chose
to DevToolsActivePort in its profile, and the page's target is driven over a WebSocket
(aiohttp, which the web view itself depends on).  Only what the tests need: navigate,
evaluate, clear cookies, type, screenshot.  Synchronous for the tests: each call runs
the browser's own event loop until it is answered.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile

import aiohttp

from conftest import poll

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
START_TIMEOUT = 30.0
CALL_TIMEOUT = 15.0


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, width: int = 1100, height: int = 700):
        self.profile = tempfile.mkdtemp(prefix="clowder-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-extensions",
             f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "HOME": self.profile})
        self.loop = asyncio.new_event_loop()
        self._ids = itertools.count(1)
        try:
            self.loop.run_until_complete(self._connect())
        except BaseException:
            self.close()
            raise

    async def _connect(self) -> None:
        port_file = os.path.join(self.profile, "DevToolsActivePort")

        def written() -> bool:
            return os.path.exists(port_file) and os.path.getsize(port_file) > 0

        # Until chromium has written its port, or exited: conftest.poll, with a deadline.
        await asyncio.to_thread(poll, lambda: written() or self.proc.poll() is not None,
                                START_TIMEOUT, 0.05)
        if not written():
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited {self.proc.returncode}: "
                                   f"{self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            raise BrowserError(f"chromium wrote no DevToolsActivePort in {START_TIMEOUT} s")
        port = int(open(port_file).read().split()[0])
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json(content_type=None)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)

    async def _call(self, method: str, **params):
        mid = next(self._ids)
        await self.ws.send_str(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = await asyncio.wait_for(self.ws.receive(), CALL_TIMEOUT)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise BrowserError(f"DevTools connection ended: {msg.type}")
            body = json.loads(msg.data)
            if body.get("id") == mid:
                if "error" in body:
                    raise BrowserError(f"{method}: {body['error']}")
                return body.get("result", {})

    def call(self, method: str, **params):
        return self.loop.run_until_complete(self._call(method, **params))

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def eval(self, expression: str):
        """The value of ``expression`` in the page (promises awaited), or None if it threw."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            return None
        return r["result"].get("value")

    def clear_cookies(self) -> None:
        self.call("Network.clearBrowserCookies")

    def type(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def enter(self) -> None:
        self.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                  text="\r", windowsVirtualKeyCode=13)
        self.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13)

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        async def done():
            if getattr(self, "ws", None) is not None:
                await self.ws.close()
            if getattr(self, "http", None) is not None:
                await self.http.close()
        try:
            self.loop.run_until_complete(done())
        finally:
            self.loop.close()
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
