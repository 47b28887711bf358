"""Adoption: a starting host takes back what the FD store kept, session by session.

A mixin of Host (host.py): the same table and fds, the start's part of them.  Sessions
whose recorded program still runs are served again with no call to systemd; the others
are asked of it; a session whose adoption fails is kept all the same (its unit is never
stopped as an orphan while its master is parked).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from typing import TYPE_CHECKING, Callable, Optional

import clowder_wire as protocol
from clowder_common import events, sdnotify

from . import faults, fdstore, handoff, inputseq, pty
from .fd import Fd
from .manager import Manager, ManagerError
from .manifest import SLOTS, Manifest, ManifestError
from .ring import Ring, RingError
from .session import UNIT_PREFIX, Session, unit_name
from .sessionevents import SessionEvents

if TYPE_CHECKING:
    from .host import Config, Host

log = logging.getLogger("ptyhostd")

AFTER_START = 0.5  # seconds from serving to the start's background checks
# What a session id must look like to be adopted from a record: usable in an FD store
# name (m.<id>, r.<id>) and a unit name.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_STATES = frozenset(("starting", "running", "exited", "lost"))  # what a record can say


class Adoption:
    """Host's start: adopt, reconcile with systemd, verify, sweep orphan units."""

    # --- start: adopt what the store gave back ------------------------------------------

    @classmethod
    async def start(cls, config: Config, stored: dict[str, list[int]],
                    bridge_end: Optional[Callable[[], None]] = None) -> "Host":
        """A host that has adopted every session parked by its predecessor.

        ``bridge_end``: after a hand-off, what stops the old code's bridge (bridge.py),
        which may be moving bytes through ptys and rings until it is called; it is
        called once every session is taken (_adopt), before the first pty is read."""
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
        # New copies replace the parked ones (an unusable pair would otherwise come back
        # at every restart, and the fresh pair be lost at the first); a copy that was not
        # parked is parked now, or every other write would go where no start finds it.
        for slot in sorted(manifest.created):
            if slot in raw_manifest:
                fdstore.unpark(slot)
            fdstore.park(slot, manifest.fds[slot].fd)
        host = cls(config, manager, manifest)
        host._bridge_end = bridge_end
        # Why this start, as far as the host can tell: nothing parked is a fresh start;
        # a manifest its predecessor marked on a clean exit (Host.shutdown) a restart; a
        # parked manifest without the mark, a predecessor that never reached its
        # shutdown (a crash, SIGKILL, the watchdog).  main() says "hand-off".
        host.start_cause = "start" if not raw_manifest else \
            "restart" if valid and content.get("left") == "restart" else "crash recovery"
        # Before the sessions: what each attach client's input reached (inputseq.py).
        host.input_seq = inputseq.InputSeqTable.start(stored.pop(inputseq.NAME, []))
        await host._adopt(records, stored, save_now=not valid)
        host._restore_saved()
        if host.start_cause == "restart":
            # Without the mark: a crash from now on is not a restart.  The parked body,
            # written again without it, when it lists exactly the sessions taken;
            # else the table, encoded (Manifest.unmark).
            ids = {r.get("id") for r in records if isinstance(r, dict)}
            if ids != host.sessions.keys() or not host.writer.now(Manifest.unmark):
                host.save_now()
        for fd in stored.get(handoff.SCREENS, []):
            host._spawn_task(host._seed_screens(handoff.unpack_screens(fd)))
        host._spawn_task(host.keep_screens())
        host._spawn_task(host.state_dir.keep(host))
        host._spawn_task(host.fit_screens())
        return host

    async def _adopt(self, records: list[dict], stored: dict[str, list[int]],
                     save_now: bool) -> None:
        """Adopt every parked session.  A failure with one session never loses it: it is
        kept in the table (see _adopt_failed and _asking_failed), or, if even that is
        impossible, its fds stay parked and its unit running for the next start."""
        masters = {n[2:]: fds for n, fds in stored.items() if n.startswith("m.")}
        rings = {n[2:]: fds for n, fds in stored.items() if n.startswith("r.")}
        by_id = {}
        for rec in records if isinstance(records, list) else []:
            sid = rec.get("id") if isinstance(rec, dict) else None
            if isinstance(sid, str) and _SESSION_ID.fullmatch(sid):
                by_id[sid] = rec
            else:  # its fds, if any, are adopted by their names below
                log.error("a manifest record without a usable id is ignored: %.200r", rec,
                          extra={"CLOWDER_CAUSE": "manifest-record"})
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
            master_fds, ring_fds = masters.pop(sid, []), rings.pop(sid, [])
            try:
                s = self._adopt_one(rec, master_fds, ring_fds)
            except Exception as exc:  # one bad session must not lose it, nor the others
                s = self._adopt_failed(sid, rec, master_fds, ring_fds, exc)
            if s is not None:
                asking.append(s)
        self._settle_bridge()
        for s in asking:
            try:
                await self._adopt_asking(s)
            except Exception as exc:
                self._asking_failed(s, exc)
        for kind, leftovers in (("m", masters), ("r", rings)):
            for sid, fds in leftovers.items():
                log.warning("closing parked %s.%s that no session claims", kind, sid,
                            extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "unclaimed-fd"})
                for fd in fds:
                    os.close(fd)
                fdstore.unpark(f"{kind}.{sid}")
        self._enforce_exited_cap()
        if save_now:
            self.save_now()  # no valid manifest was parked: there must be one now
        self._spawn_task(self._after_start(save=not save_now))
        live = sum(1 for s in self.sessions.values() if s.state == "running")
        log.info("adopted %d sessions (%d running)", len(self.sessions), live,
                 extra={"CLOWDER_CAUSE": "start", "CLOWDER_START": self.start_cause,
                        **events.fields("host-started")})

    def _settle_bridge(self) -> None:
        """After a hand-off, the sessions are taken (fds owned, rings mapped, readers and
        pidfds registered) and the old code's bridge has served their clients meanwhile:
        stop it now, then take each ring's head as the bridge left it.  Nothing before
        this read a pty or wrote a ring or the input table, and the event loop has run
        nothing yet (no await since the start began), so the two never ran at once;
        what the bridge wrote to the input table is read when a client attaches."""
        end, self._bridge_end = self._bridge_end, None
        if end is None:
            return
        end()
        for s in self.sessions.values():
            s.ring.settle()

    def _restore_saved(self) -> None:
        """Sessions saved on disk (statedir.py) that the FD store did not give back: of
        a previous boot, ended by the reboot; of this boot, lost (the store was
        flushed).  Each becomes an ended session with its saved screen as its backlog,
        so ps, snapshot, history, attach and rm work on it as on any ended one, with
        the same ownership rules.  Saved ends stay as they were."""
        restored = 0
        for rec, body in self.state_dir.load(skip=self.sessions.keys()):
            sid = rec["id"]
            if sid in self.sessions or not _SESSION_ID.fullmatch(sid):
                continue  # adopted from the FD store: alive, and its file is refreshed
            try:
                ring = Ring.create(sid, len(body) + 2 * 64 * 1024)
                ring.put(body)
            except OSError as exc:
                self.state_dir.report("state-restore", f"session {sid}: {exc}")
                continue
            s = self._session_from(sid, {**rec, "pid": 0}, ring, None)
            if s.state in ("starting", "running"):
                s.ended_by = "reboot" if rec.get("boot") != self.state_dir.boot else "lost"
                s.exit_status = "lost"
                s.ended_at = rec.get("saved_at") if isinstance(
                    rec.get("saved_at"), (int, float)) else time.time()
                s.seen = False
                why = "the service manager started again (a reboot)" \
                    if s.ended_by == "reboot" else "the FD store did not have it"
                s.set_state("lost", f"saved on disk while running; {why}")
            fdstore.park(f"r.{sid}", ring.fd.fd)
            self.sessions[sid] = s
            self.state_dir.restored(sid, (ring.head, s.record_json()))
            restored += 1
        if restored:
            log.info("%d sessions restored from the state directory %s", restored,
                     self.state_dir.path, extra={"CLOWDER_CAUSE": "state-restored"})
            self._enforce_exited_cap()
            self.save_now()

    def _adopt_one(self, rec: dict, master_fds: list[int], ring_fds: list[int]
                   ) -> Optional[Session]:
        """Take the parked fds of one session back; the session if systemd must be asked
        how it is (its program is not found running in its unit), else None.

        Each fd leaves its list as it gets an owner, and the session is in the table as
        soon as it owns them: what a failure part-way leaves is _adopt_failed's."""
        sid = rec["id"]
        faults.maybe_fail("adopt", sid)
        ring = self._adopt_ring(sid, ring_fds)
        s = self._session_from(sid, rec, ring, self._adopt_master(sid, master_fds))
        self.sessions[sid] = s
        if s.state in ("exited", "lost"):
            if s.master is not None:  # a crash came between recording the end and closing
                self._release_master(s)
            return None  # its unit, if still loaded, is stopped with the orphans
        if s.master is not None and s.pid and s.watch_pid(self.pidwatch, s.pid,
                                                           lambda: self._on_pid_exit(s)):
            # The fast path: the recorded main PID is alive. That it is still the
            # session's program (a reused pid would be in another cgroup) is checked
            # right after the host starts serving (_verify_adopted).
            self._resume(s)
            self._fast_adopted.append(s)
            return None
        return s

    def _adopt_ring(self, sid: str, ring_fds: list[int]) -> Ring:
        """The session's parked ring, or a fresh one parked in its place; exactly one ring
        is parked under its name afterwards (a corrupt one is unparked, not kept)."""
        parked = bool(ring_fds)
        ring, corrupt, extra = None, [], 0
        while ring_fds:
            fd = ring_fds.pop(0)
            if ring is not None:
                os.close(fd)
                extra += 1
                continue
            try:
                # closes fd when it raises; a ring the bridge may write is settled later
                ring = Ring.adopt(fd, sid, settle=self._bridge_end is None)
            except RingError as exc:
                corrupt.append(str(exc))
        if ring is not None and not corrupt and not extra:
            return ring
        if corrupt or extra:
            log.error("session %s: %s", sid, "; ".join(
                corrupt + [f"{extra} more rings under its name closed"] * bool(extra)),
                extra={"CLOWDER_SESSION": sid,
                       "CLOWDER_CAUSE": "ring-corrupt" if corrupt else "fd-duplicate"})
        if ring is None:
            if corrupt:
                log.error("session %s: backlog lost, a fresh ring replaces it", sid,
                          extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "ring-corrupt"})
            ring = Ring.create(sid, self.config.backlog_bytes)
        if parked:
            fdstore.unpark(f"r.{sid}")
        fdstore.park(f"r.{sid}", ring.fd.fd)
        return ring

    def _adopt_master(self, sid: str, master_fds: list[int]) -> Optional[Fd]:
        """The session's parked pty master, if one was parked; never raises."""
        if not master_fds:
            return None
        master = Fd(master_fds.pop(0), f"pty master {sid}")
        if master_fds:
            # Never parked by this code; the first is kept and made the only one.
            log.error("session %s: %d more pty masters under its name closed", sid,
                      len(master_fds), extra={"CLOWDER_SESSION": sid,
                                              "CLOWDER_CAUSE": "fd-duplicate"})
            for fd in master_fds:
                os.close(fd)
            master_fds.clear()
            try:
                fdstore.unpark(f"m.{sid}")
                fdstore.park(f"m.{sid}", master.fd, poll=False)
            except sdnotify.NotifyError as exc:
                log.error("session %s: re-parking its pty master: %s", sid, exc,
                          extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "fd-duplicate"})
        return master

    def _session_from(self, sid: str, rec: dict, ring: Ring, master: Optional[Fd]
                      ) -> Session:
        """A session from its manifest record; never raises (the session already owns
        its fds): a field that cannot be read takes its default."""
        try:
            return self._session_of(sid, rec, ring, master)
        except (TypeError, ValueError, OverflowError, AttributeError) as exc:
            log.error("session %s: its record is partly unreadable (%s): %.300r", sid, exc,
                      rec, extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "manifest-record"})

        def field(key, kinds, default):
            value = rec.get(key, default) if isinstance(rec, dict) else default
            return value if isinstance(value, kinds) and not isinstance(value, bool) \
                else default
        return self._session_of(sid, {
            "name": field("name", str, sid), "argv": [
                a for a in field("argv", list, []) if isinstance(a, str)],
            "cwd": field("cwd", str, None), "uid": field("uid", int, self.uid),
            "cols": field("cols", int, 80), "rows": field("rows", int, 24),
            "created": field("created", (int, float), None), "state": field("state", str, ""),
            "exit_status": field("exit_status", str, None),
            "exit_code": field("exit_code", int, None), "signal": field("signal", int, None),
            "ended_at": field("ended_at", (int, float), None), "pid": field("pid", int, 0),
            "agent": rec.get("agent") if isinstance(rec, dict) else False,
            "seen": rec.get("seen") if isinstance(rec, dict) else False,
            "ended_by": rec.get("ended_by") if isinstance(rec, dict) else None},
            ring, master)

    def _session_of(self, sid: str, rec: dict, ring: Ring, master: Optional[Fd]) -> Session:
        """The plain reading of a record (at 1,000 sessions, per-field type checks would
        cost milliseconds of every restart's blackout); raises on a field of a bad type."""
        cols, rows = int(rec.get("cols", 80)), int(rec.get("rows", 24))
        if not pty.valid_size(cols, rows):
            cols, rows = 80, 24
        state = rec.get("state", "running")
        name = rec.get("name") or sid
        s = Session(sid, name=name if isinstance(name, str) else str(name),
                    argv=_within([str(a) for a in rec.get("argv") or []]),
                    cwd=rec.get("cwd") or None,
                    uid=int(rec.get("uid", self.uid)), cols=cols, rows=rows,
                    created=float(rec.get("created") or time.time()), ring=ring,
                    master=master, state=state if state in _STATES else "running",
                    agent=rec.get("agent") is True)
        s.exit_status = rec.get("exit_status")
        s.exit_code = rec.get("exit_code")
        s.signal = rec.get("signal")
        s.ended_at = rec.get("ended_at")
        s.seen = rec.get("seen") is True
        ended_by = rec.get("ended_by")
        s.ended_by = ended_by if ended_by in ("reboot", "lost") else None
        s.pid = max(0, int(rec.get("pid") or 0))
        if s.state in ("starting", "running"):
            s.events = SessionEvents(s, self.bus, self.loop)  # idle until it prints
        return s

    def _adopt_failed(self, sid: str, rec: dict, master_fds: list[int], ring_fds: list[int],
                      exc: Exception) -> Optional[Session]:
        """Keep a session whose adoption raised: in the table, to be asked of systemd
        (the session if so); else its fds stay parked and its unit is left running."""
        log.error("session %s: adoption failed, asking systemd how it is: %s", sid, exc,
                  exc_info=exc, extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "adopt-failed"})
        s = self.sessions.get(sid)
        if s is None:
            try:
                ring = self._adopt_ring(sid, ring_fds)
                s = self._session_from(sid, rec, ring, self._adopt_master(sid, master_fds))
            except Exception as again:
                log.error("session %s: cannot be kept (%s): its fds stay parked and its "
                          "unit runs on, for the next start", sid, again, exc_info=again,
                          extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "adopt-failed"})
                for kind, fds in (("m", master_fds), ("r", ring_fds)):
                    if fds:
                        self._unadopted[f"{kind}.{sid}"] = list(fds)
                return None
            self.sessions[sid] = s
        else:
            s.stop_reading()
            _unwatch(s)
        return None if s.state in ("exited", "lost") else s

    def _asking_failed(self, s: Session, exc: Exception) -> None:
        """systemd could not be asked how ``s`` is: serve it on what can be seen here
        (its recorded pid, in its unit), else keep reading its pty and ask again."""
        log.error("session %s: cannot ask systemd how its unit is: %s", s.id, exc,
                  exc_info=exc, extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "adopt-failed"})
        if self.sessions.get(s.id) is not s or s.state in ("exited", "lost") \
                or s.pidfd is not None and s.state == "running":
            return  # settled before it failed
        _unwatch(s)
        try:
            if s.master is not None and s.pid and _in_unit(s.pid, s.unit) \
                    and s.watch_pid(self.pidwatch, s.pid, lambda: self._on_pid_exit(s)):
                self._resume(s)
                s.set_state("running", f"adopted by its pid {s.pid}, found in its unit, "
                            "without systemd's word", event="session-adopted")
                return
        except Exception as again:
            log.error("session %s: watching pid %d: %s", s.id, s.pid, again,
                      extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "adopt-failed"})
            _unwatch(s)
        try:
            s.start_reading(self.loop)  # a program whose output is not read blocks
        except Exception as again:
            log.error("session %s: reading its pty: %s", s.id, again,
                      extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "adopt-failed"})
        s.set_state(s.state, "kept as recorded until systemd can be asked how it is",
                    event="session-adopted")
        self._spawn_task(self._ask_again(s))

    async def _ask_again(self, s: Session) -> None:
        """Ask systemd about ``s`` until it answers (backing off to a minute)."""
        delay = 1.0
        while self.sessions.get(s.id) is s and s.state not in ("exited", "lost") \
                and s.pidfd is None:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)
            try:
                await self._adopt_asking(s)
                return
            except Exception as exc:
                _unwatch(s)
                log.warning("session %s: systemd still cannot be asked (%s); again in %.0f s",
                            s.id, exc, delay, extra={"CLOWDER_SESSION": s.id,
                                                     "CLOWDER_CAUSE": "adopt-failed"})

    async def _adopt_asking(self, s: Session) -> None:
        """The slow path of adoption: ask systemd how the session's unit is."""
        faults.maybe_fail("ask", s.id)
        state = await self.manager.unit_state(s.unit)
        if self.sessions.get(s.id) is not s or s.state in ("exited", "lost") \
                or s.id in self._finishing:
            return  # its end was seen meanwhile (its pidfd): recorded there, with status
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
        s.start_reading(self.loop, self.quiet_ptys)
        if s.state != "running":
            s.set_state("running", "adopted after a host restart", event="session-adopted")
        else:
            log.debug("session %s: adopted, pid %s", s.id, s.pid,
                      extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "adopt"})

    async def _after_start(self, save: bool) -> None:
        """What the start leaves until the clients that waited through a restart are
        served (at 1,000 sessions each step costs ~10-20 ms): rewriting the manifest
        (until then the previous one, still valid, describes the same sessions, and each
        end recorded during adoption saved its own), confirming the fast path's pids,
        and stopping units that no session claims."""
        await asyncio.sleep(AFTER_START)
        if save:
            try:
                self.save()
            except Exception as exc:  # the checks below must still run
                log.exception("writing the manifest after the start: %s", exc,
                              extra={"CLOWDER_CAUSE": "manifest-write"})
        await self._verify_adopted()
        await self._stop_orphan_units()
        log.info("the start's checks are done", extra={"CLOWDER_CAUSE": "start-checks"})

    async def _verify_adopted(self) -> None:
        """Check that each session adopted on the fast path watches its own program.

        Reading every /proc/PID/cgroup costs ~15 ms at 1,000 sessions, so it comes after
        the host is serving; a pid found outside its unit (the program ended while the
        host was down and its number was reused) is asked of systemd instead.  Only
        those sessions: one spawned since is not, and one whose program has just ended
        (its pidfd fired: the pid has left the unit) is being ended with its status."""
        adopted, self._fast_adopted = self._fast_adopted, []
        for i, s in enumerate(adopted):
            if i % 100 == 99:
                await asyncio.sleep(0)  # let clients in between
            if self.sessions.get(s.id) is not s or s.state != "running" \
                    or s.pidfd is None or s.id in self._finishing \
                    or s.pid_exited() or _in_unit(s.pid, s.unit):
                continue
            log.warning("session %s: pid %d is no longer in %s; asking systemd", s.id,
                        s.pid, s.unit, extra={"CLOWDER_SESSION": s.id,
                                              "CLOWDER_CAUSE": "pid-reused"})
            _unwatch(s)
            try:
                await self._adopt_asking(s)
            except Exception as exc:
                self._asking_failed(s, exc)

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
        # A master left parked by a failed adoption: its program may well run.
        live |= {unit_name(name[2:]) for name in self._unadopted if name.startswith("m.")}
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


def _unwatch(s: Session) -> None:
    """Stop watching the session's pid and close its pidfd (to watch it afresh)."""
    s.unwatch_pid()
    if s.pidfd is not None:
        s.pidfd.close()
        s.pidfd = None


def _within(argv: list[str]) -> list[str]:
    """A recorded command line, cut to what a spawn takes now (protocol.MAX_ARGV_BYTES):
    one recorded before that limit would make every listing that holds it too large to
    send.  Only what ``ps`` shows: the program runs on, as it was started."""
    if protocol.argv_bytes(argv) <= protocol.MAX_ARGV_BYTES:
        return argv
    kept, room = [], protocol.MAX_ARGV_BYTES
    for arg in argv:
        room -= protocol.argv_bytes([arg])
        if room < 0:
            break
        kept.append(arg)
    return kept or [argv[0][:protocol.MAX_ARGV_BYTES // 4]]
