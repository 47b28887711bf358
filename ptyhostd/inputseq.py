"""How much of each attach client's input reached the pty, kept where kill -9 can't lose it.

An attach client numbers its input by byte offset under a token it makes once per run
(``Attach.token``, ``Input.seq`` = the offset of the end of that Input).  For each
(session, token) the host records here the offset written to the pty so far; a client
that reattaches is told it (``Attached.input_seq``) and resends only what follows, and
the host skips what it already took (``accepted``, in memory), so keystrokes typed
while the host died arrive exactly once.

The record is one memfd for the whole host (one FD-store slot, named ``NAME``), mapped
and updated with a plain store after each write to the pty: no syscall on the keystroke
path.  The window left: a kill between the pty write and that store (a few
instructions) makes those bytes be resent, i.e. typed twice.

Layout (little-endian): a 16-byte header (MAGIC, then the slot count as u32), then
``SLOTS`` slots of (session id 16 bytes, token 16 bytes, written u64, last use f64).
A table whose header is not this one (another layout) is refused, logged, and replaced
by an empty one: clients then get no ``input_seq`` and resend nothing (at most once).
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import time
from typing import Optional

import clowder_wire as protocol

from . import fdstore

log = logging.getLogger("ptyhostd")

# Named like a ring on purpose: code from before this table sees a ring no session
# claims, and closes and unparks it (a name it did not know would be taken for a
# listening socket, and it would not start).  The hand-off check, which inspects rings,
# is never given it (Host.handoff adds it only to what crosses the exec).
NAME = "r.-inputseq"
MAGIC = b"clowdrinseq1"  # 12 bytes; the 1 is the layout's version
_HEADER = struct.Struct("<12sI")
_SLOT = struct.Struct("<16s16sQd")
_U64 = struct.Struct("<Q")
SLOTS = 4096
_SIZE = _HEADER.size + SLOTS * _SLOT.size
ACK_EVERY = 64 << 10  # bytes written between two InputAcks (the client keeps 2 MiB)
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,16}")


class Token:
    """One client's input stream into one session."""

    __slots__ = ("table", "slot", "written", "accepted", "acked", "conn")

    def __init__(self, table: "InputSeqTable", slot: int, written: int):
        self.table = table
        self.slot = slot
        self.written = written  # bytes of this stream written to the pty (recorded)
        self.accepted = written  # bytes taken into the host (written or queued)
        self.acked = written  # the last offset the client was told
        self.conn = None  # the connection attached with this token now

    def on_written(self, n: int) -> None:
        """``n`` more bytes of the stream are in the pty: record it, and now and then
        tell the client (InputAck), which then drops them."""
        self.written += n
        _U64.pack_into(self.table.map, _HEADER.size + self.slot * _SLOT.size + 32,
                       self.written)
        if self.written - self.acked >= ACK_EVERY and self.conn is not None:
            self.acked = self.written
            self.conn.send(protocol.InputAck(seq=self.written))

    def take(self, seq: int, data: bytes) -> bytes:
        """What of ``data`` (ending at stream offset ``seq``) is new to the host."""
        start = seq - len(data)
        if start > self.accepted:
            # A gap: the host lost its record (e.g. a table refused after a hand-off)
            # and the client numbers on from where it was: follow its numbering.
            self.written = self.accepted = self.acked = start
            self.on_written(0)
        skip = self.accepted - start
        if skip > 0:
            data = data[skip:]  # already written, or queued, before this reattach
        self.accepted = max(self.accepted, seq)
        return data


class InputSeqTable:
    def __init__(self, fd: int, fresh: bool):
        self.fd = fd
        self.map = mmap.mmap(fd, _SIZE)
        if fresh:
            _HEADER.pack_into(self.map, 0, MAGIC, SLOTS)
        self.index: dict[tuple[str, str], int] = {}
        self.tokens: dict[tuple[str, str], Token] = {}
        for i in range(SLOTS):
            sid, token, _, used = _SLOT.unpack_from(self.map, _HEADER.size + i * _SLOT.size)
            if used:
                self.index[(sid.rstrip(b"\0").decode(), token.rstrip(b"\0").decode())] = i
        used = set(self.index.values())
        self.free = [i for i in range(SLOTS - 1, -1, -1) if i not in used]

    @classmethod
    def start(cls, fds: list[int]) -> "InputSeqTable":
        """Adopt the parked table, or make (and park) an empty one."""
        for extra in fds[1:]:
            os.close(extra)
        if fds:
            fd = fds[0]
            try:
                header = os.pread(fd, _HEADER.size, 0)
                if len(header) == _HEADER.size and _HEADER.unpack(header) == (MAGIC, SLOTS) \
                        and os.fstat(fd).st_size == _SIZE:
                    return cls(fd, fresh=False)
                why = f"unknown layout (header {header!r})"
            except OSError as exc:
                why = str(exc)
            log.error("input sequence table refused, starting an empty one: %s", why,
                      extra={"CLOWDER_CAUSE": "inputseq-refused"})
            os.close(fd)
            fdstore.unpark(NAME)
        fd = os.memfd_create("clowder-inputseq", os.MFD_CLOEXEC)
        os.ftruncate(fd, _SIZE)
        fdstore.park(NAME, fd)
        return cls(fd, fresh=True)

    def token(self, sid: str, token: str) -> Token:
        """The stream of ``token`` into session ``sid`` (made, evicting the oldest, if new)."""
        key = (sid, token)
        t = self.tokens.get(key)
        if t is not None:
            return t
        slot = self.index.get(key)
        written = 0
        if slot is not None:
            written = _U64.unpack_from(self.map, _HEADER.size + slot * _SLOT.size + 32)[0]
        else:
            if not self.free:
                self._evict()
            slot = self.free.pop()
            self.index[key] = slot
        _SLOT.pack_into(self.map, _HEADER.size + slot * _SLOT.size, sid.encode(),
                        token.encode(), written, time.time())
        t = self.tokens[key] = Token(self, slot, written)
        return t

    def known(self, sid: str, token: str) -> bool:
        return (sid, token) in self.index

    def _evict(self) -> None:
        """Free the least recently attached slot (its client gets no input_seq)."""
        oldest = min(self.index.items(), key=lambda kv: _SLOT.unpack_from(
            self.map, _HEADER.size + kv[1] * _SLOT.size)[3])
        self._free(oldest[0])

    def _free(self, key: tuple[str, str]) -> None:
        slot = self.index.pop(key)
        self.tokens.pop(key, None)
        _SLOT.pack_into(self.map, _HEADER.size + slot * _SLOT.size, b"", b"", 0, 0.0)
        self.free.append(slot)

    def forget(self, sid: str) -> None:
        """The session is gone: its streams' slots are free again."""
        for key in [k for k in self.index if k[0] == sid]:
            self._free(key)


def valid_token(token: Optional[str]) -> bool:
    return token is None or bool(TOKEN.fullmatch(token))
