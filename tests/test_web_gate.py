"""clowder-web's own bounds on its connections (webd/gate.py), through the real unit.

The packages run on the distribution's aiohttp (Debian 12: 3.8), which queues every
pipelined request it reads; the venv's (3.14 and later) stops at 32.  So each flood here
runs with aiohttp's own bound lifted, as 3.8 has it, and only the Gate holds it."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

from conftest import wait_for
from hostile import connections_as
from test_web import (HTTP_FLOODS, PORT, _remove_web_drop_in, http_flood, journal_lines,
                      login, url_for, web)  # noqa: F401 - web: the fixture
from webd.gate import MAX_PER_UID

LIFT = "/run/clowder-web-test"  # a sitecustomize.py clowder-web imports at start
DROP_IN = "/run/systemd/system/clowder-web.service.d/test.conf"  # test_web's one
pytestmark = pytest.mark.parametrize("host", ["system"], indirect=True)  # as test_web's
SITECUSTOMIZE = f"""
import aiohttp.web_protocol as wp
wp.MAX_MSG_QUEUE_SIZE = 1 << 30  # aiohttp before 3.14 has no bound of its own
open("{LIFT}/lifted", "w").close()
"""


@pytest.fixture
def unbounded_aiohttp(web):
    """clowder-web restarted with aiohttp's pipelining bound lifted (PYTHONPATH: a
    sitecustomize that sets it past reach, and says so in a file)."""
    os.makedirs(LIFT, exist_ok=True)
    with open(f"{LIFT}/sitecustomize.py", "w") as f:
        f.write(SITECUSTOMIZE)
    os.makedirs(os.path.dirname(DROP_IN), exist_ok=True)
    with open(DROP_IN, "w") as f:
        f.write(f"[Service]\nEnvironment=PYTHONPATH={LIFT}\n")
    web.systemctl("daemon-reload")
    web.systemctl("restart", "clowder-web.service")
    try:
        login(url_for(web, "alice"))  # serving
        assert os.path.exists(f"{LIFT}/lifted"), "clowder-web did not import the lift"
        yield web
    finally:
        web.systemctl("stop", "clowder-web.service", check=False)
        _remove_web_drop_in(web)
        shutil.rmtree(LIFT, ignore_errors=True)


@pytest.mark.parametrize("kind", sorted(HTTP_FLOODS))
def test_pipelined_floods_are_bounded_without_aiohttps_own_bound(unbounded_aiohttp, kind):
    """Each request kind, pipelined on one connection and never read, with aiohttp's
    queue lifted: the same bounds as test_web.py's (there, aiohttp's and the Gate's)."""
    http_flood(unbounded_aiohttp, kind, 1)


def _answer(sock: socket.socket, request: bytes) -> bytes:
    """The head of what clowder-web answers ``request`` on ``sock`` (b"": it closed)."""
    sock.settimeout(10)
    sock.sendall(request)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def test_connections_of_one_user_are_capped(web):
    """alice holds MAX_PER_UID connections, each served; her next is answered 503 and
    closed, once logged; bob's and root's are served meanwhile; once she closes one,
    she may open one again."""
    cookie = login(url_for(web, "alice"))
    page = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{PORT}\r\nCookie: clowder_web={cookie}\r\n\r\n"
    logged = journal_lines("web-connections")
    held = connections_as("alice", ("127.0.0.1", PORT), MAX_PER_UID)
    try:
        # Her own login on her own connections: the Gate read her uid at accept.
        for s in (held[0], held[-1]):
            assert _answer(s, page.encode()).startswith(b"HTTP/1.1 200 "), "not served"
        over = connections_as("alice", ("127.0.0.1", PORT), 3)
        for s in over:  # answered at once, unasked (a request would be reset: unread)
            head = _answer(s, b"")
            assert head.startswith(b"HTTP/1.1 503 "), head[:80]
            while s.recv(4096):  # the rest of the answer, then the end (or a timeout)
                pass
            s.close()
        assert journal_lines("web-connections") - logged == 1, "not logged once"
        bob = connections_as("bob", ("127.0.0.1", PORT), 1)[0]
        with bob:
            assert _answer(bob, b"GET /login HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
                b"HTTP/1.1 401 "), "bob was not served"
        assert login(url_for(web, "alice"))  # root's connection: not counted
        held.pop().close()

        def admitted():
            s = connections_as("alice", ("127.0.0.1", PORT), 1)[0]
            with s:
                return _answer(s, page.encode()).startswith(b"HTTP/1.1 200 ")
        wait_for(admitted, 10, "alice's connection to be served after she closed one",
                 interval=0.1)
    finally:
        for s in held:
            s.close()
