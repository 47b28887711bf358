"""The doorbell: whether a client is at the door, so that a flood's reads step aside.

A wake of a flooding session reads up to WAKE_BYTES (session.py), and most of a wake is
reads waiting on the kernel's tty worker; with a flood's model fed on the loop as well
(session.INLINE_FEED_ASCII), a wake held the loop for 1-3.7 ms at the end of a flood
(timestamps in a private host, docs/design.md "A client at the door").  A client that
connected or asked meanwhile waited that long: a snapshot of a quiet session beside a
flood took 2.4 ms at the median, 3.4 at p90, against 1.8 / 2.7 with the model in the
screen pool, and 1.6 / 1.9 with this.

So the host's listening sockets and its clients' sockets are kept in an epoll of their
own, and past WAKE_YIELD into a wake the pump rings it before each further read (one
epoll_wait that never waits, ~1 us): when a client has something for the loop, the
wake ends there and the loop serves it before the flood's next wake.  A connection the
host has stopped reading (its requests over the high-water mark, connection.py) is left
out while it is paused: its socket stays readable, and would keep every flood's wakes
short for nothing.
"""

from __future__ import annotations

import select

# Seconds into a wake after which it asks the doorbell before each read: a client at
# the door waits for at most this and one read (plus what the wake forwards).
WAKE_YIELD = 0.0005


class Doorbell:
    """An epoll of the sockets a client can be waiting on (level-triggered: ringing
    consumes nothing, the loop's own epoll still reads them).  It keeps no list of its
    own: a socket closed while watched leaves the epoll by itself, and a list could
    outlive it and take its number for the next socket's."""

    def __init__(self) -> None:
        self._epoll = select.epoll()  # close-on-exec (a hand-off's exec drops it)

    def watch(self, fd: int) -> None:
        """Ring while ``fd`` is readable (a connection to accept, a request to read)."""
        try:
            self._epoll.register(fd, select.EPOLLIN)
        except FileExistsError:
            pass  # watched already

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd``, while it is still open (after its close the number may
        be the next socket's); -1, none (a connection that was never made), is nothing."""
        if fd < 0:
            return
        try:
            self._epoll.unregister(fd)
        except OSError:
            pass  # not watched (ENOENT), or closed already (EBADF): nothing to drop

    def watched(self) -> int:
        """How many fds it watches (the kernel's count, from /proc: for the tests)."""
        with open(f"/proc/self/fdinfo/{self._epoll.fileno()}") as f:
            return sum(line.startswith("tfd:") for line in f)

    def rung(self) -> bool:
        """Whether a watched socket has something for the loop now."""
        return bool(self._epoll.poll(0, 1))


# One for the host: the listeners and connections watch, the sessions' pumps ring.
DOORBELL = Doorbell()
