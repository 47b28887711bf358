"""What the client asks of the OS that Linux alone spells its own way.

clowderctl runs on macOS too (`clowderctl --host box attach` from a laptop); the
daemons run on Linux only.  So the client uses no Linux-only call directly: each one
it would use is here, written with what every Unix has, or behind a test for the
feature with a portable fallback (never a test of the platform's name).  On Linux
each gives what the Linux call gave.

tests/test_portable.py walks the client's modules for Linux-only names (os.pipe2,
socket.SOCK_CLOEXEC, os.memfd_create, select.epoll, /proc, ...) and fails on a new
one; `make test CLOWDER_TEST_NO_LINUX_ONLY=1` runs every clowderctl of the tests with
those names deleted (tests/portable/).
"""

from __future__ import annotations

import os

# selectors is imported by the one function that needs it: every clowderctl command
# imports this module (through transport.py), and start-up is counted (docs/bench.md 7).


def nonblocking_pipe() -> tuple[int, int]:
    """A pipe whose ends are non-blocking and close-on-exec: what
    ``os.pipe2(O_NONBLOCK | O_CLOEXEC)`` gives (os.pipe's ends are non-inheritable
    already, PEP 446; only the blocking mode is ours to set)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def terminal_selector() -> "selectors.BaseSelector":
    """A selector that may wait on a terminal: epoll where there is one (Linux), else
    select.  Not kqueue or poll: on macOS neither works on a tty device (tmux turns both
    off there for that reason), and select works on every fd on every Unix; attach
    waits on three fds, far below select's limit."""
    import selectors
    return getattr(selectors, "EpollSelector", selectors.SelectSelector)()


def scratch_fd(name: str) -> int:
    """A close-on-exec fd of an anonymous file, to collect a child's output in: a memfd
    where the OS has them (Linux: nothing on disk), else a temporary file that is
    unlinked at once."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        return memfd_create(name)  # flags default to MFD_CLOEXEC
    import tempfile  # ~5 ms, and only for ssh's stderr: not at every start
    fd, path = tempfile.mkstemp(prefix=f"{name}-")  # non-inheritable (PEP 446)
    os.unlink(path)
    return fd
