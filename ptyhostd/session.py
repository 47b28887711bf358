"""A session: one program on one pty, run as its own systemd unit, and its backlog.

States, each entered with a logged cause:
  starting -> running -> exited      (the normal life)
  starting -> (removed)              (the unit failed to start: the client gets the error)
  running  -> lost                   (the host lost track of it, e.g. its pty vanished)
The exit status is kept (in the manifest) until the session is removed; ``seen`` records
that its owner was told it (a Wait, a ps, an attach given the Exited): a plain ps then
leaves it out (Host.shown_in_ps).

The byte path is ``on_readable``: the pty is read straight into the ring, then the same
bytes are written to attached clients (attachment.py: one that cannot keep up is not
written to until it drains; it then catches up from the ring).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import math
import os
import re
import select
import time
from typing import TYPE_CHECKING, Callable, Optional

import clowder_wire as protocol
from clowder_wire.jsonpart import dumps_acyclic
from clowder_common import events

from . import engine, pty, screenmemory
from .doorbell import DOORBELL, WAKE_YIELD
from .fd import Fd
from .keystrokes import KEYSTROKES, TYPING_WAKE_BYTES
from .loopshare import FEEDS, RENDERS
from .inputqueue import InputQueue
from .ring import READ_SIZE, Ring

if TYPE_CHECKING:
    from .attachment import Attachment
    from .pidwatch import PidWatch
    from .sessionevents import SessionEvents
    from .screen import Screen  # or screen_ghostty.GhosttyScreen: the same seam

log = logging.getLogger("ptyhostd")

UNIT_PREFIX = "clowder-session-"
# Bounds how long one flooding session holds the loop.  A pty master gives at most
# 4 KiB a read (n_tty's buffer; ring.READ_SIZE), so a wake reads up to READS_PER_WAKE
# times, stopping at WAKE_BYTES, and only then forwards what it read: one Output frame,
# one send and one scan for the lot, not one a read (the per-read Python cost was most
# of the loop's time in a flood, py-spy).  Then other sessions' keystrokes get their
# turn; while someone types into another session, a wake stops at
# keystrokes.TYPING_WAKE_BYTES instead (keystrokes.py says why).
READS_PER_WAKE = 16
WAKE_BYTES = 64 * 1024
# A read that fails for another cause than the pty's end (EIO) is tried again this much
# later, for as long as it fails: an adopted ring is mapped at its first read (ring.py),
# and a mapping can fail (ENOMEM: the memory or map count is exhausted) where the backlog
# is still whole.  Meanwhile the bytes wait in the pty, and the program, once that is
# full, in its write: nothing is lost.
READ_RETRY = 1.0
# A read of a flooding pty whose line discipline is empty waits in the kernel for its
# worker to move the next 4 KiB over (tty_buffer_flush_work): good for a flood's
# throughput, but while another session has input the echo waited behind those waits
# (an 8 KiB wake held the loop ~250 us, docs/design.md "No waiting beside typing").
# Then a wake's reads after its first are made only if the pty holds bytes already.
# So are reads after one shorter than SMALL_READ, alone too: after an echo's or a
# prompt's few bytes the next read of the pty nearly always fails (EAGAIN), and that
# failed read, its exception and the ring's bookkeeping around it cost ~15 us more of
# the loop's time a keystroke than FIONREAD in its place (bench/pty_reads.py).  In a
# flood alone 0.04-1.3 % of reads are that short (the same script), and each such ends
# its wake early: the loop's epoll brings the rest (docs/design.md "The echo's second
# read").
SMALL_READ = 512
# The most raw output the terminal model parses to catch up (it runs at ~1-2 MB/s, in
# the screen pool, screenwork.py): past this, it is rebuilt from the newest bytes instead.
SCREEN_CATCH_UP = 256 * 1024
# A model whose output costs more than screenwork.WORK_BUDGET restarts from this many
# of the newest bytes.
SCREEN_RESTART = 16 * 1024
MAX_RESIZES = 64  # resizes kept for a model not yet fed up to them
# An engine that releases the GIL while it parses (ghostty: engine.follows_output) is fed
# as output arrives, at most this much per turn in the screen pool, so a repaint,
# snapshot or history is a read of a current model, whatever came before; a request
# that comes during a turn waits for it.  A turn takes what the ring has, up to the lag
# bound and a read (~224 KiB of text: ~0.7 ms of ghostty here): 256 KiB turns against
# 64 KiB, alternated in one instance (bench/trees.py, 4 rounds each, 2026-12-04): `cat`
# 43.9 -> 51.9 MB/s at 80x24 and 44.9 -> 52.9 at 200x50, echo beside a flood p99 1.92 ->
# 1.74 and 1.71 -> 1.48 ms (fewer hops to the pool, each two thread hand-offs), and the
# same snapshot right after a flood within the rounds' spread.
FOLLOW_CHUNK = 256 * 1024
_UNRENDERED = object()  # screen_call: what a request wants is not computed yet
# Every byte is fed (issue 13): a model further behind the ring than it parses in
# MODEL_LAG_SECONDS stops the reading of its pty (the program blocks on a full pty, as
# under tmux, whose one parser sets everyone's pace) until it is within half of that.
# So a repaint or snapshot right after any flood parses at most that first (of text, the
# cap below: ~0.5 ms), whatever came before, and only the flooding session waits: the
# others' models and bytes go on.
# The bound in bytes follows the model's own rate (its thread's CPU time per byte, so a
# loaded machine does not shrink it): ghostty on text here, ~330 MB/s at 80x24 and
# 200x50 with its scrollback bounded by bytes alone (bench/scrollback_limit.py), so the
# cap; a pty delivers 50-110 MB/s, so the model falls that far behind only while its
# thread waits for a core.
MODEL_LAG_SECONDS = 0.002
# The most: SCREEN_CATCH_UP less a read of the pty (up to 64 KiB), so the lag never
# reaches the point where a model is rebuilt from the newest bytes (screen_call).
MODEL_LAG_MIN, MODEL_LAG_MAX = 64 * 1024, 160 * 1024
# The model's scrollback is compressed (ghostty: compact(), ~3.5-7 ms for 10,000 lines)
# once output has been quiet this long, not after every turn: compressing after each
# 256 KiB turn cut ghostty's rate from 52-118 MB/s to 31 (bench/engines.py,
# docs/design.md "Choosing the engine"), so a flood outran the model and a repaint
# right after it waited for a rebuild.  Memory is bounded by the scrollback's byte limit
# either way (screenmemory.py); compression only gives back what is under it.
COMPACT_AFTER = 0.5
# A read this small, of cheap output only (plain text, and whole sequences whose cost
# is bounded by a row: SGR, erase in line, cursor moves, the cursor's and synchronized
# output's modes), with the model's parser in its ground state and nobody else using the
# model, is fed on the loop at once (``_feed_inline``).  A keystroke's echo then costs
# no hop to the screen pool, whose thread hand-offs cost ~0.1 ms an echo (0.21 -> 0.12
# ms p50, docs/design.md "Echo without a hop"); and many sessions printing a little at
# a time (agents' logs, a coloured line every few ms) cost no hop a read: at 100
# sessions writing every 20 ms the hops and the GIL hand-backs of the pool's threads
# held the loop for tens of ms (docs/design.md "Many sessions printing").  Its cost is
# linear in its bytes (no such sequence can make a few bytes touch the whole screen):
# ghostty parses text at 49 MB/s or more here, so at most ~80 us on the loop.
INLINE_FEED = 4096
# A whole wake's read (a flood's: up to WAKE_BYTES and a read) is fed on the loop too
# when it is ASCII text and such sequences, while the loop's share for it allows
# (loopshare.FEEDS).  In the screen pool a flood's model cost more than its parsing:
# with ghostty's call replaced by a sleep as long, `cat` ran as slowly and another
# session's echo beside it was as slow as with the model (1.05 against 1.07 ms p50,
# against 0.68 with no model at all): the pool's threads and the loop handing the GIL
# back and forth, not the parse.  On the loop it costs its parse, ~3-6 ns a byte
# (docs/design.md "A flood's model on the loop").  ASCII only: UTF-8's combining marks
# and clusters cost ghostty more than their length on one cell.
INLINE_FEED_ASCII = WAKE_BYTES + READ_SIZE
# ... with at most this many line feeds: each may scroll a row, ~0.35 us at 200 columns
# and 0.7 at 1,000 here, so 64 KiB of nothing else cost ghostty 23-48 ms.  Text of
# ~75 columns has ~900 in 64 KiB; 2,048 cost at most ~1.5 ms.
INLINE_LINES = 2048
# The bytes that may be fed inline: printable ASCII, UTF-8's bytes, CR, LF, BS and TAB;
# a read over INLINE_FEED, ASCII's alone.
_ASCII = bytes(range(0x20, 0x7f)) + b"\r\n\b\t"
_PLAIN = _ASCII + bytes(range(0x80, 0x100))
# ... and the whole sequences: what is left once they are taken out must be plain.
# (Not CSI J, scrolls, insertions or repeats, DECALN, nor other modes: their cost is
# the screen's, or they reshape it.)
_CHEAP = re.compile(rb"\x1b\[[0-9;:]{0,32}[mKHfABCDGd]|\x1b\[\?(?:25|2026)[hl]")
# An erase in line clears a row (up to 1,000 cells): a read of nothing else would make
# 4 KiB clear a million cells on the loop.  Reads whose erases could clear more than
# this many cells go to the pool.
INLINE_CELLS = 32 * 1024
_ERASE_IN_LINE = re.compile(rb"\x1b\[[0-9;:]{0,32}K")
# And each EL to the right costs ghostty's adapter a look at the cursor (~2 us: its
# wrap, GhosttyScreen._past_wrapped_erases): reads with more go to the pool.
INLINE_ERASES = 32
# A text, ANSI or HTML snapshot of a current model of at most this many cells (80x24,
# 120x40, 100x50) is made on the loop (Session.screen_call's ``inline``, loopshare.py)
# when the session's last one took less than INLINE_RENDER_SECONDS (its first: once the
# engine is warm, Session._cheap_render).  Their cost is
# ghostty's C, at most ~1 us a cell here (a combining mark bomb in every cell: 1.9 ms at
# 80x24; a hyperlink in every cell: HTML 1.2 ms), so a screen that turned costly since
# its last snapshot stalls the loop once, a few ms at most, and then its snapshots go to
# the pool.  Not a repaint: its hyperlinks and coloured blanks are made in Python, one
# formatter a link (a hyperlink in every cell of 80x24: 30-47 ms).
INLINE_RENDER_CELLS = 5_000
INLINE_RENDER_SECONDS = 0.0005


def cheap_output(data: bytes, cols: int) -> bool:
    """True if feeding ``data`` to a model of ``cols`` columns in its ground state costs
    about its length and leaves the parser in its ground state (see INLINE_FEED; over
    it, ASCII only: INLINE_FEED_ASCII)."""
    plain = _PLAIN if len(data) <= INLINE_FEED else _ASCII
    if plain is _ASCII and data.count(b"\n") > INLINE_LINES:
        return False
    if not data.translate(None, plain):
        return True
    return len(_ERASE_IN_LINE.findall(data)) * cols <= INLINE_CELLS \
        and data.count(b"\x1b[K") + data.count(b"\x1b[0K") <= INLINE_ERASES \
        and not _CHEAP.sub(b"", data).translate(None, plain)


EXIT_STATUS = {1: "exited", 2: "killed", 3: "dumped"}
_TASKS: set = set()  # compressions under way (a task must be referenced)


def _say_end(conn, msg: protocol.Exited) -> None:
    conn.send(msg)
    conn.close_after_flush()


def painted_vt(screen) -> bytes:
    """A model's repaint bytes, then its held tail: run in the screen pool."""
    return screen.repaint() + screen.pending


def painted(screen) -> tuple:
    """``painted_vt``, and the size it was painted at: run in the screen pool."""
    return painted_vt(screen), screen.cols, screen.rows


def viewed(screen, cols: int, rows: int) -> bytes:
    """A frame of a model for a terminal of another size: run in the screen pool."""
    return screen.view(cols, rows)


def unit_name(sid: str) -> str:
    return f"{UNIT_PREFIX}{sid}.service"


def user_slice(uid: int) -> str:
    """The slice the host runs ``uid``'s sessions in: ``clowder-uidUID.slice``, under
    ``clowder.slice`` (a dash is a level), made by systemd on first use.  So each user's
    sessions are accounted, limited (``systemctl set-property clowder-uid1000.slice
    MemoryMax=8G``) and, where the cpu controller is on, weighed as one against each other
    user's, and all of them against the host (docs/design.md "A slice for each user").
    A user manager's host uses the same name in its manager (one user's, then)."""
    return f"clowder-uid{uid}.slice"


class Session:
    """The host's record of one session and the fds it owns (master, ring, pidfd)."""

    def __init__(self, sid: str, *, name: str, argv: list, cwd: Optional[str], uid: int,
                 cols: int, rows: int, created: float, ring: Ring,
                 master: Optional[Fd] = None, state: str = "starting",
                 agent: bool = False):
        self.id = sid
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.uid = uid
        # Started by clowder-control (ptyhostd.peer): the only sessions it adopts as
        # agents.  Fixed at spawn, kept in the manifest; a record without it is not one.
        self.agent = agent
        self.cols = cols
        self.rows = rows
        self.created = created
        self.ring = ring
        self.master = master
        self.state = state
        self.unit = unit_name(sid)
        self.pid = 0
        self.exit_status: Optional[str] = None  # exited / killed / dumped / lost
        self.exit_code: Optional[int] = None
        self.signal: Optional[int] = None
        self.ended_at: Optional[float] = None
        # "reboot": a session of a previous boot, made from its saved file (statedir.py).
        self.ended_by: Optional[str] = None
        self.seen = False  # its owner was told how it ended (kept in the manifest)
        self.killed_at = 0.0  # monotonic time of the last Kill: a Remove waits for its end
        self.pidfd: Optional[Fd] = None
        self._pidwatch: Optional["PidWatch"] = None
        self.attachments: set[Attachment] = set()
        self.waiters: list[asyncio.Future] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # while its master is read
        self._quiet: Optional["PidWatch"] = None  # where it waits for its first output
        # The terminal model, off the byte path: following output (ghostty), or made on
        # the first attach and fed lazily (pyte), from the ring; ``screen_pos`` is the
        # ring offset it has been fed up to.
        self.screen: Optional[Screen] = None
        self.screen_pos = 0
        self.screen_start = 0  # the ring offset the model was first fed from
        self._resizes: list[tuple[int, int, int]] = []  # (ring offset, cols, rows) to apply
        self._screen_lock = asyncio.Lock()
        self.screen_budget_hits = 0
        self._following: Optional[asyncio.Task] = None  # the model being fed as output comes
        self._compact_timer: Optional[asyncio.TimerHandle] = None  # see COMPACT_AFTER
        self._compact_due = 0.0  # loop time the compression waits for (inf: a follow runs)
        self._ground = False  # the model's parser is known to be in its ground state
        self._model_paused = False  # the pty is not read until the model catches up
        self._model_lag = MODEL_LAG_MIN  # bytes: MODEL_LAG_SECONDS of the model's rate
        # Seconds the last snapshot that could be made on the loop took (screen_call's
        # ``inline``); None: none yet (see _cheap_render).
        self._render_seconds: Optional[float] = None
        self.last_output = 0.0
        self._read_failures = 0  # reads failed in a row, not for the pty's end (READ_RETRY)
        self.size_owner: Optional[Attachment] = None  # the client that typed last
        self.input = InputQueue(self)  # what its writers sent that the pty has not taken
        self._json_key: tuple = ()
        self._json = b""
        self._info_key: tuple = ()
        self._info_json = ""
        # Its events (sessionevents.py), given by the host while it runs: None until then.
        self.events: Optional["SessionEvents"] = None

    # --- records ------------------------------------------------------------------------

    def to_record(self) -> dict:
        """The manifest's entry for this session."""
        return {
            "id": self.id, "name": self.name, "argv": self.argv, "cwd": self.cwd,
            "uid": self.uid, "cols": self.cols, "rows": self.rows, "created": self.created,
            "state": self.state, "pid": self.pid, "exit_status": self.exit_status,
            "exit_code": self.exit_code, "signal": self.signal, "ended_at": self.ended_at,
            "agent": self.agent, "seen": self.seen, "ended_by": self.ended_by,
        }

    def record_json(self) -> bytes:
        """``to_record()`` as JSON (ASCII bytes, as the manifest writes them), re-encoded
        only when a field that can change did.

        The manifest is rewritten whole after every change of the table: encoding every
        session each time made a change cost milliseconds at 1,000 sessions.
        """
        key = (self.name, self.state, self.pid, self.exit_status, self.exit_code,
               self.signal, self.ended_at, self.cols, self.rows, self.seen, self.ended_by)
        if key != self._json_key:
            self._json_key = key
            self._json = json.dumps(self.to_record(), separators=(",", ":")).encode()
        return self._json

    def info(self) -> dict:
        """What clients are shown (the keys of protocol.SESSION_FIELDS)."""
        return {
            "id": self.id, "name": self.name, "pid": self.pid, "unit": self.unit,
            "state": self.state, "exit_code": self.exit_code, "signal": self.signal,
            "cols": self.cols, "rows": self.rows, "created": self.created, "uid": self.uid,
            "cwd": self.cwd, "argv": self.argv, "agent": self.agent,
            "ended_by": self.ended_by,
        }

    def info_json(self) -> str:
        """``info()`` as the wire's JSON, re-encoded only when a field that can change
        did: a `ps` of 1,000 sessions encoded every one each time (~2-3 ms of the host's
        loop; 0.04 ms from these)."""
        key = (self.name, self.pid, self.state, self.exit_code, self.signal, self.cols,
               self.rows, self.ended_by)
        if key != self._info_key:
            self._info_key = key
            self._info_json = dumps_acyclic(self.info())
        return self._info_json

    def exited_message(self) -> protocol.Exited:
        return protocol.Exited(session=self.id, status=self.exit_status or "lost",
                               exit_code=self.exit_code, signal=self.signal)

    def set_state(self, state: str, cause: str, event: Optional[str] = None) -> None:
        """Enter ``state``; every transition is logged with its cause, as an event of
        kind ``event`` (default: the state's, clowder_common/events.py)."""
        old, self.state = self.state, state
        kind = event or events.SESSION_STATES.get(state)
        log.info("session %s: %s -> %s (%s)", self.id, old, state, cause,
                 extra={"CLOWDER_SESSION": self.id, "CLOWDER_STATE": state,
                        "CLOWDER_CAUSE": cause, "CLOWDER_UNIT": self.unit,
                        **(events.fields(kind) if kind else {})})
        ev = self.events
        if ev is None:
            return
        if kind == "session-started":
            ev.bus.publish(kind, self, cause=cause)
            ev.started()
        elif state in ("exited", "lost"):
            ev.close()
            ev.bus.publish("session-ended", self, status=self.exit_status or "lost",
                           exit_code=self.exit_code, signal=self.signal, cause=cause)
        elif state in ("removed", "failed"):
            ev.close()

    # --- the byte path ------------------------------------------------------------------

    def start_reading(self, loop: asyncio.AbstractEventLoop,
                      quiet: Optional["PidWatch"] = None) -> None:
        """Read the master as the event loop's own reader (pidwatch.py says why).
        ``quiet``: a start's adoption: the master waits in that epoll until it has
        output, and only then becomes the loop's reader (``_first_output``)."""
        if self.master is not None and self._loop is None:
            if quiet is not None:
                quiet.add(self.master.fd, self._first_output)
                self._quiet = quiet
            else:
                loop.add_reader(self.master.fd, self.on_readable)
            self._loop = loop

    def _first_output(self) -> None:
        """The master, waiting in the quiet epoll, has output: the loop reads it now."""
        self._unquiet()
        if self._loop is not None and self.master is not None:
            self._loop.add_reader(self.master.fd, self.on_readable)
            self.on_readable()

    def _unquiet(self) -> bool:
        """Take the master out of the quiet epoll; whether it was there."""
        quiet, self._quiet = self._quiet, None
        if quiet is None or self.master is None:
            return False
        quiet.remove(self.master.fd)
        return True

    def _pause_reading(self) -> None:
        """Stop reading the master, wherever it waits (the quiet epoll or the loop)."""
        if not self._unquiet() and self._loop is not None and self.master is not None:
            self._loop.remove_reader(self.master.fd)

    def stop_reading(self) -> None:
        self._pause_reading()
        self._loop = None
        self._model_paused = False

    def _pump(self, now: float) -> int:
        """Read from the pty into the ring (up to READS_PER_WAKE reads, WAKE_BYTES, or
        TYPING_WAKE_BYTES while another session has input), then forward it all to
        attached clients; the byte count (0: nothing there now).
        Raises OSError (EIO: the slave side is gone) after forwarding what came before."""
        ring = self.ring
        start = ring.head
        fd = self.master.fd
        typing = KEYSTROKES.others_typing(self.id, now)
        wake = TYPING_WAKE_BYTES if typing else WAKE_BYTES
        # Each read adds at most the ring's guard: stopping at ``room`` keeps all of
        # this wake's bytes among those the ring holds (capacity - guard), however small
        # the ring.
        room = min(wake, ring.capacity - 2 * ring.guard)
        last = READ_SIZE
        try:
            for i in range(READS_PER_WAKE):
                # While someone types elsewhere, no read that would wait for the kernel's
                # worker: the loop is theirs as soon as the pty is empty (docs/design.md
                # "No waiting beside typing").  After a small read (an echo, a prompt),
                # none that would only fail (SMALL_READ).
                if i and (typing or last < SMALL_READ) and not pty.held(fd):
                    break
                # A client at the door (doorbell.py): the loop is theirs first.
                if i and time.monotonic() - now > WAKE_YIELD and DOORBELL.rung():
                    break
                last = ring.fill_from(fd)
                if not last or ring.head - start >= room:
                    break
        except BlockingIOError:
            pass
        except OSError:
            # Not kept in a variable: the traceback holds the read's views of the ring's
            # map, and a cycle through this frame would keep them until a collection
            # (the ring's close then fails: "exported pointers exist").
            if ring.head > start:
                self._forward(start, ring.head - start)
            raise
        got = ring.head - start
        if got:
            self._forward(start, got)
        return got

    def _forward(self, start: int, got: int) -> None:
        """``got`` new bytes at ring offset ``start``: to attached clients, the events'
        scan and the terminal model (which may pause the pty's reading)."""
        ring = self.ring
        data = None
        if got and (self.attachments or self.events is not None):
            data = ring.read(start, start + got)
            frame = None  # encoded once for every client in step
            for att in self.attachments:
                frame = att.push(start, data, frame)
            if self.events is not None:
                self.events.output(data)  # busy/idle, bells, notifications
        if got and self._loop is not None and engine.follows_output():
            if got <= INLINE_FEED_ASCII and self._feed_inline(start, got, data):
                return
            if self._following is None:
                self._compact_due = math.inf  # _follow re-arms it when it is done
                self._following = self._loop.create_task(self._follow())
            if ring.head - self.screen_pos > self._model_lag and not self._model_paused:
                self._pause_reading()
                self._model_paused = True  # until the model is within half of it

    def _feed_inline(self, start: int, got: int, data: Optional[bytes]) -> bool:
        """Feed the model the read of ``got`` bytes at ``start`` here, on the loop, if it
        is text that cannot cost more than its length (INLINE_FEED; a bigger one, ASCII,
        while the loop's share allows: INLINE_FEED_ASCII); False: it goes to the screen
        pool as any other output."""
        screen = self.screen
        big = got > INLINE_FEED
        if screen is None or self._following is not None or self.screen_pos != start \
                or self._resizes or self._screen_lock.locked() \
                or screenmemory.misfit(screen) or (big and not FEEDS.allows()):
            return False  # the pool's path: it also trims to a new scrollback share
        if data is None:
            data = self.ring.read(start, self.ring.head)
        if not cheap_output(data, self.cols):
            self._ground = False  # a sequence or control: it may leave the parser in one
            return False
        if not self._ground:
            # The parser may be inside a sequence these bytes would complete (ESC [ 9999
            # then "b"): only in its ground state is plain text as cheap as its length.
            # Nothing else touches the model now (the lock is free, nothing follows).
            if screen.pending:
                return False
            self._ground = True
        began = time.perf_counter() if big else 0.0
        screen.feed(data)
        if big:
            FEEDS.spent(time.perf_counter() - began)
        self.screen_pos = start + len(data)
        self._compact_later()
        return True

    def _resume_if_caught_up(self, force: bool = False) -> None:
        """Read the pty again once the model is within half its lag (MODEL_LAG_SECONDS)."""
        if self._model_paused and \
                (force or self.ring.head - self.screen_pos <= self._model_lag // 2):
            self._model_paused = False
            if self._loop is not None and self.master is not None:
                self._loop.add_reader(self.master.fd, self.on_readable)

    def on_readable(self) -> None:
        """Move what the pty has into the ring and out to attached clients."""
        now = self.last_output = time.monotonic()
        try:
            self._pump(now)
        except OSError as exc:
            loop = self._loop
            # Not read again now: the fd would stay readable forever.
            self.stop_reading()
            if exc.errno == errno.EIO:
                return  # no process has the slave open any more: the pidfd reports the end
            self._read_failures += 1
            if self._read_failures == 1:  # not one line a second while it lasts
                log.error("session %s: reading its pty: %s; trying again every %g s",
                          self.id, exc, READ_RETRY,
                          extra={"CLOWDER_SESSION": self.id, "CLOWDER_CAUSE": "read-failed"})
            if loop is not None:
                loop.call_later(READ_RETRY, self._read_again, loop)
            return
        if self._read_failures:
            log.info("session %s: its pty is read again, after %d failed tries", self.id,
                     self._read_failures,
                     extra={"CLOWDER_SESSION": self.id, "CLOWDER_CAUSE": "read-failed"})
            self._read_failures = 0

    def _read_again(self, loop: asyncio.AbstractEventLoop) -> None:
        """READ_RETRY after a failed read: read on, unless the session ended meanwhile."""
        if self.state in ("starting", "running"):
            self.start_reading(loop)

    def drain(self, limit: int = 8 << 20) -> None:
        """Read whatever the pty still holds (before the master is closed)."""
        if self.master is None:
            return
        before = self.ring.head
        while self.ring.head - before < limit:
            try:
                if not self._pump(time.monotonic()):
                    break
            except OSError:
                break

    # --- the terminal model -------------------------------------------------------------

    async def _pool(self, fn, *args, request: bool = False):
        """``fn(*args)`` in the screen pool as this session's user's work (screenpool.py);
        ``request``: a client waits on it."""
        from . import screenwork
        return await screenwork.run(fn, *args, owner=self.uid, request=request)

    async def _new_screen(self, start: int, request: bool = False) -> None:
        """A fresh model, to be fed from ring offset ``start``, at the session's size.

        Made in the screen pool: the first one loads the engine (ghostty_abi.py: ~15 ms
        from its cache, 0.35-0.5 s parsed), which must not stall the loop."""
        from . import engine
        cols, rows = self.cols, self.rows
        self.screen = await self._pool(engine.new_screen, cols, rows, self.uid,
                                       request=request)
        self._ground = False
        self.screen_pos = self.screen_start = max(self.ring.tail, start)
        self._resizes.clear()  # made at the size the session had
        if (self.cols, self.rows) != (cols, rows):  # resized meanwhile
            self._resizes.append((self.ring.head, self.cols, self.rows))

    def _plan(self, limit: int) -> list:
        """The next ``limit`` bytes of output for the model, with the resizes among them
        at the offsets where they happened; advances ``screen_pos`` past them."""
        ring, pos = self.ring, self.screen_pos
        end = min(ring.head, pos + limit)
        plan: list = []
        self._ground = False  # whatever the pool feeds may end inside a sequence
        while self._resizes and self._resizes[0][0] <= end:
            at, cols, rows = self._resizes.pop(0)
            if at > pos:
                plan.append(ring.read(pos, at))
                pos = at
            plan.append((cols, rows))
        if end > pos:
            plan.append(ring.read(pos, end))
        self.screen_pos = max(pos, end)
        return plan

    async def _follow(self) -> None:
        """Feed the model what came since it was last fed, until it has everything: the
        engine parses in the screen pool with the GIL released, so the loop keeps
        forwarding meanwhile; output that comes faster than it parses stops the reading
        of the pty (MODEL_LAG_SECONDS, in _forward), so nothing is skipped or queued
        without bound."""
        try:
            while self.master is not None and self.screen_pos < self.ring.head:
                await self.screen_call(limit=FOLLOW_CHUNK)
            self._compact_later()
        except Exception:
            log.exception("session %s: feeding its terminal model failed", self.id,
                          extra={"CLOWDER_SESSION": self.id, "CLOWDER_CAUSE": "screen-failed"})
        finally:
            self._following = None
            self._resume_if_caught_up(force=True)  # a failed model never holds the pty

    def _compact_later(self) -> None:
        """(Re)arm the compression of the model's scrollback: output was just fed.
        One timer a quiet spell, not one a read: a new deadline is noted, and the timer,
        when it fires early, waits on for it (a cancel and a new timer every read cost
        ~5 us each, at every read of every printing session)."""
        if self._loop is None:
            return
        self._compact_due = self._loop.time() + COMPACT_AFTER
        if self._compact_timer is None:
            self._compact_timer = self._loop.call_at(self._compact_due, self._compact_soon)

    def _compact_soon(self) -> None:
        """Output has been quiet for COMPACT_AFTER: compress the model's scrollback."""
        self._compact_timer = None
        loop = self._loop or asyncio.get_running_loop()
        if self._compact_due == math.inf:
            return  # a follow runs; it re-arms when done
        if loop.time() < self._compact_due:
            self._compact_timer = loop.call_at(self._compact_due, self._compact_soon)
            return
        if self._following is None and self.screen is not None:
            task = loop.create_task(self._compact())
            _TASKS.add(task)
            task.add_done_callback(_TASKS.discard)

    async def _compact(self) -> None:
        try:
            async with self._screen_lock:
                if self.screen is not None and self._following is None:
                    await self._pool(self.screen.compact)
        except Exception:
            log.exception("session %s: compressing its terminal model failed", self.id,
                          extra={"CLOWDER_SESSION": self.id, "CLOWDER_CAUSE": "screen-failed"})

    async def screen_call(self, what: Optional[Callable] = None,
                          limit: int = SCREEN_CATCH_UP, inline: bool = False):
        """Feed the model up to ``limit`` more bytes of what the ring holds, then return
        ``what(model)`` and the ring offset the model has seen.  All of it runs in the
        screen pool (see screenwork.py), one call at a time per session, so the model is
        never touched by two threads at once.  ``inline``: ``what`` is a snapshot whose
        cost is ghostty's C, so a model with every byte already, at most
        INLINE_RENDER_CELLS, whose last such render was cheap, is rendered here on the
        loop while its share allows (loopshare.py), under the same lock: no hop."""
        from . import screenwork
        request = what is not None  # a client waits on it: served first (screenpool.py)
        async with self._screen_lock:
            ring = self.ring
            if self.screen is None or self.screen_pos < ring.tail \
                    or ring.head - self.screen_pos > SCREEN_CATCH_UP:
                await self._new_screen(ring.head - SCREEN_CATCH_UP, request)
            screen = self.screen
            plan = self._plan(limit)
            if inline:
                what = functools.partial(self._timed, what)
                if not plan and screen.cols * screen.rows <= INLINE_RENDER_CELLS \
                        and self._cheap_render() and engine.follows_output() \
                        and RENDERS.allows():
                    try:
                        return what(screen), self.screen_pos
                    finally:
                        RENDERS.spent(self._render_seconds)
            # One hop to the pool (~0.1-0.3 ms each here): for ``what`` alone when the
            # model is current (an idle session's repaint, snapshot or history), for the
            # feed and ``what`` together when output came since.
            ok, seconds, result, error, unfed = await self._pool(
                screenwork.run_plan_then, screen, plan, what, screenwork.WORK_BUDGET,
                screenwork.POOL.wants_a_thread, request=request) \
                if plan else (True, 0.0, _UNRENDERED, None, 0)
            # A feed that gave its thread to a request: the rest of its last step (the
            # newest output; no resize after it) is fed at the next turn.
            self.screen_pos -= unfed
            fed = sum(len(step) for step in plan if isinstance(step, bytes)) - unfed
            if fed >= 16 * 1024 and seconds > 0:  # a turn long enough to time
                self._model_lag = int(min(MODEL_LAG_MAX, max(
                    MODEL_LAG_MIN, fed / seconds * MODEL_LAG_SECONDS)))
            if not ok:
                # Output that costs more than the budget to model: start again from the
                # newest bytes (a flood of text shows right; a bomb, its last frame).
                self.screen_budget_hits += 1
                if self.screen_budget_hits == 1 or self.screen_budget_hits % 100 == 0:
                    log.warning("session %s: its output costs more than the terminal model's "
                                "budget to follow; the model restarts from the last %d bytes "
                                "(%d times)", self.id, SCREEN_RESTART, self.screen_budget_hits,
                                extra={"CLOWDER_SESSION": self.id,
                                       "CLOWDER_CAUSE": "screen-budget"})
                await self._new_screen(ring.head - SCREEN_RESTART, request)
                screen = self.screen
                # Over budget again, the model stays as far as it got: ``_plan`` has moved
                # ``screen_pos`` past these bytes either way, so they are not retried.
                await self._pool(screenwork.run_plan, screen, self._plan(SCREEN_RESTART),
                                 request=request)
                result = _UNRENDERED
            self._resume_if_caught_up()
            if error is not None:
                raise error
            if what is None:
                return None, self.screen_pos  # fed only (one hop to the pool less)
            if result is _UNRENDERED:
                result = await self._pool(screenwork.render, screen, what, request=True)
            return result, self.screen_pos

    def _cheap_render(self) -> bool:
        """Whether this session's next small snapshot may be made on the loop: its last
        one was cheap; or it is the first, and the engine's formats are loaded (preload).
        A first is as cheap as any other (figure 8 takes a fresh session's, and the
        first right after a flood: the pool's hops were ~0.1 ms of them), and a costly
        one costs the loop once what a screen that turned costly since its last one does
        (INLINE_RENDER_CELLS).  Before preload it would pay its format's cffi look-ups
        on the loop (67 ms seen for the first text snapshot after a hand-off)."""
        if self._render_seconds is None:
            return engine.warm
        return self._render_seconds < INLINE_RENDER_SECONDS

    def _timed(self, what: Callable, screen):
        """``what(screen)``, its time noted (on the loop or in a pool thread: one float
        written, under the model's lock)."""
        began = time.perf_counter()
        try:
            return what(screen)
        finally:
            self._render_seconds = time.perf_counter() - began

    async def history(self, count: int, budget: int, ansi: bool = False) -> list[str]:
        """The last ``count`` lines of output as scrollback has them, within ``budget``
        bytes of text.  From the model when it follows output (ghostty: a line redrawn
        in place is there once, the alternate screen never) and has seen all the ring
        holds or enough lines; else from the ring's raw bytes by the line model.
        ``ansi``: with their SGR (the model's only; the line model's are plain)."""
        from .history import fit, last_lines
        if count > 0 and engine.follows_output():
            lines, _ = await self.screen_call(
                lambda screen: screen.history_lines(count, ansi=ansi))
            # A model that skipped output over its work budget (a bomb) lost lines: the
            # raw line model has them (test_each_bomb_..., "history lost the end").
            if not self.screen_budget_hits and (self.screen_start <= self.ring.tail
                                                or len(lines) >= count):
                return fit(lines, budget)
        return await last_lines(self.ring, count, budget, self.cols, self.uid)

    async def saved_screen(self, count: int, budget: int) -> tuple[list[str], bytes]:
        """For the state directory: the last ``count`` lines that scrolled off (with
        their SGR, within ``budget`` bytes) and the repaint of the screen, from one look
        at the model (``scrollback_and``).  Fed to a fresh terminal as the lines, a
        scroll of them off the screen, then the repaint, they give back the scrollback
        and the screen (statedir.saved_body)."""
        lines, vt, _ = await self.scrollback_and(painted_vt, count, budget)
        return lines, vt

    async def scrollback_and(self, paint: Callable, count: int, budget: int,
                             ansi: bool = True) -> tuple[list[str], object, int]:
        """The last ``count`` lines that scrolled off (within ``budget`` bytes; with
        their SGR if ``ansi``), ``paint(model)``, and the ring offset they show output
        up to, from one look at the model, so that no line is in both or in neither:
        what the state directory saves, and what an attach puts in the client's
        scrollback and then on its screen."""
        from .history import fit, last_lines
        follows = engine.follows_output()

        def look(screen):
            # In the screen pool, under the model's lock (so screen_start holds still).
            lines = screen.history_lines(count, ansi=ansi, scrollback=True) \
                if follows else None
            whole = follows and not self.screen_budget_hits and (
                self.screen_start <= self.ring.tail or len(lines) >= count)
            # The screen's text only for the raw line model below, not at every look.
            return lines, paint(screen), None if whole else screen.snapshot("text")
        (lines, shown_screen, text), pos = await self.screen_call(look)
        if text is None:
            return fit(lines, budget), shown_screen, pos
        # The raw line model (pyte, or a model that lost lines to a bomb), read after
        # the look: its last lines less as many as the screen showed (a line wrapped on
        # the screen, or output since, may shift them by a line).
        shown = len(text.rstrip().split("\n")) if text.strip() else 0
        lines = await last_lines(self.ring, count + shown, budget, self.cols, self.uid)
        return (lines[:-shown] if shown else lines)[-count:], shown_screen, pos

    async def fit_screen(self) -> None:
        """Give the model the current share of the scrollback budget (screenmemory.py),
        in the screen pool under the model's lock, like every other use of it."""
        from . import screenmemory
        async with self._screen_lock:
            if self.screen is not None and screenmemory.misfit(self.screen):
                await self._pool(screenmemory.fit, self.screen)

    def screen_busy(self) -> bool:
        """Whether a call on the model is running or waiting."""
        return self._screen_lock.locked()

    async def repaint(self) -> tuple[bytes, int]:
        """VT bytes that show the session's current screen, and the ring offset after them.

        What the model holds back (a half-received sequence) is sent after the repaint,
        so the live bytes that follow complete it.
        """
        (vt, _, _), pos = await self.screen_call(painted)
        return vt, pos

    async def view(self, cols: int, rows: int) -> tuple[bytes, int]:
        """A frame of the current screen for a terminal of ``cols`` x ``rows`` (see
        screen_view.py), and the ring offset it shows the output up to."""
        return await self.screen_call(functools.partial(viewed, cols=cols, rows=rows))

    def resize_screen(self, cols: int, rows: int) -> None:
        """Note a resize at the current end of output: the model applies it there (the
        bytes before it at the old size) when it is next fed."""
        if self.screen is None:
            return
        at = self.ring.head
        if self._resizes and self._resizes[-1][0] == at:
            self._resizes[-1] = (at, cols, rows)  # no output between: only the last counts
        else:
            self._resizes.append((at, cols, rows))
            del self._resizes[:-MAX_RESIZES]

    # --- the end ------------------------------------------------------------------------

    def record_exit(self, exec_code: int, exec_status: int, cause: str) -> None:
        """Keep how the program ended."""
        self.exit_status = EXIT_STATUS.get(exec_code, "lost")
        if exec_code == 1:
            self.exit_code = exec_status
        elif exec_code in (2, 3):
            self.signal = exec_status
        self.ended_at = time.time()
        self.pid = 0
        how = (f"exit {self.exit_code}" if self.exit_code is not None else
               f"signal {self.signal}" if self.signal is not None else "status unknown")
        self.set_state("exited" if self.exit_status != "lost" else "lost", f"{cause}: {how}")

    def deliver_exit(self) -> None:
        """Tell waiters and attached clients how the session ended."""
        msg = self.exited_message()
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(msg)
        self.waiters.clear()
        for att in list(self.attachments):
            # Its owner's terminal showed the end: seen (saved by the end's caller).
            self.seen = self.seen or (att.conn.uid == self.uid and not att.conn.control)
            att.finish(functools.partial(_say_end, att.conn, msg))
        self.attachments.clear()

    def close_fds(self, keep_ring: bool = True) -> None:
        """Close the master and pidfd (and the ring unless kept); idempotent."""
        self.input.close("the session ended")
        self.stop_reading()
        self.unwatch_pid()
        if self.pidfd is not None:
            self.pidfd.close()
            self.pidfd = None
        if self.master is not None:
            self.master.close()
            self.master = None
        if not keep_ring:
            self.ring.close()

    def watch_pid(self, watch: "PidWatch", pid: int, on_exit: Callable[[], None]) -> bool:
        """Call ``on_exit`` when process ``pid`` ends; False if it is already gone."""
        self.pid = pid
        try:
            self.pidfd = Fd(os.pidfd_open(pid), f"pidfd {self.id}")
        except ProcessLookupError:
            return False
        self._pidwatch = watch
        watch.add(self.pidfd.fd, on_exit)
        return True

    def pid_exited(self) -> bool:
        """Whether the watched program has ended (its pidfd is readable then), though
        the watch's callback may not have run yet."""
        if self.pidfd is None:
            return False
        # poll, not select: a host of a thousand sessions has pidfds above select's 1,024
        # (select raised there, and the check after an adoption failed).
        p = select.poll()
        p.register(self.pidfd.fd, select.POLLIN)
        return bool(p.poll(0))

    def unwatch_pid(self) -> None:
        """Stop calling ``on_exit`` (the pidfd stays open until close_fds)."""
        if self._pidwatch is not None and self.pidfd is not None:
            self._pidwatch.remove(self.pidfd.fd)
        self._pidwatch = None
