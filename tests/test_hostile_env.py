"""Issue 14 point 1, hostile: a spawn's environment reaches only the caller's own session.

With the system units (alice and bob, members of group clowder), bob's Spawn, sent raw
over the wire as any client could: cannot run alice's program by naming it on his PATH
or by its path (the lookup and the exec are bob's, in his session's process); cannot
change his unit's properties through a variable's value (User=, ExecStartPre=,
specifiers, $VAR: each arrives literally in his own process); cannot give the host's
variables (CLOWDER_SESSION naming alice's session, HOME, USER); and alice's running
session is the same before and after.  Root spawning for alice does not hand her root's
login variables (its ssh agent, display, PATH).
"""

from __future__ import annotations

import json
import os
import subprocess

from conftest import PYTHON
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)

MARK = "/tmp/clowder-hostile-env-ran"

# Bob's raw client: one Spawn from the JSON in argv[1]; the session as JSON, or REFUSED.
RAW_SPAWN = """
import json, sys
import clowder_wire as P
from ctl.client import Client, RequestFailed
try:
    with Client(sys.argv[2]) as c:
        print(json.dumps(c.request(P.Spawn(**json.loads(sys.argv[1])), P.SessionInfo).session))
except RequestFailed as exc:
    print("REFUSED", exc)
    sys.exit(1)
"""


def raw_spawn(h, as_user: str, **fields) -> subprocess.CompletedProcess:
    fields.setdefault("cwd", "/")
    return h.run([PYTHON, "-c", RAW_SPAWN, json.dumps(fields), h.socket], user=as_user,
                 check=False)


def environ(pid: int) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().split(b"\0")
    return dict(i.decode().split("=", 1) for i in items if i)


def alices_program() -> str:
    """A program in alice's private home that would leave MARK if it ever ran."""
    os.chmod("/home/alice", 0o700)
    bindir = "/home/alice/.local/bin"
    os.makedirs(bindir, exist_ok=True)
    prog = f"{bindir}/aliceprog"
    with open(prog, "w") as f:
        f.write(f"#!/bin/sh\ntouch {MARK}\nexec sleep 100000\n")
    os.chmod(prog, 0o755)  # executable by anyone who can reach it: only the dir guards it
    subprocess.run(["chown", "-R", "alice:alice", "/home/alice/.local"], check=True)
    return prog


def test_a_spawn_env_reaches_only_its_own_session(system_host):  # noqa: F811
    h = system_host
    if os.path.exists(MARK):
        os.unlink(MARK)
    prog = alices_program()
    alice = h.spawn("aliceprog", user="alice", cwd="/home/alice",
                    env="PATH=/home/alice/.local/bin:/usr/bin:/bin")
    apid = h.ps(user="alice")[alice]["pid"]
    before = environ(apid)
    assert before["USER"] == "alice" and before["CLOWDER_SESSION"] == alice
    os.unlink(MARK)  # alice's own run left it; from here on nothing may

    # Alice's program, by name on bob's PATH and by its path: refused as bob's shell would.
    for argv, env in ((["aliceprog"], {"PATH": "/home/alice/.local/bin"}),
                      ([prog], {})):
        proc = raw_spawn(h, "bob", argv=argv, env=env)
        assert proc.returncode == 1 and b"cannot execute" in proc.stdout, (argv, proc)
    proc = h.ctl("spawn", "--env", "PATH=/home/alice/.local/bin", "--", "aliceprog",
                 user="bob", check=False)
    assert proc.returncode == 2 and b"command not found" in proc.stderr, proc.stderr

    # The host's variables, and alice as the user: refused whole.
    for env in ({"CLOWDER_SESSION": alice}, {"HOME": "/home/alice"}, {"USER": "alice"},
                {"CLOWDER_AGENT": "x"}):
        proc = raw_spawn(h, "bob", argv=["sleep", "100000"], env=env)
        assert proc.returncode == 1 and b"is set by clowder-ptyhost" in proc.stdout, proc
    proc = raw_spawn(h, "bob", argv=["sleep", "100000"], env={"X": "1"}, user="alice")
    assert proc.returncode == 1 and b"only root" in proc.stdout, proc

    # Values that would be unit properties, specifiers or substitutions if they were
    # written into the unit unescaped: bob's own process gets each byte for byte.
    hostile = {
        "X": "a\nUser=alice\nExecStartPre=/bin/touch " + MARK,
        "Y": "%u %h %i $HOME ${USER} $$ \\ \" '",
        "PATH": "/usr/bin:/bin\nUser=root",
        "LD_PRELOAD": "",  # bob's own business in bob's own process
    }
    proc = raw_spawn(h, "bob", argv=["sleep", "100000"], env=hostile)
    assert proc.returncode == 0, proc
    bob = json.loads(proc.stdout)
    got = environ(bob["pid"])
    for k, v in hostile.items():
        assert got[k] == v, (k, got.get(k))
    assert got["USER"] == "bob" and got["HOME"] == "/home/bob", got
    assert got["CLOWDER_SESSION"] == bob["id"]
    props = h.show(bob["unit"], "User", "ExecStartPre", "ExecSearchPath")
    # (systemctl show prints nothing for an empty command list)
    assert props["User"] == "2002" and not props.get("ExecStartPre"), props
    assert os.stat(f"/proc/{bob['pid']}").st_uid == 2002
    # "/bin\nUser=root" is no directory systemd would take: left out of the search path.
    assert props["ExecSearchPath"] == "/usr/bin", props

    assert not os.path.exists(MARK), "a hostile spawn ran alice's program or a property"
    assert environ(apid) == before
    assert h.ps(user="alice")[alice]["state"] == "running"


def test_root_spawning_for_a_user_passes_no_login_of_its_own(system_host):  # noqa: F811
    h = system_host
    env = {**h.env, "SSH_AUTH_SOCK": "/root/agent.sock", "DISPLAY": ":5",
           "PATH": "/root/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_TIME": "C"}
    sid = h.run([PYTHON, "-m", "ctl", "--socket", h.socket, "spawn", "--user", "alice",
                 "--cwd", "/", "--", "sleep", "100000"], env=env).stdout.decode().strip()
    got = environ(h.ps()[sid]["pid"])
    assert "SSH_AUTH_SOCK" not in got and "DISPLAY" not in got, got
    assert got["PATH"] != env["PATH"] and got["LC_TIME"] == "C", got
    assert got["HOME"] == "/home/alice" and got["USER"] == "alice", got
