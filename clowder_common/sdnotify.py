"""systemd's notify protocol (sd_notify) and the fds it hands a service at start.

Both daemons tell systemd READY=1, STOPPING=1 and more through notify(); the host also
parks fds with it (ptyhostd/fdstore.py).  Both protocols are a few lines over the
standard library (sd_notify(3), sd_listen_fds(3)): systemd-python's module was ~1-2 ms
of every start, which is a restart's blackout.
"""

from __future__ import annotations

import errno
import os
import socket

FIRST_FD = 3  # SD_LISTEN_FDS_START


class NotifyError(Exception):
    """systemd refused a notification or could not be reached."""


def under_systemd() -> bool:
    """Whether a notify socket was given to us."""
    return bool(os.environ.get("NOTIFY_SOCKET"))


# One datagram socket, connected to $NOTIFY_SOCKET once and kept: sd_notify opens a new
# one per message, which fails at EMFILE, and a host that is out of fds (a full table is
# exactly when it refuses clients) must still feed the watchdog and park what it has.
_notify_sock: socket.socket | None = None


def _notify_socket() -> socket.socket:
    global _notify_sock
    if _notify_sock is None:
        addr = os.environ["NOTIFY_SOCKET"]
        if addr.startswith("@"):
            addr = "\0" + addr[1:]  # an abstract socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            sock.connect(addr)
        except OSError:
            sock.close()
            raise
        _notify_sock = sock
    return _notify_sock


def notify(state: str, fds: list[int] | None = None) -> None:
    """Send ``state`` (and fds) to the service manager; a no-op outside systemd."""
    if not under_systemd():
        return
    global _notify_sock
    data = state.encode()
    for attempt in (1, 2):
        try:
            sock = _notify_socket()
            if fds:
                socket.send_fds(sock, [data], fds)
            else:
                sock.send(data)
            return
        except OSError as exc:
            stale = exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN,
                                  errno.EPIPE, errno.ECONNRESET)
            if stale and _notify_sock is not None and attempt == 1:
                # The manager re-created its socket: connect afresh, once.
                _notify_sock.close()
                _notify_sock = None
                continue
            raise NotifyError(f"sd_notify({state.splitlines()[0]!r}) was not "
                              f"delivered: {exc}") from exc


def inherited() -> dict[str, list[int]]:
    """The fds systemd handed us (listening sockets and the store), by name, as
    sd_listen_fds_with_names(3) reads them: $LISTEN_FDS fds from fd 3 on, if
    $LISTEN_PID is ours, named by $LISTEN_FDNAMES ("unknown" without it).  The three
    variables are unset (nothing we start may take them for its own), and the fds are
    not inherited by what we start."""
    env = os.environ
    pid, count, names = (env.pop(v, None) for v in ("LISTEN_PID", "LISTEN_FDS",
                                                    "LISTEN_FDNAMES"))
    if pid is None or count is None or not pid.isdigit() or int(pid) != os.getpid():
        return {}
    if not count.isdigit():
        raise ValueError(f"LISTEN_FDS is not a count: {count!r}")
    n = int(count)
    labels = names.split(":") if names is not None else ["unknown"] * n
    if len(labels) != n:
        raise ValueError(f"LISTEN_FDNAMES names {len(labels)} fds, LISTEN_FDS says {n}")
    by_name: dict[str, list[int]] = {}
    for fd, name in enumerate(labels, FIRST_FD):
        os.set_inheritable(fd, False)
        by_name.setdefault(name, []).append(fd)
    return by_name
