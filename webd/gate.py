"""The door of every HTTP connection: who may open one, and how much it may ask ahead.

aiohttp reads a connection as fast as it comes and queues every request it parses; only
since 3.14 does it stop at 32 unanswered (aio-libs/aiohttp#12830).  The packages run on
the distribution's aiohttp (Debian 12: 3.8), where one connection that pipelines
requests and never reads the answers grows clowder-web without bound.  So the bound is
ours, the same on every version, made of public parts only: each connection's protocol
is a Gate in front of aiohttp's, which counts the request heads it passes on (a head
ends at the first empty line) and the requests aiohttp starts to handle (a middleware
tells it), and stops reading the socket while MAX_AHEAD are waiting.  Bytes after the
last head it passed wait in the Gate (one read: 256 KiB at most) until the queue drains.
Once a WebSocket is accepted (101) the connection carries frames, not heads: the Gate
steps aside, and aiohttp's WebSocket reader bounds it.

A connection's peer uid (peer.py) is read once, here, when it is accepted: the login
check asks the Gate instead of asking the kernel for every request.  A uid may hold
MAX_PER_UID connections (a browser needs ~6, plus a WebSocket per terminal, at most
app.MAX_TERMINALS); the next is answered 503 and closed.  Root and the unit's proxy users
are not counted (a reverse proxy carries everyone's); a peer on another machine is
counted by its address.
"""

from __future__ import annotations

import asyncio
import re
from typing import Callable, Optional

from . import peer

MAX_AHEAD = 4  # requests parsed and not yet handled; a browser never pipelines
MAX_PER_UID = 64  # open connections of one uid (or one remote address)
_EMPTY_LINE = re.compile(rb"\n\r?\n")  # where a request head ends (aiohttp takes bare \n)
_LEADING = re.compile(rb"[\r\n]*")
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s")


class Gates:
    """The open connections' Gates, by transport (what a request knows them by), and
    how many each uid holds."""

    def __init__(self, exempt: frozenset[int], refused: Callable[[object, int], None]):
        self.exempt = exempt  # uids never counted (root, proxies)
        self.refused = refused  # called (uid or address, held) for one turned away
        self._by_transport: dict[object, Gate] = {}
        self.held: dict[object, int] = {}  # uid (or remote address) -> connections

    def protocol(self, inner: asyncio.Protocol) -> "Gate":
        return Gate(self, inner)

    def of(self, transport) -> Optional["Gate"]:
        return self._by_transport.get(transport)

    def started(self, transport) -> None:
        """aiohttp began to handle a request of this connection."""
        gate = self._by_transport.get(transport)
        if gate is not None:
            gate.started()

    def upgraded(self, transport) -> None:
        """A request of this connection was answered 101: frames follow, not heads."""
        gate = self._by_transport.get(transport)
        if gate is not None:
            gate.step_aside()

    def _admit(self, gate: "Gate", transport) -> bool:
        try:
            uid = peer.uid_of(transport)
        except OSError:  # the kernel would not say (a peer gone at once): nobody's
            uid = peer.NOBODY
        gate.uid = uid
        if uid is None:  # another machine: counted by its address
            peername = transport.get_extra_info("peername")
            gate.counted_as = f"address {peername[0] if peername else '?'}"
        elif uid not in self.exempt:
            gate.counted_as = uid
        if gate.counted_as is not None:
            held = self.held.get(gate.counted_as, 0)
            if held >= MAX_PER_UID:
                self.refused(gate.counted_as, held)
                gate.counted_as = None
                return False
            self.held[gate.counted_as] = held + 1
        self._by_transport[transport] = gate
        return True

    def _gone(self, gate: "Gate") -> None:
        self._by_transport.pop(gate.transport, None)
        if gate.counted_as is not None:
            left = self.held[gate.counted_as] - 1
            if left:
                self.held[gate.counted_as] = left
            else:
                del self.held[gate.counted_as]
            gate.counted_as = None


class Gate(asyncio.Protocol):
    """One connection: aiohttp's protocol behind a count of the requests it was given
    and has not begun."""

    def __init__(self, gates: Gates, inner: asyncio.Protocol):
        self.gates, self.inner = gates, inner
        self.transport = None
        self.uid: Optional[int] = None  # the peer's (peer.uid_of), read at accept
        self.counted_as = None  # the key of gates.held this connection counts under
        self.ahead = 0  # heads passed on whose requests aiohttp has not begun
        self.held, self.pos = b"", 0  # bytes read, and how many were passed on
        # The last two bytes passed on of a head begun and not ended (b"": none begun).
        self.tail = b""
        self.aside = False  # a WebSocket: everything passes
        self.paused = False
        self.refused = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.gates._admit(self, transport):
            self.refused = True
            text = (f"503: this user has {MAX_PER_UID} connections to clowder-web "
                    f"open already: close some\n").encode()
            transport.write(BUSY % (len(text), text))
            transport.close()
            return
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.aside:
            self.inner.data_received(data)
            return
        self.held = self.held[self.pos:] + data if self.held else data
        self.pos = 0
        self._pass_on()

    def _pass_on(self) -> None:
        """Hand aiohttp the held bytes up to the head that makes MAX_AHEAD waiting."""
        while self.pos < len(self.held) and not self.aside:
            if self.ahead >= MAX_AHEAD:
                self._pause()
                return
            start, end = self.pos, self._head_end()
            if end < 0:  # a head still coming: aiohttp's limits bound its size
                chunk = self.held[start:]
                if self.tail:
                    self.tail = (self.tail + chunk)[-2:]
                elif _LEADING.match(chunk).end() < len(chunk):  # a head has begun
                    self.tail = chunk[_LEADING.match(chunk).end():][-2:]
                self.held, self.pos = b"", 0
            else:
                chunk, self.pos = self.held[start:end], end
                self.ahead += 1
                self.tail = b""  # the next head starts afresh
            self.inner.data_received(chunk)
        self.held, self.pos = b"", 0
        self._resume()

    def _head_end(self) -> int:
        """Where in the held bytes the current head ends (past its empty line); -1: not
        in them yet.  Empty lines before a head are not one (a parser skips them)."""
        held, pos = self.held, self.pos
        if self.tail:  # a head has begun: its empty line may span the last read
            joined = self.tail + held[pos:pos + 2]
            found = _EMPTY_LINE.search(joined)
            if found is not None and found.end() > len(self.tail):
                return pos + found.end() - len(self.tail)
            found = _EMPTY_LINE.search(held, pos)
        else:
            found = _EMPTY_LINE.search(held, _LEADING.match(held, pos).end())
        return -1 if found is None else found.end()

    def started(self) -> None:
        self.ahead = max(self.ahead - 1, 0)
        if not self.aside and self.ahead < MAX_AHEAD:
            self._pass_on()

    def step_aside(self) -> None:
        self.aside, self.ahead = True, 0
        held, self.held, self.pos = self.held[self.pos:], b"", 0
        if held:
            self.inner.data_received(held)
        self._resume()

    def _pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    # What asyncio tells a protocol, passed on.
    def connection_lost(self, exc) -> None:
        self.gates._gone(self)
        if not self.refused:
            self.inner.connection_lost(exc)

    def eof_received(self):
        return None if self.refused else self.inner.eof_received()

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()
