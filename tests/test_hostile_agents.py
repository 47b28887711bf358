"""Issue 12, items 1, 5, 6 and names: no agent hijack by name, status shows only your
own, UpgradeCheck is root's, and names cannot drive root's terminal.

An agent's session is one the host marked as started by clowder-control (by the
peer's cgroup, from the kernel: ptyhostd/peer.py) that runs as the agents' user; a
session that only has the name is never adopted.  The impostors here are made the two
ways the code allows: an old manifest record (what a host before the mark left: the
test rewrites the parked manifest and kills the host), and a process that root moves
into clowder-control.service's cgroup to spawn as bob (marked, but not the agents' user).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import zlib

import pytest

from conftest import PYTHON, ensure_user, wait_for
from ctl.client import Client
import clowder_wire as P
from test_control import agent_yaml, control  # noqa: F401 - the fixture
from test_ending import control_socket

BOB = ("bob", 2002)
HOSTILE = "\x1b]0;owned\x07\x1b[2J\u202eevil\x9b"  # retitle, clear, reorder, C1 CSI
_HEADER = struct.Struct("<8sQQI")  # ptyhostd.manifest: magic, generation, length, crc


def bob() -> str:
    ensure_user(*BOB, "clowder")
    return BOB[0]


def member(host) -> str | None:
    """The user who plays the other user: bob on the system host; on a user manager's
    host only its own user (and root) can connect, so the impostor is its own."""
    return bob() if host.scope == "system" else None


# --- an old manifest record: what a host from before the mark left behind -------------

def _manifest_fds(pid: int) -> list[str]:
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "clowder-manifest." in os.readlink(f"/proc/{pid}/fd/{fd}"):
                fds.append(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    assert len(fds) == 2, f"the host holds manifest copies {fds}"
    return fds


def rewrite_records(host, change) -> None:
    """Apply ``change(record)`` to each session record of the host's newest manifest,
    written as the next generation, then kill -9 the host: the next one adopts it."""
    copies = []
    for path in _manifest_fds(host.main_pid()):
        with open(path, "rb") as f:
            data = f.read()
        _magic, gen, length, _crc = _HEADER.unpack(data[:_HEADER.size])
        copies.append((gen, path, json.loads(data[_HEADER.size:_HEADER.size + length])))
    copies.sort(key=lambda c: c[0])
    (_old_gen, older, _), (gen, _newer, content) = copies
    for rec in content["sessions"]:
        change(rec)
    body = json.dumps(content, separators=(",", ":")).encode()
    with open(older, "r+b") as f:
        f.truncate(0)
        f.write(_HEADER.pack(b"CLWMANI1", gen + 1, len(body), zlib.crc32(body)) + body)
    host.kill9()


def old_record(sid: str, name: str):
    """A ``change`` that makes ``sid``'s record one a host before the mark wrote."""
    def change(rec: dict) -> None:
        if rec["id"] == sid:
            rec["name"] = name
            rec.pop("agent", None)
    return change


# --- what root types through `attach --agent` -----------------------------------------

def type_to_agent(host, agent: str, text: bytes) -> None:
    """Attach to ``agent`` through clowder-control, type ``text``, see it echoed."""
    with Client(control_socket(host), timeout=10, peer="clowder-control") as c:
        c.sock.settimeout(10)
        c.send(P.Attach(session=agent, cols=80, rows=24, replay=0))
        got = c.recv()
        assert isinstance(got, P.Attached), got
        c.send(P.Input(data=text))
        seen = b""
        deadline = time.monotonic() + 10
        while text.strip() not in seen:
            assert time.monotonic() < deadline, f"{text!r} not echoed by agent {agent}"
            msg = c.recv()
            if isinstance(msg, P.Output):
                seen += msg.data


def check_untouched(host, sid: str, info: dict, user, marks=()) -> None:
    now = host.ps(user=user)[sid]
    assert (now["state"], now["pid"]) == ("running", info["pid"]), now
    out = host.backlog(sid, user=user)
    for mark in marks:
        assert mark not in out, f"{mark!r} reached the impostor's program"


def journal_lines(host, **fields) -> list[dict]:
    unit = ["-u", "clowder-control.service"] if host.scope == "system" else \
        ["_SYSTEMD_USER_UNIT=clowder-control.service"]
    out = subprocess.run(["journalctl", "--no-pager", "-o", "json", *unit,
                          *[f"{k}={v}" for k, v in fields.items()]],
                         capture_output=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


# --- 1. no agent hijack by name -------------------------------------------------------

def test_reserved_and_unshowable_names_are_refused(host):
    users = [None] + ([bob()] if host.scope == "system" else [])
    for user in users:
        for name in ("agent:api", "agent:api/sh"):
            r = host.ctl("spawn", "--name", name, "--", "sleep", "100", user=user,
                         check=False)
            assert r.returncode != 0 and b"reserved for clowder-control" in r.stderr, r
        for bad, point in (("a\x1bb", "U+001B"), ("a\x7fb", "U+007F"), ("a\x85b", "U+0085"),
                           ("a\x9b2Jb", "U+009B"), ("a\u202eb", "U+202E"),
                           ("a\u2066b", "U+2066"), ("a\u200bb", "U+200B")):
            r = host.ctl("spawn", "--name", bad, "--", "sleep", "100", user=user,
                         check=False)
            assert r.returncode != 0 and point.encode() in r.stderr, (bad, r.stderr)
    sid = host.spawn("sleep", "100", name="café-日本 ok")
    assert host.ps()[sid]["name"] == "café-日本 ok"
    assert not any(s["state"] == "running" and s["name"] != "café-日本 ok"
                   for s in host.ps().values()), "a refused spawn left a session"
    host.ctl("kill", sid)


def test_a_session_with_only_the_name_is_never_adopted(host, control):
    """The hijack, with the impostor from an old manifest: restart, up after down and a
    lost registry each give the agent a session of its own; the impostor (the member's,
    same pid, running) gets none of what root types to the agent."""
    user = member(host)
    impostor = host.spawn("cat", name="not-yet-an-agent", user=user)
    info = host.ps(user=user)[impostor]
    rewrite_records(host, old_record(impostor, "agent:api"))
    assert host.ps(user=user)[impostor]["name"] == "agent:api"
    assert not host.ps(user=user)[impostor].get("agent")

    control.write_config("agents:\n" + agent_yaml("api", "cat", control.workdir))
    marks = []
    for variant in ("start", "restart", "up after down", "lost registry"):
        if variant == "restart":
            host.ctl("restart", "api", timeout=40)
        elif variant == "up after down":
            host.ctl("down", "api", timeout=40)
            host.ctl("up", "api", timeout=40)
        elif variant == "lost registry":
            before = control.agents()["api"]["session"]
            for path in (control.registry, control.registry + ".prev"):
                if os.path.exists(path):
                    os.unlink(path)
            control.restart()
        agent = control.wait_running(["api"])["api"]
        assert agent["session"] != impostor, f"{variant}: the impostor was adopted"
        mine = host.ps()[agent["session"]]
        assert mine["agent"] is True and mine["uid"] == host.uid, (variant, mine)
        if variant == "lost registry":
            assert agent["session"] == before, "its own session is adopted by name"
        marks.append(f"typed-{variant.replace(' ', '-')}-x".encode())
        type_to_agent(host, "api", marks[-1] + b"\r")
        assert marks[-1] in host.backlog(agent["session"])
        check_untouched(host, impostor, info, user, marks)
        st = control.status()
        assert impostor in [s["id"] for s in st["unclaimed"]], (variant, st["unclaimed"])
    said = journal_lines(host, CLOWDER_SESSION=impostor, CLOWDER_CAUSE="not-adopted")
    # Once per clowder-control run (it was started once and restarted once).
    assert len(said) == 2, [e["MESSAGE"] for e in said]
    assert "not started by clowder-control" in said[0]["MESSAGE"], said[0]["MESSAGE"]
    host.ctl("kill", impostor, user=user, timeout=20)


def test_the_mark_survives_restart_kill9_and_handoff(host, control):
    control.write_config("agents:\n" + agent_yaml("api", "cat", control.workdir))
    agent = control.wait_running(["api"])["api"]
    plain = host.spawn("sleep", "100000")
    host.restart()
    main = host.kill9()
    host.systemctl("reload", "clowder-ptyhost.service")  # returns once the new code serves
    assert b"took over by hand-off" in host.run(
        ["journalctl", "--no-pager", "-o", "cat", f"_PID={main}",
         "CLOWDER_CAUSE=handoff"]).stdout, "systemctl reload returned before the hand-off"
    now = host.ps()
    assert now[agent["session"]]["agent"] is True and now[plain]["agent"] is False
    control.restart()
    again = control.wait_running(["api"])["api"]
    assert (again["session"], again["pid"], again["spawns"]) == \
        (agent["session"], agent["pid"], agent["spawns"]), "the agent was re-spawned"
    host.ctl("kill", plain)


def test_agents_from_before_the_mark_are_kept_by_their_registry_id(host, control):
    """An upgrade from a host that did not mark agents: the sessions the registry names,
    running as the agents' user, are adopted (same pid, not re-spawned); nothing else."""
    control.write_config("agents:\n" + agent_yaml("api", "cat", control.workdir))
    agent = control.wait_running(["api"])["api"]
    rewrite_records(host, old_record(agent["session"], "agent:api"))
    assert host.ps()[agent["session"]]["agent"] is False, "the record kept its mark"
    control.restart()
    again = control.wait_running(["api"])["api"]
    assert (again["session"], again["pid"], again["spawns"]) == \
        (agent["session"], agent["pid"], agent["spawns"]), "the agent was re-spawned"
    type_to_agent(host, "api", b"after-the-upgrade\r")


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_a_removed_agent_ends_only_its_own_sessions(host, control):
    """A registry from an old clowder-control that adopted bob's session by name names
    it; the agent removed from the YAML meanwhile: bob's session is left running."""
    from controld.registry import AgentRecord, Registry
    name = bob()
    theirs = host.spawn("cat", name="bobs", user=name)
    info = host.ps(user=name)[theirs]
    control.write_config("agents:\n" + agent_yaml("api", "cat", control.workdir))
    control.wait_running(["api"])
    host.systemctl("stop", "clowder-control.service")
    reg = Registry.load(control.registry)
    reg.set(AgentRecord(name="old", session=theirs))
    reg.save()
    host.systemctl("start", "clowder-control.service")
    control.wait_running(["api"])
    # What clowder-control did with it: ended it (the old code) or left it, said either way.
    done = wait_for(lambda: [e for e in journal_lines(host, CLOWDER_AGENT="old")
                             if e.get("CLOWDER_CAUSE") in ("stop", "stop-failed",
                                                           "not-adopted")], 30,
                    "clowder-control to deal with the removed agent's session")
    assert done[0]["CLOWDER_CAUSE"] == "not-adopted", done[0]["MESSAGE"]
    check_untouched(host, theirs, info, name)
    host.ctl("kill", theirs, user=name, timeout=20)


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_member_cannot_take_an_agents_name(host, control):
    """Bob's try of today's hijack is refused; a session marked as clowder-control's
    but running as bob (root moved a process into clowder-control's cgroup to spawn it)
    is not the agent's either."""
    name = bob()
    r = host.ctl("spawn", "--name", "agent:api", "--", "cat", user=name, check=False)
    assert r.returncode != 0 and b"reserved" in r.stderr, r
    control.write_config("agents:\n" + agent_yaml("api", "cat", control.workdir))
    first = control.wait_running(["api"])["api"]
    cgroup = "/sys/fs/cgroup/system.slice/clowder-control.service/cgroup.procs"
    spawn = (f"from ctl.client import Client\nimport clowder_wire as P\n"
             f"with Client({host.socket!r}) as c:\n"
             f"    print(c.request(P.Spawn(argv=['cat'], name='agent:api', user='{name}'),"
             f" P.SessionInfo).session['id'])\n")
    out = host.run(["sh", "-c", f'echo $$ > {cgroup} && exec "$0" -c "$1"', PYTHON, spawn])
    impostor = out.stdout.decode().strip()
    info = host.ps(user=name)[impostor]
    assert info["agent"] is True and info["uid"] == BOB[1], info
    host.ctl("restart", "api", timeout=40)
    agent = control.wait_running(["api"])["api"]
    assert agent["session"] not in (impostor, first["session"])
    type_to_agent(host, "api", b"root-typed-this\r")
    check_untouched(host, impostor, info, name, [b"root-typed-this"])
    said = journal_lines(host, CLOWDER_SESSION=impostor, CLOWDER_CAUSE="not-adopted")
    assert len(said) == 1 and "runs as uid 2002" in said[0]["MESSAGE"], said
    host.ctl("kill", impostor, user=name, timeout=20)


# --- 2. status shows only your own ----------------------------------------------------

@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_status_shows_a_member_only_their_own(host, control):
    name = bob()
    # Before clowder-control starts: its reconcile is what lists the plain sessions.
    roots = host.spawn("sleep", "100000", name="roots-own")
    bobs = host.spawn("sleep", "100000", name="bobs-own", user=name)
    control.write_config("agents:\n" + agent_yaml("api", "sleep 100000", control.workdir))
    control.wait_running(["api"])
    st = json.loads(host.ctl("status", "--json", user=name).stdout)
    assert st["agents"] == [], st["agents"]
    assert [s["id"] for s in st["sessions"]] == [bobs], st["sessions"]
    assert st["unclaimed"] == [], st["unclaimed"]
    assert st["problems"] == [] and "sessions" not in st["host"], st
    text = host.ctl("status", user=name).stdout.decode()
    assert "api" not in text and roots not in text and bobs in text, text
    full = control.status()
    assert {roots, bobs} <= {s["id"] for s in full["sessions"]}
    assert [a["name"] for a in full["agents"]] == ["api"]
    assert set(host.ps(user=name)) == {bobs}, "ps lists only bob's own sessions"
    host.ctl("kill", roots)
    host.ctl("kill", bobs, user=name)


# --- 3. UpgradeCheck is root's --------------------------------------------------------

@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_upgrade_check_is_roots_only(host):
    r = host.ctl("upgrade", "--check", user=bob(), check=False)
    assert r.returncode != 0 and b"uid 2002 may not run the upgrade check" in r.stderr, r
    assert host.ctl("upgrade", "--check").stdout.startswith(b"ok:")


HANDOFF_AS = """
import socket, sys
import clowder_wire as P
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)) + P.encode(P.HandOff()))
r = P.FrameReader()
got = []
while len(got) < 2:
    data = s.recv(65536)
    if not data:
        break
    got += r.feed(data)
print(repr(got[1:]))
"""


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_handoff_is_roots_only(host):
    """HandOff (what ExecReload= sends) from another user: refused, and nothing starts."""
    main = host.main_pid()
    before = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main}",
                       "CLOWDER_CAUSE=handoff"]).stdout
    for _ in range(20):
        r = host.run([PYTHON, "-c", HANDOFF_AS, host.socket], user=bob())
        assert b"uid 2002 may not hand the host off" in r.stdout, r
    assert host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main}",
                     "CLOWDER_CAUSE=handoff"]).stdout == before, "a hand-off was started"
    assert host.main_pid() == main
    host.systemctl("reload", "clowder-ptyhost.service")  # root's own: still works


# --- 4. names never reach root's terminal raw -----------------------------------------

def test_a_hostile_name_from_the_wire_is_printed_escaped(host, control):
    """A name from an old manifest (the host refuses such names now) is printed by ps
    and status with its controls escaped; --json escapes them as JSON does."""
    sid = host.spawn("sleep", "100000", name="plain")
    rewrite_records(host, old_record(sid, HOSTILE))
    control.write_config("agents: []\n")
    for args in (("ps",), ("status",)):
        out = host.ctl(*args).stdout.decode()
        assert sid in out, out
        for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
            assert raw not in out, f"{args}: {raw!r} printed raw: {out!r}"
        assert "\\x1b]0;owned\\x07\\x1b[2J\\u202eevil\\x9b" in out, out
    assert host.ps()[sid]["name"] == HOSTILE
    r = host.ctl("kill", HOSTILE + "-nope", check=False)
    assert "\x1b" not in r.stderr.decode(), r.stderr
    host.ctl("kill", sid)


# --- issue 14, point 9: an agent's `user:` drives it, nobody else does -----------------

def attach_reply(host, agent: str, user: str):
    """What clowder-control answers ``user``'s Attach to ``agent`` with."""
    code = ("import sys, clowder_wire as P\n"
            "from ctl.client import Client, RequestFailed\n"
            "with Client(sys.argv[1], timeout=10, peer='clowder-control') as c:\n"
            "    c.send(P.Attach(session=sys.argv[2], cols=80, rows=24, replay=0))\n"
            "    try:\n"
            "        print(type(c.recv()).__name__)\n"
            "    except RequestFailed as exc:\n"
            "        print('Error', exc)\n")
    return host.run([PYTHON, "-c", code, control_socket(host), agent], user=user,
                    timeout=30).stdout.decode()


def alices_and_roots_agents(control) -> tuple[int, str, dict]:
    """Agent "hers" (``user: alice``) and "roots" running: (alice's uid, bob, hers' info)."""
    alice = ensure_user("alice", 2001, "clowder")
    other = bob()
    workdir = "/home/alice/agent-work"
    os.makedirs(workdir, exist_ok=True)
    os.chown(workdir, alice, alice)
    text = agent_yaml("hers", "sleep 100000", workdir)
    control.write_config("agents:\n" + text.replace(
        "    shells:", "    user: alice\n    shells:") + agent_yaml(
        "roots", "sleep 100000", control.workdir))
    return alice, other, control.wait_running(["hers", "roots"])["hers"]


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_an_agents_user_drives_it_and_no_other_member_does(host, control):
    alice, other, info = alices_and_roots_agents(control)
    assert host.ps(user="alice")[info["session"]]["uid"] == alice, "runs as alice"
    st = json.loads(host.ctl("status", "--json", user="alice").stdout)
    assert [a["name"] for a in st["agents"]] == ["hers"], st["agents"]
    # The hostile member: every verb on an agent that is not theirs is refused.
    for verb in ("up", "down", "restart"):
        r = host.ctl(verb, "hers", user=other, check=False, timeout=40)
        assert r.returncode != 0 and b"may not change agent 'hers'" in r.stderr, r
    assert "Error" in attach_reply(host, "hers", other) and \
        "may not attach to agent 'hers'" in attach_reply(host, "hers", other)
    assert "may not attach" in attach_reply(host, "hers/sh", other)
    assert json.loads(host.ctl("status", "--json", user=other).stdout)["agents"] == []
    same = control.agents()["hers"]
    assert (same["session"], same["pid"], same["state"]) == \
        (info["session"], info["pid"], "running"), "bob's tries touched it"
    # Alice may drive hers, and not root's.
    assert attach_reply(host, "hers", "alice").startswith("Attached")
    assert "may not attach" in attach_reply(host, "roots", "alice")
    r = host.ctl("down", "roots", user="alice", check=False, timeout=40)
    assert r.returncode != 0 and b"may not change agent 'roots'" in r.stderr, r
    host.ctl("restart", "hers", user="alice", timeout=40)
    host.ctl("down", "hers", user="alice", timeout=40)
    assert control.agents()["hers"]["state"] == "down"
    host.ctl("up", "hers", user="alice", timeout=40)
    again = control.wait_running(["hers"])["hers"]
    assert again["session"] != info["session"] and again["spawns"] == 3
