"""Entries sent to journald in its native protocol, from Python.

python-systemd's ``sendv`` (sd_journal_sendv) keeps the GIL while it sends, and the send
blocks when journald does not read (stopped, busy flushing to a slow disk, restarting):
its datagram queue holds net.unix.max_dgram_qlen entries (10 on these machines, the
kernel's default) and the next sender waits.  A daemon's log writer thread blocked
there held the GIL, so the event loop stopped with it (tests/test_hostile_journal.py
failed so with the writer thread alone).  ``socket.sendto`` gives the GIL up while it
waits: only the writer thread waits.

The protocol (systemd's JOURNAL_NATIVE_PROTOCOL): one datagram to
/run/systemd/journal/socket, each field ``KEY=value\\n``, or, for a value with a
newline, ``KEY\\n``, its length as 64-bit little-endian, the value and ``\\n``.  An
entry larger than a datagram may be goes as a sealed memfd passed with SCM_RIGHTS, as
sd_journal_sendv does.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct

SOCKET = "/run/systemd/journal/socket"
SEND_BUFFER = 8 << 20  # sd-journal's too: an entry up to this goes as one datagram
_LENGTH = struct.Struct("<Q")
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def encode(fields) -> bytes:
    """The datagram of one entry: ``fields`` are ``KEY=value`` str or bytes."""
    parts = []
    for field in fields:
        if isinstance(field, str):
            field = field.encode("utf-8", "surrogateescape")
        key, _, value = field.partition(b"=")
        if b"\n" in value:
            parts += (key, b"\n", _LENGTH.pack(len(value)), value, b"\n")
        else:
            parts += (field, b"\n")
    return b"".join(parts)


class JournalSender:
    """One datagram socket to journald, opened at the first entry."""

    def __init__(self, path: str = SOCKET):
        self.path = path
        self._sock: socket.socket | None = None

    def send(self, fields) -> None:
        """Send one entry; OSError if journald refuses it (no journald: dropped, as
        sd-journal does)."""
        data = encode(fields)
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
            except OSError:
                pass  # the default buffer: larger entries go through a memfd
            self._sock = sock
        try:
            self._sock.sendto(data, self.path)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
                return  # no journald listens
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
            self._send_memfd(data)

    def _send_memfd(self, data: bytes) -> None:
        fd = os.memfd_create("journal-entry", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)  # journald takes sealed ones only
            self._sock.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                     struct.pack("i", fd))], 0, self.path)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
