"""The fds the host waits on for sessions (pty masters, pidfds), in one epoll of its own.

The host's event loop watches only this epoll's fd.  Registering a thousand masters and
a thousand pidfds with asyncio one by one (a Handle, a selector key and an epoll_ctl
each) took ~30 ms of every start at 1,000 sessions, all of it before the host could
serve; registering them here is one epoll_ctl each.  Level-triggered, like asyncio's
own readers: a callback that leaves data unread is called again on the next turn.
"""

from __future__ import annotations

import asyncio
import select
from typing import Callable


class Readers:
    """Calls a callback while an fd is readable; ``remove`` it before closing the fd."""

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
