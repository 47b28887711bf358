"""A client whose connection the host closes in the middle of a spawn (issue 12's bad
day): the spawn is done or not done, never left half-way.  A bad frame closes the
connection at once (test_hostile_frames.py), and the host cancels the connection's work
when it is lost: a spawn cut at an await after its table entry was left `starting` for
good, its program started or not and never watched."""

from __future__ import annotations

import random
import socket
import time

import pytest

import clowder_wire as P
from conftest import poll

CLIENTS = 40
BAD = P.HEADER.pack(4, 4242) + b"\0\0\0\0"  # an unknown kind: fatal, the host closes


def _spawn_then_bad_frame(path: str, name: str, delay: float) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="gone"))
              + P.encode(P.Spawn(argv=["sleep", "100000"], name=name)))
    # The moment the connection is closed on it: anywhere in the spawn (a start job
    # takes ~10-20 ms here), not a wait for anything.
    time.sleep(delay)
    try:
        s.sendall(BAD)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()


def test_a_spawn_cut_by_its_connections_close_is_never_left_starting(host):
    rng = random.Random(5)
    before = set(host.ps())
    try:
        for i in range(CLIENTS):
            _spawn_then_bad_frame(host.socket, f"gone-{i}", rng.uniform(0.0, 0.03))

        def settled():
            ps = {sid: s for sid, s in host.ps().items() if sid not in before}
            return [ps] if all(s["state"] != "starting" for s in ps.values()) else None
        got = poll(settled, 30, 0.05)  # [the new sessions], even when there are none
        if not got:
            stuck = [sid for sid, s in host.ps().items() if s["state"] == "starting"]
            pytest.fail(f"spawns cut by their connection's close left starting: {stuck}")
    finally:
        for sid in set(host.ps()) - before:
            host.ctl("kill", sid, check=False)
    made = got[0]
    assert made, f"none of {CLIENTS} spawns reached the host's table: nothing was tried"
    for sid, s in made.items():  # each one made runs, its program watched
        assert s["state"] == "running" and s["pid"], s
    print(f"{len(made)} of {CLIENTS} spawns cut by their connection's close were made, "
          "every one running")
