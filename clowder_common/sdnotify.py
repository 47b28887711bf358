"""systemd's notify protocol (sd_notify) and the fds it hands a service at start.

Both daemons tell systemd READY=1, STOPPING=1 and more through notify(); the host also
parks fds with it (ptyhostd/fdstore.py).
"""

from __future__ import annotations

import errno
import os
import socket

from systemd import daemon


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
    """The fds systemd handed us (listening sockets and the store), by name."""
    by_name: dict[str, list[int]] = {}
    for fd, name in daemon.listen_fds_with_names(unset_environment=True).items():
        os.set_inheritable(fd, False)
        by_name.setdefault(name, []).append(fd)
    return by_name
