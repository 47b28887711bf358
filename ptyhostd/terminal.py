"""A client's own terminal, written by the host: an attach's output goes from the pty
through the host straight to the client's terminal, as tmux's server writes its
clients' terminals, instead of in Output frames the client's process copies out.

That takes one process off every byte's way and every echo's: ``clowderctl attach``
no longer copies output (its CPU in a 50 MB `cat`: 0.17 s -> 0; a keystroke: 258-308 ->
180-222 us; docs/design.md, "The client's terminal, written by the host").

The client names its terminal in its Attach (``terminal``: path, device and inode, as
its own fstat of stdout sees them).  The host opens it only if it is a pseudo-terminal
(/dev/pts/N) that the client's uid owns (root: any), checked on the path *before*
opening, so the host never opens someone else's terminal (opening and closing a pts
nobody else holds hangs it up), and again on the open file: the same device and inode
as the client's, so a client in another devpts instance (a container) is not written
into a namesake.  The host's own open file is non-blocking whatever the client does to
its flags.  Nothing is written until the client says it drew what goes before the
screen (TerminalReady).  Anything else: the attach goes on in frames, as before.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import Callable, Optional

# A pseudo-terminal's slave: its device majors (UNIX98_PTY_SLAVE_MAJOR and the 7 after).
PTS_MAJORS = range(136, 144)
_PATH = re.compile(r"/dev/pts/[0-9]{1,9}\Z")
# Unwritten bytes past this: the attachment stops taking output (it waits in the ring,
# as for a client whose socket is full) until the terminal has taken all but LOW.
HIGH = 1 << 20
LOW = 256 << 10
# A write larger than this is cut: a terminal takes ~4 KiB at a time anyway.
WRITE_MAX = 256 << 10


def open_for(spec, uid: int) -> tuple[Optional[int], str]:
    """(fd, "") of the terminal ``spec`` names, opened for writing if ``uid`` may have
    it written, or (None, why not)."""
    if not isinstance(spec, dict):
        return None, "not a terminal's description"
    path, dev, ino = spec.get("path"), spec.get("dev"), spec.get("ino")
    if not isinstance(path, str) or not _PATH.match(path):
        return None, "not a pseudo-terminal's path"
    if type(dev) is not int or type(ino) is not int:
        return None, "no device and inode"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    problem = _problem(st, dev, ino, uid)
    if problem:
        return None, f"{path}: {problem}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
                     | os.O_NOFOLLOW)
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    problem = _problem(os.fstat(fd), dev, ino, uid)
    if problem:
        os.close(fd)
        return None, f"{path}: {problem}"
    return fd, ""


def _problem(st: os.stat_result, dev: int, ino: int, uid: int) -> str:
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) not in PTS_MAJORS:
        return "not a pseudo-terminal"
    if (st.st_dev, st.st_ino) != (dev, ino):
        return "not the client's terminal (another devpts?)"
    if uid != 0 and st.st_uid != uid:
        return "not the client's own"
    return ""


class Terminal:
    """One open client terminal: writes without blocking, keeps what it did not take."""

    def __init__(self, fd: int, loop, on_room: Callable[[], None],
                 on_broken: Callable[[str], None]):
        self.fd: Optional[int] = fd
        self._loop = loop
        self._on_room = on_room  # below LOW again after being over HIGH
        self._on_broken = on_broken  # a write failed (hung up): the client is gone
        self._pending = bytearray()
        self._held = True  # until the client's TerminalReady
        self._waiting = False  # a writer is registered with the loop
        self.full = False
        self._drained: list[Callable[[], None]] = []

    def pending(self) -> int:
        return len(self._pending)

    def empty(self) -> bool:
        return not self._pending

    def release(self) -> None:
        """The client drew what goes before: write from now on."""
        if self._held:
            self._held = False
            self._flush()

    def write(self, data) -> None:
        if self.fd is None:
            return
        if self._pending or self._held:
            self._pending += data
        else:
            n = self._write(data)
            if n is None:
                return
            if n < len(data):
                self._pending += memoryview(data)[n:]
                self._wait()
        if len(self._pending) > HIGH:
            self.full = True

    def take(self) -> bytes:
        """What was not written, taken back (to be sent another way)."""
        data, self._pending = bytes(self._pending), bytearray()
        return data

    def when_drained(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once everything written so far is in the terminal (or it broke)."""
        if self.fd is None or (not self._pending and not self._held):
            fn()
        else:
            self._drained.append(fn)

    def close(self) -> None:
        if self.fd is not None:
            if self._waiting:
                self._loop.remove_writer(self.fd)
                self._waiting = False
            os.close(self.fd)
            self.fd = None
            self._pending = bytearray()
            self.full = False
            fns, self._drained = self._drained, []
            for fn in fns:
                fn()

    # --- internals ------------------------------------------------------------------

    def _write(self, data) -> Optional[int]:
        """Bytes the terminal took (0: full); None: it broke and is closed."""
        try:
            with memoryview(data) as view:
                return os.write(self.fd, view[:WRITE_MAX])
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            why = "hung up" if exc.errno == errno.EIO else (exc.strerror or str(exc))
            self.close()
            self._on_broken(why)
            return None

    def _wait(self) -> None:
        if not self._waiting and self.fd is not None:
            self._loop.add_writer(self.fd, self._flush)
            self._waiting = True

    def _flush(self) -> None:
        while self._pending and self.fd is not None:
            n = self._write(self._pending)
            if n is None:
                return
            if n == 0:
                self._wait()
                return
            del self._pending[:n]
            if self.full and len(self._pending) <= LOW:
                self.full = False
                self._on_room()  # may write more: it is appended, and written here
        if self.fd is None:
            return
        if self._waiting:
            self._loop.remove_writer(self.fd)
            self._waiting = False
        fns, self._drained = self._drained, []
        for fn in fns:
            fn()
