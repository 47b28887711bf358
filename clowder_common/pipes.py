"""Self-pipes that signal handlers write to (``signal.set_wakeup_fd``)."""

from __future__ import annotations

import os


def drain(fd: int) -> None:
    """Empty a non-blocking pipe: the wake-up has been seen, its bytes are not needed."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
