"""The listening socket: accepting clients, and refusing them clearly when out of fds.

asyncio's own accept loop, at EMFILE/ENFILE, logs "socket.accept() out of system
resource" with a traceback through the loop's exception handler, stops accepting for a
second and tries again: a traceback a second in the journal for as long as the host is
short, and clients left waiting in the backlog with no answer.  Here one fd is kept in
reserve instead: at EMFILE it is given up for a moment to accept the waiting client,
tell it why in a fatal Error frame, and close it; the journal gets one line per episode
(episodes logged at most one every ratelog.INTERVAL, the next line counting those skipped).

Both daemons use it.  It also caps the
connections one uid may hold open (``per_uid``): each costs an fd and a little memory,
and without a cap one member could take every fd and lock root out.  Root and the
daemon's own uid are exempt.  A connection past the cap is told why in a fatal Error
frame; the journal gets one line per uid every ratelog.INTERVAL at most, saying how many
were refused since the last (clowder_common/ratelog.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from typing import Callable, Optional

import clowder_wire as protocol

from . import fdlimit
from .peercred import peer_creds
from .ratelog import RateLimitedLog

log = logging.getLogger("ptyhostd")

BATCH = 100  # connections accepted per wake-up, as asyncio does
RETRY = 1.0  # seconds before accepting again when even the reserve fd is gone
PER_UID = 256  # open connections a uid other than root and the daemon's own may hold
REFUSAL_GRACE = 5.0  # seconds a refused client has to read its Error before we close


class _Refusal(asyncio.Protocol):
    """A connection past its uid's cap: the fatal Error, our end shut, then closed.

    Shutting down our writing side (not closing) lets the client read the Error even if
    its Hello arrives after we answered: a close with unread bytes resets the peer."""

    def __init__(self, frame: bytes):
        self.frame = frame
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.frame)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(REFUSAL_GRACE, transport.abort)

    def data_received(self, data: bytes) -> None:
        pass  # whatever it sends is not read: it was told why

    def eof_received(self) -> bool:
        return False  # closes the transport


class Listener:
    """Serves one listening socket with protocols made by ``factory``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 factory: Callable[[], asyncio.Protocol], *, per_uid: int = PER_UID,
                 daemon: str = "the PTY host", unit: str = "clowder-ptyhost.service",
                 logger: logging.Logger = log):
        self._loop = loop
        self._log = logger  # the daemon's own: only it goes to the journal
        self._sock = sock
        self._factory = factory
        self._per_uid = per_uid
        self._exempt = {0, os.getuid()}
        self._daemon, self._unit = daemon, unit
        # The accepted sockets of each capped uid: asyncio closes a transport's socket
        # object when the connection ends (fileno() -1), so counting needs no hook.
        self._open: dict[int, list[socket.socket]] = {}
        self._reserve: Optional[int] = None
        self._short = False  # refusing clients for lack of fds
        # "refusing" lines: per capped uid, and of out-of-fds episodes.
        self._refusals = RateLimitedLog(logger)
        self._logged = False  # whether this episode was (so its end is logged too)
        self._tasks: set[asyncio.Task] = set()
        sock.setblocking(False)
        self._take_reserve()
        loop.add_reader(sock.fileno(), self._accept)

    def _take_reserve(self) -> None:
        if self._reserve is None:
            try:
                self._reserve = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._reserve = None  # retried after the next refusal

    def _accept(self) -> None:
        for _ in range(BATCH):
            try:
                conn, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in fdlimit.EXHAUSTED + (errno.ENOBUFS, errno.ENOMEM):
                    self._log.error("accepting a client: %s", exc,
                                    extra={"CLOWDER_CAUSE": "accept-failed"})
                    return
                if not self._refuse_one():
                    self._pause()
                    return
                continue
            if self._short:
                self._short = False
                if self._logged:
                    self._logged = False
                    self._log.info("file descriptors available again: accepting clients",
                             extra={"CLOWDER_CAUSE": "fds-available"})
            conn.setblocking(False)
            refused = self._over_cap(conn)
            factory = self._factory if refused is None else \
                (lambda uid=refused: self._refusal(uid))
            task = self._loop.create_task(
                self._loop.connect_accepted_socket(factory, conn))
            self._tasks.add(task)
            task.add_done_callback(self._connected)

    def _over_cap(self, conn: socket.socket) -> Optional[int]:
        """The peer's uid if it is at its cap, else None (and the connection counted)."""
        try:
            _pid, uid, _gid = peer_creds(conn)
        except OSError:
            return None  # the Connection finds out, and says so
        if uid in self._exempt:
            return None
        held = self._open.setdefault(uid, [])
        if len(held) >= self._per_uid:
            held[:] = [c for c in held if c.fileno() >= 0]  # pruned only when full
        if len(held) < self._per_uid:
            held.append(conn)
            return None
        self._refusals.warning(("connection-limit", uid), "refusing connections of uid %d: "
                               "it holds %d, the most a uid may", uid, self._per_uid,
                               extra={"CLOWDER_CAUSE": "connection-limit"})
        return uid

    def _refusal(self, uid: int) -> asyncio.Protocol:
        text = (f"uid {uid} already holds {self._per_uid} connections to {self._daemon}, "
                f"the most one user may: close some and retry")
        return _Refusal(protocol.encode(protocol.Error(message=text, code="capacity",
                                                       fatal=True)))

    def _connected(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("setting up a client connection: %r", task.exception(),
                      extra={"CLOWDER_CAUSE": "accept-failed"})

    def _refuse_one(self) -> bool:
        """Accept one waiting client on the reserve fd and tell it why it cannot be
        served; False if that was not possible either (no reserve, nobody waiting)."""
        text = fdlimit.out_of_fds("a new connection", self._daemon, self._unit)
        # Once per episode, and episodes at most one an interval: a client that connects
        # and leaves in a loop at the edge must not flood the journal either.
        if not self._short:
            self._logged = self._refusals.warning("out-of-fds", "refusing clients: %s", text,
                                                  extra={"CLOWDER_CAUSE": "out-of-fds"})
        self._short = True
        if self._reserve is None:
            self._take_reserve()
            return False
        os.close(self._reserve)
        self._reserve = None
        try:
            conn, _addr = self._sock.accept()
        except OSError:
            self._take_reserve()
            return False
        try:
            conn.setblocking(False)
            try:
                conn.recv(65536)  # its Hello: closing with it unread would reset the peer
            except OSError:
                pass
            conn.send(protocol.encode(protocol.Error(message=text, code="capacity",
                                                     fatal=True)))
        except OSError:
            pass  # the client went away; nothing more to tell it
        finally:
            conn.close()
            self._take_reserve()
        return True

    def _pause(self) -> None:
        """Stop polling a socket we cannot accept from (it stays readable), for a while."""
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(RETRY, self._resume)

    def _resume(self) -> None:
        self._loop.add_reader(self._sock.fileno(), self._accept)
        self._accept()
