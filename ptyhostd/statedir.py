"""The state directory: each session's record and last screen, on disk for the next boot.

The FD store and the memfds die with the service manager (a reboot), so what a user
wants back after one - which sessions there were, how their screens looked, the last of
their scrollback - is written here (``StateDirectory=clowder-ptyhost``: systemd makes
``/var/lib/clowder-ptyhost``, or the user manager's state directory, and names it in
``$STATE_DIRECTORY``), one file a session, ``sessions/<id>.saved``:

    clowder-saved-session 1\\n
    {record as JSON: id, name, uid, unit, argv, cwd, cols, rows, created, boot, agent,
     state, exit_status, exit_code, signal, ended_at, saved_at}\\n
    VT bytes: the last TAIL_LINES lines of scrollback (with their colours; not the
    screen's rows), newlines that scroll them all off, then the repaint of the screen:
    fed to a fresh terminal of cols x rows they give back its scrollback and screen.

Bounds (docs/design.md "Across a reboot"): a file is rewritten at most every INTERVAL
seconds and only when the session's output, size, name or state changed; one file is at
most FILE_MAX bytes; one round writes at most ROUND_BUDGET bytes and makes files for at
most ROUND_SECONDS (the rest wait for the next round; users in turn, each user's least
recently saved first); the directory holds at most TOTAL_MAX bytes (past it ended
sessions' files go, from the user whose files take the most and more than an equal
share, longest ended first).  The text is made
in the screen pool (the model's own worker), the file written in a thread: never on the
byte path nor on the event loop.  Writes are atomic: a temporary file, fsync, rename.

The boot a record belongs to (``boot_key``): the kernel's boot id and the service
manager's start (our parent's pid and start time).  The kernel's boot id alone is not
enough: a container's systemd (tools/sysinstance.py) boots again under the same kernel.
Under systemd our parent is the manager (PID 1, or the user's manager), and a hand-off
keeps the process, so the key changes exactly when the manager - and with it the FD
store - was started again.

Whatever is wrong with the directory (unreadable, garbage, truncated, someone else's
file, full) is reported once per cause and minute (``state-dir-problem``) and the host
serves as without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Optional

from clowder_common import events

log = logging.getLogger("ptyhostd")

MAGIC = b"clowder-saved-session 1\n"
SUBDIR = "sessions"
SUFFIX = ".saved"
INTERVAL = 5.0  # seconds between two writes of one session's file, at least
TAIL_LINES = 2000  # scrollback lines kept
FILE_MAX = 256 * 1024  # one session's file at most
ROUND_BUDGET = 1 << 20  # written in one round (every INTERVAL) at most, all sessions
# Time one round may spend making files (the model's scrollback and repaint, in the
# screen pool; with pyte, its catch-up too): past it the rest wait for the next round,
# least recently saved first.  So saving takes at most ROUND_SECONDS / INTERVAL (2%) of
# the time, whatever the number of sessions and their output.
ROUND_SECONDS = 0.1
TOTAL_MAX = 64 << 20  # the directory at most (default of $CLOWDER_STATE_BYTES)
READ_MAX = FILE_MAX + 64 * 1024  # a file larger than this is not read (not ours)
REPORT_EVERY = 60.0  # seconds: one journal line per cause at most
TRIMMED = ("trimmed",)  # a session whose file went for the cap


def _rows_used(tail: bytes, cols: int, most: int) -> int:
    """The screen rows the last lines of ``tail`` (each ending in CRLF) fill, at most
    ``most``: a line wider than the screen wraps onto more than one."""
    from wcwidth import wcswidth

    from .history import ESCAPE
    used = 0
    for line in reversed(tail.split(b"\r\n")[:-1]):
        text = ESCAPE.sub("", line.decode("utf-8", "replace"))
        width = wcswidth(text)
        used += max(1, -(-(width if width >= 0 else len(text)) // max(1, cols)))
        if used >= most:
            return most
    return used


def saved_body(lines: list[str], screen: bytes, cols: int, rows: int, room: int) -> bytes:
    """The VT bytes of a saved file: the scrollback's ``lines`` (whole lines, the last
    that fit in ``room`` with the screen), then the repaint ``screen``; fed to a fresh
    terminal of ``cols`` x ``rows`` they give back both, no line twice or missing."""
    tail = "".join(line + "\r\n" for line in lines).encode("utf-8", "replace")
    screen = screen[:room]  # a screen larger than a file is cut (never seen: ~10 KiB)
    left = room - len(screen) - 16  # 16: the scroll below
    if left <= 0:
        tail = b""
    elif len(tail) > left:
        tail = tail[len(tail) - left:]
        tail = tail[tail.find(b"\n") + 1:]  # whole lines only
    # Scroll those lines off the screen (the repaint then draws it afresh): after the
    # last newline the screen holds the rows of the last of them and blank rows, which
    # must not enter the scrollback.  A scroll (SU), not newlines, so the raw line model
    # (history without a following model) sees no blank lines.
    up = _rows_used(tail, cols, rows - 1)
    scroll = b"\x1b[%dS" % up if up > 0 else b""
    return tail + scroll + screen


def boot_key() -> str:
    """The kernel's boot id and the service manager's start (see the module's doc)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = "?"
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/stat") as f:
            # Field 22, start time in clock ticks; after the ")" of comm, which may hold
            # spaces, it is the 20th.
            start = f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        start = "?"
    return f"{boot_id}/{ppid}/{start}"


def default_path() -> Optional[str]:
    """``$STATE_DIRECTORY``, which systemd sets from the unit's StateDirectory=; None
    (nothing saved) for a host run by hand without it, or with ``CLOWDER_STATE_SAVES=0``
    in its environment (a drop-in): no saves and nothing restored after a reboot, for
    whoever wants no session's screen on disk, and to measure what the saves cost
    (bench/statedir.py)."""
    if os.environ.get("CLOWDER_STATE_SAVES", "1").strip() == "0":
        return None
    return os.environ.get("STATE_DIRECTORY", "").split(":")[0] or None


def write_atomic(path: str, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: tmp, fsync, rename (raises OSError)."""
    tmp = f"{path}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class StateDir:
    """The saved sessions of one host: loaded at start, kept current by ``keep``."""

    def __init__(self, path: Optional[str], boot: str):
        self.path = path
        self.dir = os.path.join(path, SUBDIR) if path else None
        self.boot = boot
        self.frozen = False  # the system is going down: the files stay as they are
        self.sizes: dict[str, int] = {}  # session id -> bytes of its file
        self._unsized: list[str] = []  # ids whose file the start found, not yet measured
        self._saved: dict[str, tuple] = {}  # session id -> what its file shows
        self._saved_at: dict[str, float] = {}
        self._reported: dict[str, float] = {}
        self.written = 0  # bytes written since start (for the journal and tests)
        self.total_max = TOTAL_MAX
        given = os.environ.get("CLOWDER_STATE_BYTES", "")
        if given:
            try:
                self.total_max = max(0, int(given))
            except ValueError:
                log.warning("CLOWDER_STATE_BYTES=%r is not a number of bytes: %d kept",
                            given, TOTAL_MAX, extra={"CLOWDER_CAUSE": "state-config"})

    # --- problems -------------------------------------------------------------------------

    def report(self, cause: str, text: str) -> None:
        now = time.monotonic()
        if now - self._reported.get(cause, -REPORT_EVERY) >= REPORT_EVERY:
            self._reported[cause] = now
            log.error("state directory %s: %s (the host serves on; sessions are kept in "
                      "memory and the FD store only)", self.path, text,
                      extra={"CLOWDER_CAUSE": cause, **events.fields("state-dir-problem")})

    def _file(self, sid: str) -> str:
        return os.path.join(self.dir, sid + SUFFIX)

    # --- start ----------------------------------------------------------------------------

    def load(self, skip=frozenset()) -> list[tuple[dict, bytes]]:
        """(record, VT bytes) of every usable saved session but those in ``skip`` (the
        sessions the FD store gave back: a restart reads none of their files, only
        their sizes); what is not usable is reported (and removed if it is ours)."""
        if self.dir is None:
            return []
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            names = os.listdir(self.dir)
        except OSError as exc:
            self.report("state-unreadable", f"cannot open {self.dir}: {exc.strerror}")
            return []
        out = []
        for name in sorted(names):
            path = os.path.join(self.dir, name)
            if name.endswith(SUFFIX) and name[:-len(SUFFIX)] in skip:
                # Its size is read when first needed (_measure): an lstat each is ~4 ms
                # at 1,000 sessions, all of it a restart's blackout otherwise.
                self._unsized.append(name[:-len(SUFFIX)])
                continue
            try:
                rec, body = self._read(path, name)
            except ValueError as exc:
                self.report("state-corrupt", f"{name}: {exc}; left out")
                if not str(exc).startswith("owned by"):
                    self._unlink(path)
                continue
            out.append((rec, body))
            self.sizes[rec["id"]] = len(MAGIC) + len(body) + 256
        return out

    def _read(self, path: str, name: str) -> tuple[dict, bytes]:
        if name.endswith(".tmp"):
            raise ValueError("a write that never finished")
        if not name.endswith(SUFFIX) or not 1 <= len(name) - len(SUFFIX) <= 64:
            raise ValueError("not a saved session's file")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ValueError(f"cannot open it: {exc.strerror}") from None
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid():
                raise ValueError(f"owned by uid {st.st_uid}, not the host's {os.getuid()}")
            if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > READ_MAX:
                raise ValueError("not a regular file of a saved session's size")
            data = os.read(fd, READ_MAX + 1)
        finally:
            os.close(fd)
        if not data.startswith(MAGIC):
            raise ValueError("not a saved session (no header)")
        head, nl, body = data[len(MAGIC):].partition(b"\n")
        if not nl:
            raise ValueError("truncated (no end to its record)")
        try:
            rec = json.loads(head)
        except ValueError as exc:
            raise ValueError(f"its record is not JSON ({exc})") from None
        if not isinstance(rec, dict) or rec.get("id") != name[:-len(SUFFIX)]:
            raise ValueError("its record does not name this session")
        return rec, body

    def _unlink(self, path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    def restored(self, sid: str, key: tuple) -> None:
        """A session made from its file: the file shows it already."""
        self._saved[sid] = key
        self._saved_at[sid] = time.monotonic()

    # --- while serving --------------------------------------------------------------------

    def remove(self, sid: str) -> None:
        """The session was removed: its file goes (not while the system goes down)."""
        if self.dir is None or self.frozen:
            return
        self._saved.pop(sid, None)
        self._saved_at.pop(sid, None)
        if self.sizes.pop(sid, None) is not None or os.path.exists(self._file(sid)):
            self._unlink(self._file(sid))

    async def keep(self, host) -> None:
        """Every INTERVAL, write the files of the sessions that changed."""
        if self.dir is None:
            return
        while True:
            await asyncio.sleep(INTERVAL)
            try:
                await self.save_round(host)
            except Exception:
                log.exception("state directory %s: a round of saving failed", self.path,
                              extra={"CLOWDER_CAUSE": "state-failed"})

    async def save_round(self, host, force: bool = False) -> None:
        """Write what changed, within ROUND_BUDGET (``force``: every running session,
        at once, without the budget: the system is going down)."""
        if self.frozen or self.dir is None:
            return
        loop = asyncio.get_running_loop()
        changed = []  # (session, what its file will hold)
        for s in host.sessions.values():
            if s.state in ("running", "exited", "lost"):
                key = (s.ring.head, s.record_json())
                if self._saved.get(s.id) not in (key, TRIMMED):
                    changed.append((s, key))
        budget = ROUND_BUDGET
        until = time.monotonic() + ROUND_SECONDS
        for s, key in self._in_turn(changed):
            if s.id not in host.sessions:
                continue  # removed meanwhile
            if not force and time.monotonic() > until:
                break  # the rest next round, least recently saved first
            data = await self._render(s)
            if data is None or s.id not in host.sessions or self.frozen and not force:
                continue
            if len(data) > budget and not force:
                break  # the rest next round, least recently saved first
            try:
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                await loop.run_in_executor(None, write_atomic, self._file(s.id), data)
            except OSError as exc:
                self.report("state-full" if exc.errno in (28, 122) else "state-unwritable",
                            f"cannot save session {s.id}: {exc.strerror}")
                return
            if s.id not in host.sessions:  # removed while it was written
                self._unlink(self._file(s.id))
                continue
            budget -= len(data)
            self.written += len(data)
            self.sizes[s.id] = len(data)
            self._saved[s.id] = key
            self._saved_at[s.id] = time.monotonic()
        self._trim(host)

    def _in_turn(self, changed: list) -> list:
        """The changed sessions in the order a round saves them: users in turn, each
        user's least recently saved first.  By session alone, alice's 600 sessions that
        print went before bob's one, and his file waited minutes for its turn (a reboot
        then gives him back an old screen: test_hostile_statedir.py)."""
        by_uid: dict[int, list] = {}
        for item in sorted(changed, key=lambda item: self._saved_at.get(item[0].id, 0.0)):
            by_uid.setdefault(item[0].uid, []).append(item)
        rank = {item[0].id: n for items in by_uid.values() for n, item in enumerate(items)}
        return sorted(changed, key=lambda item: (rank[item[0].id],
                                                 self._saved_at.get(item[0].id, 0.0)))

    async def _render(self, s) -> Optional[bytes]:
        """The file's bytes for ``s``: header, record, scrollback tail and repaint."""
        try:
            lines, screen = await s.saved_screen(TAIL_LINES, FILE_MAX // 2)
        except Exception as exc:  # e.g. no fd left (EMFILE) for a lazy import
            # Through report: once a minute, not a line per session and round.
            self.report("state-render", f"cannot render session {s.id}'s screen to save "
                        f"it: {exc}")
            return None
        rec = {**s.to_record(), "unit": s.unit, "boot": self.boot, "saved_at": time.time()}
        head = MAGIC + json.dumps(rec, separators=(",", ":")).encode() + b"\n"
        return head + saved_body(lines, screen, s.cols, s.rows, FILE_MAX - len(head))

    def _measure(self) -> None:
        """The sizes of the files the start found and left unmeasured (load)."""
        unsized, self._unsized = self._unsized, []
        for sid in unsized:
            if sid not in self.sizes:  # else written since, with its size
                try:
                    self.sizes[sid] = os.lstat(self._file(sid)).st_size
                except OSError:
                    pass  # removed since

    def _trim(self, host) -> None:
        """Past TOTAL_MAX, ended sessions' files go: each from the user whose files take
        the most bytes, of theirs the one that ended longest ago, and never from a user
        whose files take no more than an equal share of the cap.  Oldest first for
        everyone, alice's many running sessions' files pushed out bob's last ended one
        (test_hostile_statedir.py); now, if only running sessions' files are over, they
        stay and the cap's excess is reported."""
        self._measure()
        total = sum(self.sizes.values())
        if total <= self.total_max:
            return
        held: dict[int, int] = {}  # uid -> the bytes of that user's files
        ended: dict[int, list] = {}  # uid -> that user's ended sessions with a file
        for s in host.sessions.values():
            if s.id in self.sizes:
                held[s.uid] = held.get(s.uid, 0) + self.sizes[s.id]
                if s.state in ("exited", "lost"):
                    ended.setdefault(s.uid, []).append(s)
        for items in ended.values():
            items.sort(key=lambda s: s.ended_at or 0, reverse=True)  # the oldest last
        share = self.total_max // max(len(held), 1)
        while total > self.total_max:
            over = [u for u in ended if held[u] > share]
            if not over:
                break  # the rest is running sessions' files, or within every share
            uid = max(over, key=lambda u: held[u])
            s = ended[uid].pop()
            if not ended[uid]:
                del ended[uid]
            size = self.sizes.pop(s.id)
            total -= size
            held[uid] -= size
            self._unlink(self._file(s.id))
            self._saved[s.id] = TRIMMED  # not written again: it would be trimmed again
        if total > self.total_max:
            self.report("state-over-cap", f"the saved sessions' files take {total} bytes, "
                        f"over the {self.total_max} cap ($CLOWDER_STATE_BYTES): running "
                        f"sessions' files, and ended ones of users within an equal share")
