"""Spawning and naming sessions: the checks a new session or a new name passes, and
the start of its program in a transient unit.

A mixin of Host (host.py), as adopt.py is for its start: the same table and fds.
Nothing starts that could not be kept (the FD store's room, the host's fds), nor past
a user's limits (sessions, manifest bytes); each refusal is a RequestError with a reason
the client shows, and logged at most once an interval a cause.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
import unicodedata
from typing import NoReturn, Optional

import clowder_wire as protocol
from clowder_common import events, fdlimit, sdnotify
from clowder_common.ratelog import RateLimitedLog

from . import fdstore, pty, recordbudget, sessionenv
from .manager import EXEC_FAILURES, SETUP_FAILURES, ManagerError
from .manifestwriter import ManifestWriteError
from .requesterror import RequestError
from .ring import Ring
from .session import Session, user_slice
from .sessionevents import SessionEvents

log = logging.getLogger("ptyhostd")


class Spawning:
    """Host's spawn, rename and the checks they share."""

    async def spawn(self, req: protocol.Spawn, client_uid: int,
                    by_control: bool = False) -> Session:
        """_spawn, carried through to the end if the client goes away meanwhile: its
        connection's work is cancelled then (Connection.connection_lost), and a spawn cut
        at an await after its table entry left the session `starting` for good, its
        program run or not and never watched (test_hostile_gone.py)."""
        return await self._carried(self._spawn(req, client_uid, by_control))

    async def _spawn(self, req: protocol.Spawn, client_uid: int,
                     by_control: bool = False) -> Session:
        """Start a session for a client; raises RequestError with a reason it can show.

        ``by_control``: the client is clowder-control (peer.py): the session is marked
        as an agent's, and only then may its name start with ``agent:``.
        Nothing starts that could not be kept: a session the FD store has no room for
        would be lost at the next crash (systemd closes what is parked past its max)."""
        argv = _check_argv(req.argv)
        try:
            env = sessionenv.check(req.env)
        except sessionenv.EnvError as exc:
            raise RequestError(str(exc), "bad-request") from None
        if not pty.valid_size(req.cols, req.rows):
            raise RequestError(pty.size_problem(req.cols, req.rows), "bad-request")
        if req.cwd is not None and not os.path.isabs(req.cwd):
            raise RequestError(f"working directory must be absolute: {req.cwd!r}",
                               "bad-request")
        size = protocol.argv_bytes([req.cwd]) - 1 if req.cwd is not None else 0
        if size >= protocol.MAX_CWD_BYTES:
            raise RequestError(f"a working directory may take at most "
                               f"{protocol.MAX_CWD_BYTES - 1} bytes (PATH_MAX), not {size}",
                               "bad-request")
        user, uid = self._run_as(req.user, client_uid)
        name = req.name or ""
        _check_name(name)
        if name.startswith(protocol.AGENT_PREFIX) and not by_control:
            raise RequestError(f"session names starting with {protocol.AGENT_PREFIX!r} are "
                               f"reserved for clowder-control's agents", "reserved-name")
        if sdnotify.under_systemd():
            try:
                capacity, held = await self.manager.fd_store()
            except ManagerError as exc:
                raise RequestError(f"cannot start {argv[0]!r}: {exc}", "spawn") from exc
        # From here to the table entry nothing awaits: concurrent spawns count each other.
        if name and not by_control:
            self._check_name_free(name, uid)
        if client_uid != 0:
            mine = sum(1 for s in self.sessions.values()
                       if s.uid == uid and s.state in ("starting", "running"))
            limit = self.config.max_sessions_per_user
            if mine >= limit:
                _refuse_spawn("user-limit", uid, (
                    f"uid {uid} already has {mine} running sessions, the most one user "
                    f"may have (--max-sessions-per-user / CLOWDER_MAX_SESSIONS_PER_USER="
                    f"{limit} on clowder-ptyhost.service); end one first"))
            # An empty name becomes the session's id, 8 hex digits.
            text = self._over_record_budget(uid, recordbudget.new_record(
                name or "0" * 8, argv, req.cwd), "this session's record")
            if text:
                _refuse_spawn("record-limit", uid, text)
        if sdnotify.under_systemd():
            ours = fdstore.store_slots(len(self.sessions), sum(
                1 for s in self.sessions.values() if s.master is not None))
            full = fdstore.store_full(ours, held, capacity)
            if full:
                _log_refusal("store-full", full)
                raise RequestError(full, "capacity")
        if fdstore.fds_short(len(self.sessions)):
            raise RequestError(self._out_of_fds("a new session"), "capacity")
        sid = os.urandom(4).hex()  # as secrets.token_hex, without its ~6 ms import
        while sid in self.sessions:
            sid = os.urandom(4).hex()
        name = name or sid
        try:
            master, slave, tty = pty.open_pair(sid)
        except pty.PtyError as exc:
            if exc.errno in fdlimit.EXHAUSTED:
                raise RequestError(self._out_of_fds("a pty"), "capacity") from exc
            raise RequestError(str(exc), "pty") from exc
        seed = self._resumed_screen(req.resumes, uid, req.rows)
        try:
            pty.set_size(master.fd, req.cols, req.rows)
            ring = Ring.create(sid, self.config.backlog_bytes)
            if seed:
                ring.put(seed[-(self.config.backlog_bytes // 2):])
        except OSError as exc:
            master.close()
            slave.close()
            if exc.errno in fdlimit.EXHAUSTED:
                raise RequestError(self._out_of_fds("a backlog ring"), "capacity") from exc
            raise
        except Exception:
            master.close()
            slave.close()
            raise
        s = Session(sid, name=name, argv=argv, cwd=req.cwd, uid=uid, cols=req.cols,
                    rows=req.rows, created=time.time(), ring=ring, master=master,
                    agent=by_control)
        s.events = SessionEvents(s, self.bus, self.loop)
        # Parked before the program starts: a crash from here on cannot lose the pty.
        fdstore.park(f"m.{sid}", master.fd, poll=False)
        fdstore.park(f"r.{sid}", ring.fd.fd)
        self.sessions[sid] = s
        s.start_reading(self.loop)
        log.debug("session %s: parked its pty and ring; starting unit %s as uid %d: %s",
                  sid, s.unit, uid, argv, extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "spawn"})
        try:
            await self.saved()  # recorded before its program runs
            result = await self.manager.start_session(
                s.unit, argv, tty, req.cwd,
                sessionenv.assignments(env, uid, sid,
                                       sessionenv.agent_of(name) if by_control else None),
                user, _printable(f"clowder session {name}: {' '.join(argv)}")[:200],
                search_path=sessionenv.search_path(argv[0], env), slice_=user_slice(uid))
            state = await self.manager.unit_state(s.unit)
        except Exception as exc:  # whatever failed, the session must not stay starting
            await self._discard(s, f"start failed: {exc}")
            raise RequestError(f"cannot start {argv[0]!r}: {exc}", "spawn") from exc
        finally:
            slave.close()  # the unit has opened the tty (or never will)
        # A program that exits at once can fail the Type=exec start job before systemd
        # saw its exec succeed; it did run unless the status is one of systemd's own.
        setup_failed = state.exec_code == 1 and state.exec_status in SETUP_FAILURES
        if result != "done" and (setup_failed or not state.exec_code):
            reason = EXEC_FAILURES.get(state.exec_status) if state.exec_code == 1 else None
            await self._discard(s, f"start job {result}: {reason or state.result}")
            raise RequestError(f"cannot start {argv[0]!r}: "
                               f"{reason or f'systemd start job {result} ({state.result})'}",
                               "spawn")
        s.set_state("running", f"started by uid {client_uid}"
                    + (" (clowder-control)" if by_control else ""))
        try:
            watched = bool(state.main_pid) and s.watch_pid(self.pidwatch, state.main_pid,
                                                           lambda: self._on_pid_exit(s))
        except OSError as exc:
            # No pidfd, no way to see the end: refuse rather than keep a session whose
            # exit would never be noticed.
            if exc.errno not in fdlimit.EXHAUSTED:
                raise
            await self._discard(s, "no fd left for its pidfd")
            raise RequestError(self._out_of_fds("the session's pidfd"), "capacity") from exc
        if not watched:
            self._on_pid_exit(s)
        try:
            await self.saved()  # before the client hears of it
        except ManifestWriteError:
            pass  # logged; it runs and is listed, and the next change's write records it
        return s

    def _resumed_screen(self, resumes: Optional[str], uid: int, rows: int) -> bytes:
        """What opens a resumed agent's output: the last screen of the session it
        resumes (one of the same owner's, ended by a reboot) and a notice on its last
        row, the cursor left where the screen had it.  The program's first drawing
        replaces both; until then an attach shows them (its repaint is of this)."""
        if not resumes:
            return b""
        old = self.sessions.get(resumes) if isinstance(resumes, str) else None
        if old is None or old.uid != uid or old.ended_by != "reboot":
            return b""  # not the caller's, or nothing to show: spawn without it
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(old.ended_at or 0))
        notice = f"clowder: last screen before the reboot at {when}; the agent was resumed"
        return (old.ring.read(old.ring.tail) + b"\x1b[0m\x1b7"
                + f"\x1b[{rows};1H\x1b[2K\x1b[7m{notice}\x1b[0m".encode() + b"\x1b8")

    def _check_name_free(self, name: str, uid: int, keep: Optional[Session] = None) -> None:
        """Refuse a name one of the user's running sessions has (``attach NAME`` would be
        ambiguous); ended sessions do not hold their names."""
        for s in self.sessions.values():
            if s is not keep and s.uid == uid and s.name == name \
                    and s.state in ("starting", "running"):
                raise RequestError(f"a running session of yours is already named "
                                   f"{name!r} ({s.id}): choose another name, or "
                                   f"`clowderctl rename {s.id} NEW` first", "name-taken")

    def rename(self, s: Session, name: str, client_uid: int, by_control: bool = False) -> None:
        """Give ``s`` a new name, checked as a spawn's is (printable, unique among the
        owner's running sessions, ``agent:`` names and agents' sessions only from
        clowder-control, which finds its agents by name, within the owner's record
        budget unless the client is root)."""
        _check_name(name)
        if not name:
            raise RequestError("a session name may not be empty", "bad-request")
        if not by_control and (s.agent or name.startswith(protocol.AGENT_PREFIX)):
            raise RequestError(f"session {s.id} is an agent's, or the name starts with "
                               f"{protocol.AGENT_PREFIX!r}: those names are "
                               f"clowder-control's", "reserved-name")
        if name == s.name:
            return
        self._check_name_free(name, s.uid, keep=s)
        if client_uid != 0:
            text = self._over_record_budget(s.uid, recordbudget.renamed(s.name, name),
                                            "the new name")
            if text:
                raise RequestError(text, "limit")
        old, s.name = s.name, name
        log.info("session %s: renamed from %r to %r", s.id, old, name,
                 extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "rename"})
        self.save()

    def _over_record_budget(self, uid: int, adding: int, what: str) -> Optional[str]:
        """Why adding ``adding`` bytes to ``uid``'s manifest records must be refused, or
        None.  The sum walks the table as the session count does: each record's encoding
        is kept between changes (Session.record_json), ~0.2 ms at 1,024 sessions."""
        held = sum(len(s.record_json()) for s in self.sessions.values() if s.uid == uid)
        return recordbudget.refusal(uid, held, adding, self.config.max_record_bytes_per_user,
                                    what)

    def _out_of_fds(self, what: str) -> str:
        """The refusal for a spawn that found the host's fd table full, logged."""
        text = fdlimit.out_of_fds(what)
        _log_refusal("out-of-fds", text)
        return text

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
        except Exception as exc:  # the unit is stopped as an orphan after a reconnect
            log.error("session %s: cleaning up its unit: %s", s.id, exc,
                      extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": "unit-cleanup"})


# A client that retries a refused spawn in a loop must not flood the journal.
_refusals = RateLimitedLog(log)


def _log_refusal(cause: str, text: str, uid: Optional[int] = None) -> None:
    """Log why spawns are refused, at most once per interval for each cause (and uid,
    if the refusal is that uid's alone), with how many were not logged since."""
    _refusals.warning((cause, uid), "spawn refused: %s", text,
                      extra={"CLOWDER_CAUSE": cause, **events.fields("spawn-refused")})


def _refuse_spawn(cause: str, uid: int, text: str) -> NoReturn:
    """Refuse a spawn past one of ``uid``'s limits: logged (_log_refusal), and told to
    the client as a ``limit`` error."""
    _log_refusal(cause, text, uid)
    raise RequestError(text, "limit")


def _check_argv(argv) -> list[str]:
    if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv[:1]) \
            or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise RequestError("a command is needed (non-empty strings without NUL)",
                           "bad-request")
    size = protocol.argv_bytes(argv)
    if size > protocol.MAX_ARGV_BYTES:
        raise RequestError(f"a command line may take at most {protocol.MAX_ARGV_BYTES} "
                           f"bytes (its arguments' UTF-8 and a NUL each), not {size}",
                           "bad-request")
    return list(argv)


# Unicode categories a name may not hold: controls (C0, DEL, C1), format characters
# (bidi overrides and isolates, zero-width ones: they reorder or hide what a terminal
# shows), surrogates, and the line and paragraph separators.
_UNSHOWABLE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def _check_name(name: str) -> None:
    if len(name) > 200:
        raise RequestError(f"a session name may be at most 200 characters, not {len(name)}",
                           "bad-request")
    for c in name:
        if unicodedata.category(c) in _UNSHOWABLE:
            raise RequestError(f"a session name may not contain U+{ord(c):04X} "
                               f"({unicodedata.name(c, 'a control character')}): it "
                               f"would change or hide what a terminal shows", "bad-request")


def _printable(text: str) -> str:
    """``text`` with control characters as spaces (a unit description is one line)."""
    return "".join(c if c.isprintable() else " " for c in text)


def _uid_of(user: str) -> int:
    try:
        return int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise RequestError(f"no such user: {user!r}", "bad-request") from None
