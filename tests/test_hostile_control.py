"""Hostile clients of clowder-control's down and restart and of the host's kill.

A second unprivileged user may not end someone else's agent or session (with or without
the escalation); one client that sends many down/kill requests, or restarts of a real
agent, and never reads the answers keeps clowder-control's memory bounded and every
other client served.
"""

from __future__ import annotations

import socket
import time

import pytest

from conftest import PYTHON, ensure_user, poll, wait_for
import clowder_wire as P
from test_control import agent_yaml, control  # noqa: F401 - the fixture
from hostile import MiB, Memory, rss_kib
from test_ending import STUBBORN, control_socket, timed_status


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_other_user_cannot_down_or_kill(host, control):
    control.write_config("agents:\n" + agent_yaml("mine", STUBBORN, control.workdir))
    info = control.wait_running(["mine"])["mine"]
    ensure_user("bob", 2002, "clowder")
    for verb in ("down", "restart"):
        r = host.ctl(verb, "mine", user="bob", check=False)
        assert r.returncode != 0 and b"uid 2002 may not change agent 'mine'" in r.stderr, r
    for args in (["kill", info["session"]], ["kill", "--signal", "KILL", info["session"]],
                 ["kill", "agent:mine"]):
        r = host.ctl(*args, user="bob", check=False, timeout=20)
        assert r.returncode != 0 and b"no such session" in r.stderr, (args, r.stderr)
    # The escalating kill on the wire, straight to the host, as bob: refused the same way.
    r = host.run([PYTHON, "-c", f"""
from ctl.client import Client, RequestFailed
import clowder_wire as P
with Client({host.socket!r}) as c:
    try:
        c.request(P.Kill(session={info['session']!r}, signal=1, escalate=True), P.Ok)
    except RequestFailed as exc:
        print(exc.code)
"""], user="bob")
    assert r.stdout.strip() == b"no-session", r
    now = control.agents()["mine"]
    assert (now["state"], now["pid"]) == ("running", info["pid"])
    assert host.ps()[info["session"]]["state"] == "running"
    # Its owner may (and must: a stopping host gives a program that ignores SIGHUP
    # only its own stop timeout).
    host.ctl("down", "mine", timeout=30)
    assert host.ps().get(info["session"], {}).get("state") != "running"


def test_flood_of_downs_never_read(host, control):
    control.write_config("agents:\n" + agent_yaml("victim", STUBBORN, control.workdir)
                         + agent_yaml("bystander", "sleep 100000", control.workdir))
    before = control.wait_running(["victim", "bystander"])
    pid = int(host.show("clowder-control.service", "MainPID")["MainPID"])
    rss0 = rss_kib(pid)
    frames = b"".join(P.encode(m) for m in (P.AgentDown(agent="victim"),
                                            P.Kill(session=before["victim"]["session"]),
                                            P.AgentDown(agent="no-such-agent")))
    flooders = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_UNIX)
            s.connect(control_socket(host))
            s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="flood")))
            s.settimeout(0.5)
            flooders.append(s)
        sent = 0
        active = list(flooders)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and active:
            for s in list(active):
                try:
                    s.sendall(frames * 200)
                    sent += 600
                except socket.timeout:
                    # The daemon stopped reading this one: that is the point.  (A frame
                    # may be half-sent: nothing more goes on this connection.)
                    active.remove(s)
            # Meanwhile every other client is served at once.
            took, rep = timed_status(host)
            assert took < 1.0, f"status took {took:.2f} s during the flood"
        assert sent > 1000, sent
        # The stubborn victim was ended once, by escalation, while nobody read.
        wait_for(lambda: control.agents()["victim"]["state"] == "down", 20,
                 "the flooded down to take effect")
        growth = rss_kib(pid) - rss0
        assert growth < 30 * 1024, f"clowder-control grew by {growth} KiB"
        by = control.agents()["bystander"]
        assert (by["state"], by["pid"]) == ("running", before["bystander"]["pid"])
        assert host.ps().get(before["victim"]["session"], {}).get("state") != "running"
    finally:
        for s in flooders:
            s.close()
    took, _ = timed_status(host)
    assert took < 1.0


def test_flood_of_restarts_never_read(host, control):
    """Restart after restart of a real agent from one client that never reads: each one
    handled really restarts it (one connection's requests are done in turn, so none is
    refused as busy), status answers meanwhile, memory stays bounded, and once the
    client has gone the restarts it left queued are dropped: the agent runs on."""
    control.write_config("agents:\n" + agent_yaml("victim", "sleep 100000", control.workdir)
                         + agent_yaml("bystander", "sleep 100000", control.workdir))
    before = control.wait_running(["victim", "bystander"])
    pid = int(host.show("clowder-control.service", "MainPID")["MainPID"])
    mem = Memory(pid)
    frames = P.encode(P.AgentRestart(agent="victim")) * 200

    def spawns(report) -> int:
        return [a for a in report.agents if a["name"] == "victim"][0]["spawns"]
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(control_socket(host))
            s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="flood")))
            s.settimeout(0.5)
            sent, reading = 0, True
            # Timed, not counted to the end: a restart takes 50-80 ms here (its session
            # ended, a new one started through systemd), and the restarts the daemon
            # takes in before it stops reading (4,400 measured) would take minutes.
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                if reading:
                    try:
                        s.sendall(frames)
                        sent += 200
                    except socket.timeout:
                        reading = False  # the daemon stopped reading us: the point
                took, rep = timed_status(host)
                assert took < 1.0, f"status took {took:.2f} s during the flood"
            assert not reading and sent > 1000, (reading, sent)
            restarted = spawns(rep) - before["victim"]["spawns"]
            assert restarted >= 10, f"{restarted} restarts done in 8 s, none read"
            at_close = spawns(timed_status(host)[1])
        # Gone: what it left queued is dropped.  The restart under way is done, and one
        # more may have begun just after that status: 2.
        wait_for(lambda: control.agents()["victim"]["state"] == "running", 20,
                 "the victim to run once the flooder has gone")
        more = poll(lambda: spawns(timed_status(host)[1]) > at_close + 2, 2.0, interval=0.1)
        assert not more, "clowder-control went on restarting for a client that had gone"
        victim = control.agents()["victim"]
        settled = victim["spawns"]
    finally:
        mem.stop()
    grew = (mem.max_rss - mem.start_rss) * 1024
    assert grew < 30 * MiB, f"clowder-control's peak grew by {grew / MiB:.1f} MiB"
    assert victim["state"] == "running" and victim["pid"] != before["victim"]["pid"], victim
    assert host.ps()[victim["session"]]["state"] == "running"
    by = control.agents()["bystander"]
    assert (by["state"], by["pid"], by["spawns"]) == \
        ("running", before["bystander"]["pid"], before["bystander"]["spawns"])
    print(f"restarts: {sent} sent, {settled - before['victim']['spawns']} done, peak "
          f"+{grew / MiB:.1f} MiB")
