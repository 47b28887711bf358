"""The peer of a connection: whether it is this host's clowder-control, from the kernel.

Only clowder-control may start sessions that it will later adopt as agents (names
``agent:...``).  What a client says about itself proves nothing, so the host asks the
kernel: the peer's pid (``SO_PEERCRED``) -> ``/proc/PID/cgroup`` -> is that the cgroup of
``clowder-control.service`` beside this host's own unit (``/system.slice/...`` for the
system units, ``.../user@UID.service/app.slice/...`` for a user manager's)?

A pid alone can be reused: a peer that connects and exits could leave its number to a
process of clowder-control's.  Where the kernel has ``SO_PEERPIDFD`` (Linux 6.5) the
host holds a pidfd of the very process that connected while it reads the cgroup, and
believes the reading only if that process is still alive afterwards (a pid is not
reused while its process exists, zombie included).  On an older kernel the cgroup is
read once, at accept; the window left is a peer exiting, and its pid being reused by a
process of clowder-control.service, between its connect() and the host's accept.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
from typing import Optional

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python 3.11 lacks the name
CONTROL_UNIT = "clowder-control.service"
HOST_UNIT = "clowder-ptyhost.service"


def cgroup_of(pid: str | int) -> Optional[str]:
    """The cgroup v2 path of ``pid`` ("self" too), or None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def control_cgroup() -> Optional[str]:
    """The cgroup clowder-control runs in beside this host, or None when this host is not
    itself clowder-ptyhost.service (then no peer is clowder-control)."""
    own = cgroup_of("self")
    if not own or os.path.basename(own) != HOST_UNIT:
        return None
    return os.path.join(os.path.dirname(own), CONTROL_UNIT)


def is_control(sock: socket.socket, pid: int, expected: Optional[str]) -> bool:
    """Whether the process that connected ``sock`` (pid ``pid``) runs in ``expected``."""
    if not expected or pid <= 0:
        return False
    try:
        pidfd = _peer_pidfd(sock)
    except OSError:
        return False  # e.g. out of fds: not believed without its pidfd (the host is short)
    try:
        if cgroup_of(pid) != expected:
            return False
        return pidfd is None or _alive(pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _kernel_has_peer_pidfd() -> bool:
    """Asked once, of a socket pair: a peer that is gone also fails (EINVAL, ESRCH),
    and must then not be taken for an old kernel."""
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        os.close(a.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD))
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOPROTOOPT, errno.EINVAL):
            return False
        raise
    finally:
        a.close()
        b.close()


_HAS_PEER_PIDFD: Optional[bool] = None


def _peer_pidfd(sock: socket.socket) -> Optional[int]:
    """A pidfd of the peer, None on a kernel without SO_PEERPIDFD; raises OSError else
    (out of fds, or the peer is gone)."""
    global _HAS_PEER_PIDFD
    if _HAS_PEER_PIDFD is None:
        _HAS_PEER_PIDFD = _kernel_has_peer_pidfd()
    if not _HAS_PEER_PIDFD:
        return None
    return sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except PermissionError:
        return True  # it exists; a user manager's host may not signal a root peer
    except ProcessLookupError:
        return False
    return True
