"""A list of sessions too large for one frame, and one user's long command lines.

A SessionList used to be one frame of at most 1 MiB: past ~3,800 sessions of plain
`sleep`s (a full FD store holds 8,190), or a few sessions of a user whose command lines
were as long as a Spawn frame allows, every listing that held them failed with an
internal error: root's `ps`, clowder-control's status and reconcile, the web view's
list.  One user could so break root's and clowder-control's view of every other user.
Now a command line and a working directory are bounded at spawn
(``MAX_ARGV_BYTES``, ``MAX_CWD_BYTES``) and a long list comes in pages, each within a
frame, that the clients ask for in turn (``SessionList.more``).

clowder-control's status lists the plain sessions too, and names are bounded by
characters, not bytes: 200 emoji are 2,400 bytes of JSON, so one user's ~450 sessions
made root's status fail the same way.  It lists at most 512 KiB of them now and counts
the rest (``StatusReport.omitted``).
"""

from __future__ import annotations

import json
import socket

import clowder_wire as P
from ctl.client import Client
from hostile import connect_as
from test_access import system_host  # noqa: F401  (alice, bob, mallory and the host)
from test_ending import control_socket
from controld.supervisor import STATUS_SESSIONS_BYTES

BASE = ["/bin/sh", "-c", "exec sleep 100000", "--"]
ARG = "y" * 8000
# A command line just within the limit: ~32 KiB a session, so 40 sessions list ~1.3 MiB.
LONG = BASE + [ARG] * ((P.MAX_ARGV_BYTES - P.argv_bytes(BASE)) // (len(ARG) + 1))
COUNT = 40


def _read_reply(sock: socket.socket, reader: P.FrameReader, pending: list) -> tuple:
    """The next frame on ``sock``: (its size, its message)."""
    while not pending:
        data = sock.recv(1 << 20)
        assert data, "the host closed the connection"
        pending += reader.frames(data)
    kind, payload = pending.pop(0)
    return P.HEADER.size + len(payload), P.decode(kind, payload)


def _pages(sock: socket.socket, **listing) -> list[tuple[int, P.SessionList]]:
    """Every page of a listing on a raw connection: (frame size, SessionList) each."""
    sock.settimeout(30)
    reader, pending = P.FrameReader(), []
    sock.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="listing-test")))
    _, welcome = _read_reply(sock, reader, pending)
    assert isinstance(welcome, P.Welcome), welcome
    pages, after = [], ""
    while True:
        sock.sendall(P.encode(P.ListSessions(after=after, **listing)))
        size, reply = _read_reply(sock, reader, pending)
        assert isinstance(reply, P.SessionList), reply
        pages.append((size, reply))
        if not reply.more:
            return pages
        assert reply.more > after, f"page after {after!r} goes back to {reply.more!r}"
        assert len(pages) < 100, "the pages never end"
        after = reply.more


def test_long_command_lines_and_directories_are_refused_with_the_limit(system_host):
    h = system_host
    before = set(h.ps(user="alice"))
    too_long = LONG + ["z" * 2000]
    assert P.argv_bytes(too_long) > P.MAX_ARGV_BYTES
    proc = h.ctl("spawn", "--", *too_long, user="alice", check=False)
    assert proc.returncode != 0
    assert f"at most {P.MAX_ARGV_BYTES} bytes".encode() in proc.stderr, proc.stderr
    deep = "/" + "d" * P.MAX_CWD_BYTES
    proc = h.ctl("spawn", "--cwd", deep, "--", "sleep", "100000", user="alice", check=False)
    assert proc.returncode != 0
    assert b"working directory may take at most" in proc.stderr, proc.stderr
    assert set(h.ps(user="alice")) == before, "a refused spawn left a session"
    # Just within the limit, it runs, and is listed with its whole command line.
    sid = h.spawn(*LONG, user="alice")
    assert h.ps(user="alice")[sid]["argv"] == LONG


def test_a_list_larger_than_a_frame_comes_whole_to_everyone(system_host):
    h = system_host
    with Client(h.socket, timeout=30) as c:
        ids = {c.request(P.Spawn(argv=LONG, user="alice", name=f"long-{i}"),
                         P.SessionInfo).session["id"] for i in range(COUNT)}
    assert len(ids) == COUNT
    # Alice's own listing, as a client of any version asks for it: pages, each a frame
    # no larger than a frame may be, together every session once, in the order of ids.
    pages = _pages(connect_as("alice", h.socket), all=True)
    assert len(pages) > 1, f"{COUNT} sessions of {len(LONG)} long arguments fit one frame"
    assert all(size <= P.MAX_FRAME for size, _ in pages), [s for s, _ in pages]
    listed = [s["id"] for _, page in pages for s in page.sessions]
    assert len(listed) == len(set(listed)), "a session was listed twice"
    assert set(listed) == ids
    assert listed == sorted(listed)
    assert all(s["argv"] == LONG for _, page in pages for s in page.sessions)
    # The clients ask for every page: alice's `ps` (the quick path, then the full one),
    # root's, and clowder-control's status; bob's is his own and untouched.
    assert ids <= set(h.ps(user="alice"))
    plain = h.ctl("ps", user="alice").stdout.decode()
    assert all(sid in plain for sid in ids), plain[:2000]
    assert ids <= set(h.ps())
    assert not ids & set(h.ps(user="bob"))
    with Client(control_socket(h), timeout=30, peer="clowder-control") as c:
        status = c.request(P.GetStatus(), P.StatusReport)
    assert status.host.get("answering") is True, status.host
    assert status.host.get("sessions", 0) >= COUNT, status.host


EMOJI = "\U0001f600"  # printable (So), and 12 bytes of JSON: \ud83d\ude00
NAMED = 480  # sessions named with 190 emoji: ~1.15 MB of status, over a frame


def test_one_users_long_names_leave_roots_status_whole(system_host):
    h = system_host
    with Client(h.socket, timeout=60) as c:
        ids = {c.request(P.Spawn(argv=["sleep", "100000"], user="alice",
                                 name=f"{i:03d}" + EMOJI * 190), P.SessionInfo).session["id"]
               for i in range(NAMED)}

    with Client(control_socket(h), timeout=60, peer="clowder-control") as c:
        report = c.request(P.GetStatus(), P.StatusReport)
    listed = {s["id"] for s in report.sessions}
    assert report.omitted > 0, "every session fit: the test no longer goes past a frame"
    assert listed <= ids and len(listed) + report.omitted == NAMED, \
        (len(listed), report.omitted)
    assert len(json.dumps(report.sessions, separators=(",", ":"))) <= STATUS_SESSIONS_BYTES + 2
    assert report.host.get("sessions") == NAMED, report.host
    # The command line says so, and root's ps lists every one.
    out = h.ctl("status").stdout.decode()
    assert f"and {report.omitted} more sessions" in out, out[-500:]
    assert json.loads(h.ctl("status", "--json").stdout)["omitted"] == report.omitted
    assert ids <= set(h.ps())
