"""How much of each attach client's input reached the pty, kept where kill -9 can't lose it.

An attach client numbers its input by byte offset under a token it makes once per run
(``Attach.token``, ``Input.seq`` = the offset of the end of that Input).  For each
(session, token) the host records here the offset written to the pty so far; a client
that reattaches is told it (``Attached.input_seq``) and resends only what follows, and
the host skips what it already took (``accepted``, in memory), so keystrokes typed
while the host died arrive exactly once.

The record is one memfd for the whole host (one FD-store slot, named ``NAME``), mapped.
The bytes and their record move in one system call (``Token.write``): they are put in a
stage (a memfd of this process, at the stream offset the slot records), and sendfile(2)
moves them to the pty given the *address* of the slot's offset, which the kernel updates
itself before the call returns.  A kill -9 lands before the call or after it, never
between the bytes and their record.  (A write then a store in Python left a window: the
interpreter may hand the GIL to another thread, or collect garbage, between the two, and
a kill there made the bytes be typed twice after the restart: the chaos run's typist,
1-3 lines in some runs; beside two busy threads, 31 of 50 kills in
tests/test_input_record.py's harness.)  Where ctypes cannot load, the write and the
store are separate again (docs/design.md, "Input").

Layout (little-endian): a 16-byte header (MAGIC, then the slot count as u32), then
``SLOTS`` slots of (session id 16 bytes, token 16 bytes, written u64, last use f64).
A table whose header is not this one (another layout) is refused, logged, and replaced
by an empty one: clients then get no ``input_seq`` and resend nothing (at most once).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import re
import struct
import time
from typing import Optional

import clowder_wire as protocol

from . import fdstore
from .fd import Fd
from .pty import WRITE_CHUNK, load_staged_write, write_some

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

    def write(self, fd: int, data) -> int:
        """Write to the pty ``fd`` what it takes now of ``data`` (the stream from
        ``written`` on), recorded in the same system call (see the top); the count
        written, 0 if the pty is full.  EIO (its program is gone): taken, dropped."""
        n = self.table.send(fd, self.slot, data)
        if n:
            self.written += n
            if self.written - self.acked >= ACK_EVERY and self.conn is not None:
                self.acked = self.written
                self.conn.send(protocol.InputAck(seq=self.written))
        return n

    def take(self, seq: int, data: bytes) -> bytes:
        """What of ``data`` (ending at stream offset ``seq``) is new to the host."""
        start = seq - len(data)
        if start > self.accepted:
            # A gap: the host lost its record (e.g. a table refused after a hand-off)
            # and the client numbers on from where it was: follow its numbering.
            self.written = self.accepted = self.acked = start
            _U64.pack_into(self.table.map, _offset(self.slot), start)
        skip = self.accepted - start
        if skip > 0:
            data = data[skip:]  # already written, or queued, before this reattach
        self.accepted = max(self.accepted, seq)
        return data


def _offset(slot: int) -> int:
    """Where in the table a slot's ``written`` is."""
    return _HEADER.size + slot * _SLOT.size + 32


class InputSeqTable:
    def __init__(self, fd: int, fresh: bool):
        self.fd = fd
        self.map = mmap.mmap(fd, _SIZE)
        # Bytes on their way to a pty (Token.write): empty between two writes.  Not
        # parked: what it held and the pty did not take, the client sends again.
        self.stage = Fd(os.memfd_create("clowder-inputstage", os.MFD_CLOEXEC),
                        "input stage")
        self._address = 0  # of the map, for sendfile (ready_to_send)
        self._staged = None
        self._page = None  # the one page the stage may hold, or None: it holds none
        self._overflowed = False  # a stream went past what sendfile records (logged once)
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

    def ready_to_send(self) -> bool:
        """Load the staged write and take the map's address (ctypes: ~4 ms, after the
        start, and before the hand-off's fork, whose bridge imports nothing); False
        without them."""
        if self._staged is None:
            self._staged = load_staged_write() or False
            if self._staged:
                import ctypes
                self._anchor = ctypes.c_char.from_buffer(self.map)  # the map stays put
                self._address = ctypes.addressof(self._anchor)
        return bool(self._staged)

    def send(self, fd: int, slot: int, data) -> int:
        """Write to the pty ``fd`` what it takes of ``data``, staged at the offset
        ``slot`` records: the kernel moves that offset on by what the pty took."""
        chunk = data[:WRITE_CHUNK]
        chunk = chunk if isinstance(chunk, bytes) else bytes(chunk)
        at = _offset(slot)
        if not self.ready_to_send():
            return self._write_then_store(fd, chunk, at)
        written = _U64.unpack_from(self.map, at)[0]
        # What is staged is dead once the call returns, so the stage may be emptied at
        # any time; emptying it costs ~5 us (twice a keystroke's write), so one page
        # that a run of keystrokes fills is kept until a write lands elsewhere.
        page = written >> 12
        single = (written + len(chunk) - 1) >> 12 == page
        empty_first = self._page not in (None, page)
        self._page = page if single else None
        try:
            return self._staged(fd, self.stage.fileno(), chunk, written, self._address + at,
                                empty_first, not single)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                return 0  # written when the pty is writable again (ctypes does not retry)
            if exc.errno == errno.EIO:  # the slave is gone: the input has nowhere to go
                _U64.pack_into(self.map, at, written + len(chunk))
                return len(chunk)
            if exc.errno == errno.EOVERFLOW:
                # sendfile stops at the smaller file system's largest offset: a master
                # opened through devpts' ptmx (/dev/ptmx a link to pts/ptmx, as in
                # containers) takes none past 2 GiB - 1 of a stream.  Past it, the
                # write and the store are separate.
                if not self._overflowed:
                    self._overflowed = True
                    log.warning("an attach client's input stream is past %d bytes, the "
                                "most sendfile records on this pty: from there its writes "
                                "are recorded after them (a kill -9 between the two may "
                                "type those bytes twice)", written,
                                extra={"CLOWDER_CAUSE": "inputseq-overflow"})
                return self._write_then_store(fd, chunk, at)
            raise

    def _write_then_store(self, fd: int, chunk: bytes, at: int) -> int:
        """The write, then its record: a kill between the two types the bytes twice."""
        n = write_some(fd, chunk)
        if n:
            _U64.pack_into(self.map, at, _U64.unpack_from(self.map, at)[0] + n)
        return n

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
            written = _U64.unpack_from(self.map, _offset(slot))[0]
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
