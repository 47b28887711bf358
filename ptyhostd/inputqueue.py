"""A session's input queue: bytes for its pty, in order, written as the pty drains.

One FIFO per session for all of its writers (attached clients' keystrokes and ``Send``
requests), so what two writers send is never interleaved within one message.  The fast
path is today's: the queue is empty and the pty takes the bytes whole, with one write.
What the kernel does not take waits here and is written when the master is writable
again (the loop's ``add_writer``).

The queue is bounded (``limit`` bytes): a writer whose bytes take it past the limit stops
being read (``pause_input``) until it drains below half of it, so a paste of any size is
delivered whole while the host's memory stays flat, and nothing is dropped.  Except:
a ``Send`` whose bytes see no progress for ``deadline`` seconds (a program that is not
reading its input) fails with an error naming how many bytes were not delivered, and
those bytes are dropped from the queue, so the error is true.  When the session ends,
what is queued is released and each waiting ``Send`` gets an error.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Callable, Optional

from .pty import write_some

if TYPE_CHECKING:
    from .inputseq import Token

log = logging.getLogger("ptyhostd")

# Set from ptyhostd's --input-queue-bytes and --input-deadline (configure()).
LIMIT = 4 << 20
DEADLINE = 10.0  # seconds without progress before a Send is refused


def configure(limit: int, deadline: float) -> None:
    global LIMIT, DEADLINE
    LIMIT, DEADLINE = limit, deadline


def _write(fd: int, view, token: Optional[Token]) -> int:
    return write_some(fd, view) if token is None else token.write(fd, view)


class _Item:
    __slots__ = ("view", "total", "writer", "done", "since", "token")

    def __init__(self, view, writer, done, token):
        self.view = view  # what is still to be written
        self.total = len(view)
        self.writer = writer  # the connection whose reading stops when we are full
        self.done = done  # Send: done(None) once written whole, done(reason) if dropped
        self.since = time.monotonic()
        # A client's numbered input: written through its token, which records it in the
        # same system call (inputseq.py); None: plain writes (Send).
        self.token = token


class InputQueue:
    def __init__(self, session):
        self.session = session
        self.limit = LIMIT
        self.low = LIMIT // 2
        self.deadline = DEADLINE
        self.items: collections.deque[_Item] = collections.deque()
        self.queued = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # while add_writer is on
        self._paused: set = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._progress = 0.0

    def write(self, data: bytes, writer=None, done: Optional[Callable] = None,
              token: Optional[Token] = None) -> bool:
        """Write ``data`` or queue it; True if it was written whole now (``done`` is then
        not called).  Raises OSError if the pty refuses it (not EAGAIN, not EIO)."""
        view = memoryview(data)
        if not self.items:
            n = _write(self.session.master.fd, view, token)
            if n == len(view):
                return True
            view = view[n:]
            self._progress = time.monotonic()
        item = _Item(view, writer, done, token)
        self.items.append(item)
        self.queued += len(view)
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_writer(self.session.master.fd, self._on_writable)
        if self.queued > self.limit and writer is not None and writer not in self._paused:
            self._paused.add(writer)
            writer.pause_input()
        if done is not None and self._timer is None:
            self._arm()
        return False

    def _on_writable(self) -> None:
        fd = self.session.master.fd
        try:
            while self.items:
                item = self.items[0]
                n = _write(fd, item.view, item.token)
                if n == 0:
                    break
                self._progress = time.monotonic()
                self.queued -= n
                if n < len(item.view):
                    item.view = item.view[n:]
                    break  # the kernel's buffer is full: wait for writable again
                self.items.popleft()
                if item.done is not None:
                    item.done(None)
        except OSError as exc:
            log.error("session %s: writing its input: %s", self.session.id, exc,
                      extra={"CLOWDER_SESSION": self.session.id,
                             "CLOWDER_CAUSE": "input-write-failed"})
            self.close(f"writing to its pty failed: {exc}")
            return
        self._resume_writers()
        if not self.items:
            self._stop_writing()

    def _resume_writers(self) -> None:
        if self._paused and self.queued <= self.low:
            paused, self._paused = self._paused, set()
            for writer in paused:
                writer.resume_input()

    def _stop_writing(self) -> None:
        if self._loop is not None:
            if self.session.master is not None:
                self._loop.remove_writer(self.session.master.fd)
            self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- Sends to a program that does not read ------------------------------------------

    def _arm(self) -> None:
        sends = [it for it in self.items if it.done is not None]
        if not sends:
            self._timer = None
            return
        due = min(max(it.since, self._progress) for it in sends) + self.deadline
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, due - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = time.monotonic()
        for item in [it for it in self.items if it.done is not None
                     and now - max(it.since, self._progress) >= self.deadline]:
            self.items.remove(item)
            self.queued -= len(item.view)
            sid = self.session.id
            log.warning("session %s: not reading its input: %d of %d bytes of a send "
                        "dropped after %g s", sid, len(item.view), item.total, self.deadline,
                        extra={"CLOWDER_SESSION": sid, "CLOWDER_CAUSE": "input-stalled"})
            item.done(f"session {sid} is not reading its input: {len(item.view)} of "
                      f"{item.total} bytes were not delivered (nothing was read for "
                      f"{self.deadline:g} s; the rest was dropped)")
        self._resume_writers()
        if not self.items:
            self._stop_writing()
        else:
            self._arm()

    # --- the end ------------------------------------------------------------------------

    def close(self, why: str) -> None:
        """Release everything queued; waiting Sends are told ``why`` and how much."""
        items, self.items = self.items, collections.deque()
        self.queued = 0
        self._stop_writing()
        lost = sum(len(it.view) for it in items)
        if lost:
            log.warning("session %s: %d bytes of queued input released: %s",
                        self.session.id, lost, why,
                        extra={"CLOWDER_SESSION": self.session.id,
                               "CLOWDER_CAUSE": "input-released"})
        for item in items:
            if item.done is not None:
                item.done(f"session {self.session.id}: {why}: {len(item.view)} of "
                          f"{item.total} bytes were not delivered")
        paused, self._paused = self._paused, set()
        for writer in paused:
            writer.resume_input()
