"""systemd's notify protocol and file-descriptor store: the host's only link to them.

What systemd 252 does with the store, measured (see docs/design.md): it keeps parked fds
across restart, ``kill -9`` and daemon-reload, hands them back in ``LISTEN_FDS`` after
the socket unit's fds, stores one object once whatever its name, and drops a stored fd
when it polls EPOLLHUP on it unless ``FDPOLL=0`` was given.  Closing our own copy never
closes the parked one: ending a session needs ``unpark`` too.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import socket

from systemd import daemon

_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")

# What the host keeps, counted in one place: whoever parks a new kind of fd changes these.
# In systemd's store: per session its pty master ``m.<id>`` and its backlog ring
# ``r.<id>``; an ended session keeps only its ring until it is forgotten; once,
# ``manifest.a``, ``manifest.b`` and the input record ``r.-inputseq`` (inputseq.py).
STORE_PER_SESSION = 2
STORE_PER_ENDED = 1
STORE_FIXED = 3
# Open in the host process: per session the master, the ring and the pidfd; during a
# spawn the pty's slave too; during a hand-off the screens memfd (it crosses the exec
# inherited, never through the store: if it is ever parked, count it in STORE_FIXED).
# The unit's numbers agree: FileDescriptorStoreMax=16384 holds 8,190 sessions, which
# hold 24,570 of the LimitNOFILE=65536 fds.
HOST_PER_SESSION = 3
HOST_SPAWNING = 4  # master, slave, ring, pidfd
HOST_HANDOFF = 1
# fds kept free for what is not a session: client connections, D-Bus, the journal.
HOST_SPARE = 16


# The errnos of a full fd table: ours (EMFILE) or the whole system's (ENFILE).
EXHAUSTED = (errno.EMFILE, errno.ENFILE)


class FdStoreError(Exception):
    """systemd refused or could not be reached."""


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
            raise FdStoreError(f"sd_notify({state.splitlines()[0]!r}) was not "
                               f"delivered: {exc}") from exc


def park(name: str, fd: int, poll: bool = True) -> None:
    """Store ``fd`` under ``name``.  ``poll=False`` stops systemd dropping it on hang-up."""
    if not _NAME.fullmatch(name):
        # systemd would silently store it as "stored" (measured): refuse loudly instead.
        raise FdStoreError(f"invalid FD store name {name!r}")
    notify(f"FDSTORE=1\nFDNAME={name}" + ("" if poll else "\nFDPOLL=0"), [fd])


def unpark(name: str) -> None:
    """Remove every stored fd named ``name``."""
    notify(f"FDSTOREREMOVE=1\nFDNAME={name}")


def inherited() -> dict[str, list[int]]:
    """The fds systemd handed us (listening sockets and the store), by name."""
    by_name: dict[str, list[int]] = {}
    for fd, name in daemon.listen_fds_with_names(unset_environment=True).items():
        os.set_inheritable(fd, False)
        by_name.setdefault(name, []).append(fd)
    return by_name


def store_slots(sessions: int, masters: int) -> int:
    """Store entries parked for ``sessions``, ``masters`` of which still hold their pty."""
    return STORE_FIXED + masters * STORE_PER_SESSION + (sessions - masters) * STORE_PER_ENDED


def store_full(ours: int, held: int, capacity: int) -> str:
    """Why a spawn cannot be parked, or "" if it can: ``ours`` entries parked by our
    count, ``held`` by systemd's (it also counts parks and removals not yet processed)."""
    used = max(ours, held)
    if used + STORE_PER_SESSION <= capacity:
        return ""
    text = (f"the PTY host's FD store is full: {used} of {capacity} slots used, a session "
            f"needs {STORE_PER_SESSION} (FileDescriptorStoreMax={capacity}); raise "
            f"FileDescriptorStoreMax= in a drop-in for clowder-ptyhost.service and run "
            f"systemctl daemon-reload, or remove ended sessions (clowderctl rm)")
    if ours > capacity:
        # Measured on 252: a daemon-reload that lowers the max below the count closes
        # parked fds at once; their sessions would not come back after a restart.
        text += (f"; systemd has already closed {ours - capacity} parked fds (the max was "
                 f"lowered below what was parked): some sessions will not survive a "
                 f"restart of the host")
    return text


def out_of_fds(what: str, daemon: str = "the PTY host",
               unit: str = "clowder-ptyhost.service") -> str:
    """The refusal when the daemon's process has no fds left (EMFILE/ENFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (f"{daemon} has no file descriptors left (LimitNOFILE={soft}) for {what}; "
            f"end some sessions or connections, or raise LimitNOFILE= in a drop-in for "
            f"{unit} and restart it")


def fds_short(sessions: int) -> bool:
    """Whether the host process lacks the fds a spawn takes, beyond its spare ones."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or sessions * HOST_PER_SESSION + 1024 < soft // 2:
        return False  # far from the limit: not worth listing thousands of fds
    # /proc/self/fd lists every open fd; its lowest free number would not tell a full
    # table from a fragmented one.
    return len(os.listdir("/proc/self/fd")) + HOST_SPAWNING + HOST_HANDOFF + HOST_SPARE > soft
