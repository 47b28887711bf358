"""One user's many floods and another user's snapshots: the screen pool's turns.

Every session's terminal model is fed, and every snapshot, repaint and history rendered,
in the host's two screen-pool threads.  A first-in-first-out pool queued a turn of each
of alice's flooding sessions ahead of bob's snapshot; the pool now serves requests
first (leaving one thread to the models' feeding while it waits) and users in turn
(ptyhostd/screenpool.py; its order is checked without a host in tests/test_screenpool.py,
what it buys is measured in docs/design.md "The screen pool").  Here, on a real host:
while alice's sessions print coloured text as fast as their models follow, bob's
snapshots are answered, whole, within the hostile suite's bound, and none of alice's
sessions is lost.
"""

from __future__ import annotations

import os
import statistics
import time

import clowder_wire as P
from conftest import wait_for
from hostile import connect_as
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)
from test_hostile_hoard import P99
from test_hostile_listing import _read_reply
from test_hostile_screen_memory import coloured

FLOODS = 32  # alice's sessions, each printing all the time
SNAPSHOTS = 200  # bob's, one after another, each sent once the last is answered
FLOOD = "/home/alice/pool-flood.bin"


def _snapshots(sock, reader, pending, sid: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        sock.sendall(P.encode(P.GetSnapshot(session=sid, format="text")))
        kind, reply = _read_reply(sock, reader, pending)
        times.append(time.monotonic() - t0)
        assert isinstance(reply, P.SnapshotData) and b"BOB-READY" in reply.data, reply
    return times


def _quantiles(times: list[float]) -> str:
    q = statistics.quantiles(times, n=100)
    return f"p50 {q[49] * 1e3:.1f} p90 {q[89] * 1e3:.1f} p99 {q[98] * 1e3:.1f} ms"


def test_anothers_snapshots_are_served_beside_one_users_many_floods(system_host):
    h = system_host
    with open(FLOOD, "wb") as f:
        f.write(coloured(3000))
    os.chmod(FLOOD, 0o644)
    bobs = h.spawn("sh", "-c", "echo BOB-READY; exec sleep 100000", user="bob",
                   cwd="/home/bob")
    wait_for(lambda: b"BOB-READY" in h.backlog(bobs, user="bob"), 30, "bob's session to start")
    sock, reader, pending = connect_as("bob", h.socket), P.FrameReader(), []
    sock.settimeout(30)
    sock.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="bob")))
    assert isinstance(_read_reply(sock, reader, pending)[1], P.Welcome)
    idle = _snapshots(sock, reader, pending, bobs, 50)
    sids = [h.spawn("sh", "-c", f"echo FLOODING; while :; do cat {FLOOD}; done",
                    user="alice", cwd="/home/alice") for _ in range(FLOODS)]
    try:
        for sid in sids:
            wait_for(lambda: len(h.backlog(sid, user="alice")) > 256 * 1024, 60,
                     f"alice's session {sid} to be flooding", interval=0.2)
        busy = _snapshots(sock, reader, pending, bobs, SNAPSHOTS)
        listed = h.ps(user="alice")
        states = {sid: listed[sid]["state"] for sid in sids}
        assert set(states.values()) == {"running"}, states
    finally:
        sock.close()
        for sid in sids:
            h.ctl("kill", sid, user="alice", check=False)
        os.unlink(FLOOD)
    print(f"\nbob's snapshots idle: {_quantiles(idle)}; beside alice's {FLOODS} floods: "
          f"{_quantiles(busy)}")
    p99 = statistics.quantiles(busy, n=100)[98]
    assert p99 < P99, f"bob's snapshot p99 was {p99:.3f} s beside alice's {FLOODS} floods"
