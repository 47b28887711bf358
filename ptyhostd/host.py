"""The host: the table of sessions, and what happens to it at start, spawn, end and stop.

Everything it owns that must outlive the process is parked in the FD store under these
names: ``m.<id>`` a pty master (parked with FDPOLL=0, so systemd keeps it while no
process has the slave open), ``r.<id>`` a backlog ring, ``manifest.a``/``manifest.b``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import secrets
import time
from dataclasses import dataclass
from typing import Optional

from . import fdstore, handoff, inputseq, protocol, pty
from .fd import Fd
from .manager import EXEC_FAILURES, SETUP_FAILURES, Manager, ManagerError
from .manifest import SLOTS, Manifest, ManifestError
from .pidwatch import PidWatch
from .ring import Ring, RingError
from .session import UNIT_PREFIX, Session

log = logging.getLogger("ptyhostd")


class RequestError(Exception):
    """A client's request cannot be done; the message goes back to that client."""

    def __init__(self, message: str, code: str = "error"):
        super().__init__(message)
        self.code = code


@dataclass
class Config:
    backlog_bytes: int = 4 << 20
    max_exited: int = 256  # ended sessions kept for ps/wait/backlog before the oldest go
    user_manager: bool = False


AFTER_START = 0.5  # seconds from serving to the start's background checks


class Host:
    """Owns every session and the two parked manifest copies."""

    def __init__(self, config: Config, manager: Manager, manifest: Manifest):
        self.config = config
        self.manager = manager
        self.manifest = manifest
        self.sessions: dict[str, Session] = {}
        self.loop = asyncio.get_running_loop()
        self.pidwatch = PidWatch(self.loop)
        self.uid = os.getuid()
        self._tasks: set[asyncio.Task] = set()
        self._handing_off = False
        self.last_handoff_error = ""

    # --- the terminal models, kept current while sessions are quiet ----------------------

    async def keep_screens(self, interval: float = 0.2, quiet: float = 0.1,
                           budget: int = 32 * 1024) -> None:
        """Feed each existing model a little at a time, only while its session is quiet.

        pyte-speed parsing in this thread would slow the byte path, so it never runs
        during output; after a flood the next attach catches up (bounded by
        session.SCREEN_CATCH_UP) instead.
        """
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for s in list(self.sessions.values()):
                if s.screen is not None and s.screen_pos < s.ring.head \
                        and now - s.last_output > quiet:
                    s.feed_screen(budget)

    def _seed_screens(self, screens: dict[str, dict]) -> None:
        """Rebuild the models handed over as VT bytes (a repaint, fed to a fresh model)."""
        for sid, sc in screens.items():
            s = self.sessions.get(sid)
            if s is None or s.state != "running" or sc["pos"] < s.ring.tail:
                continue
            from .screen import Screen  # pyte: imported when first needed, not at start
            s.screen = Screen(sc["cols"], sc["rows"])
            s.screen.feed(sc["vt"])
            s.screen_pos = sc["pos"]
        if screens:
            log.info("%d screens carried across the hand-off", len(screens),
                     extra={"CLOWDER_CAUSE": "handoff"})

    # --- persistence -------------------------------------------------------------------

    def save(self) -> None:
        """Rewrite the manifest; called after every change of the session table."""
        self.manifest.write_sessions([s.record_json() for s in self.sessions.values()])

    def _spawn_task(self, coro) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("internal task failed: %r", task.exception(), exc_info=task.exception())

    # --- start: adopt what the store gave back ------------------------------------------

    @classmethod
    async def start(cls, config: Config, stored: dict[str, list[int]]) -> "Host":
        """A host that has adopted every session parked by its predecessor."""
        manager = Manager(config.user_manager)  # connects meanwhile; calls wait for it
        raw_manifest = {name: fds[0] for name, fds in stored.items() if name in SLOTS}
        records: list[dict] = []
        valid = False
        if raw_manifest:
            try:
                manifest, content = Manifest.adopt(raw_manifest)
                records = content.get("sessions", [])
                valid = True
            except ManifestError as exc:
                log.error("manifest unusable, adopting from fd names alone: %s", exc,
                          extra={"CLOWDER_CAUSE": "manifest-corrupt"})
                manifest = Manifest.create()
        else:
            manifest = Manifest.create()
        if not valid:
            # New copies replace the parked ones (an unusable pair would otherwise come
            # back at every restart, and the fresh pair be lost at the first).
            for slot, fd in manifest.fds.items():
                if slot in raw_manifest:
                    fdstore.unpark(slot)
                fdstore.park(slot, fd.fd)
        host = cls(config, manager, manifest)
        # Before the sessions: what each attach client's input reached (inputseq.py).
        host.input_seq = inputseq.InputSeqTable.start(stored.pop(inputseq.NAME, []))
        await host._adopt(records, stored, save_now=not valid)
        for fd in stored.get(handoff.SCREENS, []):
            host._seed_screens(handoff.unpack_screens(fd))
        host._spawn_task(host.keep_screens())
        return host

    async def _adopt(self, records: list[dict], stored: dict[str, list[int]],
                     save_now: bool) -> None:
        masters = {n[2:]: fds for n, fds in stored.items() if n.startswith("m.")}
        rings = {n[2:]: fds for n, fds in stored.items() if n.startswith("r.")}
        by_id = {r["id"]: r for r in records if isinstance(r, dict) and "id" in r}
        for sid in masters.keys() - by_id.keys():
            # Parked but not in the manifest (a crash between park and save, or a lost
            # manifest): adopt it with what the fd names and systemd can tell.
            # Its owner: a user manager's host runs only its own user's sessions; a
            # system host cannot tell, so only root sees the session.
            by_id[sid] = {"id": sid, "name": sid, "argv": [], "cwd": None, "uid": self.uid,
                          "cols": 80, "rows": 24, "created": time.time(), "state": "running"}
        # Sessions whose recorded program still runs in its unit are served again with
        # no call to systemd (at 1,000 sessions a round trip each would be seconds of
        # blackout, and even one ListUnits call and its parsing are ~10% of a restart):
        # only the others wait for the service manager.
        asking = []
        for sid, rec in by_id.items():
            try:
                s = self._adopt_one(rec, masters.pop(sid, []), rings.pop(sid, []))
                if s is not None:
                    asking.append(s)
            except Exception as exc:  # one bad record must not stop the others
                log.exception("session %s: could not be adopted: %s", sid, exc,
                              extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "adopt-failed"})
        for s in asking:
            try:
                await self._adopt_asking(s)
            except Exception as exc:
                log.exception("session %s: could not be adopted: %s", s.id, exc,
                              extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "adopt-failed"})
        for kind, leftovers in (("m", masters), ("r", rings)):
            for sid, fds in leftovers.items():
                log.warning("closing parked %s.%s that no session claims", kind, sid,
                            extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "unclaimed-fd"})
                for fd in fds:
                    os.close(fd)
                fdstore.unpark(f"{kind}.{sid}")
        self._enforce_exited_cap()
        if save_now:
            self.save()  # no valid manifest was parked: there must be one now
        self._spawn_task(self._after_start(save=not save_now))
        live = sum(1 for s in self.sessions.values() if s.state == "running")
        log.info("adopted %d sessions (%d running)", len(self.sessions), live,
                 extra={"CLOWDER_CAUSE": "start"})

    def _adopt_one(self, rec: dict, master_fds: list[int], ring_fds: list[int]
                   ) -> Optional[Session]:
        """Take the parked fds of one session back; the session if systemd must be asked
        how it is (its program is not found running in its unit), else None."""
        sid = rec["id"]
        for extra in master_fds[1:] + ring_fds[1:]:
            os.close(extra)
        ring = None
        if ring_fds:
            try:
                ring = Ring.adopt(ring_fds[0], sid)
            except RingError as exc:
                log.error("session %s: backlog lost: %s", sid, exc,
                          extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "ring-corrupt"})
        if ring is None:
            ring = Ring.create(sid, self.config.backlog_bytes)
            fdstore.park(f"r.{sid}", ring.fd.fd)
        master = Fd(master_fds[0], f"pty master {sid}") if master_fds else None
        s = Session(sid, name=rec.get("name") or sid, argv=list(rec.get("argv") or []),
                    cwd=rec.get("cwd"), uid=int(rec.get("uid", 0)),
                    cols=int(rec.get("cols", 80)), rows=int(rec.get("rows", 24)),
                    created=float(rec.get("created", time.time())), ring=ring, master=master,
                    state=rec.get("state", "running"))
        s.exit_status = rec.get("exit_status")
        s.exit_code = rec.get("exit_code")
        s.signal = rec.get("signal")
        s.ended_at = rec.get("ended_at")
        s.pid = int(rec.get("pid") or 0)
        self.sessions[sid] = s
        if s.state in ("exited", "lost"):
            if master is not None:  # a crash came between recording the end and closing
                self._release_master(s)
            return None  # its unit, if still loaded, is stopped with the orphans
        if master is not None and s.pid and s.watch_pid(self.pidwatch, s.pid,
                                                         lambda: self._on_pid_exit(s)):
            # The fast path: the recorded main PID is alive. That it is still the
            # session's program (a reused pid would be in another cgroup) is checked
            # right after the host starts serving (_verify_adopted).
            self._resume(s)
            return None
        return s

    async def _adopt_asking(self, s: Session) -> None:
        """The slow path of adoption: ask systemd how the session's unit is."""
        state = await self.manager.unit_state(s.unit)
        if s.master is None:
            await self._end(s, None, "its pty master was not in the FD store")
            return
        if state.finished:
            await self._end(s, state, "ended while the host was down")
        elif not state.loaded or state.active in ("inactive", "failed") or not state.main_pid:
            await self._end(s, state if state.loaded else None,
                            f"its unit is gone ({state.active}/{state.sub})")
        elif s.watch_pid(self.pidwatch, state.main_pid, lambda: self._on_pid_exit(s)):
            self._resume(s)
        else:
            self._resume(s)
            self._on_pid_exit(s)  # gone since systemd answered: find out how it ended

    def _resume(self, s: Session) -> None:
        """Serve an adopted session whose program still runs (its pid is watched)."""
        s.start_reading(self.loop)
        if s.state != "running":
            s.set_state("running", "adopted after a host restart")

    async def _after_start(self, save: bool) -> None:
        """What the start leaves until the clients that waited through a restart are
        served (at 1,000 sessions each step costs ~10-20 ms): rewriting the manifest
        (until then the previous one, still valid, describes the same sessions, and each
        end recorded during adoption saved its own), confirming the fast path's pids,
        and stopping units that no session claims."""
        await asyncio.sleep(AFTER_START)
        if save:
            self.save()
        await self._verify_adopted()
        await self._stop_orphan_units()

    async def _verify_adopted(self) -> None:
        """Check that each session adopted on the fast path watches its own program.

        Reading every /proc/PID/cgroup costs ~15 ms at 1,000 sessions, so it comes after
        the host is serving; a pid found outside its unit (the program ended while the
        host was down and its number was reused) is asked of systemd instead."""
        for i, s in enumerate(list(self.sessions.values())):
            if i % 100 == 99:
                await asyncio.sleep(0)  # let clients in between
            if s.state != "running" or s.pidfd is None or _in_unit(s.pid, s.unit):
                continue
            log.warning("session %s: pid %d is no longer in %s; asking systemd", s.id,
                        s.pid, s.unit, extra={"CLOWDER_SESSION": s.id,
                                              "CLOWDER_CAUSE": "pid-reused"})
            s.unwatch_pid()
            s.pidfd.close()
            s.pidfd = None
            await self._adopt_asking(s)

    async def _stop_orphan_units(self) -> None:
        """Stop session units that no running session claims: their terminal is gone,
        or their session had already ended when a crash came before its unit stopped."""
        try:
            units = await self.manager.list_units(UNIT_PREFIX + "*.service")
        except ManagerError as exc:
            log.error("cannot list session units: %s", exc)
            return
        # A session is in the table before its unit exists (spawn adds it first), so a
        # unit listed here that is starting or running has its session in the table.
        ended = {s.unit for s in self.sessions.values() if s.state in ("exited", "lost")}
        live = {s.unit for s in self.sessions.values()} - ended
        for name, active, sub in units:
            if name in live:
                continue
            if name not in ended:
                log.warning("stopping orphaned unit %s (%s/%s): no parked terminal", name,
                            active, sub, extra={"CLOWDER_UNIT": name,
                                                "CLOWDER_CAUSE": "orphan-unit"})
            try:
                await self.manager.stop(name)
            except ManagerError as exc:
                log.error("stopping %s: %s", name, exc, extra={"CLOWDER_UNIT": name})

    # --- spawn --------------------------------------------------------------------------

    async def spawn(self, req: protocol.Spawn, client_uid: int) -> Session:
        """Start a session for a client; raises RequestError with a reason it can show."""
        argv = _check_argv(req.argv)
        env = _check_env(req.env)
        if not pty.valid_size(req.cols, req.rows):
            raise RequestError(f"invalid size {req.cols}x{req.rows}", "bad-request")
        if req.cwd is not None and not os.path.isabs(req.cwd):
            raise RequestError(f"working directory must be absolute: {req.cwd!r}",
                               "bad-request")
        user, uid = self._run_as(req.user, client_uid)
        sid = secrets.token_hex(4)
        while sid in self.sessions:
            sid = secrets.token_hex(4)
        name = req.name or sid
        if len(name) > 200 or any(ord(c) < 32 for c in name):
            raise RequestError("a session name must be printable and at most 200 characters",
                               "bad-request")
        try:
            master, slave, tty = pty.open_pair(sid)
        except pty.PtyError as exc:
            raise RequestError(str(exc), "pty") from exc
        try:
            pty.set_size(master.fd, req.cols, req.rows)
            ring = Ring.create(sid, self.config.backlog_bytes)
        except Exception:
            master.close()
            slave.close()
            raise
        s = Session(sid, name=name, argv=argv, cwd=req.cwd, uid=uid, cols=req.cols,
                    rows=req.rows, created=time.time(), ring=ring, master=master)
        # Parked before the program starts: a crash from here on cannot lose the pty.
        fdstore.park(f"m.{sid}", master.fd, poll=False)
        fdstore.park(f"r.{sid}", ring.fd.fd)
        self.sessions[sid] = s
        self.save()
        s.start_reading(self.loop)
        try:
            result = await self.manager.start_session(
                s.unit, argv, tty, req.cwd, env, user,
                _printable(f"clowder session {name}: {' '.join(argv)}")[:200])
        except ManagerError as exc:
            await self._discard(s, f"start failed: {exc}")
            raise RequestError(f"cannot start {argv[0]!r}: {exc}", "spawn") from exc
        finally:
            slave.close()  # the unit has opened the tty (or never will)
        state = await self.manager.unit_state(s.unit)
        # A program that exits at once can fail the Type=exec start job before systemd
        # saw its exec succeed; it did run unless the status is one of systemd's own.
        setup_failed = state.exec_code == 1 and state.exec_status in SETUP_FAILURES
        if result != "done" and (setup_failed or not state.exec_code):
            reason = EXEC_FAILURES.get(state.exec_status) if state.exec_code == 1 else None
            await self._discard(s, f"start job {result}: {reason or state.result}")
            raise RequestError(f"cannot start {argv[0]!r}: "
                               f"{reason or f'systemd start job {result} ({state.result})'}",
                               "spawn")
        s.set_state("running", f"started by uid {client_uid}")
        if not state.main_pid or not s.watch_pid(self.pidwatch, state.main_pid,
                                                 lambda: self._on_pid_exit(s)):
            self._on_pid_exit(s)
        self.save()
        return s

    def _run_as(self, user: Optional[str], client_uid: int) -> tuple[Optional[str], int]:
        """(User= for the session, the uid that owns it), enforcing who may ask for whom."""
        if user is not None and client_uid != 0:
            raise RequestError("only root may start a session as another user", "permission")
        if self.uid != 0:
            return None, self.uid  # a user manager runs everything as its own user
        if user is not None:
            return user, _uid_of(user)  # an unknown user is refused here, clearly
        return (None, 0) if client_uid == 0 else (str(client_uid), client_uid)

    async def _discard(self, s: Session, cause: str) -> None:
        """Undo a spawn that did not start: nothing of it stays parked or loaded."""
        s.set_state("failed", cause)
        self.sessions.pop(s.id, None)
        s.close_fds(keep_ring=False)
        fdstore.unpark(f"m.{s.id}")
        fdstore.unpark(f"r.{s.id}")
        self.save()
        try:
            await self.manager.stop(s.unit)
        except ManagerError as exc:
            log.error("session %s: cleaning up its unit: %s", s.id, exc)

    # --- the end of a session -----------------------------------------------------------

    def _on_pid_exit(self, s: Session) -> None:
        s.unwatch_pid()
        self._spawn_task(self._finish(s))

    async def _finish(self, s: Session) -> None:
        if s.state != "running":
            return
        try:
            state = await self.manager.wait_finished(s.unit)
        except ManagerError as exc:
            log.error("session %s: %s", s.id, exc, extra={"CLOWDER_SESSION": s.id})
            state = None
        await self._end(s, state, "its program ended")

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
            self.save()  # recorded before anything is released: a crash now loses nothing
        s.deliver_exit()
        self._release_master(s)
        try:
            await self.manager.stop(s.unit)
        except ManagerError as exc:
            log.error("session %s: removing its unit: %s", s.id, exc)
        if self._enforce_exited_cap() and persist:
            self.save()

    def _release_master(self, s: Session) -> None:
        """Close the pty master (the slave side gets a hang-up) and unpark it."""
        s.close_fds(keep_ring=True)
        fdstore.unpark(f"m.{s.id}")

    def _enforce_exited_cap(self) -> bool:
        """Forget the oldest ended sessions beyond the cap; whether any went."""
        ended = [s for s in self.sessions.values() if s.state in ("exited", "lost")]
        if len(ended) <= self.config.max_exited:
            return False
        ended.sort(key=lambda s: s.ended_at or 0)
        for s in ended[:len(ended) - self.config.max_exited]:
            self.forget(s, "too many ended sessions kept")
        return True

    def forget(self, s: Session, cause: str) -> None:
        """Drop an ended session and its backlog."""
        s.set_state("removed", cause)
        self.sessions.pop(s.id, None)
        s.close_fds(keep_ring=False)
        fdstore.unpark(f"r.{s.id}")
        self.input_seq.forget(s.id)

    # --- requests on running sessions ---------------------------------------------------

    async def kill(self, s: Session, signal: int) -> None:
        if s.state != "running":
            raise RequestError(f"session {s.id} is not running ({s.state})", "not-running")
        if not 1 <= signal <= 64:
            raise RequestError(f"invalid signal number {signal}", "bad-request")
        try:
            await self.manager.kill(s.unit, signal)
        except ManagerError as exc:
            raise RequestError(str(exc), "kill") from exc

    def resize(self, s: Session, cols: int, rows: int) -> None:
        if not pty.valid_size(cols, rows):
            raise RequestError(f"invalid size {cols}x{rows}", "bad-request")
        if s.master is None:
            return
        if (cols, rows) != (s.cols, s.rows):
            s.resize_screen(cols, rows)
        pty.set_size(s.master.fd, cols, rows)
        if (cols, rows) != (s.cols, s.rows):
            s.cols, s.rows = cols, rows
            self.save()

    # --- hand-off (systemctl reload) -----------------------------------------------------

    def parked(self) -> dict[str, list[int]]:
        """Every fd this host keeps across an exec, by its FD store name."""
        fds: dict[str, list[int]] = {slot: [fd.fileno()] for slot, fd in self.manifest.fds.items()}
        for s in self.sessions.values():
            fds[f"r.{s.id}"] = [s.ring.fd.fileno()]
            if s.master is not None:
                fds[f"m.{s.id}"] = [s.master.fileno()]
        return fds

    async def check_handoff(self) -> dict:
        """The installed code's verdict on taking over from us (HandoffError if refused)."""
        return await self.loop.run_in_executor(None, handoff.run_check, self.parked(),
                                               self.manifest)

    async def handoff(self, listeners: dict[str, list[int]]) -> None:
        """Become the installed code in this same process, or say why not and carry on."""
        if self._handing_off:
            return
        self._handing_off = True
        fdstore.notify("RELOADING=1\nSTATUS=checking the new code")
        try:
            report = await self.check_handoff()
            log.info("hand-off to ptyhostd %s: check passed (%d sessions)", report["version"],
                     report["sessions"], extra={"CLOWDER_CAUSE": "handoff"})
            self.save()
            screens = handoff.pack_screens({
                s.id: {"pos": s.screen_pos, "cols": s.cols, "rows": s.rows,
                       "vt": s.screen.repaint() + s.screen.pending}
                for s in self.sessions.values() if s.screen is not None})
            try:
                # returns only on failure
                handoff.execute({**self.parked(), **listeners, handoff.SCREENS: [screens],
                                 inputseq.NAME: [self.input_seq.fd]})
            finally:
                os.close(screens)
        except handoff.HandoffError as exc:
            self.last_handoff_error = str(exc)
            log.error("hand-off refused, the running code keeps serving: %s", exc,
                      extra={"CLOWDER_CAUSE": "handoff-refused"})
        finally:
            self._handing_off = False
        fdstore.notify(f"READY=1\nSTATUS=serving {len(self.sessions)} sessions "
                       f"(hand-off refused)")

    # --- stop ---------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """On SIGTERM: a restart keeps everything parked; a real stop ends every session."""
        try:
            job = await self.manager.own_job_type()
        except ManagerError as exc:
            log.error("cannot tell a stop from a restart (%s): keeping sessions", exc)
            job = "restart"
        if job != "stop":
            log.info("exiting for %s; %d sessions stay parked", job or "a signal",
                     len(self.sessions), extra={"CLOWDER_CAUSE": job or "signal"})
            return
        log.info("stopping: ending every session", extra={"CLOWDER_CAUSE": "stop"})
        running = [s for s in self.sessions.values() if s.state == "running"]
        for s in running:
            s.unwatch_pid()
        await asyncio.gather(*(self._stop_session(s) for s in running))
        for s in list(self.sessions.values()):
            self.forget(s, "the host was stopped")
        self.save()

    async def _stop_session(self, s: Session) -> None:
        """Hang up the session's program, and record how it ended before its unit goes."""
        state = None
        try:
            await self.manager.kill(s.unit, 1)  # SIGHUP, as when a terminal closes
            state = await self.manager.wait_finished(s.unit, timeout=5)
        except ManagerError as exc:
            log.warning("session %s: no clean hang-up (%s): stopping its unit", s.id, exc)
        if state is None or not state.finished:
            try:
                await self.manager.stop(s.unit)  # escalates to SIGKILL after its timeout
            except ManagerError as exc:
                log.error("session %s: stopping: %s", s.id, exc)
        await self._end(s, state, "the host was stopped", persist=False)


def _check_argv(argv) -> list[str]:
    if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv[:1]) \
            or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise RequestError("a command is needed (non-empty strings without NUL)",
                           "bad-request")
    return list(argv)


def _check_env(env) -> list[str]:
    out = []
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k or "=" in k \
                or "\0" in k or "\0" in v or not (k[0].isalpha() or k[0] == "_"):
            raise RequestError(f"invalid environment variable {k!r}", "bad-request")
        out.append(f"{k}={v}")
    return out


def _printable(text: str) -> str:
    """``text`` with control characters as spaces (a unit description is one line)."""
    return "".join(c if c.isprintable() else " " for c in text)


def _in_unit(pid: int, unit: str) -> bool:
    """Whether process ``pid`` runs in ``unit``'s cgroup (a reused pid would not)."""
    # Raw os calls: this runs once per session at every start, before serving.
    try:
        fd = os.open(f"/proc/{pid}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        data = os.read(fd, 4096)
    except OSError:
        return False
    finally:
        os.close(fd)
    suffix = ("/" + unit).encode()
    return any(line.endswith(suffix) for line in data.split(b"\n"))


def _uid_of(user: str) -> int:
    try:
        return int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise RequestError(f"no such user: {user!r}", "bad-request") from None
