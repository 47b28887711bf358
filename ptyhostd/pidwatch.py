"""The sessions' pidfds, in one epoll of the host's own; and, in a second one, the pty
masters adopted at a start until each has output (Session.start_reading).

The host's event loop watches only this epoll's fd.  Registering a thousand pidfds with
asyncio one by one (a Handle, a selector key and an epoll_ctl each) took ~15 ms of every
start at 1,000 sessions, all of it before the host could serve; registering them here
is one epoll_ctl each.  Level-triggered, like asyncio's own readers.
A pty master is read as the event loop's own reader: on the byte path, the extra
epoll_wait per wake that this costs took ~10 % more CPU per MB forwarded (measured:
55.8 vs 65.3 MB/s through the host, bench/, same run conditions).  Only its first
output after a start comes through here: it moves the master to the loop (~10 ms of
asyncio readers at 1,000 sessions before READY, now only for the sessions that print).
"""

from __future__ import annotations

import asyncio
import select
from typing import Callable


class PidWatch:
    """Calls a callback when a pidfd becomes readable (its process ended); ``remove``
    the pidfd before closing it."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._epoll = select.epoll()  # close-on-exec: never crosses a hand-off's exec
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._loop = loop
        loop.add_reader(self._epoll.fileno(), self._ready)

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        self._epoll.register(fd, select.EPOLLIN)
        self._callbacks[fd] = callback

    def remove(self, fd: int) -> None:
        """Stop watching ``fd`` (idempotent); must come before the fd is closed, since
        its number may be reused at once."""
        if self._callbacks.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass

    def _ready(self) -> None:
        for fd, _events in self._epoll.poll(0):
            callback = self._callbacks.get(fd)  # an earlier callback may have removed it
            if callback is not None:
                callback()

    def close(self) -> None:
        self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()
        self._callbacks.clear()
