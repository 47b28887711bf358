"""clowder-web's own bounds on its connections (webd/gate.py), through the real unit.

The packages run on the distribution's aiohttp (Debian 12: 3.8.4), which queues every
pipelined request it reads; the venv's (3.14 and later) stops at 32 by itself.  So the
floods here run clowder-web as the .deb does, on Debian's python3 and its aiohttp
(test_web.py's `web` fixture with "debian"), where only the Gate holds them."""

from __future__ import annotations

import socket

import pytest

from conftest import wait_for
from hostile import connections_as
from test_web import (BOTH, HTTP_FLOODS, PORT, http_flood, journal_lines, login, url_for,
                      web)  # noqa: F401 - web: the fixture
from webd.gate import MAX_PER_UID

pytestmark = pytest.mark.parametrize("host", ["system"], indirect=True)  # as test_web's


@pytest.mark.parametrize("web", ["debian"], indirect=True)
@pytest.mark.parametrize("kind", sorted(HTTP_FLOODS))
def test_pipelined_floods_are_bounded_on_debians_aiohttp(web, kind):
    """Each request kind, pipelined on one connection and never read, on aiohttp 3.8
    (test_web.py's `web` fixture, "debian"): the same bounds as test_web.py's (there,
    the venv's aiohttp's and the Gate's)."""
    http_flood(web, kind, 1)


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


@BOTH
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
