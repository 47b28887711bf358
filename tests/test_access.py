"""Who may do what (issue 2, acceptance 8): with system units a non-root user's
session runs as that user, and another non-root user can neither list, attach to,
send to nor kill it."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import Env, ensure_user, wait_for
from ctl.client import Client
from hostile import connect_as
import clowder_wire as P
from test_ending import control_socket


@pytest.fixture
def system_host(systemd_required):
    env = Env("system")
    env.stop_all()
    env.install()
    subprocess.run(["getent", "group", "clowder"], check=True, capture_output=True)
    ensure_user("alice", 2001, "clowder")
    ensure_user("bob", 2002, "clowder")
    ensure_user("mallory", 2003)  # not in the clowder group
    env.start()
    yield env
    env.stop_all()
    assert env.session_units() == []


def test_session_runs_as_its_client(system_host):
    h = system_host
    sid = h.spawn("sh", "-c", "id -un; id -u; exec sleep 100000", user="alice",
                  cwd="/home/alice")
    wait_for(lambda: b"2001" in h.backlog(sid, user="alice"), 10,
             "alice's session to print its uid")
    out = h.backlog(sid, user="alice")
    assert b"alice" in out
    info = h.ps(user="alice")[sid]
    assert info["uid"] == 2001
    assert os.stat(f"/proc/{info['pid']}").st_uid == 2001
    props = h.show(info["unit"], "User")
    assert props["User"] == "2001"


def test_each_users_sessions_run_in_a_slice_of_their_own(system_host):
    """System units: a session runs in clowder-uidUID.slice under clowder.slice, not
    beside the host in system.slice, so systemd accounts and limits each user's sessions
    together, apart from other users' and from the host (docs/design.md "A slice for
    each user")."""
    h = system_host
    spawned = [(h.spawn("sleep", "100000", user="alice", cwd="/home/alice"), "alice", 2001),
               (h.spawn("sleep", "100000", user="alice", cwd="/home/alice"), "alice", 2001),
               (h.spawn("sleep", "100000", user="bob", cwd="/home/bob"), "bob", 2002),
               (h.spawn("sleep", "100000"), None, 0)]
    for sid, user, uid in spawned:
        info = h.ps(user=user)[sid]
        props = h.show(info["unit"], "Slice", "ControlGroup")
        cgroup = f"/clowder.slice/clowder-uid{uid}.slice/{info['unit']}"
        assert props == {"Slice": f"clowder-uid{uid}.slice", "ControlGroup": cgroup}, props
        with open(f"/proc/{info['pid']}/cgroup") as f:
            assert f.read().strip().endswith(f"::{cgroup}"), f"{sid}'s program ran elsewhere"
    host_cgroup = h.show("clowder-ptyhost.service", "ControlGroup")["ControlGroup"]
    assert host_cgroup == "/system.slice/clowder-ptyhost.service", host_cgroup
    # A user's slice is one handle on all their sessions: stopping it ends alice's two
    # (as an admin may), and nobody else's.
    h.systemctl("stop", "clowder-uid2001.slice")
    wait_for(lambda: all(h.ps(user="alice")[sid]["state"] != "running"
                         for sid, user, _ in spawned if user == "alice"), 15,
             "alice's sessions to end with her slice")
    assert h.ps(user="bob")[spawned[2][0]]["state"] == "running"
    assert h.ps()[spawned[3][0]]["state"] == "running"


def test_other_user_cannot_touch_it(system_host):
    h = system_host
    sid = h.spawn("sleep", "100000", user="alice", cwd="/home/alice", name="secret")
    assert sid not in h.ps(user="bob")
    for args in (["send", sid, "x"], ["backlog", sid], ["kill", sid], ["wait", sid],
                 ["attach", "--read-only", sid], ["send", "secret", "x"],
                 ["snapshot", sid], ["snapshot", "--format", "json", sid], ["rm", sid]):
        proc = h.ctl(*args, user="bob", check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode != 0, f"bob could run {args}"
        assert b"no such session" in proc.stderr, proc.stderr
    # Only root may start a session as someone else.
    proc = h.ctl("spawn", "--user", "alice", "--", "true", user="bob", check=False)
    assert proc.returncode != 0 and b"only root" in proc.stderr
    # The socket is not world-writable: a user outside the group cannot even connect.
    mode = os.stat(h.socket).st_mode & 0o777
    assert mode & 0o002 == 0, oct(mode)
    proc = h.ctl("ps", user="mallory", check=False)
    assert proc.returncode != 0 and b"permission denied" in proc.stderr.lower()
    # Nor to clowder-control's, which a member (bob) reaches.
    control = control_socket(h)
    mode = os.stat(control).st_mode & 0o777
    assert mode & 0o002 == 0, oct(mode)
    h.ctl("--control-socket", control, "status", user="bob")
    proc = h.ctl("--control-socket", control, "status", user="mallory", check=False)
    assert proc.returncode != 0 and \
        f"permission denied on {control}".encode() in proc.stderr.lower(), proc.stderr
    # Root sees everything, and alice's session is untouched.
    assert h.ps()[sid]["state"] == "running"
    assert h.ps(user="alice")[sid]["state"] == "running"


def test_other_user_gets_nothing_of_it_on_the_wire(system_host):
    """What clowderctl refuses bob above, as raw requests on his own connection: an Attach
    asking for alice's scrollback is refused with none of it sent, and a peek at the
    list (which marks no end seen) leaves her session out."""
    h = system_host
    sid = h.spawn("sh", "-c", "seq 1 3000; exec sleep 100000", user="alice",
                  cwd="/home/alice")
    wait_for(lambda: b"\n3000\r\n" in h.backlog(sid, user="alice"), 10,
             "alice's session to print its lines")
    bobs = h.spawn("sleep", "100000", user="bob", cwd="/home/bob")
    # Root's same Attach gets her lines: the request asks for something there is.
    with Client(h.socket, timeout=10) as c:
        c.send(P.Attach(session=sid, history=500))
        assert isinstance(c.recv(), P.Attached)
        history = c.recv()
        assert isinstance(history, P.SnapshotData) and b"2500" in history.data, history
    with connect_as("bob", h.socket) as s:
        s.settimeout(10)
        s.sendall(b"".join(P.encode(m) for m in (
            P.Hello(version=P.PROTOCOL_VERSION), P.Attach(session=sid, history=500),
            P.ListSessions(peek=True), P.ListSessions(peek=True, all=True), P.Detach())))
        reader, got = P.FrameReader(), []
        while data := s.recv(65536):  # the host closes after the Detach's Ok
            got += reader.feed(data)
    assert [type(m).__name__ for m in got] == \
        ["Welcome", "Error", "SessionList", "SessionList", "Ok"], got
    assert got[0].uid == 2002 and got[1].code == "no-session", got[:2]
    for listing in got[2:4]:
        ids = [x["id"] for x in listing.sessions]
        assert sid not in ids and bobs in ids, ids
    assert h.ps(user="alice")[sid]["state"] == "running"
    h.ctl("kill", bobs, user="bob")


def test_root_may_spawn_as_another_user(system_host):
    h = system_host
    sid = h.ctl("spawn", "--user", "bob", "--cwd", "/", "--", "sh", "-c",
                "id -un; exec sleep 100000").stdout.decode().strip()
    wait_for(lambda: b"bob" in h.backlog(sid), 10, "the session to print its user")
    assert sid in h.ps(user="bob")
