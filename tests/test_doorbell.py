"""A client at the door ends a flood's wake (ptyhostd/doorbell.py): the doorbell rings
while a watched socket is readable and never for one unwatched; a real Connection
watches its socket while it is read, not while paused, not once lost; and a session's
pump on a real pty flooded by `yes` reads whole wakes alone, one read with a client
waiting, whole wakes again once it was served."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import types

from ptyhostd import connection, doorbell
from ptyhostd import session as session_mod
from ptyhostd.doorbell import Doorbell
import test_wake_size
from test_wake_size import PTY_READ_MAX, _wakes

flooded_session = test_wake_size.flooded_session  # the fixture: a session `yes` floods
pty_session = test_wake_size.pty_session  # the one it is made on


def test_it_rings_while_a_watched_socket_is_readable():
    bell = Doorbell()
    assert not bell.rung(), "rang with nothing watched"
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    e = None
    try:
        bell.watch(a.fileno())
        bell.watch(a.fileno())  # twice: still one watch
        assert bell.watched() == 1
        assert not bell.rung(), "rang with nothing to read"
        d.send(b"x")
        assert not bell.rung(), "rang for a socket it does not watch"
        b.send(b"x")
        assert bell.rung() and bell.rung(), "did not ring (or ringing consumed it)"
        a.recv(1)
        assert not bell.rung(), "rang after the bytes were read"
        b.send(b"y")
        bell.unwatch(a.fileno())
        bell.unwatch(a.fileno())  # twice: no error
        assert not bell.rung(), "rang for an unwatched socket"
        assert bell.watched() == 0
        bell.watch(c.fileno())
        gone = c.fileno()
        c.close()  # closed while watched: the kernel drops it from the epoll
        assert bell.watched() == 0, "a closed socket is still in the epoll"
        bell.unwatch(gone)  # closed: no error
        bell.unwatch(d.fileno())  # never watched: no error
        bell.unwatch(-1)
        c, e = socket.socketpair()  # may take the closed one's number: watched afresh
        bell.watch(c.fileno())
        assert bell.watched() == 1 and not bell.rung()
        e.send(b"x")
        assert bell.rung(), "a socket watched after a closed one did not ring"
    finally:
        for s in (a, b, c, d):
            s.close()
        if e is not None:
            e.close()


def test_a_connection_is_watched_while_it_is_read(monkeypatch):
    bell = Doorbell()
    monkeypatch.setattr(connection, "DOORBELL", bell)
    host = types.SimpleNamespace(last_request=0.0, uid=os.getuid(), control_cgroup=None)

    async def main():
        ours, theirs = socket.socketpair()
        conn = connection.Connection(host)
        lost = asyncio.Event()
        keep = conn.connection_lost

        def connection_lost(exc):  # the transport calls it at a later turn of the loop
            keep(exc)
            lost.set()
        conn.connection_lost = connection_lost
        await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, ours)
        try:
            assert bell.watched() == 1, "a new connection is not watched"
            theirs.send(b"\0")  # the start of a frame: the loop has not read it yet
            assert bell.rung(), "a connection with bytes to read did not ring"
            conn._pause("requests")
            assert not bell.rung() and bell.watched() == 0, \
                "a connection that is not read rang"
            conn._resume("requests")
            assert bell.rung(), "a connection read again did not ring"
        finally:
            conn.transport.close()
        try:
            await asyncio.wait_for(lost.wait(), timeout=10)
        except asyncio.TimeoutError:
            raise AssertionError("the closed connection was not lost within 10 s") from None
        assert conn.closed
        assert bell.watched() == 0, "a lost connection is still watched"
        theirs.close()

    asyncio.run(main())


def test_a_flood_wakes_one_read_at_a_time_while_a_client_waits(flooded_session, monkeypatch):
    bell = Doorbell()
    monkeypatch.setattr(session_mod, "DOORBELL", bell)
    s = flooded_session
    ours, theirs = socket.socketpair()
    try:
        bell.watch(ours.fileno())
        # Each wake started a second ago: past WAKE_YIELD from its first read on.
        assert doorbell.WAKE_YIELD < 1
        alone = _wakes(s, time.monotonic() - 1.0)
        theirs.send(b"x")  # a request, waiting for the loop
        waiting = _wakes(s, time.monotonic() - 1.0)
        ours.recv(1)  # served
        served = _wakes(s, time.monotonic() - 1.0)
    finally:
        ours.close()
        theirs.close()
    assert max(alone) > PTY_READ_MAX, f"no wake read more than one read alone: {alone}"
    assert max(waiting) <= PTY_READ_MAX, \
        f"a wake read on past one read with a client waiting: {waiting}"
    assert max(served) > PTY_READ_MAX, f"wakes stayed short once it was served: {served}"
