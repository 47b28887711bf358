"""Issue 14, points 1 and 5, acceptance 1: a session starts with its user's environment.

Under a real systemd, system and user units: a non-root user's program in ~/.local/bin
on their PATH runs by its bare name (and with the PATH given by --env only); ``env``
inside a root, a user's and an agent's session shows PATH, HOME, USER, LOGNAME, SHELL,
CLOWDER_SESSION (and CLOWDER_AGENT for the agent's); the host's own variables cannot be
given; attaching to the session you are in is refused.  How: README, "A session's
environment"; ptyhostd/sessionenv.py.
"""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest

from conftest import PYTHON, ensure_user, wait_for
from test_control import agent_yaml, control  # noqa: F401 - the fixture

# The system scope's non-root caller (in group clowder, so that they may connect).
MEMBER = "envuser"
# `env` between two markers, then a long sleep: the session stays to be looked at.
SHOW_ENV = "echo ENV-BEGIN; env; echo ENV-END; exec sleep 100000"


def caller(host) -> str:
    """The non-root user who spawns in this scope: the user manager's, or MEMBER."""
    if host.scope == "user":
        return host.run_user
    ensure_user(MEMBER, 2011, "clowder")
    return MEMBER


def user_env(host, user: str, path: str) -> dict:
    """The environment of a login shell of ``user`` whose PATH is ``path``."""
    pw = pwd.getpwnam(user)
    env = {"PATH": path, "HOME": pw.pw_dir, "USER": user, "LANG": "C.UTF-8"}
    if host.scope == "user":
        env["XDG_RUNTIME_DIR"] = f"/run/user/{pw.pw_uid}"
    return env


def ctl_as(host, user: str, env: dict, *args, check=True) -> subprocess.CompletedProcess:
    return host.run([PYTHON, "-m", "ctl", "--socket", host.socket, *args], user=user,
                    env=env, check=check, cwd=env["HOME"])


def install_prog(user: str) -> str:
    """~/.local/bin/envprog of ``user``, printing a mark and then the environment."""
    pw = pwd.getpwnam(user)
    bindir = os.path.join(pw.pw_dir, ".local", "bin")
    os.makedirs(bindir, exist_ok=True)
    prog = os.path.join(bindir, "envprog")
    with open(prog, "w") as f:
        f.write(f"#!/bin/sh\necho PROG-RAN\n{SHOW_ENV}\n")
    os.chmod(prog, 0o755)
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}",
                    os.path.join(pw.pw_dir, ".local")], check=True)
    return bindir


def session_env(host, sid: str, user: str | None = None) -> dict:
    """What ``env`` printed in session ``sid`` (SHOW_ENV), as a dict."""
    def shown():
        out = host.backlog(sid, user=user).decode(errors="replace")
        return out if "ENV-END" in out else None
    out = wait_for(shown, 15, f"session {sid} to print its environment")
    block = out.split("ENV-BEGIN", 1)[1].split("ENV-END", 1)[0]
    return dict(line.split("=", 1) for line in block.replace("\r", "").splitlines()
                if "=" in line)


def assert_identity(env: dict, user: str, sid: str) -> None:
    pw = pwd.getpwnam(user)
    assert env.get("HOME") == pw.pw_dir, env
    assert env.get("USER") == user and env.get("LOGNAME") == user, env
    assert env.get("SHELL") == (pw.pw_shell or "/bin/sh"), env
    assert env.get("CLOWDER_SESSION") == sid, env
    assert env.get("PATH"), env


def test_a_program_on_the_callers_path_runs_by_its_name(host):
    user = caller(host)
    bindir = install_prog(user)
    env = user_env(host, user, f"{bindir}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    sid = ctl_as(host, user, env, "spawn", "--", "envprog").stdout.decode().strip()
    inside = session_env(host, sid, user=user)
    assert "PROG-RAN" in host.backlog(sid, user=user).decode()
    assert inside["PATH"] == env["PATH"]
    assert_identity(inside, user, sid)
    assert "CLOWDER_AGENT" not in inside
    # ps shows the command as typed, not where it was found.
    assert host.ps(user=user)[sid]["argv"] == ["envprog"]


def test_path_given_with_env_is_where_the_program_is_found(host):
    """The old failure: --env PATH=... reached the environment, but systemd looked the
    program up on its own path."""
    user = caller(host)
    bindir = install_prog(user)
    env = user_env(host, user, "/usr/sbin:/usr/bin:/sbin:/bin")
    proc = ctl_as(host, user, env, "spawn", "--", "envprog", check=False)
    assert proc.returncode == 2 and b"envprog: command not found on PATH" in proc.stderr, \
        proc.stderr
    sid = ctl_as(host, user, env, "spawn", "--env", f"PATH={bindir}:/usr/bin:/bin", "--",
                 "envprog").stdout.decode().strip()
    assert session_env(host, sid, user=user)["PATH"] == f"{bindir}:/usr/bin:/bin"


def test_a_relative_path_is_from_the_sessions_directory(host):
    user = caller(host)
    bindir = install_prog(user)
    env = user_env(host, user, "/usr/sbin:/usr/bin:/sbin:/bin")
    sid = ctl_as(host, user, env, "spawn", "--cwd", os.path.dirname(bindir), "--",
                 "bin/envprog").stdout.decode().strip()
    assert_identity(session_env(host, sid, user=user), user, sid)
    assert host.ps(user=user)[sid]["argv"] == [f"{bindir}/envprog"]


def test_env_of_the_scopes_own_session(host):
    """Root's session (system units) and the user's (user units) have their identity."""
    who = host.run_user or "root"
    sid = host.spawn("sh", "-c", SHOW_ENV)
    inside = session_env(host, sid)
    assert_identity(inside, who, sid)
    assert inside["PATH"] == host.env["PATH"]


def test_passed_variables_and_env_overrides(host):
    user = caller(host)
    env = {**user_env(host, user, "/usr/sbin:/usr/bin:/sbin:/bin"),
           "SSH_AUTH_SOCK": "/tmp/agent.sock",
           "LC_TIME": "C", "COLORTERM": "truecolor", "TERM": "screen",
           "NOT_PASSED": "1", "DISPLAY": ":7"}
    sid = ctl_as(host, user, env, "spawn", "--env", "DISPLAY=:9", "--env", "EXTRA=x y",
                 "--", "sh", "-c", SHOW_ENV).stdout.decode().strip()
    inside = session_env(host, sid, user=user)
    assert inside["SSH_AUTH_SOCK"] == "/tmp/agent.sock" and inside["LC_TIME"] == "C"
    assert inside["COLORTERM"] == "truecolor" and inside["TERM"] == "screen"
    assert inside["DISPLAY"] == ":9" and inside["EXTRA"] == "x y"
    assert "NOT_PASSED" not in inside


@pytest.mark.parametrize("name", ["HOME", "USER", "LOGNAME", "SHELL", "CLOWDER_SESSION",
                                  "CLOWDER_AGENT"])
def test_the_hosts_own_variables_cannot_be_given(host, name):
    proc = host.ctl("spawn", "--env", f"{name}=/tmp/x", "--", "true", check=False)
    assert proc.returncode == 1, proc
    assert f"{name} is set by clowder-ptyhost".encode() in proc.stderr, proc.stderr
    assert not host.session_units()


def test_an_agents_sessions_have_its_name(host, control):  # noqa: F811
    control.write_config("agents:\n" + agent_yaml(
        "envagent", ["sh", "-c", SHOW_ENV], control.workdir,
        shell=f"sh -c {SHOW_ENV!r}"))
    control.wait_running(["envagent"])
    by_name = {s["name"]: s["id"] for s in host.ps().values()}
    who = host.run_user or "root"
    for name in ("agent:envagent", "agent:envagent/sh"):
        sid = by_name[name]
        inside = session_env(host, sid)
        assert_identity(inside, who, sid)
        assert inside.get("CLOWDER_AGENT") == "envagent", inside


def test_attaching_to_the_session_you_are_in_is_refused(host):
    sid = host.spawn("sh", "-c", f"{PYTHON} -m ctl --socket {host.socket} attach "
                     f"\"$CLOWDER_SESSION\"; echo attach-rc=$?; exec sleep 100000")
    out = wait_for(lambda: (lambda b: b if b"attach-rc=" in b else None)(host.backlog(sid)),
                   15, "the attach inside the session to end")
    assert b"attach-rc=2" in out, out
    assert b"is session " + sid.encode() + b" itself" in out.replace(b"\r\n", b" "), out


def test_attaching_to_the_session_you_are_in_by_name_is_refused(host):
    """By name (or as an agent), the id is known only once the host answers: still refused."""
    sid = host.spawn("sh", "-c", f"{PYTHON} -m ctl --socket {host.socket} attach selfy; "
                     f"echo attach-rc=$?; exec sleep 100000", name="selfy")
    out = wait_for(lambda: (lambda b: b if b"attach-rc=" in b else None)(host.backlog(sid)),
                   15, "the attach inside the session to end")
    assert b"attach-rc=2" in out, out
    assert b"is session " + sid.encode() + b" itself" in out.replace(b"\r\n", b" "), out
