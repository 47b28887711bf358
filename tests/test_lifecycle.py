"""A session's life as a tmux user expects it (issue 14, points 6 and 7; acceptance 5).

`kill` hangs up and escalates and says so; `rm` right after a kill works; an ended session
keeps its exit status until its owner has seen it (`ps`, `wait`, an attach), then leaves
`ps` (or after the host's --show-ended time) while `ps --all` still lists it; names are
unique among a user's running sessions, `rename` changes them (printable ones only, never
someone else's session); `attach` without an id takes the caller's newest running
session.  Against system and user units (the ``host`` fixture), under a real systemd.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from conftest import PYTHON, wait_for
from test_access import system_host  # noqa: F401  (alice, bob and a system host)
from test_attach import DRAW_PROBE, attach  # noqa: F401  (the fixture)
from test_ending import ESCALATION_BOUND, STUBBORN


def ps(host, *opts: str, user=None) -> dict:
    """``clowderctl ps --json`` as a user would run it: a plain ps sees what it lists."""
    out = host.ctl("ps", "--json", *opts, user=user).stdout
    return {s["id"]: s for s in json.loads(out)}


def prompt(host, sid: str, user=None) -> None:
    wait_for(lambda: b"$ " in host.backlog(sid, user=user)
             or b"# " in host.backlog(sid, user=user), 15, f"session {sid}: bash's prompt")


# --- kill and rm ---------------------------------------------------------------------------

def test_kill_hangs_up_then_escalates_and_says_so(host):
    # An interactive bash ignores SIGTERM; the hang-up ends it.
    sid = host.spawn("bash", "--norc", "-i")
    prompt(host, sid)
    r = host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
    assert r.stdout.decode().strip() == f"session {sid}: hung up; killed by signal 1 " \
                                        f"(SIGHUP)", r.stdout
    host.ctl("rm", sid)
    assert sid not in ps(host, "--all")
    # One that ignores the hang-up and SIGTERM too is ended, and the reply says how far
    # it went.
    sid = host.spawn(*STUBBORN)
    wait_for(lambda: b"stubborn-up" in host.backlog(sid), 15, "the stubborn program")
    r = host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
    assert b"hung up, then sent SIGTERM, then SIGKILL; killed by signal 9" in r.stdout, r
    host.ctl("rm", sid)


def test_rm_right_after_a_single_signal_waits_for_the_end(host):
    """The old host answered "still running" to a Remove sent right after the Kill."""
    sid = host.spawn("sleep", "100000")
    r = host.run([PYTHON, "-c", f"""
from ctl.client import Client
import clowder_wire as P
with Client({host.socket!r}) as c:
    c.request(P.Kill(session={sid!r}, signal=9), P.Ok)
    c.request(P.Remove(session={sid!r}), P.Ok)
print("removed")
"""], check=False)
    assert r.returncode == 0 and r.stdout.strip() == b"removed", r
    assert sid not in ps(host, "--all")
    # A session nobody ended is still refused, with the reason.
    sid = host.spawn("sleep", "100000")
    r = host.ctl("rm", sid, check=False)
    assert r.returncode == 1 and b"still running: kill it first" in r.stderr, r
    host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)


# --- ended sessions ------------------------------------------------------------------------

def test_an_ended_session_leaves_ps_once_seen(host, attach):
    # Seen by ps: the first listing after the end shows its code, the next one not.
    sid = host.spawn("sh", "-c", "read x; exit 3")
    host.ctl("send", sid, "go\r")
    seen = wait_for(lambda: ps(host).get(sid, {}).get("state") == "exited"
                    and ps(host, "--all")[sid], 15, "the exit shown by ps")
    assert seen["exit_code"] == 3, seen
    assert sid not in ps(host), "a seen end stayed in ps"
    assert ps(host, "--all")[sid]["exit_code"] == 3
    # Still kept: wait, backlog and rm work on it.
    w = host.ctl("wait", sid, check=False)
    assert (w.returncode, w.stdout.strip()) == (3, b"3"), w
    host.ctl("rm", sid)
    assert sid not in ps(host, "--all")
    # Seen by wait.
    sid = host.spawn("sh", "-c", "read x; exit 4")
    host.ctl("send", sid, "go\r")
    assert host.ctl("wait", sid, check=False).returncode == 4
    assert sid not in ps(host) and ps(host, "--all")[sid]["exit_code"] == 4
    # Seen by an attach that showed the end; and a restart keeps it seen.
    sid = host.spawn("sh", "-c", "read x; echo bye-$((2+3)); exit 5")
    client = attach(sid)
    client.wait_raw()
    client.type(b"go\r")
    client.expect(b"bye-5", what="the session's last words")
    assert client.finish() == 5
    assert sid not in ps(host)
    host.restart()
    assert sid not in ps(host) and ps(host, "--all")[sid]["exit_code"] == 5


def test_only_the_owner_sees_and_unseen_ends_leave_after_the_configured_time(
        system_host):  # noqa: F811
    h = system_host
    sid = h.spawn("sh", "-c", "exit 6", user="alice")
    # Root's listing (--all here, as plain) does not count as alice seeing it.
    wait_for(lambda: {s["id"]: s for s in json.loads(h.ctl("ps", "--json").stdout)}
             .get(sid, {}).get("state") == "exited", 15, "alice's session to end")
    assert sid in ps(h), "root's ps counted as alice seeing it"
    assert ps(h, user="alice")[sid]["exit_code"] == 6
    assert sid not in ps(h, user="alice")
    # --show-ended 0: an end nobody has seen is in no plain ps, only in --all.
    h.drop_in("[Service]\nEnvironment=CLOWDER_SHOW_ENDED=0\n")
    try:
        h.restart()
        sid = h.spawn("sh", "-c", "exit 7", user="alice")
        wait_for(lambda: {s["id"]: s for s in json.loads(
            h.ctl("ps", "--all", "--json").stdout)}[sid]["state"] == "exited", 15,
            "alice's second session to end")
        assert sid not in ps(h, user="alice")
        assert ps(h, "--all", user="alice")[sid]["exit_code"] == 7
    finally:
        h.remove_drop_ins()


# --- names ---------------------------------------------------------------------------------

def test_names_are_unique_among_running_sessions_and_rename(host):
    first = host.spawn("sleep", "100000", name="work")
    r = host.ctl("spawn", "--name", "work", "--", "sleep", "100000", check=False)
    assert r.returncode == 1 and b"already named 'work'" in r.stderr \
        and first.encode() in r.stderr, r
    r = host.ctl("rename", first, "work-old")
    assert r.stdout.strip() == f"session {first} is now named work-old".encode(), r
    assert ps(host)[first]["name"] == "work-old"
    second = host.spawn("sleep", "100000", name="work")
    r = host.ctl("rename", "work", "work-old", check=False)
    assert r.returncode == 1 and b"already named 'work-old'" in r.stderr, r
    # By name, and to a name only an ended session has: ended sessions hold no name.
    host.ctl("kill", "work-old", timeout=ESCALATION_BOUND + 10)
    host.ctl("rename", "work", "work-old")
    assert ps(host)[second]["name"] == "work-old"
    # The running one of a name is the one a name finds.
    assert host.ctl("send", "work-old", "x").returncode == 0  # an ended one refuses
    # Names must be printable, and agent: names are clowder-control's.
    for bad, why in (("a\x1b[2Jb", b"U+001B"), ("x\u202ey", b"U+202E"),
                     ("agent:fake", b"clowder-control"), ("", b"may not be empty"),
                     ("n" * 201, b"at most 200")):
        r = host.ctl("rename", second, bad, check=False)
        assert r.returncode == 1 and why in r.stderr, (bad, r.stderr)
    assert ps(host)[second]["name"] == "work-old"
    host.ctl("kill", second, timeout=ESCALATION_BOUND + 10)


def test_another_user_cannot_rename(system_host):  # noqa: F811
    h = system_host
    sid = h.spawn("sleep", "100000", user="alice", name="alices")
    r = h.ctl("rename", sid, "bobs", user="bob", check=False)
    assert r.returncode == 1 and b"no such session" in r.stderr, r
    r = h.ctl("rename", "alices", "bobs", user="bob", check=False)
    assert r.returncode == 1 and b"no such session" in r.stderr, r
    assert ps(h, user="alice")[sid]["name"] == "alices"
    # Names are per user: bob may have one alice has.
    bobs = h.spawn("sleep", "100000", user="bob", name="alices")
    for who, s in (("alice", sid), ("bob", bobs)):
        h.ctl("kill", s, user=who, timeout=ESCALATION_BOUND + 10)


# --- attach without an id ------------------------------------------------------------------

def test_attach_without_an_id_takes_the_newest_running_session(host, attach):
    older = host.spawn("sh", "-c", "echo older-$((1+1)); exec sleep 100000")
    newer = host.spawn("sh", "-c", "echo newer-$((2+2)); exec sleep 100000")
    wait_for(lambda: b"newer-4" in host.backlog(newer), 15, "the newer session's line")
    ended_one = host.spawn("sh", "-c", "exit 0")  # newest, but ended: not taken
    host.ctl("wait", ended_one)
    client = attach("--read-only")  # the Attach helper puts its id last: none here
    client.expect(f"attached to {newer}".encode(), what="the banner naming the newest")
    client.expect(b"newer-4", what="the newest session's screen")
    for sid in (older, newer):
        host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
    client.finish()  # the end of the session it watched ends it
    client = attach("--read-only")
    client.expect(b"no running session to attach to", what="the refusal")
    assert client.finish() == 1  # refused (ctl/exits.py), not a usage error


def test_attach_without_an_id_is_drawn_before_the_command_line(host, attach):
    """Plain `attach` asks which session and attaches on one connection before the rest
    of clowderctl is imported (ctl/firstpaint.py), choosing as the full path chooses:
    the newest running session, not an ended one; with none, the full path refuses."""
    probe_dir = tempfile.mkdtemp(prefix="clowder-draw-", dir="/var/tmp")
    os.chmod(probe_dir, 0o777)  # the user scope's user writes there too
    out = f"{probe_dir}/drawn"
    saved = host.env
    host.env = {**saved, "PROBE_OUT": out}
    try:
        older = host.spawn("sh", "-c", "echo older-$((1+1)); exec tail -f /dev/null")
        newer = host.spawn("sh", "-c", "echo newer-$((2+2)); exec tail -f /dev/null")
        wait_for(lambda: b"newer-4" in host.backlog(newer), 15, "the newer session's line")
        host.ctl("wait", host.spawn("sh", "-c", "exit 0"))  # newest, but ended
        client = attach(None, entry=("-c", DRAW_PROBE))
        client.expect(f"attached to {newer}".encode(), what="the banner naming the newest")
        client.expect(b"newer-4", what="the newest session's screen")
        with open(out) as f:
            assert f.read() == repr((newer, [])), "not drawn before the command line"
        client.wait_raw()
        client.type(b"\x1c")  # Ctrl-\\: detach
        assert client.finish() == 0
        os.unlink(out)
        for sid in (older, newer):
            host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
        client = attach(None, entry=("-c", DRAW_PROBE))
        client.expect(b"no running session to attach to", what="the refusal")
        assert client.finish() == 1
        assert not os.path.exists(out), "drawn with no session to attach to"
    finally:
        host.env = saved
        shutil.rmtree(probe_dir)
