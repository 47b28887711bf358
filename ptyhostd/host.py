"""The host: the table of sessions, and what happens to it at end and stop (its start,
adopting what the FD store gave back, is adopt.py's; a spawn and a rename, spawn.py's).

Everything it owns that must outlive the process is parked in the FD store under these
names: ``m.<id>`` a pty master (parked with FDPOLL=0, so systemd keeps it while no
process has the slave open), ``r.<id>`` a backlog ring, ``manifest.a``/``manifest.b``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Callable, Optional

from clowder_common import events, sdnotify

from . import (bridge, engine, fdstore, handoff, inputseq, peer, pty, recordbudget,
               screenmemory, statedir)
from .manager import Manager, ManagerError
from .manifest import Manifest
from .manifestwriter import ManifestWriteError, ManifestWriter
from .pidwatch import PidWatch
from .adopt import Adoption
from .eventbus import EventBus
from .requesterror import RequestError
from .session import UNIT_PREFIX, Session, painted
from .spawn import Spawning

log = logging.getLogger("ptyhostd")


class Config:
    """The host's settings (a plain class: a dataclass is ~1 ms of the start's imports
    and as much to make, and the start is a restart's blackout)."""

    def __init__(self, *, backlog_bytes: int = 4 << 20, max_exited: int = 256,
                 show_ended: float = 86400.0, user_manager: bool = False,
                 max_sessions_per_user: int = 1024,
                 max_record_bytes_per_user: int = recordbudget.DEFAULT,
                 state_dir: Optional[str] = None):
        self.backlog_bytes = backlog_bytes
        # Ended sessions kept for ps/wait/backlog before the oldest go.
        self.max_exited = max_exited
        # An ended session leaves `ps` once its owner has seen how it ended
        # (Session.seen), or this many seconds after its end if nobody did; `ps --all`
        # lists it while kept.
        self.show_ended = show_ended
        self.user_manager = user_manager
        # Running sessions one non-root uid may have: one user takes at most 1/8 of the
        # store's 8,190 sessions (FileDescriptorStoreMax=16384, two fds each).
        self.max_sessions_per_user = max_sessions_per_user
        # Bytes one non-root uid's manifest records (running and ended sessions) may
        # take: every start parses them all before it serves anyone (recordbudget.py).
        self.max_record_bytes_per_user = max_record_bytes_per_user
        # Where sessions' records and last screens are saved for the next boot
        # (statedir.py); None: nowhere.
        self.state_dir = state_dir


class Host(Adoption, Spawning):
    """Owns every session and the two parked manifest copies."""

    def __init__(self, config: Config, manager: Manager, manifest: Manifest):
        self.config = config
        self.manager = manager
        self.manifest = manifest
        self.sessions: dict[str, Session] = {}
        self.writer = ManifestWriter(manifest, self._records)
        self.loop = asyncio.get_running_loop()
        self.pidwatch = PidWatch(self.loop)
        self.quiet_ptys = PidWatch(self.loop)  # adopted masters until their first output
        self.uid = os.getuid()
        # Where clowder-control runs; a connection from there may take reserved names.
        self.control_cgroup = peer.control_cgroup()
        self._tasks: set[asyncio.Task] = set()
        self._handing_off = False
        self.stop_requested = False  # SIGTERM seen: a hand-off under way must not exec
        self.last_handoff_error = ""
        self.listener_fds: dict[str, list[int]] = {}  # systemd's listening sockets (main())
        self.standby = None  # standby.Standby, once serving (main())
        self.took_over = False  # this host is a standby that took over (main())
        self._unadopted: dict[str, list[int]] = {}  # FD store name -> fds left parked
        self._finishing: set[str] = set()  # sessions whose end is being recorded
        # Sessions adopted on the fast path (their recorded pid alive), for the start's
        # check that each pid is still its program's; sessions spawned since are not.
        self._fast_adopted: list[Session] = []
        self.start_cause = "start"  # why this host started (Adoption.start)
        # time.monotonic() of the last client connection or request: work that can wait
        # waits for a quiet moment (__main__._after_the_clients)
        self.last_request = time.monotonic()
        self._bridge_end: Optional[Callable[[], None]] = None  # Adoption._settle_bridge
        manager.on_reconnect = self._after_reconnect
        self.bus = EventBus()  # what `clowderctl events` watches (eventbus.py)
        self.state_dir = statedir.StateDir(config.state_dir, statedir.boot_key())
        self._down_lock = asyncio.Lock()  # see _going_down

    # --- the terminal models, kept current while sessions are quiet ----------------------

    async def keep_screens(self, interval: float = 0.2, quiet: float = 0.1,
                           budget: int = 32 * 1024) -> None:
        """Feed each existing model a little at a time, only while its session is quiet.

        pyte-speed parsing in this thread would slow the byte path, so it never runs
        during output; after a flood the next attach catches up (bounded by
        session.SCREEN_CATCH_UP) instead.  Ends once ghostty is loaded: its models are
        fed as output comes (Session._follow), and this loop's five wakes a second
        would be most of an idle host's (docs/design.md "An idle host's wakes").
        """
        while True:
            await asyncio.sleep(interval)
            if engine.loaded() and engine.follows_output():
                return
            now = time.monotonic()
            for s in list(self.sessions.values()):
                if s.screen is not None and s.screen_pos < s.ring.head \
                        and now - s.last_output > quiet and not s.screen_busy():
                    try:
                        await s.screen_call(limit=budget)
                    except Exception:
                        log.exception("session %s: feeding its terminal model failed", s.id,
                                      extra={"CLOWDER_SESSION": s.id,
                                             "CLOWDER_CAUSE": "screen-failed"})

    async def fit_screens(self, interval: float = 0.5) -> None:
        """Give every model its share of the scrollback budget when the share changed
        (screenmemory.py): the models are counted here, each is trimmed in the screen
        pool under its session's lock, one session at a time.  A model being fed takes
        the new share before its next feed anyway (screenwork.run_plan); this reaches
        the quiet ones, which would otherwise keep the old share."""
        seen = screenmemory.generation
        while True:
            await asyncio.sleep(interval)
            screenmemory.recount()
            if screenmemory.generation == seen:
                continue
            seen = screenmemory.generation
            for s in list(self.sessions.values()):
                try:
                    await s.fit_screen()
                except Exception:
                    log.exception("session %s: giving its terminal model its share of the "
                                  "screen memory failed", s.id,
                                  extra={"CLOWDER_SESSION": s.id,
                                         "CLOWDER_CAUSE": "screen-failed"})

    async def _seed_screens(self, screens: dict[str, dict]) -> None:
        """Rebuild the models handed over as VT bytes (a repaint, fed to a fresh model).

        After the start, in the screen pool, one session at a time under its model's
        lock: with every session's model kept (ghostty follows all output), seeding a
        thousand on the loop before serving would lengthen the hand-off's blackout."""
        from . import screenwork
        from .engine import new_screen

        def seeded(cols: int, rows: int, vt: bytes, uid: int):
            screen = new_screen(cols, rows, uid)
            screen.feed(vt)
            return screen
        done = 0
        for sid, sc in screens.items():
            s = self.sessions.get(sid)
            if s is None or s.state != "running":
                continue
            async with s._screen_lock:
                if s.screen is not None or sc["pos"] < s.ring.tail:
                    continue  # made from the ring meanwhile, or its bytes are gone
                try:
                    s.screen = await screenwork.run(seeded, sc["cols"], sc["rows"], sc["vt"],
                                                   s.uid, owner=s.uid)
                    s.screen_pos = s.screen_start = sc["pos"]  # no scrollback before it
                    done += 1
                except Exception as exc:  # rebuilt from the ring when next needed
                    s.screen, s.screen_pos = None, 0
                    log.warning("session %s: its screen from the hand-off is unusable: %s",
                                sid, exc, extra={"CLOWDER_SESSION": sid,
                                                 "CLOWDER_CAUSE": "handoff"})
        if screens:
            log.info("%d screens carried across the hand-off", done,
                     extra={"CLOWDER_CAUSE": "handoff"})

    # --- persistence -------------------------------------------------------------------

    def save(self) -> None:
        """Called after every change of the session table: the manifest is rewritten
        soon, off the loop (manifestwriter.py)."""
        self.writer.changed()

    async def saved(self) -> None:
        """save(), and return once the change is in the manifest: what a crash must not
        lose (a program started, a request answered, a unit stopped) waits for this.
        ManifestWriteError if the write failed."""
        await self.writer.written()

    def save_now(self, left: str = "") -> None:
        """Rewrite the manifest on the loop, now: a start before it serves, an exit, an
        exec (``left``: see Manifest.write_sessions)."""
        self.writer.write_now(left)

    def _records(self) -> list[bytes]:
        return [s.record_json() for s in self.sessions.values()]

    def _spawn_task(self, coro) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _carried(self, coro):
        """``coro``'s outcome, ``coro`` run as a task of the host's: a client that goes
        away (its connection's work cancelled) does not cut it short.  Its failure,
        then told to nobody, is let go (the request's own errors are logged where
        they arise)."""
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: (self._tasks.discard(t),
                                          t.cancelled() or t.exception()))
        return await asyncio.shield(task)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("internal task failed: %r", task.exception(), exc_info=task.exception())

    # --- listing ------------------------------------------------------------------------

    def shown_in_ps(self, s: Session, now: float) -> bool:
        """Whether a plain `ps` lists ``s``: not once an ended session was seen, or
        Config.show_ended seconds after its end."""
        if s.state not in ("exited", "lost"):
            return True
        return not s.seen and now - (s.ended_at or now) < self.config.show_ended

    # --- the end of a session -----------------------------------------------------------

    def _on_pid_exit(self, s: Session) -> None:
        s.unwatch_pid()
        self._spawn_task(self._finish(s))

    async def _going_down(self) -> bool:
        """Whether the service manager is going down (a poweroff or reboot); the first
        time it is, the sessions' files are written as they are now and then kept as
        they are (statedir.py): the ends that follow (systemd stops session units
        before or while it stops us) are the reboot's, not the programs'."""
        async with self._down_lock:  # the other ends wait for the files to be written
            if self.state_dir.frozen:
                return True
            try:
                going_down = await self.manager.system_state() == "stopping"
            except ManagerError as exc:
                log.warning("cannot tell whether the system is going down: %s", exc)
                return False
            if going_down:
                await self.state_dir.save_round(self, force=True)
                self.state_dir.frozen = True
                log.info("the system is going down: %d sessions saved in %s for the next "
                         "boot", len(self.sessions), self.state_dir.path,
                         extra={"CLOWDER_CAUSE": "state-saved"})
            return going_down

    async def _finish(self, s: Session) -> None:
        if s.state != "running" or s.id in self._finishing:
            return  # already ended, or its end is being recorded (pidfd and reconnect)
        self._finishing.add(s.id)
        try:
            if self.state_dir.dir is not None:
                await self._going_down()  # before this end is recorded
            try:
                state = await self.manager.wait_finished(s.unit)
            except Exception as exc:  # any failure still ends it, status unknown
                log.error("session %s: %s", s.id, exc, extra={"CLOWDER_SESSION": s.id})
                state = None
            if s.state == "running":
                await self._end(s, state, "its program ended")
        finally:
            self._finishing.discard(s.id)

    async def _end(self, s: Session, state, cause: str, persist: bool = True) -> None:
        """Record how ``s`` ended, tell its clients, and release its pty and unit.

        ``persist=False`` (a stop, which saves once at the end) skips the manifest
        writes: each is a whole rewrite, and thousands of them made a stop take seconds.
        """
        s.drain()
        if state is not None and state.exec_code:
            s.record_exit(state.exec_code, state.exec_status, cause)
        else:
            s.record_exit(0, 0, cause + " (exit status unknown)")
        if persist:
            try:  # recorded before anything is released: a crash now loses nothing
                await self.saved()
            except ManifestWriteError:
                pass  # logged; released all the same, or the unit would never stop
        s.deliver_exit()
        if persist and s.seen:
            self.save()  # an attached owner's terminal showed the end (deliver_exit)
        self._release_master(s)
        try:
            await self.manager.stop(s.unit)
        except Exception as exc:  # the unit is stopped as an orphan after a reconnect
            log.error("session %s: removing its unit: %s", s.id, exc,
                      extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "unit-cleanup"})
        if self._enforce_exited_cap() and persist:
            self.save()

    async def _after_reconnect(self) -> None:
        """Catch up after the link to systemd came back (a daemon-reexec drops it): end
        the sessions whose unit ended meanwhile unnoticed, and stop units left behind
        by ends whose stop was cut off."""
        try:
            units = {name: (active, sub) for name, active, sub
                     in await self.manager.list_units(UNIT_PREFIX + "*.service")}
        except ManagerError as exc:
            log.error("after a reconnect, cannot list session units: %s", exc,
                      extra={"CLOWDER_CAUSE": "manager-reconnect"})
            return
        for s in list(self.sessions.values()):
            active, sub = units.get(s.unit, ("not-found", "dead"))
            if s.state == "running" and s.id not in self._finishing \
                    and (active in ("inactive", "failed", "not-found")
                         or sub in ("exited", "dead", "failed")):
                log.info("session %s: its unit ended while the link was down (%s/%s)",
                         s.id, active, sub, extra={"CLOWDER_SESSION": s.id,
                                                   "CLOWDER_CAUSE": "manager-reconnect"})
                self._on_pid_exit(s)
        await self._stop_orphan_units()

    def _release_master(self, s: Session) -> None:
        """Close the pty master (the slave side gets a hang-up) and unpark it."""
        s.close_fds(keep_ring=True)
        fdstore.unpark(f"m.{s.id}")

    def _enforce_exited_cap(self) -> bool:
        """Forget ended sessions beyond the host's cap; whether any went.

        Each one goes from the user who keeps the most ended sessions, and of theirs
        the seen ones first, then the oldest: so one user's many quick ends push out
        their own, never another user's unseen end and its output (when the oldest
        went first, alice's 300 `true`s erased bob's overnight exit status:
        test_hostile_capacity.py)."""
        ended = [s for s in self.sessions.values() if s.state in ("exited", "lost")]
        over = len(ended) - self.config.max_exited
        if over <= 0:
            return False
        by_uid: dict[int, list[Session]] = {}
        for s in ended:
            by_uid.setdefault(s.uid, []).append(s)
        for group in by_uid.values():  # each user's next to go last
            group.sort(key=lambda s: (not s.seen, s.ended_at or 0), reverse=True)
        for _ in range(over):
            # The most kept; between equals, a seen one, then the oldest, goes first.
            uid = max(by_uid, key=lambda u: (len(by_uid[u]), by_uid[u][-1].seen,
                                             -(by_uid[u][-1].ended_at or 0)))
            s = by_uid[uid].pop()
            self.forget(s, f"too many ended sessions kept; uid {uid} kept the most "
                           f"({len(by_uid[uid]) + 1})")
        return True

    def forget(self, s: Session, cause: str) -> None:
        """Drop an ended session and its backlog."""
        self.drop(s, cause)
        self.release(s)

    def drop(self, s: Session, cause: str) -> None:
        """Take an ended session out of the table (its backlog stays, see release)."""
        s.set_state("removed", cause)
        self.sessions.pop(s.id, None)

    def release(self, s: Session) -> None:
        """Close and unpark a dropped session's backlog, and forget its files."""
        s.close_fds(keep_ring=False)
        fdstore.unpark(f"r.{s.id}")
        self.input_seq.forget(s.id)
        self.state_dir.remove(s.id)

    # --- requests on running sessions ---------------------------------------------------

    # Ending a session (Kill with escalate): each signal and how long it may take to end
    # the session before the next.  8 s in all: inside the host's TimeoutStopSec=30 and
    # the session units' default 90 s, and short enough for a person waiting on a kill.
    ESCALATION = ((1, 3.0), (15, 3.0), (9, 2.0))  # SIGHUP, SIGTERM, SIGKILL

    async def kill(self, s: Session, signal: int, escalate: bool = False) -> None:
        """Send ``signal`` to the session's unit; with ``escalate``, end the session:
        ``signal``, then SIGTERM, then SIGKILL, each given its grace (Host.ESCALATION), and
        return once the end is recorded, so a Wait or Remove right after succeeds."""
        if s.state != "running":
            raise RequestError(f"session {s.id} is not running ({s.state})", "not-running")
        if not 1 <= signal <= 64:
            raise RequestError(f"invalid signal number {signal}", "bad-request")
        if not escalate:
            try:
                await self.manager.kill(s.unit, signal)
            except ManagerError as exc:
                raise RequestError(str(exc), "kill") from exc
            return

        async def escalation() -> None:
            ended = self.loop.create_future()
            s.waiters.append(ended)  # deliver_exit resolves it (and clears the list)
            try:
                for number, grace in [(signal, self.ESCALATION[0][1]), *self.ESCALATION[1:]]:
                    try:
                        await self.manager.kill(s.unit, number)
                    except ManagerError as exc:
                        if not ended.done() and s.state == "running":
                            raise RequestError(str(exc), "kill") from exc
                    log.info("session %s: ending it: signal %d sent, waiting %g s", s.id,
                             number, grace, extra={"CLOWDER_SESSION": s.id,
                                                   "CLOWDER_CAUSE": "kill-escalate"})
                    try:
                        await asyncio.wait_for(asyncio.shield(ended), grace)
                        return
                    except asyncio.TimeoutError:
                        pass
                raise RequestError(f"session {s.id} still runs {grace:g} s after SIGKILL "
                                   f"(a process stuck in the kernel?)", "kill")
            finally:
                if ended in s.waiters:
                    s.waiters.remove(ended)

        # A client that goes away mid-way does not stop the ending it asked for.
        await self._carried(escalation())

    def resize(self, s: Session, cols: int, rows: int) -> None:
        if not pty.valid_size(cols, rows):
            raise RequestError(pty.size_problem(cols, rows), "bad-request")
        if s.master is None:
            return
        if (cols, rows) != (s.cols, s.rows):
            s.resize_screen(cols, rows)
        pty.set_size(s.master.fd, cols, rows)
        if (cols, rows) != (s.cols, s.rows):
            s.cols, s.rows = cols, rows
            self.save()
            for att in list(s.attachments):  # the others' frames change size, start or stop
                att.follow_size()

    # --- hand-off (systemctl reload) -----------------------------------------------------

    def kept_fds(self) -> dict[str, list[int]]:
        """Every fd a successor needs, by name (a hand-off's exec, the standby's copy):
        the parked ones, the listening sockets and the input table."""
        return {**self.parked(), **self.listener_fds, inputseq.NAME: [self.input_seq.fd]}

    def parked(self) -> dict[str, list[int]]:
        """Every fd this host keeps across an exec, by its FD store name."""
        fds: dict[str, list[int]] = {slot: [fd.fileno()] for slot, fd in self.manifest.fds.items()}
        for s in self.sessions.values():
            fds[f"r.{s.id}"] = [s.ring.fd.fileno()]
            if s.master is not None:
                fds[f"m.{s.id}"] = [s.master.fileno()]
        for name, group in self._unadopted.items():  # the next code may adopt them
            fds.setdefault(name, list(group))
        return fds

    async def check_handoff(self) -> dict:
        """The installed code's verdict on taking over from us (HandoffError if refused)."""
        return await self.loop.run_in_executor(None, handoff.run_check, self.parked(),
                                               self.manifest)

    async def handoff(self, started: Optional[Callable[[], None]] = None) -> str:
        """Become the installed code in this same process, or say why not and carry on:
        the new code never returns here, this returns why it did not take over.
        ``started`` is called once systemd was told the host is reloading (a HandOff
        request is answered then).  Whatever fails, systemd hears READY=1 again (else the
        unit stays `reloading`)."""
        if self._handing_off:
            return "a hand-off is already under way"
        self._handing_off = True
        outcome = "hand-off refused"
        why = ""
        try:
            sdnotify.notify("RELOADING=1\nSTATUS=checking the new code")
            if started is not None:
                started()
            report = await self.check_handoff()
            log.info("hand-off to ptyhostd %s: check passed (%d sessions)", report["version"],
                     report["sessions"], extra={"CLOWDER_CAUSE": "handoff",
                                                **events.fields("handoff-checked")})
            models = {}
            for s in [s for s in self.sessions.values() if s.screen is not None]:
                (vt, cols, rows), pos = await s.screen_call(painted, limit=0)
                models[s.id] = {"pos": pos, "cols": cols, "rows": rows, "vt": vt}
            screens = handoff.pack_screens(models)
            try:
                if self.stop_requested:
                    # A stop (SIGTERM) came while the new code was checked: its handler
                    # ran in this process, so the new code would never see it, and the
                    # stop would wait out TimeoutStopSec.  This code stops instead.
                    log.info("hand-off abandoned: a stop came meanwhile",
                             extra={"CLOWDER_CAUSE": "handoff"})
                    outcome = "hand-off abandoned for a stop"
                    why = "hand-off abandoned: the host is stopping"
                    return why
                self.save_now()  # the table as it is at the exec: no await from here on
                if self.standby is not None:
                    self.standby.leave()  # the new code starts its own
                # returns only on failure
                handoff.execute({**self.kept_fds(), handoff.SCREENS: [screens]},
                                bridge.Plan.of(self.sessions.values(),
                                               {sid: m["pos"] for sid, m in models.items()}))
            finally:
                os.close(screens)
        except handoff.HandoffError as exc:
            self.last_handoff_error = str(exc)
            why = f"hand-off refused, the running code keeps serving: {exc}"
            log.error("%s", why, extra={"CLOWDER_CAUSE": "handoff-refused",
                                        **events.fields("handoff-refused")})
        except Exception as exc:  # our side failed, not the new code's check
            outcome = "hand-off failed"
            self.last_handoff_error = f"{type(exc).__name__}: {exc}"
            why = f"hand-off failed, the running code keeps serving: {type(exc).__name__}: {exc}"
            log.error("%s", why, exc_info=exc, extra={"CLOWDER_CAUSE": "handoff-failed",
                                                      **events.fields("handoff-failed")})
        finally:
            self._handing_off = False
            if self.standby is not None and not self.stop_requested:
                self.standby.resume()  # this code serves on (a no-op if it never left)
            try:
                if not self.stop_requested:  # stopping: the stop's STOPPING=1 was sent
                    sdnotify.notify(f"READY=1\nSTATUS=serving {len(self.sessions)} sessions "
                                    f"({outcome})")
                    if self.standby is not None:
                        self.standby.announce()  # the one that stayed, if any
            except Exception as exc:
                log.error("cannot tell systemd the host serves again: %s", exc,
                          extra={"CLOWDER_CAUSE": "handoff-failed"})
        return why or "hand-off failed: the new code returned"

    # --- stop ---------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """On SIGTERM: a restart keeps everything parked; a real stop ends every session."""
        try:
            job = await self.manager.own_job_type()
        except ManagerError as exc:
            log.error("cannot tell a stop from a restart (%s): keeping sessions", exc)
            job = "restart"
        if job != "stop":
            # The next start says "restart", not a crash.
            if not self.writer.now(lambda m: m.mark("restart")):
                self.save_now(left="restart")
            log.info("exiting for %s; %d sessions stay parked", job or "a signal",
                     len(self.sessions), extra={"CLOWDER_CAUSE": job or "signal",
                                                **events.fields("host-exiting")})
            return
        await self._going_down()
        log.info("stopping: ending every session",
                 extra={"CLOWDER_CAUSE": "stop", **events.fields("host-stopping")})
        running = [s for s in self.sessions.values() if s.state == "running"]
        for s in running:
            s.unwatch_pid()
        await asyncio.gather(*(self._stop_session(s) for s in running))
        await self._stop_orphan_units()  # e.g. a spawn's, cut off by a lost link
        for s in list(self.sessions.values()):
            self.forget(s, "the host was stopped")
        self.save_now()

    async def _stop_session(self, s: Session) -> None:
        """Hang up the session's program (then SIGTERM, then SIGKILL, as ``kill``
        escalates: a program that ignores SIGHUP must not outlive the host's own stop
        timeout), and record how it ended before its unit goes."""
        state = None
        for number, grace in self.ESCALATION:
            try:
                await self.manager.kill(s.unit, number)
                state = await self.manager.wait_finished(s.unit, timeout=grace)
                break
            except ManagerError as exc:
                log.warning("session %s: still running after signal %d (%s)", s.id, number,
                            exc, extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "stop"})
        if state is None or not state.finished:
            try:
                await self.manager.stop(s.unit)  # SIGKILL after the unit's stop timeout
            except ManagerError as exc:
                log.error("session %s: stopping: %s", s.id, exc)
        await self._end(s, state, "the host was stopped", persist=False)
