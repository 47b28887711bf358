"""Every file renamed into a directory, as inotify reports it (for tests).

A file written atomically (a temporary file, then rename) appears as one IN_MOVED_TO;
counting those counts the writes exactly, where sampling the directory would miss the
versions that came and went between two looks.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time

IN_MOVED_TO = 0x80
IN_Q_OVERFLOW = 0x4000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, NUL-padded

_libc = ctypes.CDLL(None, use_errno=True)


class Renames:
    """``with Renames(path) as r: r.collect(seconds)`` -> [(name, size), ...]."""

    def __init__(self, path: str):
        self.path = path
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if _libc.inotify_add_watch(self.fd, path.encode(), IN_MOVED_TO) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch {path}")

    def __enter__(self) -> "Renames":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)

    def collect(self, seconds: float) -> list[tuple[str, int]]:
        """The files renamed in over the next ``seconds``, each with its size just after
        (0 when it was already gone again)."""
        seen: list[tuple[str, int]] = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if not select.select([self.fd], [], [], left)[0]:
                continue
            data = os.read(self.fd, 64 * 1024)
            at = 0
            while at < len(data):
                _wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size:at + _EVENT.size + size].rstrip(b"\0").decode()
                at += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    raise AssertionError(f"inotify's queue overflowed watching {self.path}")
                try:
                    seen.append((name, os.stat(os.path.join(self.path, name)).st_size))
                except FileNotFoundError:
                    seen.append((name, 0))
        return seen
