"""A file-descriptor holder that closes exactly once.

After ``close()`` the holder's ``fd`` is -1, so a reused integer can never be touched
by mistake through a stale holder.
"""

from __future__ import annotations

import os


class ClosedFdError(OSError):
    """The holder was used after it was closed."""


class Fd:
    """Owns one file descriptor."""

    __slots__ = ("fd", "what")

    def __init__(self, fd: int, what: str):
        self.fd = fd
        self.what = what

    def fileno(self) -> int:
        if self.fd < 0:
            raise ClosedFdError(f"{self.what}: already closed")
        return self.fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        """Close the fd if still open; a second call does nothing."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __repr__(self) -> str:
        return f"Fd({self.fd}, {self.what!r})"
