"""The environment a session's program starts with (README, "A session's environment").

Three layers, later ones winning: what systemd gives every service (PATH, LANG of the
manager, and for a unit with User= its own HOME/USER/LOGNAME/SHELL); what the client
sent (Spawn.env); what the host sets itself, never taken from a client
(protocol.HOST_SET_ENV): the passwd entry of the uid the session runs as, decided by
Host._run_as, and the session's own id and agent.  A client may set anything else: the
program runs as the client's own uid (only root may name another user), so a variable
such as LD_PRELOAD changes only what the client could run anyway.
"""

from __future__ import annotations

import pwd

import clowder_wire as protocol


class EnvError(ValueError):
    """A Spawn's env cannot be used; the message says which variable and why."""


def check(env) -> dict[str, str]:
    """The client's variables, refused whole if one is malformed or the host's own."""
    if not isinstance(env, dict):
        raise EnvError("env must be a mapping of names to strings")
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k \
                or "\0" in k or "\0" in v or not (k[0].isalpha() or k[0] == "_"):
            raise EnvError(f"invalid environment variable {k!r}")
        if k in protocol.HOST_SET_ENV:
            raise EnvError(f"{k} is set by clowder-ptyhost in every session (from the "
                           f"passwd entry of its user, or the session itself) and cannot "
                           f"be given; to run a program with another {k}, start it "
                           f"through env(1): env {k}=... PROGRAM")
    return dict(env)


def host_set(uid: int, sid: str, agent: str | None) -> dict[str, str]:
    """The variables the host sets: the user's identity from passwd, and the session's."""
    out = {"CLOWDER_SESSION": sid}
    if agent:
        out["CLOWDER_AGENT"] = agent
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return out  # systemd refuses a User= it cannot resolve; nothing to take from
    out.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name,
               SHELL=pw.pw_shell or "/bin/sh")
    return out


def agent_of(name: str) -> str | None:
    """The agent a session named ``agent:NAME[/SHELL]`` belongs to (clowder-control's)."""
    if not name.startswith(protocol.AGENT_PREFIX):
        return None
    return name[len(protocol.AGENT_PREFIX):].split("/", 1)[0] or None


def assignments(client: dict[str, str], uid: int, sid: str,
                agent: str | None) -> list[str]:
    """The unit's Environment= lines: the client's variables under the host's own."""
    merged = {**client, **host_set(uid, sid, agent)}
    return [f"{k}={v}" for k, v in merged.items()]


def search_path(argv0: str, env: dict[str, str]) -> list[str]:
    """The unit's ExecSearchPath= for a bare program name: the PATH sent, as systemd takes it.

    systemd looks ExecStart's bare name up on its own fixed path, not on the unit's
    Environment=PATH (measured on 252: before this, a Spawn with env PATH=/x of a program
    only in /x failed with status 203; tests/test_session_env.py), which is why
    ``--env PATH=...`` found nothing.  ExecSearchPath= (systemd 250) is looked up in the
    session's process, after it became the session's user, so a program the user could
    not run is refused there, as their shell would refuse it.  protocol.search_dirs says
    which entries systemd takes."""
    if "/" in argv0 or "PATH" not in env:
        return []
    return protocol.search_dirs(env["PATH"])
