"""Pseudo-terminal masters: opening a pair, sizing it, writing input.

The host only ever holds the master; systemd opens the slave by path (``TTYPath=``)
for the session's unit.  The slave we open here is held just until that unit has
opened it, because a master whose slave was never opened reads EIO.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import termios

from clowder_wire.host import MAX_CELLS, MAX_COLS, MAX_ROWS

from .fd import Fd

TIOCGPTN = 0x80045430
TIOCSPTLCK = 0x40045431
TIOCGPTPEER = 0x5441
_WINSZ = struct.Struct("HHHH")


class PtyError(OSError):
    """A pty could not be opened or used."""


def open_pair(sid: str) -> tuple[Fd, Fd, str]:
    """(master, slave, slave path) of a new pty, both non-inheritable and not our ctty."""
    try:
        master = Fd(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC
                            | os.O_NONBLOCK), f"pty master {sid}")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:  # the kernel's pty count, not our fd table
            raise PtyError(exc.errno, f"the system has no ptys left for session {sid} "
                                      f"(sysctl kernel.pty.max)") from exc
        raise PtyError(exc.errno, f"opening /dev/ptmx for session {sid}: {exc.strerror}")
    try:
        fcntl.ioctl(master.fd, TIOCSPTLCK, struct.pack("i", 0))
        num = struct.unpack("I", fcntl.ioctl(master.fd, TIOCGPTN, b"\0" * 4))[0]
        path = f"/dev/pts/{num}"
        # TIOCGPTPEER opens exactly our peer, immune to a /dev/pts path race.
        slave = Fd(fcntl.ioctl(master.fd, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC),
                   f"pty slave {sid}")
    except OSError as exc:
        master.close()
        raise PtyError(exc.errno, f"setting up pty for session {sid}: {exc.strerror}")
    return master, slave, path


def set_size(fd: int, cols: int, rows: int) -> None:
    """Set the window size; the kernel sends SIGWINCH to the foreground group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, _WINSZ.pack(rows, cols, 0, 0))


def get_size(fd: int) -> tuple[int, int]:
    """(cols, rows) of the pty."""
    rows, cols, _, _ = _WINSZ.unpack(fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return cols, rows


def held(fd: int) -> int:
    """Bytes the pty's line discipline holds now (FIONREAD): a read returns them at once.
    A read when it holds none first waits for the kernel's worker to move over what the
    other side wrote (in a flood, 50-250 us of the caller's time)."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


# At most this much of a write's data is copied for write(2) at once (a paste's rest
# waits in the input queue in any case; the pty takes ~4-64 KiB at a time).
WRITE_CHUNK = 64 * 1024
_staged = None  # see load_staged_write


def load_staged_write():
    """A write whose record the kernel makes, or None where ctypes cannot load libc:
    ``staged_write(fd, stage, data, offset, address, empty_first, empty_after)`` puts
    ``data`` in the file ``stage`` at ``offset`` and sendfile(2)s it to ``fd``, passing
    the offset by its ``address`` (os.sendfile takes it by value), so the kernel itself
    stores there the offset it reached, in the same system call as the bytes move
    (inputseq.Token.write); the stage is emptied (ftruncate) before and after as asked.
    Returns the count the pty took.  libc is called through
    ctypes.PyDLL, which keeps the GIL: calls that let it go wait for another thread's
    turn to take it back (the screen pool's: up to the switch interval each)."""
    global _staged
    if _staged is None:
        try:
            import ctypes
            libc = ctypes.PyDLL(None, use_errno=True)
            pwrite, sendfile, ftruncate = libc.pwrite64, libc.sendfile64, libc.ftruncate64
        except (ImportError, OSError, AttributeError):
            _staged = False
            return None
        pwrite.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64)
        pwrite.restype = ctypes.c_ssize_t
        sendfile.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
        sendfile.restype = ctypes.c_ssize_t
        ftruncate.argtypes = (ctypes.c_int, ctypes.c_int64)
        ftruncate.restype = ctypes.c_int
        get_errno = ctypes.get_errno

        def fail(what: str):
            err = get_errno()
            return OSError(err, f"{what}: {os.strerror(err)}")

        def staged_write(fd: int, stage: int, data: bytes, offset: int, address: int,
                         empty_first: bool, empty_after: bool) -> int:
            if empty_first:
                ftruncate(stage, 0)
            if pwrite(stage, data, len(data), offset) != len(data):
                raise fail("staging input")
            try:
                n = sendfile(fd, stage, address, len(data))
                if n < 0:
                    raise fail("sendfile")
                return n
            finally:
                if empty_after:
                    ftruncate(stage, 0)
        _staged = staged_write
    return _staged or None


def write_some(fd: int, data: bytes) -> int:
    """Write what the pty accepts now without blocking; returns the count written.
    (A client's numbered input goes through inputseq.Token.write, which records it.)"""
    chunk = data[:WRITE_CHUNK]
    try:
        return os.write(fd, chunk)
    except BlockingIOError:
        return 0
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return 0
        if exc.errno == errno.EIO:  # slave gone: the input has nowhere to go
            return len(data)
        raise


def valid_size(cols: int, rows: int) -> bool:
    """Whether a size is one a session may have (the limits: clowder_wire.host)."""
    return 1 <= cols <= MAX_COLS and 1 <= rows <= MAX_ROWS and cols * rows <= MAX_CELLS


def size_problem(cols: int, rows: int) -> str:
    """Why a size is refused, for the client's error."""
    return (f"invalid size {cols}x{rows}: at most {MAX_COLS} columns, {MAX_ROWS} rows "
            f"and {MAX_CELLS} cells")
