"""A daemon out of file descriptors: how to tell, and what to tell its clients."""

from __future__ import annotations

import errno
import resource

# The errnos of a full fd table: ours (EMFILE) or the whole system's (ENFILE).
EXHAUSTED = (errno.EMFILE, errno.ENFILE)


def out_of_fds(what: str, daemon: str = "the PTY host",
               unit: str = "clowder-ptyhost.service") -> str:
    """The refusal when the daemon's process has no fds left (EMFILE/ENFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (f"{daemon} has no file descriptors left (LimitNOFILE={soft}) for {what}; "
            f"end some sessions or connections, or raise LimitNOFILE= in a drop-in for "
            f"{unit} and restart it")
