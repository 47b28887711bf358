"""Hostile input: a client that floods Sends and never reads, and another user's Send.

A client writes a Wait (which blocks its requests behind it) and then hundreds of MiB of
Send frames, never reading an answer: the host stops reading it once it holds ~2 MiB of
its unhandled requests, so its memory stays bounded, and the other sessions keep
working meanwhile.  Another unprivileged user's Send into a session is refused.
"""

from __future__ import annotations

import select
import socket

from conftest import wait_for
import clowder_wire as P
from test_access import system_host  # noqa: F401  (a fixture)
from hostile import Memory

FLOOD = 300 << 20
ACCEPTED_BOUND = 32 << 20  # what the host (and both socket buffers) may take of it
MEMORY_BOUND = 32 << 20


def test_flood_of_sends_behind_a_wait(host):
    quiet = host.spawn("sleep", "100000")
    echo = host.spawn("cat")
    mem = Memory(host.main_pid())
    s = socket.socket(socket.AF_UNIX)
    s.connect(host.socket)
    s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)) + P.encode(P.Wait(session=quiet)))
    s.setblocking(False)
    frame = P.encode(P.Send(session=quiet, data=b"z" * P.MAX_DATA))
    sent = 0
    pending = memoryview(frame)
    while sent < FLOOD:
        _, ready, _ = select.select([], [s], [], 3)
        if not ready:
            break  # the host stopped reading us
        try:
            n = s.send(pending)
        except BlockingIOError:
            continue
        sent += n
        pending = pending[n:] or memoryview(frame)
    print(f"the host took {sent >> 10} KiB of a {FLOOD >> 20} MiB flood")
    assert sent < ACCEPTED_BOUND, f"the host read {sent} bytes of requests it cannot handle"
    # Meanwhile, another session works as usual.
    host.ctl("send", echo, "still here\n")
    wait_for(lambda: b"still here" in host.backlog(echo), 10,
             "the other session to echo while the flood waits")
    assert host.ps()[quiet]["state"] == "running"
    grew = mem.stop()
    assert grew <= MEMORY_BOUND, f"the host's peak RSS grew {grew} bytes"
    s.close()
    # The flooder gone, the host is still fine.
    host.ctl("send", echo, "after\n")
    wait_for(lambda: b"after" in host.backlog(echo), 10, "the session to echo after")


def test_other_user_cannot_send(system_host):  # noqa: F811
    h = system_host
    sid = h.spawn("sh", "-c", "stty raw -echo; echo READY; exec cat", user="alice",
                  cwd="/home/alice")
    wait_for(lambda: b"READY" in h.backlog(sid, user="alice"), 10, "alice's session")
    proc = h.ctl("send", sid, input=b"evil\n", user="bob", check=False)
    assert proc.returncode != 0 and b"no such session" in proc.stderr, proc.stderr
    # And over the raw protocol, as an attach's Input would need the attach first.
    assert b"evil" not in h.backlog(sid, user="alice")
