"""The backlog ring: a session's raw output, bounded in bytes, in a memfd.

The memfd is parked in systemd's FD store, so the backlog outlives the host process.
Bytes are read from the pty master *directly into* the shared mapping (``readv``), so
the moment the kernel hands them over they are in memory that survives a ``kill -9``.

Layout: a 4 KiB header page (its first 40 bytes the header below, from byte 64 the output
timestamps of stamps.py), then ``capacity`` bytes of ring.  ``head`` counts every
byte ever written; byte ``i`` lives at ``DATA + i % capacity``.  The last ``guard``
bytes of a full ring are scratch space for the next read, so what is held is
``capacity - guard`` bytes.

Crash safety of the one window that remains (killed after the read, before ``head`` is
advanced): before each read the target region (``READ_SIZE``, the most a pty read gives)
is zeroed and recorded as ``pending`` at ``pending_at == head``, flagged ``UP_TO``: the
read fills some of it.  On adoption the pending region was read up to its last non-zero
byte (advance ``head`` that far); an all-zero one was not read (its bytes are still in
the pty).  The only ambiguity left is NUL bytes at the end of the chunk being read at the
instant of the crash: treated as unread and lost; terminals essentially never print
them.  (A pending length without ``UP_TO``, written by hosts before it, was exact: taken
whole if any byte of it is non-zero.)  A newer ring adopted by an older host: the
flagged length is past its ``guard`` check, so it drops the region in the window, never
takes zeros for output.
"""

from __future__ import annotations

import mmap
import os
import struct

from .fd import Fd
from .stamps import Stamps

MAGIC = b"CLWRING1"
_HEADER = struct.Struct("<8sQQQQ")  # magic, capacity, head, pending, pending_at
DATA = 4096
MAX_CHUNK = 64 * 1024  # the most one read may take (a ring's guard is at most this)
# What one read asks for: the most a pty's line discipline holds (N_TTY_BUF_SIZE), so one
# read takes all there is.  Not sized by FIONREAD first: it counts only what the kernel's
# worker has already moved into that buffer, and in a flood it often had not, so reads of
# 1 byte (to make the read wait for the worker) were 42 % of all, each after an ioctl:
# four syscalls a 4 KiB where one does (docs/design.md, "One read a 4 KiB").
READ_SIZE = 4096
UP_TO = 1 << 63  # in ``pending``: the read fills a prefix of the region, not all of it
_ZEROS = memoryview(bytes(MAX_CHUNK))
_OFF_HEAD = 16
_OFF_PENDING = 24
_Q = struct.Struct("<Q")
_QQ = struct.Struct("<QQ")


class RingError(Exception):
    """A parked ring could not be adopted."""


class Ring:
    """The holder of one backlog memfd and its mapping."""

    def __init__(self, fd: Fd, mm: mmap.mmap | None, capacity: int, head: int):
        self.fd = fd
        # An adopted ring is mapped at its first read or write (``_mapping``), not at
        # adoption: a restart adopts every session before it serves, and a mapping and
        # its first fault were ~8 of the ~12 us a ring cost there (docs/design.md,
        # "Start: adopt and reconcile"); a quiet session's ring is never mapped at all.
        self._mm = mm
        self._view = memoryview(mm) if mm is not None else None
        self.capacity = capacity
        self.head = head
        # Each read zeroes up to ``guard`` bytes ahead of head, i.e. the oldest bytes of
        # a full ring; they are never reported as held.
        self.guard = min(MAX_CHUNK, capacity // 4)
        self._read_size = min(READ_SIZE, self.guard)
        # This process is the ring's only writer (a new ring, or ``settle`` was called):
        # only then are the stamps loaded, which rewrites their index.
        self._settled = False
        self._stamps: Stamps | None = None

    @classmethod
    def create(cls, name: str, capacity: int) -> "Ring":
        """A new, empty ring of ``capacity`` bytes."""
        if capacity < 4096:
            raise ValueError(f"backlog capacity {capacity} is below 4096 bytes")
        try:
            fd = Fd(os.memfd_create(f"clowder-ring-{name}", os.MFD_CLOEXEC), f"ring {name}")
        except OSError as exc:
            # The errno stays: EMFILE/ENFILE is the host's fd table, refused as such.
            raise OSError(exc.errno, f"creating the backlog ring of {name}: "
                                     f"{exc.strerror}") from exc
        try:
            os.ftruncate(fd.fd, DATA + capacity)
            mm = mmap.mmap(fd.fd, DATA + capacity)
        except BaseException:
            fd.close()
            raise
        _HEADER.pack_into(mm, 0, MAGIC, capacity, 0, 0, 0)
        ring = cls(fd, mm, capacity, 0)
        ring._settled = True
        ring._stamps = Stamps.create(mm)
        return ring

    @classmethod
    def adopt(cls, raw_fd: int, name: str, settle: bool = True) -> "Ring":
        """Take over a parked ring, finishing any read a crash interrupted.

        ``settle=False``: another process (a hand-off's bridge) may still be writing to
        it; nothing is written and the caller calls ``settle`` once that one is gone.
        Raises RingError, with ``raw_fd`` closed, for whatever makes it unusable."""
        fd = Fd(raw_fd, f"ring {name}")
        ring = None
        try:
            header = cls._header(raw_fd, name)
            ring = cls(fd, None, header[1], header[2])
            if settle:
                ring._settle(header)
            return ring
        except Exception as exc:
            if ring is not None:
                ring.close()
            fd.close()
            if isinstance(exc, RingError):
                raise
            raise RingError(f"ring {name}: cannot adopt: {exc}") from exc

    def settle(self) -> None:
        """Take ``head`` from the header, finish a read that was cut off (``pending``, see
        above) and load the stamps: when this process becomes the ring's only writer."""
        self._settle(_HEADER.unpack(os.pread(self.fd.fd, _HEADER.size, 0)))

    def _settle(self, header: tuple) -> None:
        _magic, _cap, head, pending, pending_at = header
        self.head = head
        up_to, pending = pending & UP_TO, pending & ~UP_TO
        if pending and pending_at == head and pending <= self.guard:
            region = b"".join(v.tobytes() for v in self._region(head, pending))
            if up_to:
                self.head = head + len(region.rstrip(b"\0"))
            elif region.count(0) != len(region):
                self.head = head + pending
            _QQ.pack_into(self._mm, _OFF_HEAD, self.head, 0)
        self._settled = True
        if self._mm is not None:  # else when it is mapped, before its first write
            self._stamps = Stamps.load(self._mm, self.head)

    def _mapping(self) -> memoryview:
        """The ring's memory, mapped now if it was not yet (see ``__init__``)."""
        if self._view is None:
            self._mm = mmap.mmap(self.fd.fd, DATA + self.capacity)
            self._view = memoryview(self._mm)
            if self._settled:
                self._stamps = Stamps.load(self._mm, self.head)
        return self._view

    @property
    def stamps(self) -> Stamps | None:
        """The output timestamps in the header page (None until the ring is settled)."""
        if self._stamps is None and self._settled:
            self._mapping()
        return self._stamps

    @staticmethod
    def inspect(raw_fd: int, name: str) -> tuple[int, int]:
        """(capacity, head) of a parked ring, read without changing anything."""
        _magic, capacity, head, _pending, _at = Ring._header(raw_fd, name)
        return capacity, head

    @staticmethod
    def _header(raw_fd: int, name: str) -> tuple:
        """The parked ring's header, checked against its memfd's size (a mapping past
        the file's end would fault: SIGBUS)."""
        size = os.fstat(raw_fd).st_size
        if size < DATA + 4096:
            raise RingError(f"ring {name}: memfd of {size} bytes is too small")
        header = _HEADER.unpack(os.pread(raw_fd, _HEADER.size, 0))
        magic, capacity = header[0], header[1]
        if magic != MAGIC or DATA + capacity != size:
            raise RingError(f"ring {name}: bad header (magic {magic!r}, capacity {capacity})")
        return header

    def _region(self, start: int, length: int) -> list:
        """Views of the ring bytes [start, start+length), split where the ring wraps."""
        view = self._view if self._view is not None else self._mapping()
        pos = start % self.capacity
        first = min(length, self.capacity - pos)
        views = [view[DATA + pos:DATA + pos + first]]
        if first < length:
            views.append(view[DATA:DATA + length - first])
        return views

    def fill_from(self, fd: int) -> int:
        """Read what the pty ``fd`` has into the ring; returns the byte count.

        Raises what ``readv`` raises (BlockingIOError when nothing is there, EIO when the
        slave side has gone away).
        """
        want = self._read_size
        head = self.head
        views = self._region(head, want)
        for v in views:
            v[:] = _ZEROS[:len(v)]
        _QQ.pack_into(self._mm, _OFF_PENDING, want | UP_TO, head)
        # If readv raises, pending stays set over an all-zero region: adopt() reads that
        # as "not read", which is the truth.
        got = os.readv(fd, views)
        # head first, then clear pending: a crash in between leaves pending_at != head,
        # which adopt() ignores.
        self.head = head + got
        _Q.pack_into(self._mm, _OFF_HEAD, self.head)
        _Q.pack_into(self._mm, _OFF_PENDING, 0)
        if got:
            self.stamps.note(head, self.tail)
        return got

    def put(self, data: bytes) -> None:
        """Append ``data`` (a saved screen opening a restored or resumed session's ring,
        before any pty is read into it), a guard's worth at a time as a read would."""
        view = memoryview(data)
        while view:
            chunk, view = view[:self.guard], view[self.guard:]
            head = self.head
            at = 0
            for v in self._region(head, len(chunk)):
                v[:] = chunk[at:at + len(v)]
                at += len(v)
            self.head = head + len(chunk)
            _Q.pack_into(self._mm, _OFF_HEAD, self.head)
            self.stamps.note(head, self.tail)

    @property
    def tail(self) -> int:
        """The oldest absolute offset still held."""
        return max(0, self.head - self.capacity + self.guard)

    def read(self, start: int, end: int | None = None) -> bytes:
        """The bytes at absolute offsets [start, end), clamped to what is held."""
        end = self.head if end is None else min(end, self.head)
        start = max(start, self.tail)
        if start >= end:
            return b""
        return b"".join(bytes(v) for v in self._region(start, end - start))

    def close(self) -> None:
        """Unmap and close; idempotent."""
        if self._mm is not None:
            self._view.release()
            self._mm.close()
            self._mm = None
        self.fd.close()
