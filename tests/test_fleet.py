"""Issue 17, "Fleet" (acceptance 3): many hosts seen as one, over real ssh.

Two boxes (tools/sshhost.py), each a systemd instance of its own with sshd and clowder's
units, booted side by side inside the test instance: box 1 at 169.254.77.6 and box 2 at
169.254.77.10, both reached from one client namespace with one ssh command, as a fleet's
hosts are.  clowderctl is given both (`--host A --host B`, or the client configuration's
`hosts:`) and asks them at once; one box is cut off (its veth down), killed, or asked for
a terminal.

Needs the openssh-server debs fetched on the host first (`python3 tools/sshhost.py
fetch`): the instances have no network.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time

import pytest

from conftest import PYTHON, SUMMARY, wait_for
from test_remote import CONFIG, REGISTRY, UNITS, WORKDIR, Remote, agent_yaml, boot_box

PARTIAL = 4  # ctl/exits.py: some hosts answered, some did not
DEADLINE = 3.0  # the fleet's --timeout in these tests
# How much later than the deadline the answer of the hosts that did answer may come: ssh
# and two Python starts on two shared cores (the fleet itself ends at DEADLINE + 0.5).
SLACK = 3.0


@pytest.fixture(scope="module")
def boxes():
    """Two boxes, booted once for this module; the second shares the first's client
    namespace and keys (one $CLOWDER_SSH reaches both).  Indexes 1 and 2: box 0's
    addresses stay test_remote.py's."""
    first = boot_box("clowder-fleet-a", 1)
    try:
        second = boot_box("clowder-fleet-b", 2, first)
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()


class Fleet:
    """clowderctl over both boxes, and each box alone (a test_remote.Remote each)."""

    def __init__(self, a: Remote, b: Remote):
        self.a, self.b = a, b
        self.env = a.env  # one ssh command for both

    def ctl(self, *args, hosts=None, env=None, timeout=60) -> subprocess.CompletedProcess:
        """clowderctl --timeout DEADLINE --host A --host B ARGS..., run here."""
        hosts = [self.a.target, self.b.target] if hosts is None else hosts
        argv = [PYTHON, "-m", "ctl", "--timeout", str(DEADLINE)]
        for h in hosts:
            argv += ["--host", h]
        return subprocess.run(argv + list(args), env={**self.env, **(env or {})},
                              capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, cwd="/")


@pytest.fixture
def fleet(boxes):
    """Both boxes with their sockets listening; everything stopped and cleaned after."""
    remotes = []
    for box in boxes:
        box.exec(["systemctl", "start", "clowder-ptyhost.socket", "clowder-control.socket"],
                 check=True)
        remotes.append(Remote(box))
    yield Fleet(*remotes)
    for box in boxes:
        box.link(True)  # in case a test failed during its outage
        box.exec(["systemctl", "stop", *UNITS])
        box.exec(["rm", "-f", CONFIG, REGISTRY, REGISTRY + ".prev"])
        left = box.exec(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                         "clowder-session-*"], capture_output=True).stdout.decode().split()
        assert not left, f"session units left on {box.name}: {left}"


def _ok(proc: subprocess.CompletedProcess, code: int = 0) -> str:
    assert proc.returncode == code, \
        f"exit {proc.returncode} (expected {code}): {proc.stderr.decode(errors='replace')}"
    return proc.stdout.decode()


def _agents_and_sessions(fleet: Fleet) -> dict[str, str]:
    """An agent "web" on each box (the same name: only the HOST column tells them apart)
    and a plain session each; {target: that session's id}."""
    for r in (fleet.a, fleet.b):
        r.write_config("agents:\n" + agent_yaml("web", "sh -c 'echo up; exec sleep 100000'"))
    sids = {}
    for r in (fleet.a, fleet.b):
        r.wait_running("web")
        sids[r.target] = r.ctl("spawn", "--name", "plain", "--", "sleep",
                               "100000").stdout.decode().strip()
    return sids


def _end(fleet: Fleet, sids: dict[str, str]) -> None:
    for r in (fleet.a, fleet.b):
        r.ctl("kill", sids[r.target])
        r.ctl("wait", sids[r.target], check=False)
        r.ctl("rm", sids[r.target])


def test_ps_status_and_events_over_both_boxes_in_one_table(fleet, tmp_path):
    sids = _agents_and_sessions(fleet)
    targets = (fleet.a.target, fleet.b.target)

    table = _ok(fleet.ctl("ps"))
    assert table.startswith("host "), table
    for t in targets:
        assert re.search(rf"^{re.escape(t)}\s+{sids[t]}\s+plain\s", table, re.M), table
    listed = json.loads(_ok(fleet.ctl("ps", "--json")))
    assert [(h["host"], h["answered"]) for h in listed["hosts"]] == \
        [(t, True) for t in targets]
    assert {(s["host"], s["id"]) for s in listed["sessions"] if s["name"] == "plain"} == \
        set(sids.items())

    table = _ok(fleet.ctl("status"))
    for t in targets:
        assert re.search(rf"^{re.escape(t)}\s+web\s+running\s", table, re.M), table
    status = json.loads(_ok(fleet.ctl("status", "--json")))
    assert sorted((a["host"], a["name"], a["state"]) for a in status["agents"]) == \
        sorted((t, "web", "running") for t in targets)
    assert all(h["status"]["host"]["answering"] for h in status["hosts"]), status

    lines = _ok(fleet.ctl("events")).splitlines()
    for t in targets:
        assert any(re.match(rf"{re.escape(t)}\s+\S+ \S+\s+session-started\s+{sids[t]} "
                            rf"\(plain\)", line) for line in lines), lines
    events = [json.loads(line) for line in _ok(fleet.ctl("events", "--json")).splitlines()]
    started = {(e["host"], e["session"]) for e in events if e["kind"] == "session-started"}
    assert set(sids.items()) <= started, events
    times = [e["time"] for e in events]
    assert times == sorted(times), "one stream, in time order"
    # A session named: the box that has it answers, the other has nothing to say.
    one = [json.loads(line) for line in
           _ok(fleet.ctl("events", "--json", sids[targets[1]])).splitlines()]
    assert {(e["host"], e["session"]) for e in one if e["kind"] == "session-started"} \
        == {(targets[1], sids[targets[1]])}, one
    assert not [e for e in one if e["kind"] == "host-unreachable"], one

    # The same fleet named in the client configuration instead of on the command line.
    config = tmp_path / "client.yaml"
    config.write_text("hosts:\n" + "".join(f"  - {t}\n" for t in targets))
    listed = json.loads(_ok(fleet.ctl("ps", "--json", hosts=[],
                                      env={"CLOWDER_CLIENT_CONFIG": str(config)})))
    assert [h["host"] for h in listed["hosts"]] == list(targets)
    config.write_text("hosts: [one, two\n")
    bad = fleet.ctl("ps", hosts=[], env={"CLOWDER_CLIENT_CONFIG": str(config)})
    assert bad.returncode == 2 and f"{config} is not valid YAML".encode() in bad.stderr, bad
    _end(fleet, sids)


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_local_and_a_box_in_one_table(fleet, host):
    """"local" is this machine's own sockets, beside a box reached through ssh."""
    here = host.ctl("spawn", "--name", "here", "--", "sleep", "100000").stdout.decode().strip()
    there = fleet.a.ctl("spawn", "--name", "there", "--", "sleep",
                        "100000").stdout.decode().strip()
    table = _ok(fleet.ctl("ps", hosts=["local", fleet.a.target]))
    assert re.search(rf"^local\s+{here}\s+here\s", table, re.M), table
    assert re.search(rf"^{re.escape(fleet.a.target)}\s+{there}\s+there\s", table, re.M), table
    host.ctl("kill", here)
    host.ctl("wait", here, check=False)
    fleet.a.ctl("kill", there)
    fleet.a.ctl("wait", there, check=False)
    fleet.a.ctl("rm", there)


def _one_cut_off(fleet: Fleet, sids: dict[str, str], how: str) -> None:
    """ps, status, events with box b cut off (``how``, for messages): a's rows within the
    deadline, b marked, exit 4."""
    a, b = fleet.a.target, fleet.b.target
    for verb, row in (("ps", rf"^{re.escape(a)}\s+{sids[a]}\s+plain\s"),
                      ("status", rf"^{re.escape(a)}\s+web\s+running\s"),
                      ("events", rf"^{re.escape(a)}\s+.*session-started\s+{sids[a]}")):
        start = time.monotonic()
        proc = fleet.ctl(verb)
        took = time.monotonic() - start
        SUMMARY.append(f"test_fleet: {verb} over two boxes, one {how}: {took:.1f} s "
                       f"(deadline {DEADLINE:g} s)")
        out = _ok(proc, PARTIAL)
        assert took < DEADLINE + SLACK, f"{verb}: {took:.1f} s for a fleet with one " \
                                        f"box {how} (deadline {DEADLINE:g} s)"
        assert re.search(row, out, re.M), out
        assert re.search(rf"^{re.escape(b)} unreachable: ", out, re.M), out
        assert not re.search(rf"^{re.escape(b)}\s+(?!unreachable)", out, re.M), out
    listed = json.loads(_ok(fleet.ctl("ps", "--json"), PARTIAL))
    assert [(h["host"], h["answered"]) for h in listed["hosts"]] == \
        [(a, True), (b, False)], listed
    assert listed["hosts"][1]["error"], listed
    # Only the cut one: when no host answers the status is 3 (unreachable).
    assert fleet.ctl("ps", hosts=[b, b]).returncode == 3


def test_a_cut_off_box_is_marked_and_the_other_answers_within_the_deadline(fleet):
    """Two ways a box is cut off: its link down (connecting fails at once: no route),
    and its sshd frozen (the TCP connection is taken, nothing ever answers: only the
    deadline ends the wait)."""
    sids = _agents_and_sessions(fleet)
    box = fleet.b.box
    box.link(False)
    try:
        _one_cut_off(fleet, sids, "cut off (link down)")
    finally:
        box.link(True)
    sshd = box.exec(["systemctl", "show", "-p", "MainPID", "--value", "ssh.service"],
                    capture_output=True, check=True).stdout.decode().strip()
    assert int(sshd) > 0, "no sshd running in box b"
    box.exec(["kill", "-STOP", sshd], check=True)
    try:
        _one_cut_off(fleet, sids, "frozen (sshd stopped)")
    finally:
        box.exec(["kill", "-CONT", sshd], check=True)
    assert json.loads(_ok(fleet.ctl("ps", "--json")))["hosts"][1]["answered"]
    _end(fleet, sids)


def test_events_follow_goes_on_with_the_others_when_one_box_drops(fleet):
    a, b = fleet.a.target, fleet.b.target
    proc = subprocess.Popen([PYTHON, "-m", "ctl", "--timeout", str(DEADLINE), "--host", a,
                             "--host", b, "events", "--follow", "--json"],
                            env=fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd="/")
    events: list[dict] = []
    said: list[bytes] = []

    def read(stream, into, parse):
        for line in stream:
            into.append(parse(line))
    for args in ((proc.stdout, events, json.loads), (proc.stderr, said, bytes)):
        threading.Thread(target=read, args=args, daemon=True).start()
    try:
        wait_for(lambda: sum(line.startswith(b"clowderctl events: following")
                             for line in said) == 2, 30,
                 f"events --follow to follow both boxes (it said {said})")
        first = {}
        for r in (fleet.a, fleet.b):
            first[r.target] = r.ctl("spawn", "--", "true").stdout.decode().strip()
        wait_for(lambda: {(e.get("host"), e.get("session")) for e in events
                          if e["kind"] == "session-started"} >= set(first.items()), 30,
                 "each box's session-started, with its host")
        fleet.b.box.link(False)
        later = fleet.a.ctl("spawn", "--", "true").stdout.decode().strip()
        wait_for(lambda: any(e.get("host") == a and e.get("session") == later
                             for e in events), 30,
                 "the first box's new session while the second is cut off")
        fleet.b.box.link(True)
        # The second box's connection drops (its PTY host stops, as in a restart): the
        # stream asks it again, and the first box's events never stopped meanwhile.
        fleet.b.box.exec(["systemctl", "stop", "clowder-ptyhost.service"], check=True)
        back = fleet.b.ctl("spawn", "--", "true").stdout.decode().strip()
        wait_for(lambda: any(e.get("host") == b and e.get("session") == back
                             for e in events), 60,
                 "the second box's events again once it is back (reconnected)")
        assert proc.poll() is None
        for r, sid in [(fleet.a, first[a]), (fleet.b, first[b]), (fleet.a, later),
                       (fleet.b, back)]:
            r.ctl("wait", sid, check=False)
            r.ctl("rm", sid, check=False)
    finally:
        proc.kill()
        proc.wait()


class _ViaHostId:
    """What test_attach.Attach needs to run `clowderctl attach HOST:ID` (no --host)."""

    def __init__(self, fleet: Fleet):
        self.env = fleet.env
        self.socket = "-"

    def _as(self, argv: list[str]) -> list[str]:
        i = argv.index("--socket")
        return argv[:i] + argv[i + 2:]


def _type_through(a, first: bytes, word: str, what: str) -> None:
    """Attached through a fleet name: the screen shows ``first``, a typed command runs
    in the session's shell, and the detach key ends the client with 0."""
    from test_attach import DETACH
    try:
        a.wait_raw()
        a.expect(first, what=what)
        a.type(f"echo {word}-$((6*7))\r".encode())
        a.expect(f"{word}-42".encode(), what=f"typed input run there ({word})")
        a.type(DETACH)
        assert a.finish() == 0
    finally:
        a.close()


def test_attach_host_id_and_agent_through_the_fleets_names(fleet):
    from test_attach import Attach
    fleet.b.write_config("agents:\n" + agent_yaml(
        "job", "sh -c 'echo agent-up; PS1=\"job$ \" exec sh -i'"))
    fleet.b.wait_running("job")
    sid = fleet.b.ctl("spawn", "--cwd", WORKDIR, "--", "sh", "-c",
                      "echo plain-up; PS1='plain$ ' exec sh -i").stdout.decode().strip()
    via = _ViaHostId(fleet)
    _type_through(Attach(via, f"{fleet.b.target}:{sid}"), b"plain-up", "typed",
                  "the session's screen on box b, through HOST:ID")
    _type_through(Attach(via, f"{fleet.b.target}:job", "--agent"), b"agent-up", "agent",
                  "the agent's screen on box b, through HOST:AGENT")
    snap = subprocess.run([PYTHON, "-m", "ctl", "snapshot", f"{fleet.b.target}:{sid}"],
                          env=fleet.env, capture_output=True, timeout=60, cwd="/")
    assert b"typed-42" in _ok(snap).encode()
    # wait HOST:ID, and wait over the fleet finding the one box that has the session.
    fleet.b.ctl("kill", "--signal", "HUP", sid)
    waited = subprocess.run([PYTHON, "-m", "ctl", "wait", "--json", f"{fleet.b.target}:{sid}"],
                            env=fleet.env, capture_output=True, timeout=60, cwd="/")
    assert json.loads(_ok(waited))["session"] == sid
    found = json.loads(_ok(fleet.ctl("wait", "--json", sid)))
    assert found["session"] == sid and found["status"] != "exited", found
    missing = fleet.ctl("wait", "no-such-session")
    assert missing.returncode == 125 and b"on none of the hosts" in missing.stderr, missing
    fleet.b.ctl("rm", sid)


def test_kill9_of_one_boxs_daemons_is_survived(fleet):
    """As on one host: systemd restarts them, the sessions are the same, and the fleet's
    table has both boxes again (the other box never stopped answering)."""
    sids = _agents_and_sessions(fleet)
    before = {r.target: r.agents()["web"]["session"] for r in (fleet.a, fleet.b)}
    for unit in ("clowder-ptyhost.service", "clowder-control.service"):
        fleet.a.kill9_and_wait(unit)

    def both():
        proc = fleet.ctl("status", "--json")
        if proc.returncode != 0:
            return None
        status = json.loads(proc.stdout)
        return {a["host"]: a["session"] for a in status["agents"]
                if a["state"] == "running"} == before
    wait_for(both, 30, "both boxes' agents, with the same sessions, after kill -9 on one")
    listed = json.loads(_ok(fleet.ctl("ps", "--json")))
    assert {(s["host"], s["id"]) for s in listed["sessions"]} >= set(sids.items()) | \
        {(t, sid) for t, sid in before.items()}
    _end(fleet, sids)
