"""An attachment: one client streaming one session's output, live or caught up from
the session's ring.

A client that cannot keep up is not written to until it drains (``stops``); it then
catches up from the ring, or, a terminal far behind, is repainted instead of sent what
it missed.  A client whose terminal is not the session's size is sent frames of its own
size (screen_view.py).  The session (session.py) pushes its live bytes to each of its
attachments; the connection (connection.py) makes and ends them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Optional

import clowder_wire as protocol

from .session import painted_vt, viewed

if TYPE_CHECKING:
    from .session import Session

# A terminal client this far behind is repainted rather than sent what it missed.
RESYNC_AFTER = 1 << 20
# A client whose terminal is not the session's size is sent frames (screen_view.py),
# at most one per this many seconds while output goes on.
VIEW_INTERVAL = 0.05
# The longest the end of a session waits for a client's terminal to take the rest of
# its output (Attachment.finish): a terminal that takes nothing (stopped with ^S, or a
# client that never reads its pty) gets the end without it.
FINISH_WAIT = 2.0
FINISH_POLL = 0.02  # how often it looks while nothing is in flight (a repaint is made)
_TASKS: set = set()  # resync repaints under way (a task must be referenced)


class Attachment:
    """One client streaming a session; ``pos`` is the ring offset it has been sent up to."""

    def __init__(self, conn, session: "Session", read_only: bool, repaints: bool = True,
                 size: tuple[int, int] = (0, 0)):
        self.conn = conn
        self.session = session
        self.read_only = read_only
        self.repaints = repaints  # a terminal (resynchronised by repaint), not a raw reader
        self.size = size  # the client's terminal size; applied while it owns the size
        self.pos = session.ring.head
        # Why output is not sent now (it waits in the ring): "socket" (the client's
        # socket is full), "terminal" (its terminal is), "ready" (the host writes its
        # terminal, and the client has not yet drawn what goes before the screen).
        self.stops: set[str] = set()
        # The client's own terminal, when the host writes it (terminal.py); else frames.
        self.terminal = None
        self.token = None  # its numbered input stream (inputseq.Token), if it has one
        self.resyncing = False  # a repaint is being made and sent (``_resync``)
        self.again = False  # the size changed while it was: one more once it is done
        self.viewing = False  # sent frames (screen_view.py), not the program's bytes
        self.attached_at = time.monotonic()  # the newest writer left takes the size

    @property
    def paused(self) -> bool:
        return bool(self.stops)

    def stop(self, why: str) -> None:
        self.stops.add(why)

    def go(self, why: str) -> None:
        """``why`` is over: send what waits, if nothing else stops it."""
        if why in self.stops:
            self.stops.discard(why)
            if not self.stops:
                self.catch_up()

    def _out(self, data) -> None:
        """Output for the client: to its terminal, or in Output frames."""
        term = self.terminal
        if term is None:
            for i in range(0, len(data), protocol.MAX_DATA):
                self.conn.write_raw(protocol.encode_output(data[i:i + protocol.MAX_DATA]))
            return
        term.write(data)
        if term.full:
            self.stop("terminal")

    def finish(self, then) -> None:
        """The session ended: ``then()`` once the client has all of its output (a
        terminal the host writes takes the rest first: ``then`` says the end on the
        socket, which must not overtake it), or after FINISH_WAIT if it takes nothing."""
        term = self.terminal
        if term is not None and "ready" in self.stops:
            # The client has not drawn what goes before the screen yet: what its
            # terminal would have had goes in frames, which come after that.
            self.terminal = None
            held = term.take()
            term.close()
            self.stops -= {"ready", "terminal"}
            self._out(held)
            self.catch_up()
            term = None
        if term is None or term.fd is None:
            then()
            return
        loop = asyncio.get_running_loop()
        said = []

        def say() -> None:
            if not said:
                said.append(True)
                timer.cancel()
                then()

        def drained() -> None:
            if said:
                return
            if self.pos >= self.session.ring.head or term.fd is None:
                say()
            elif not term.empty():
                term.when_drained(drained)
            else:  # nothing in flight (a repaint being made): look again shortly
                loop.call_later(FINISH_POLL, drained)
        timer = loop.call_later(FINISH_WAIT, say)
        self.catch_up()
        term.when_drained(drained)

    def close_terminal(self) -> None:
        if self.terminal is not None:
            self.terminal.close()

    def sized_to_session(self) -> bool:
        """Whether the program's bytes can be sent as they are: a raw reader, a client
        of unknown size, or one whose terminal is the session's size."""
        size = self.size
        return not self.repaints or not all(size) or \
            size == (self.session.cols, self.session.rows)

    def push(self, start: int, data: bytes, frame: Optional[bytes] = None
             ) -> Optional[bytes]:
        """Live bytes at ring offset ``start``; sent only if the client is in step.
        A client that is sent frames gets a new one instead (at most every
        VIEW_INTERVAL).  ``frame``: these bytes' Output frame if another client's push
        made it; returns it, made here if needed, so several clients' share one."""
        if self.paused:
            return frame
        if self.viewing or not self.sized_to_session():
            self.refresh()
            return frame
        if self.pos != start:
            return frame
        self.pos = start + len(data)
        if self.terminal is not None:
            self._out(data)
            return frame
        if frame is None:
            frame = protocol.encode_output(data)
        self.conn.write_raw(frame)
        return frame

    async def repaint(self, history: int = 0, ansi: bool = True) -> None:
        """Send the current screen; live output continues from the offset after it.
        A client whose terminal is not the session's size gets a frame of its size.
        ``history``: first the last that many lines that scrolled off, in a SnapshotData,
        from the same look at the model as the screen (Attach.history)."""
        sized = self.sized_to_session()
        if history > 0:
            from .history import as_text
            paint = painted_vt if sized else functools.partial(viewed, cols=self.size[0],
                                                                rows=self.size[1])
            lines, painted, self.pos = await self.session.scrollback_and(
                paint, history, protocol.MAX_DATA, ansi)
            self.conn.send(protocol.SnapshotData(data=as_text(lines)))
        elif sized:
            painted, self.pos = await self.session.repaint()
        else:
            painted, self.pos = await self.session.view(*self.size)
        self.viewing = not sized
        self._out(painted)

    def refresh(self) -> None:
        """Repaint soon (off the loop): after output while viewing, or when the session's
        or the client's size changed."""
        if self.resyncing:
            self.again = True
            return
        self.resyncing = True
        task = asyncio.get_running_loop().create_task(self._resync())
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    def follow_size(self) -> None:
        """The session's or the client's size changed: frames start, stop or change size."""
        if self.repaints and (self.viewing or not self.sized_to_session()):
            self.refresh()

    async def _resync(self) -> None:
        try:
            self.again = False
            start = time.monotonic()
            await self.repaint()
            if self.viewing and not self.conn.closed:
                # Frames are whole: while output goes on, the newest one every interval,
                # and the model (pure Python: it may be catching up on a flood) busy a
                # third of the time at most.
                await asyncio.sleep(max(VIEW_INTERVAL, 2 * (time.monotonic() - start)))
        finally:
            self.resyncing = False
        if self.conn.closed:
            return
        if self.again:
            self.refresh()
        else:
            self.catch_up()

    def catch_up(self) -> None:
        """Send what the ring holds past ``pos`` until the client's buffer is full again."""
        ring = self.session.ring
        if self.resyncing:
            return  # a repaint is being made: it sets ``pos``, then catches up
        if self.viewing or not self.sized_to_session():
            if self.pos < ring.head and not self.paused:
                self.refresh()  # output came after the last frame
            return
        if self.repaints and ring.head - self.pos > RESYNC_AFTER:
            # Far behind (a client that stopped reading): the current screen replaces
            # the bytes it missed, instead of megabytes of stale frames.  Made off the
            # loop; until it is sent, live bytes are not (``pos`` is behind them).
            self.refresh()
            return
        if self.pos < ring.tail:
            self.pos = ring.tail  # a raw reader resumes at the oldest byte held
        while not self.paused and self.pos < ring.head:
            chunk = ring.read(self.pos, min(ring.head, self.pos + protocol.MAX_DATA))
            self.pos += len(chunk)
            self._out(chunk)
