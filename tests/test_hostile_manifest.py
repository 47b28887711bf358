"""One user's largest records and a flood of changes: the manifest's rewrite.

The manifest is rewritten whole after every change of the session table.  A spawn may
make a record of ~35 KB (a command line just within ``MAX_ARGV_BYTES``, a name of 190
emoji), so one user's sessions make a table of tens of MB, and each rewrite used to hold
the host's event loop, every user's echo with it, ~90 ms at 1,024 such sessions.  Now
the rewrites run in a thread, one at a time, and the changes made meanwhile are written
together by the next (ptyhostd/manifestwriter.py).  What is checked here, on a real host:
a flood of alice's renames over several connections is answered in full, takes fewer
writes than renames, stays out of another client's way, and every rename answered is in
the manifest a kill -9 leaves behind.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

import clowder_wire as P
from ctl.client import Client
from ptyhostd import recordbudget
from hostile import connect_as, connections_as, environment
from test_access import system_host  # noqa: F401  (alice, bob, mallory and the host)
from test_hostile_agents import _HEADER, _manifest_fds
from test_hostile_hoard import P99
from test_hostile_listing import EMOJI, LONG, _read_reply

COUNT = 256  # alice's sessions with the largest records: a table of ~9 MB
CONNS = 8  # alice's connections, each renaming its own session
RENAMES = 30  # on each connection, all sent at once


def _generation(pid: int) -> int:
    """The newest manifest copy's generation: one more for every write."""
    gens = []
    for path in _manifest_fds(pid):
        with open(path, "rb") as f:
            gens.append(_HEADER.unpack(f.read(_HEADER.size))[1])
    return max(gens)


def _name(conn: int, n: int) -> str:
    return f"r{conn}-{n:02d}" + EMOJI * 190  # within the 200 characters a name may have


def _flood(sock, sid: str, conn: int, replies: list) -> None:
    """Send every rename of one connection at once, then read every answer."""
    sock.settimeout(120)
    frames = [P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="rename-flood"))]
    frames += [P.encode(P.Rename(session=sid, name=_name(conn, n))) for n in range(RENAMES)]
    sock.sendall(b"".join(frames))
    reader, got = P.FrameReader(), []
    while len(got) < RENAMES + 1:
        data = sock.recv(1 << 20)
        if not data:
            break
        got += [P.decode(kind, payload) for kind, payload in reader.frames(data)]
    replies.extend(got)
    sock.close()


@pytest.fixture
def roomy_host(system_host):  # noqa: F811
    """Alice's ~9 MB of records (root's spawns, not budgeted) renamed by her: past the
    default record budget, whose refusals are test_hostile_records.py's."""
    with environment(system_host, **{recordbudget.ENV: 64 << 20}) as h:
        yield h


def test_a_flood_of_renames_over_the_largest_table_is_coalesced_and_kept(roomy_host):
    h = roomy_host
    with Client(h.socket, timeout=120) as c:
        ids = [c.request(P.Spawn(argv=LONG, user="alice", name=f"{i:03d}" + EMOJI * 190),
                         P.SessionInfo).session["id"] for i in range(COUNT)]
        bobs = c.request(P.Spawn(argv=["sleep", "100000"], user="bob"),
                         P.SessionInfo).session["id"]
    # Bob, at a person's pace, lists his own sessions (one) throughout.
    probe, reader, pending = connect_as("bob", h.socket), P.FrameReader(), []
    probe.settimeout(30)
    probe.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="bob")))
    assert isinstance(_read_reply(probe, reader, pending)[1], P.Welcome)
    pid = h.main_pid()
    before = _generation(pid)
    replies: list[list] = [[] for _ in range(CONNS)]
    threads = [threading.Thread(target=_flood, args=(sock, ids[k], k, replies[k]))
               for k, sock in enumerate(connections_as("alice", h.socket, CONNS))]
    for t in threads:
        t.start()
    times = []
    while any(t.is_alive() for t in threads) or len(times) < 30:
        t0 = time.monotonic()
        probe.sendall(P.encode(P.ListSessions()))
        listed = _read_reply(probe, reader, pending)[1]
        times.append(time.monotonic() - t0)
        assert [s["id"] for s in listed.sessions] == [bobs], listed
        threads[0].join(0.02)
    probe.close()
    for t in threads:
        t.join()
    writes = _generation(pid) - before
    for k, got in enumerate(replies):
        assert isinstance(got[0], P.Welcome), got[:1]
        names = [r.session["name"] for r in got[1:] if isinstance(r, P.SessionInfo)]
        assert names == [_name(k, n) for n in range(RENAMES)], \
            f"connection {k}: {len(names)} of {RENAMES} renames answered: {got[-1:]}"
    p99 = statistics.quantiles(times, n=100)[98]
    print(f"{CONNS * RENAMES} renames over {COUNT} sessions of ~35 KB: {writes} writes; "
          f"another client's p99 {p99 * 1000:.0f} ms")
    assert writes < CONNS * RENAMES, \
        f"{writes} manifest writes for {CONNS * RENAMES} renames: none was coalesced"
    assert p99 < P99, f"another client's p99 was {p99:.3f} s during the flood"
    # Every rename answered is what the next host adopts.
    h.kill9()
    listed = h.ps(user="alice")
    assert [listed[ids[k]]["name"] for k in range(CONNS)] == \
        [_name(k, RENAMES - 1) for k in range(CONNS)]
    assert set(ids) <= set(listed)
