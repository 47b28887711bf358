"""Watchers that never read (issue 16, "Events"): the host's memory stays bounded.

Hundreds of connections each ask to follow the host's events and never read a byte,
while dozens of sessions send notifications (each event ~0.7 KB) and sessions come and
go: the host grows by less than the bound docs/design.md writes ("Events"), another
client is answered meanwhile, and a watcher that reads again is told how many events
it lost (``events-lost``) before the ones it kept.
"""

from __future__ import annotations

import socket
import time

import pytest

from conftest import wait_for
from ctl.client import Client
from hostile import MiB, Memory
import clowder_wire as P

WATCHERS = 300
NOTIFIERS = 24
CHURN_SECONDS = 12.0
GROWTH = 24 * MiB  # docs/design.md, "Events": what never-read watchers may make it hold
# Each notifier prints a 500-byte OSC 9 notification every 0.1 s (5 a second pass).
NOTIFIER = ("import sys, time\n"
            "while True:\n"
            "    sys.stdout.write('\\x1b]9;' + 'n' * 500 + '\\x07'); sys.stdout.flush()\n"
            "    time.sleep(0.1)\n")


def _watcher(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="hoarder"))
              + P.encode(P.WatchEvents(follow=True)))
    return s


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_watchers_that_never_read_are_bounded_and_told_what_they_lost(host):
    notifiers = [host.spawn("python3", "-c", NOTIFIER) for _ in range(NOTIFIERS)]
    pid = host.main_pid()
    held = []
    try:
        # What the notifiers and churn cost by themselves (their terminal models, the
        # spawn path) is paid before the measure: it is not the watchers'.
        for sid in notifiers:
            wait_for(lambda: len(host.backlog(sid)) > 5000, 30, "a notifier's notifications")
        for _ in range(3):
            host.ctl("rm", host.spawn("sh", "-c", "echo churn; exit 1"), check=False)
        mem = Memory(pid)
        start = mem.read()["VmRSS"]
        held = [_watcher(host.socket) for _ in range(WATCHERS)]
        late = held[0]
        end = time.monotonic() + CHURN_SECONDS
        answered = []
        while time.monotonic() < end:  # sessions come and go meanwhile
            sid = host.spawn("sh", "-c", "echo churn; exit 1")
            t0 = time.monotonic()
            with Client(host.socket, timeout=5) as c:
                c.request(P.ListSessions(), P.SessionList)
            answered.append(time.monotonic() - t0)
            host.ctl("rm", sid, check=False)
        mem.max_rss = max(mem.max_rss, mem.read()["VmRSS"])
        grown = (mem.max_rss - start) * 1024
        mem.stop()
        print(f"{WATCHERS} watchers never read: rss +{grown / MiB:.1f} MiB, slowest "
              f"ListSessions {max(answered) * 1000:.0f} ms")
        assert grown < GROWTH, f"the host grew by {grown / MiB:.1f} MiB"
        assert max(answered) < 2.0, answered
        # The late reader: the events it had room for, then how many it lost.
        reader = P.FrameReader()
        late.settimeout(10)
        got: list = []

        def lost() -> bool:
            got.extend(reader.feed(late.recv(1 << 16)))
            return any(isinstance(m, P.Event) and m.event["kind"] == "events-lost"
                       for m in got)
        wait_for(lost, 30, "an events-lost event for the watcher that read late")
        count = next(m.event["count"] for m in got if isinstance(m, P.Event)
                     and m.event["kind"] == "events-lost")
        assert count > 100, count
        assert host.main_pid() == pid, "the host restarted"
    finally:
        for s in held:
            s.close()
        for sid in notifiers:
            host.ctl("kill", sid, "--signal", "KILL", check=False)
