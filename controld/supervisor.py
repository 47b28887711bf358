"""The supervisor: keeps each configured agent (and its companion shells) running.

An agent's sessions live on the PTY host, named ``agent:<name>`` and
``agent:<name>/<shell>``; this daemon holds only what it wants and what it knows, so it
can be restarted at any moment without touching a session.  At start it reconciles:
a session still running is adopted (by the id in the registry, else by its name) if
it is the agent's own: the host marked it as started by this daemon (``agent``, see
ptyhostd/peer.py) and it runs as the agents' user (this daemon's uid) - a name alone
never makes a session an agent's; one that is gone is re-spawned (an agent with its
resume command) and the reason is recorded; a running session no agent claims is
reported (a plain session as one, an ``agent:`` name as unclaimed), never killed.

When an agent's program (or a shell) ends by itself its ``restart:`` policy decides:
``on-failure`` (the default) brings it back unless it exited with code 0, ``always``
does, ``never`` does not.  A session that is not brought back stays "exited" until
``up`` or ``restart``.  Each comeback waits RESPAWN_DELAYS[n], n the session's recent
failures; n drops by one for every DECAY_SECONDS the ended session had run, so a
program that crashes once a day always comes back within half a second.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import signal
import time
from dataclasses import dataclass, field
from typing import Optional

import clowder_wire as protocol
from clowder_wire.jsonpart import dumps
from clowder_common import events

from . import agentevents
from .activity import Activity
from .agentevents import AgentEvents
from .attention import REPLAY_WINDOW, Attention
from .config import Agent, Config, Shell, to_dict
from .hostclient import PROBE_TIMEOUT, HostConnection, HostError, SessionWatch
from .notify import Notifier
from .registry import AgentRecord, Registry, RegistryError

log = logging.getLogger("clowder-control")

PREFIX = protocol.AGENT_PREFIX
RESPAWN_DELAYS = (0.5, 1, 2, 5, 10, 30)  # seconds, after a program ends by itself
# The most a status lists of plain and unclaimed sessions (their briefs' JSON): the rest
# are counted (``omitted``).  A frame holds 1 MiB, and one user's 450 sessions named
# with 200 emoji each (12 bytes of JSON apiece) would otherwise make root's status too
# large to send, and with it every status of this daemon.
STATUS_SESSIONS_BYTES = 512 * 1024
DECAY_SECONDS = 30  # each this long the ended session ran forgives one failure


def restarts(policy: str, exit_code, sig) -> bool:
    """Whether a session that ended by itself comes back under ``policy``."""
    if policy == "always":
        return True
    if policy == "never":
        return False
    return not (exit_code == 0 and sig is None)  # on-failure


def backoff(failures: int, ran: float) -> tuple[float, int]:
    """(seconds to wait, recent failures after this one) for a session that ended after
    running ``ran`` seconds, ``failures`` recent failures before it."""
    failures = max(0, failures - int(ran // DECAY_SECONDS))
    return RESPAWN_DELAYS[min(failures, len(RESPAWN_DELAYS) - 1)], failures + 1


def user_uid(user: Optional[str]) -> Optional[int]:
    """The uid of ``user``; None if there is no such user."""
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def session_name(agent: str, shell: Optional[str] = None) -> str:
    return f"{PREFIX}{agent}" + (f"/{shell}" if shell else "")


def agent_base_env(environ) -> dict[str, str]:
    """What an agent's sessions take before its YAML env: a terminal type, and this
    daemon's PATH (systemd's, or the user manager's environment) so that the command is
    looked up where a PATH set with ``systemctl --user set-environment`` says.  The host
    adds HOME, USER, LOGNAME, SHELL, CLOWDER_SESSION and CLOWDER_AGENT."""
    env = {"TERM": "xterm-256color"}
    if environ.get("PATH"):
        env["PATH"] = environ["PATH"]
    return env


def describe_exit(info: dict) -> str:
    if info.get("signal") is not None:
        try:
            name = f" ({signal.Signals(info['signal']).name})"
        except ValueError:
            name = ""
        return f"killed by signal {info['signal']}{name}"
    if info.get("exit_code") is not None:
        return f"exited with code {info['exit_code']}"
    return "ended (exit status unknown)"


@dataclass
class Runtime:
    """What the daemon holds for one agent while it runs."""

    spec: Agent
    activity: Activity = field(default_factory=Activity)
    watches: dict = field(default_factory=dict)  # role ("" = the agent) -> SessionWatch
    pids: dict = field(default_factory=dict)  # role -> pid
    failures: dict = field(default_factory=dict)  # role -> recent failures (back-off)
    started: dict = field(default_factory=dict)  # role -> time.monotonic() of spawn/adopt
    pending: set = field(default_factory=set)  # roles waiting out their back-off
    stopping: Optional[asyncio.Task] = None  # a down or restart ending its sessions
    attention: Attention = field(default_factory=Attention)
    busy: bool = False  # as last published (busy/idle events are its changes)
    idle_timer: Optional[asyncio.TimerHandle] = None  # when the busy period may end
    replay_until: float = 0.0  # time.monotonic(): a new watch's replay ends by then

    def is_stopping(self) -> bool:
        return self.stopping is not None and not self.stopping.done()


class Supervisor:
    def __init__(self, host: HostConnection, host_path: str, registry: Registry):
        self.host = host
        self.host_path = host_path
        self.registry = registry
        self.runtimes: dict[str, Runtime] = {}
        self.unclaimed: list[dict] = []
        self.problems: list[str] = []
        self._lock = asyncio.Lock()
        self.ending: set[str] = set()  # sessions being ended: neither adopted nor unclaimed
        self._background: set[asyncio.Task] = set()  # stops of removed agents, retries
        self._retry: Optional[asyncio.Task] = None
        self.uid = os.getuid()  # the agents' user: the host runs our spawns as us
        self._refused: set[str] = set()  # sessions named like an agent's, not its own
        self.events = AgentEvents()
        self.notifier = Notifier()

    # --- whose agents -------------------------------------------------------------------

    def agent_uid(self, spec: Optional[Agent]) -> Optional[int]:
        """The uid an agent's sessions run as: its ``user:``, else ours (None: no such
        user, so no session can be its own)."""
        if spec is None or spec.user is None:
            return self.uid
        return user_uid(spec.user)

    def _record_uid(self, rt: Optional[Runtime], rec: AgentRecord) -> Optional[int]:
        spec = rt.spec if rt is not None else None
        if spec is None and rec.layout.get("spec"):
            try:
                spec = _spec_from_dict(rec.layout["spec"])
            except Exception:  # a damaged record: only our own uid's sessions are ended
                spec = None
        return self.agent_uid(spec)

    def may_drive(self, uid: int, name: str) -> bool:
        """Whether ``uid`` may up/down/restart/attach to agent ``name``: root, our own
        uid, and the agent's ``user:``."""
        if uid in (0, self.uid):
            return True
        rt = self.runtimes.get(name)
        return rt is not None and rt.spec.user is not None and \
            user_uid(rt.spec.user) == uid

    # --- logging -----------------------------------------------------------------------

    def event(self, agent: str, message: str, cause: str, session: str = "",
              level: int = logging.INFO) -> None:
        """A lifecycle event, filterable with journalctl CLOWDER_AGENT=<agent>."""
        kind = events.AGENT_CAUSES.get(cause)
        log.log(level, "agent %s: %s", agent, message,
                extra={"CLOWDER_AGENT": agent, "CLOWDER_CAUSE": cause,
                       "CLOWDER_SESSION": session, **(events.fields(kind) if kind else {})})

    # --- configuration -----------------------------------------------------------------

    def specs_from_registry(self) -> dict[str, Agent]:
        """The last good specs, kept in the registry for a start with a broken config."""
        specs = {}
        for name, rec in self.registry.agents.items():
            spec = rec.layout.get("spec")
            if spec:
                try:
                    specs[name] = _spec_from_dict(spec)
                except Exception as exc:  # a damaged record must not stop the others
                    self.problems.append(f"registry record of {name}: {exc}")
        return specs

    async def apply(self, config: Optional[Config], cause: str) -> None:
        """Make the running set match ``config`` (None: keep the registry's specs)."""
        async with self._lock:
            if config is not None:
                specs = {a.name: a for a in config.agents}
            else:
                specs = self.specs_from_registry()
            # Agents gone from the configuration, also while this daemon was stopped
            # (then only the registry remembers them).
            for name in sorted(set(self.runtimes) | set(self.registry.agents)):
                if name not in specs:
                    self._remove_agent(name)
            for name, spec in specs.items():
                rt = self.runtimes.get(name)
                if rt is None:
                    self.runtimes[name] = Runtime(spec, attention=Attention(spec.attention))
                else:
                    rt.spec = spec
                    rt.attention.set_patterns(spec.attention)
                rec = self.registry.get(name) or AgentRecord(name=name)
                rec.layout = {**rec.layout, "spec": _spec_dict(spec),
                              "shells": [{"name": s.name, "split": s.split,
                                          "percent": s.percent} for s in spec.shells]}
                self.registry.set(rec)
            await self._reconcile_or_retry(cause)
            self.save()

    def _remove_agent(self, name: str) -> None:
        """An agent gone from the configuration: out of status now, and its sessions
        ended as by ``down`` (in the background: a reload does not wait for them)."""
        rt = self.runtimes.pop(name, None)
        if rt is not None and rt.idle_timer is not None:
            rt.idle_timer.cancel()
        self.notifier.forget(name)
        rec = self.registry.remove(name)
        if rec is None:
            return
        sids = self._detach(rt, rec)
        cause = "removed from the configuration"
        self.event(name, f"{cause}: ending its {len(sids)} session(s)", "removed",
                   rec.session or "")
        if sids:
            self._spawn_task(self._end_own(name, sids, cause, self._record_uid(rt, rec)))

    async def _end_own(self, name: str, sids: list[tuple[str, str]], cause: str,
                       uid: Optional[int]) -> str:
        """``_end_all`` of those the host still has as the agent's own (a registry from
        before the mark may name another user's session: it is left alone)."""
        try:
            live = await self.host.sessions(timeout=PROBE_TIMEOUT)
        except HostError as exc:
            self.ending.difference_update(sid for _, sid in sids)
            self.event(name, f"its sessions could not be ended ({cause}): {exc}",
                       "stop-failed", level=logging.ERROR)
            return str(exc)
        own = [(role, sid) for role, sid in sids
               if sid in live and self._owned(live[sid], uid, recorded=True)]
        kept = {sid for _, sid in own}
        for _, sid in sids:
            if sid not in kept:
                self.ending.discard(sid)
                if sid in live:
                    self.event(name, f"session {sid} is not the agent's own: left running",
                               "not-adopted", sid, level=logging.WARNING)
        return await self._end_all(name, own, cause)

    def _spawn_task(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def save(self) -> None:
        try:
            self.registry.save()
        except (OSError, RegistryError) as exc:
            self.problems.append(f"cannot write the registry: {exc}")
            log.error("cannot write the registry: %s", exc,
                      extra={"CLOWDER_CAUSE": "registry-write"})

    # --- reconcile ---------------------------------------------------------------------

    async def _reconcile_or_retry(self, cause: str) -> None:
        """Reconcile; if the host does not answer, say so and try again until it does
        (clowder-control keeps serving status meanwhile)."""
        try:
            await self._reconcile(cause)
        except HostError as exc:
            problem = f"agents not reconciled ({cause}): {exc}; retrying"
            if problem not in self.problems:
                self.problems.append(problem)
            log.error("%s", problem, extra={"CLOWDER_CAUSE": "reconcile-failed"})
            if self._retry is None or self._retry.done():
                self._retry = self._spawn_task(self._retry_reconcile(cause, problem))

    async def _retry_reconcile(self, cause: str, problem: str) -> None:
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
            async with self._lock:
                try:
                    await self._reconcile(f"{cause}, retried")
                except HostError:
                    continue
                if problem in self.problems:
                    self.problems.remove(problem)
                self.save()
                return

    async def _reconcile(self, cause: str, only: Optional[str] = None) -> None:
        """Adopt, else spawn, what each agent should have running; ``only``: just that
        agent (a request about one agent neither touches another nor writes into its
        history).  Sessions waiting out a back-off, and those left ended by their
        restart policy, are not spawned."""
        live = await self.host.sessions()
        running = {s["id"]: s for s in live.values()
                   if s["state"] == "running" and s["id"] not in self.ending}
        by_name = {}
        for s in running.values():
            name = s.get("name") or ""
            agent = name[len(PREFIX):].partition("/")[0] if name.startswith(PREFIX) else ""
            rt = self.runtimes.get(agent)
            if self._owned(s, self.agent_uid(rt.spec) if rt else self.uid):
                by_name.setdefault(name, s)
        claimed = set()
        for name, rt in self.runtimes.items():
            rec = self.registry.get(name)
            if only is not None and name != only:
                claimed.update(sid for sid in (rec.session, *rec.shells.values())
                               if sid in running)
                continue
            if rec.layout.get("down") or rt.is_stopping():
                continue
            uid = self.agent_uid(rt.spec)
            exited = rec.layout.get("exited") or {}
            roles = [("", None)] + [(s.name, s) for s in rt.spec.shells]
            for role, shell in roles:
                if role in rt.pending or role in exited:
                    continue
                sid = rec.session if not role else rec.shells.get(role)
                found = running.get(sid) if sid else None
                if found is not None and not self._owned(found, uid, recorded=True):
                    found = None  # the registry's id, now someone else's: never theirs
                how = "adopted its running session"
                if found is None and session_name(name, role or None) in by_name:
                    found = by_name[session_name(name, role or None)]
                    how = "adopted its running session by name (the registry did not have it)"
                if found is not None:
                    claimed.add(found["id"])
                    self._adopt(rt, rec, role, found, f"{how} ({cause})")
                    continue
                before = live.get(sid) if sid else None
                # A session of a previous boot (the host saved it: ptyhostd/statedir.py)
                # did not end by itself: the agent comes back with its resume command
                # whatever its restart policy, opening on the old session's last screen,
                # which stays listed (ended by the reboot) until someone removes it.
                rebooted = before is not None and before.get("ended_by") == "reboot"
                if rebooted:
                    why = "its session ended with the reboot"
                elif before is not None:
                    ended = f"its session {describe_exit(before)}"
                    why = f"{ended} while clowder-control was away"
                    if not role:
                        rec.last_exit = {k: before.get(k) for k in ("exit_code", "signal")}
                    if not restarts(rt.spec.restart, before.get("exit_code"),
                                    before.get("signal")):
                        self._exited(rt, rec, role, why)
                        await self._forget(sid)
                        continue
                elif sid:
                    why = "its session is gone from the PTY host"
                else:
                    why = "it was not running"
                resume = not role and (bool(sid) or bool(rec.layout.get("resume")))
                await self._spawn(rt, rec, role, resume=resume, cause=f"{why} ({cause})",
                                  resumes=sid if rebooted else None)
                if before is not None and not rebooted:
                    await self._forget(sid)
        # Plain sessions and other users' are listed by status; only a session named
        # like an agent's that is not one is logged (once, by _owned).
        self.unclaimed = [s for s in running.values() if s["id"] not in claimed]
        self._refused &= set(running)  # said once per session, while it runs

    def _owned(self, info: dict, uid: Optional[int], recorded: bool = False) -> bool:
        """Whether a session may be adopted as an agent's: started by this daemon (the
        host's mark) and running as the agent's user (``uid``: its ``user:``, else ours).  One named ``agent:...`` that is
        not is left alone, and said once.

        ``recorded``: the registry names this id, i.e. this daemon spawned it (ids are
        the host's, never reused).  Then the agents' uid is enough: a host from before
        the mark left its agents unmarked, and an upgrade must not re-spawn them all.
        The uid still rules out another user's session (one an old clowder-control
        adopted by name and recorded); only root, or in a user manager the user itself,
        can make a session of the agents' uid."""
        if uid is not None and info.get("uid") == uid and \
                (info.get("agent") is True or recorded):
            return True
        name = info.get("name") or ""
        if name.startswith(PREFIX) and info["id"] not in self._refused:
            self._refused.add(info["id"])
            why = "not started by clowder-control" if info.get("agent") is not True \
                else f"it runs as uid {info.get('uid')}, not {uid}"
            log.warning("session %s is named %r but is not an agent's (%s): never adopted, "
                        "left alone", info["id"], name, why,
                        extra={"CLOWDER_SESSION": info["id"], "CLOWDER_CAUSE": "not-adopted",
                               **events.fields("session-not-adopted")})
        return False

    def _adopt(self, rt: Runtime, rec: AgentRecord, role: str, info: dict, cause: str):
        known = rec.shells.get(role) if role else rec.session
        if known == info["id"] and role in rt.watches:
            return  # already ours: a reconcile for a reload or another agent says nothing
        self._record(rec, role, info["id"])
        rt.pids[role] = info["pid"]
        rt.started[role] = time.monotonic()
        self._watch(rt, role, info["id"], adopted=True)
        self.event(rec.name, f"{role or 'agent'} session {info['id']} (pid {info['pid']}): "
                   f"{cause}", "adopt", info["id"])

    def _record(self, rec: AgentRecord, role: str, sid: Optional[str]) -> None:
        if role:
            if sid is None:
                rec.shells.pop(role, None)
            else:
                rec.shells[role] = sid
        else:
            rec.session = sid

    def _exited(self, rt: Runtime, rec: AgentRecord, role: str, what: str) -> None:
        """A session that ended by itself stays ended, as its restart policy says,
        until ``up`` or ``restart`` (kept in the registry: a restart of this daemon
        does not bring it back).  The agent's resume command is used then."""
        note = f"{what}: not restarted (restart: {rt.spec.restart})"
        exited = {**(rec.layout.get("exited") or {}), role: note}
        rec.layout = {**rec.layout, "exited": exited, **({} if role else {"resume": True})}
        self._record(rec, role, None)
        if not role:
            rec.cause = note
        self.event(rec.name, f"{role or 'agent'} {note}", "not-restarted")

    async def _spawn(self, rt: Runtime, rec: AgentRecord, role: str, resume: bool,
                     cause: str, resumes: Optional[str] = None) -> None:
        """``resumes``: the id of the session of a previous boot whose last screen the
        new one opens with (protocol.Spawn.resumes)."""
        spec = rt.spec
        if role:
            shell = next(s for s in spec.shells if s.name == role)
            argv, cwd = list(shell.command), shell.cwd
        else:
            argv = list(spec.resume if resume and spec.resume else spec.command)
            cwd = spec.cwd
        cols, rows = spec.size or (120, 40)
        env = {**agent_base_env(os.environ), **spec.env}
        uid = self.agent_uid(spec)
        if uid is None:
            rec.cause = f"cannot spawn: user {spec.user!r} does not exist"
            self.event(spec.name, f"cannot spawn {role or 'agent'}: user {spec.user!r} "
                       "does not exist", "spawn-failed", level=logging.ERROR)
            if not role:
                self._attention(rt, rt.attention.failed(rec.cause))
            return
        # Our own uid is named by none: a user manager's host refuses any name.
        user = spec.user if uid != self.uid else None
        try:
            reply = await self.host.request(protocol.Spawn(
                argv=argv, name=session_name(spec.name, role or None), cwd=cwd, env=env,
                cols=cols, rows=rows, user=user, resumes=resumes), protocol.SessionInfo)
        except HostError as exc:
            rec.cause = f"spawn failed: {exc}"
            self.event(spec.name, f"cannot spawn {role or 'agent'}: {exc}", "spawn-failed",
                       level=logging.ERROR)
            if not role:
                self._attention(rt, rt.attention.failed(rec.cause))
            return
        info = reply.session
        self._record(rec, role, info["id"])
        rt.pids[role] = info["pid"]
        rt.started[role] = time.monotonic()
        if not role:
            rec.cause = cause
            rec.spawned_at = time.time()
            rec.spawns += 1
            rec.layout = {k: v for k, v in rec.layout.items() if k != "resume"}
        self._watch(rt, role, info["id"])
        what = "agent (resume command)" if resume and spec.resume and not role else \
            (role or "agent")
        self.event(spec.name, f"spawned {what} as session {info['id']} pid {info['pid']}: "
                   f"{cause}", "spawn", info["id"])
        if not role:
            self.events.publish(agentevents.make(
                "agent-restarted" if rec.spawns > 1 else "agent-spawned", spec.name,
                session=info["id"], pid=info["pid"], cause=cause))
            self._attention(rt, rt.attention.clear(f"a new session: {cause}"))

    def _watch(self, rt: Runtime, role: str, sid: str, adopted: bool = False) -> None:
        old = rt.watches.pop(role, None)
        if old is not None:
            old.cancel()

        def attached(replay: int, rt=rt) -> None:
            # What an adopted session's watch replays was read by the daemon before
            # us; a spawned one's is new (and a re-attach replays nothing).
            if not role and adopted and replay:
                rt.replay_until = time.monotonic() + REPLAY_WINDOW

        def output(data: bytes, rt=rt) -> None:
            if not role:
                try:
                    self._output(rt, data)
                except Exception:  # a bug here must not end the watch (and the restarts)
                    log.exception("agent %s: reading its output for activity and "
                                  "attention failed", rt.spec.name,
                                  extra={"CLOWDER_AGENT": rt.spec.name,
                                         "CLOWDER_CAUSE": "attention-error"})

        async def ended(msg: protocol.Exited, rt=rt) -> None:
            await self._ended(rt, role, sid, msg)

        rt.watches[role] = SessionWatch(self.host_path, sid, output, ended,
                                        on_attached=attached)

    async def _ended(self, rt: Runtime, role: str, sid: str, msg: protocol.Exited) -> None:
        """A watched session ended while we run: record why, and bring it back if its
        restart policy says so, after its back-off."""
        name = rt.spec.name
        rec = self.registry.get(name)
        if rec is None or rt.watches.get(role) is None:
            return
        rt.watches.pop(role, None)
        rt.pids.pop(role, None)
        if rt.is_stopping():
            return
        ran = time.monotonic() - rt.started.pop(role, time.monotonic())
        how = describe_exit({"exit_code": msg.exit_code, "signal": msg.signal})
        if not role:
            rec.last_exit = {"exit_code": msg.exit_code, "signal": msg.signal,
                             "at": time.time()}
        self.event(name, f"{role or 'agent'} session {sid} {how} after {ran:.0f} s",
                   "exit", sid)
        if not role:
            self.events.publish(agentevents.make(
                "agent-ended", name, session=sid, status=msg.status,
                exit_code=msg.exit_code, signal=msg.signal, how=how))
            self._attention(rt, rt.attention.ended(msg.exit_code, msg.signal, how))
        await self._forget(sid)
        policy = rt.spec.restart
        if rec.layout.get("down"):
            self.save()
            return
        if not restarts(policy, msg.exit_code, msg.signal):
            self._exited(rt, rec, role, f"its session {how}")
            self.save()
            return
        delay, rt.failures[role] = backoff(rt.failures.get(role, 0), ran)
        self.save()
        rt.pending.add(role)
        try:
            await asyncio.sleep(delay)
        finally:
            rt.pending.discard(role)
        async with self._lock:
            if rec.layout.get("down") or role in rt.watches or rt.is_stopping() or \
                    self.runtimes.get(name) is not rt or \
                    role in (rec.layout.get("exited") or {}):
                return
            await self._spawn(rt, rec, role, resume=not role,
                              cause=f"its session {how} (restart: {policy}; back-off "
                                    f"{delay} s)")
            self.save()

    async def _forget(self, sid: str) -> None:
        try:
            await self.host.request(protocol.Remove(session=sid), protocol.Ok)
        except HostError:
            pass  # already gone, or still ending: the host caps what it keeps

    # --- activity and attention ----------------------------------------------------------

    def _output(self, rt: Runtime, data: bytes) -> None:
        """The agent's output: busy now; maybe a notification; idle once it is quiet."""
        rt.activity.feed(data, time.time())
        if not rt.busy:
            rt.busy = True
            self.events.publish(agentevents.make("busy", rt.spec.name))
            self._attention(rt, rt.attention.busy())
        replayed = time.monotonic() < rt.replay_until
        self._attention(rt, rt.attention.output(data, replayed))
        if rt.idle_timer is None:
            rt.idle_timer = asyncio.get_running_loop().call_later(
                rt.activity.quiet, self._check_idle, rt)

    def _check_idle(self, rt: Runtime) -> None:
        """The end of a busy period, when no output came for Activity.quiet seconds."""
        rt.idle_timer = None
        if self.runtimes.get(rt.spec.name) is not rt:
            return  # removed from the configuration meanwhile
        now = time.time()
        state, why = rt.activity.state(now)
        if state == "busy":  # more output came: look again when it may be quiet
            left = rt.activity.quiet - (now - rt.activity.last_output)
            rt.idle_timer = asyncio.get_running_loop().call_later(
                max(left, 0.01), self._check_idle, rt)
            return
        rt.busy = False
        line = rt.activity.last_line()
        self.events.publish(agentevents.make("idle", rt.spec.name, reason=why,
                                             last_line=line.strip()[-200:]))
        self._attention(rt, rt.attention.idle(line, rt.activity.at_prompt()))

    def _attention(self, rt: Runtime, change: Optional[tuple[str, str]]) -> None:
        """Log, publish and notify an attention change (None: nothing changed)."""
        if change is None:
            return
        state, cause = change
        name = rt.spec.name
        rec = self.registry.get(name)
        sid = (rec.session if rec is not None else None) or ""
        log.info("agent %s: attention %s: %s", name, state, cause,
                 extra={"CLOWDER_AGENT": name, "CLOWDER_CAUSE": cause,
                        "CLOWDER_ATTENTION": state, "CLOWDER_SESSION": sid,
                        **events.fields("agent-attention")})
        event = agentevents.make("attention", name, attention=state, cause=cause,
                                 session=sid or None)
        self.events.publish(event)
        if state != "none":
            spec = rt.spec
            self.notifier.notify(name, spec.notify, spec.user, spec.cwd,
                                 {**agent_base_env(os.environ), **spec.env}, event)

    def agent_event_state(self, name: str) -> dict:
        """The ``state`` event of WatchAgentEvents: the agent as it is now."""
        st = self.agent_status(name)
        rt = self.runtimes[name]
        return agentevents.make(
            "state", name, state=st["state"], session=st["session"],
            activity=st["activity"], activity_reason=st["activity_reason"],
            attention=rt.attention.state, attention_cause=rt.attention.cause,
            last_line=rt.activity.last_line().strip()[-200:])

    # --- requests ----------------------------------------------------------------------

    async def up(self, name: str) -> dict:
        rt = self.runtimes.get(name)
        if rt is not None and rt.is_stopping():
            await asyncio.shield(rt.stopping)  # a down or restart in progress ends first
        async with self._lock:
            rec = self._known(name)
            await self.host.sessions(timeout=PROBE_TIMEOUT)  # a frozen host: fail now
            rec.layout = {k: v for k, v in rec.layout.items() if k != "exited"}
            rec.layout["down"] = False
            self.runtimes[name].failures.clear()
            await self._reconcile(f"up requested for {name}", only=name)
            self.save()
        return self.agent_status(name)

    async def down(self, name: str) -> str:
        """Stop the agent and its shells and keep it down; how its sessions ended.

        The supervisor's lock is held only to mark it down and detach its sessions:
        ending them (up to the host's 8 s escalation) runs unlocked, so other requests
        and a status go on meanwhile.  A second down waits for the same stop."""
        async with self._lock:
            rec = self._known(name)
            rt = self.runtimes[name]
            if not rt.is_stopping():
                live = await self.host.sessions(timeout=PROBE_TIMEOUT)  # frozen: fail now
                sids = self._detach(rt, rec, live)
                if not sids and rec.layout.get("down"):
                    return rec.layout.get("stopped") or "already down"
                rec.layout = {**rec.layout, "down": True}
                rt.stopping = asyncio.get_running_loop().create_task(
                    self._stop(name, rt, rec, sids, "down requested"))
                self.save()
            stopping = rt.stopping
        return await asyncio.shield(stopping)

    async def restart(self, name: str, shells: bool = False) -> dict:
        """End the agent's session and start it with its normal command; its shells
        too only with ``shells`` (else they are left running, as they are)."""
        async with self._lock:
            rec = self._known(name)
            rt = self.runtimes[name]
            if rt.is_stopping():
                raise HostError(f"agent {name} is being stopped: try again when it is down",
                                "busy")
            live = await self.host.sessions(timeout=PROBE_TIMEOUT)  # frozen: fail now
            sids = self._detach(rt, rec, live, roles=None if shells else {""})
            rt.stopping = asyncio.get_running_loop().create_task(
                self._stop(name, rt, rec, sids, "restart requested"))
            stopping = rt.stopping
        await asyncio.shield(stopping)
        async with self._lock:
            rec = self._known(name)
            rec.session = None
            if shells:
                rec.shells = {}
            rec.layout = {k: v for k, v in rec.layout.items() if k not in ("exited", "resume")}
            rec.layout["down"] = False
            self.runtimes[name].failures.clear()
            await self._reconcile(f"restart requested for {name}", only=name)
            self.save()
        return self.agent_status(name)

    def _known(self, name: str) -> AgentRecord:
        rec = self.registry.get(name)
        if rec is None or name not in self.runtimes:
            raise KeyError(name)
        return rec

    def _detach(self, rt: Optional[Runtime], rec: AgentRecord,
                live: Optional[dict] = None, roles: Optional[set] = None
                ) -> list[tuple[str, str]]:
        """Stop watching the agent's sessions (``roles`` only, "" the agent; all if
        None), so that their end is not a respawn; the (role, session id) pairs to end
        (those the host still has, if ``live`` is its list), now marked as ending."""
        if rt is not None:
            for role in [r for r in rt.watches if roles is None or r in roles]:
                rt.watches.pop(role).cancel()
        uid = self._record_uid(rt, rec)
        # With the host's list, only sessions that are the agent's own: a registry
        # written before the host marked them may name a session someone else made.
        sids = [(role, sid) for role, sid in [("", rec.session), *rec.shells.items()]
                if sid and sid not in self.ending and (roles is None or role in roles)
                and (live is None
                     or (sid in live and self._owned(live[sid], uid, recorded=True)))]
        self.ending.update(sid for _, sid in sids)
        return sids

    async def _stop(self, name: str, rt: Runtime, rec: AgentRecord,
                    sids: list[tuple[str, str]], cause: str) -> str:
        how = await self._end_all(name, sids, cause)
        rec.layout = {**rec.layout, "stopped": how}
        self.event(name, f"stopped: {cause}: {how}", "stop", rec.session or "")
        # Forgotten, so that a later up says why it starts (and not that a session is
        # gone); the agent comes back with its resume command.
        for role, sid in sids:
            rt.pids.pop(role, None)
            rt.started.pop(role, None)
            if (rec.shells.get(role) if role else rec.session) == sid:
                self._record(rec, role, None)
                if not role:
                    rec.layout = {**rec.layout, "resume": True}
        self.save()
        return how

    async def _end_all(self, name: str, sids: list[tuple[str, str]], cause: str) -> str:
        """End the sessions at once (the host escalates each); how each ended."""
        said = await asyncio.gather(*(self._end_one(name, role, sid, cause)
                                      for role, sid in sids))
        return "; ".join(said) or "no session was running"

    async def _end_one(self, name: str, role: str, sid: str, cause: str) -> str:
        what = f"{role or 'agent'} session {sid}"
        try:
            ended = await self.host.end_session(sid)
        except HostError as exc:
            if exc.code == "no-session":
                return f"{what} was already gone"
            self.event(name, f"{what} could not be ended ({cause}): {exc}", "stop-failed",
                       sid, level=logging.ERROR)
            return f"{what} could not be ended: {exc}"
        finally:
            self.ending.discard(sid)
        how = describe_exit({"exit_code": ended.exit_code, "signal": ended.signal})
        self.event(name, f"{what} {how} ({cause})", "stop", sid)
        if not role:
            self.events.publish(agentevents.make(
                "agent-ended", name, session=sid, status=ended.status,
                exit_code=ended.exit_code, signal=ended.signal, how=f"{how} ({cause})"))
            rt = self.runtimes.get(name)
            if rt is not None:
                self._attention(rt, rt.attention.clear(f"stopped: {cause}"))
        return f"{what} {how}"

    def session_of(self, ref: str) -> Optional[str]:
        """The running session of ``AGENT`` or ``AGENT/SHELL``, if any."""
        name, _, role = ref.partition("/")
        rt = self.runtimes.get(name)
        rec = self.registry.get(name)
        if rt is None or rec is None or role not in rt.watches:
            return None
        return rec.shells.get(role) if role else rec.session

    def workdir(self, name: str) -> str:
        """The working directory of agent ``name`` (KeyError if there is no such agent):
        the root the file and VCS services keep every path inside."""
        return self.runtimes[name].spec.cwd

    # --- status ------------------------------------------------------------------------

    def agent_status(self, name: str, sessions: Optional[dict] = None) -> dict:
        rt = self.runtimes[name]
        rec = self.registry.get(name)
        now = time.time()
        busy, why = rt.activity.state(now)
        down = bool(rec.layout.get("down"))
        exited = rec.layout.get("exited") or {}
        state = "stopping" if rt.is_stopping() else "down" if down else \
            "running" if "" in rt.watches else "exited" if "" in exited else "starting"
        return {
            "name": name,
            "state": state,
            "session": rec.session, "pid": rt.pids.get(""),
            "uptime": round(now - rec.spawned_at, 1) if rec.spawned_at and not down else None,
            "activity": "down" if down else busy, "activity_reason": why,
            "attention": rt.attention.state, "attention_cause": rt.attention.cause,
            "last_exit": rec.last_exit, "cause": rec.cause, "spawns": rec.spawns,
            "stopped": rec.layout.get("stopped") if down else None,
            "cwd": rt.spec.cwd, "restart": rt.spec.restart, "user": rt.spec.user,
            "exited": exited.get(""),
            "shells": [{"name": s.name, "session": rec.shells.get(s.name),
                        "pid": rt.pids.get(s.name), "split": s.split, "percent": s.percent,
                        "running": s.name in rt.watches, "exited": exited.get(s.name)}
                       for s in rt.spec.shells],
        }

    def status(self, viewer: Optional[int] = None) -> dict:
        """Everything, for root and this daemon's uid (``viewer`` None); for another uid
        only what is theirs: the agents whose ``user:`` they are, the sessions they run,
        and no problems (they name agents, paths and files).  Running sessions no agent
        has are ``sessions`` (plain ones, not a problem) and ``unclaimed`` (named like
        an agent's, but not one), within STATUS_SESSIONS_BYTES; ``omitted`` counts
        those left out (`clowderctl ps` lists every one)."""
        everything = viewer is None or viewer in (0, self.uid)
        briefs, omitted, room = [], 0, STATUS_SESSIONS_BYTES
        for s in self.unclaimed:
            if everything or s.get("uid") == viewer:
                brief = {k: s.get(k) for k in ("id", "name", "pid", "unit")}
                room -= len(dumps(brief)) + 1
                if room < 0:
                    omitted += 1
                else:
                    briefs.append(brief)
        return {"agents": [self.agent_status(n) for n in sorted(self.runtimes)
                           if everything or self.may_drive(viewer, n)],
                "sessions": [b for b in briefs
                             if not (b.get("name") or "").startswith(PREFIX)],
                "unclaimed": [b for b in briefs
                              if (b.get("name") or "").startswith(PREFIX)],
                "omitted": omitted,
                "problems": list(self.problems) if everything else []}


def _spec_dict(spec: Agent) -> dict:
    return to_dict(Config(version=1, agents=(spec,)))["agents"][0]


def _spec_from_dict(d: dict) -> Agent:
    """The inverse of _spec_dict, for specs kept in the registry."""
    return Agent(name=d["name"], command=tuple(d["command"]),
                 resume=tuple(d["resume"]) if d.get("resume") else None, cwd=d["cwd"],
                 env=dict(d.get("env") or {}),
                 size=tuple(d["size"]) if d.get("size") else None,
                 shells=tuple(Shell(name=s["name"], command=tuple(s["command"]),
                                    split=s["split"], percent=s["percent"], cwd=s["cwd"])
                              for s in d.get("shells") or ()),
                 restart=d.get("restart") or "on-failure", user=d.get("user"),
                 attention=tuple(d.get("attention") or ()),
                 notify=tuple(d["notify"]) if d.get("notify") else None)
