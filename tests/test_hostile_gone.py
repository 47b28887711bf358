"""A client whose connection the host closes in the middle of a spawn (issue 12's bad
day): the spawn is done or not done, never left half-way.  A bad frame closes the
connection at once (test_hostile_frames.py), and the host cancels the connection's work
when it is lost: a spawn cut at an await after its table entry was left `starting` for
good, its program started or not and never watched."""

from __future__ import annotations

import socket

import pytest

import clowder_wire as P
from conftest import poll
from ctl.client import Client

CLIENTS = 40
BAD = P.HEADER.pack(4, 4242) + b"\0\0\0\0"  # an unknown kind: fatal, the host closes


def spawn_then_bad_frame(path: str, name: str) -> None:
    """Spawn ``name``'s `true`, and once the spawn is in the host's table (listed, on
    another connection: its start job is then under way), send a bad frame on the
    spawn's connection, which the host closes on it."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    try:
        s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="gone"))
                  + P.encode(P.Spawn(argv=["true"], name=name)))
        with Client(path, timeout=10) as c:
            listed = poll(lambda: any(x["name"] == name for x in c.sessions(all=True)),
                          10, 0.001)
        assert listed, f"the spawn of {name} never reached the host's table"
        s.sendall(BAD)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the host closed it first (the spawn refused, or its answer failed)
    finally:
        s.close()


def test_a_spawn_cut_by_its_connections_close_is_never_left_starting(host):
    before = set(host.ps())
    try:
        for i in range(CLIENTS):
            spawn_then_bad_frame(host.socket, f"gone-{i}")

        def settled():
            ps = {sid: s for sid, s in host.ps().items() if sid not in before}
            return [ps] if all(s["state"] not in ("starting", "running")
                               for s in ps.values()) else None
        got = poll(settled, 30, 0.05)  # [the new sessions], once every one has ended
        if not got:
            stuck = [sid for sid, s in host.ps().items() if s["state"] == "starting"]
            pytest.fail(f"spawns cut by their connection's close left starting: {stuck}")
    finally:
        for sid in set(host.ps()) - before:
            host.ctl("kill", sid, check=False)
    made = got[0]
    assert len(made) == CLIENTS, f"only {len(made)} of {CLIENTS} spawns were made"
    for sid, s in made.items():  # each one ran and its end was seen
        assert s["state"] == "exited" and s["exit_code"] == 0, s
    if made:
        host.ctl("rm", *made)
    print(f"{CLIENTS} spawns cut by their connection's close: every one ran and ended")
