"""An agent's ``notify:`` command: run on an attention event, as the agent's user.

The command is an argv (never a shell string), run with the agent's uid, gid and
supplementary groups (set by the kernel in the child before exec, as subprocess does for
``user=``; not needed when the agent runs as this daemon's own user), in the agent's cwd
(else /), with HOME, USER, LOGNAME, SHELL from its passwd entry, the agent's env and
this daemon's PATH, and the event as one JSON object and a newline on stdin.  Its
output is discarded; its stderr's last MAX_STDERR bytes go into the log if it fails.

Rate limits, so that an agent that rings its bell in a loop cannot make us fork in one:
at most one run per agent per INTERVAL seconds (the events between are not run; the
first skipped one in each interval is logged), and at most MAX_RUNNING runs at once over
all agents.  A run is killed after TIMEOUT seconds.  Runs are tasks of their own: the
control loop never waits for one.  A failure (not found, not executable, a non-zero
exit, killed for the timeout, no such user) is logged with its cause, never retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import subprocess
import time
from typing import Optional

from clowder_common import events

log = logging.getLogger("clowder-control")

INTERVAL = 30.0  # seconds: at most one run per agent in each
TIMEOUT = 20.0  # seconds a run may take before it is killed
MAX_RUNNING = 16  # runs at once, over all agents
MAX_STDERR = 2048


class Notifier:
    """The notify runs of one daemon."""

    def __init__(self, interval: float = INTERVAL):
        self.interval = interval
        self.last: dict[str, float] = {}  # agent -> time.monotonic() of its last run
        self.skipped: dict[str, int] = {}  # agent -> events skipped since its last run
        self.running: set[asyncio.Task] = set()

    def notify(self, agent: str, argv: Optional[tuple], user: Optional[str], cwd: str,
               env: dict, event: dict) -> bool:
        """Start ``argv`` for ``event`` unless a limit says no; whether it started."""
        if not argv:
            return False
        now = time.monotonic()
        last = self.last.get(agent)
        if last is not None and now - last < self.interval:
            self.skipped[agent] = self.skipped.get(agent, 0) + 1
            if self.skipped[agent] == 1:
                self._log(agent, logging.INFO, f"notify not run for {event['fields']} "
                          f"(rate limit: one run per {self.interval:g} s)", "notify-limited")
            return False
        if len(self.running) >= MAX_RUNNING:
            self._log(agent, logging.WARNING, f"notify not run: {MAX_RUNNING} notify "
                      "commands are running already", "notify-limited")
            return False
        self.last[agent] = now
        self.skipped.pop(agent, None)
        task = asyncio.get_running_loop().create_task(
            self._run(agent, tuple(argv), user, cwd, env, event))
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return True

    def forget(self, agent: str) -> None:
        self.last.pop(agent, None)
        self.skipped.pop(agent, None)

    def _log(self, agent: str, level: int, message: str, cause: str, kind: str = "") -> None:
        log.log(level, "agent %s: %s", agent, message,
                extra={"CLOWDER_AGENT": agent, "CLOWDER_CAUSE": cause,
                       **(events.fields(kind) if kind else {})})

    async def _run(self, agent: str, argv: tuple, user: Optional[str], cwd: str,
                   env: dict, event: dict) -> None:
        what = f"notify command {argv[0]!r}"
        try:
            kwargs = _as_user(user, env)
        except KeyError:
            self._log(agent, logging.ERROR, f"{what} not run: user {user!r} does not exist",
                      "notify-failed", "agent-notify-failed")
            return
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd if os.path.isdir(cwd) else "/", start_new_session=True, **kwargs)
        except (OSError, subprocess.SubprocessError) as exc:
            why = getattr(exc, "strerror", None) or exc
            self._log(agent, logging.ERROR, f"{what} could not be started: {why}",
                      "notify-failed", "agent-notify-failed")
            return
        data = (json.dumps(event) + "\n").encode()
        try:
            _, err = await asyncio.wait_for(proc.communicate(data), TIMEOUT)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            self._log(agent, logging.ERROR, f"{what} killed: still running after "
                      f"{TIMEOUT:g} s", "notify-failed", "agent-notify-failed")
            return
        except asyncio.CancelledError:
            proc.kill()
            raise
        if proc.returncode != 0:
            tail = err[-MAX_STDERR:].decode("utf-8", "replace").strip()
            self._log(agent, logging.ERROR, f"{what} exited with {proc.returncode}"
                      + (f": {tail}" if tail else ""), "notify-failed",
                      "agent-notify-failed")
            return
        self._log(agent, logging.INFO, f"{what} ran for attention "
                  f"{event['fields'].get('attention')}", "notify", "agent-notified")


def _as_user(user: Optional[str], env: dict) -> dict:
    """subprocess keywords that run a command as ``user`` (None: as we are)."""
    if user is None or pwd.getpwnam(user).pw_uid == os.getuid():
        pw = pwd.getpwuid(os.getuid())
        ids = {}
    else:
        pw = pwd.getpwnam(user)
        groups = [g for g in os.getgrouplist(pw.pw_name, pw.pw_gid)]
        ids = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": groups}
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env,
            "HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name,
            "SHELL": pw.pw_shell or "/bin/sh"}
    return {"env": full, **ids}
