"""systemd's file-descriptor store: the host's only link to it (the notify protocol
under it is clowder_common/sdnotify.py).

What systemd 252 does with the store, measured (see docs/design.md): it keeps parked fds
across restart, ``kill -9`` and daemon-reload, hands them back in ``LISTEN_FDS`` after
the socket unit's fds, stores one object once whatever its name, and drops a stored fd
when it polls EPOLLHUP on it unless ``FDPOLL=0`` was given.  Closing our own copy never
closes the parked one: ending a session needs ``unpark`` too.
"""

from __future__ import annotations

import os
import re
import resource

from clowder_common.sdnotify import NotifyError, notify

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


# The standby's copy of the store (standby.Standby, while one is ready): told of each
# change before systemd is, so a crash leaves it one change ahead at most, never behind.
follower = None


class FdStoreError(NotifyError):
    """A name systemd would not store as given."""


def park(name: str, fd: int, poll: bool = True) -> None:
    """Store ``fd`` under ``name``.  ``poll=False`` stops systemd dropping it on hang-up."""
    if not _NAME.fullmatch(name):
        # systemd would silently store it as "stored" (measured): refuse loudly instead.
        raise FdStoreError(f"invalid FD store name {name!r}")
    if follower is not None:
        follower.parked(name, fd, poll)
    notify_park(name, fd, poll)


def unpark(name: str) -> None:
    """Remove every stored fd named ``name``."""
    if follower is not None:
        follower.unparked(name)
    notify_unpark(name)


def notify_park(name: str, fd: int, poll: bool = True) -> None:
    """systemd's part of ``park`` alone (a standby's takeover does the last one again)."""
    notify(f"FDSTORE=1\nFDNAME={name}" + ("" if poll else "\nFDPOLL=0"), [fd])


def notify_unpark(name: str) -> None:
    """systemd's part of ``unpark`` alone."""
    notify(f"FDSTOREREMOVE=1\nFDNAME={name}")


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


def fds_short(sessions: int) -> bool:
    """Whether the host process lacks the fds a spawn takes, beyond its spare ones."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or sessions * HOST_PER_SESSION + 1024 < soft // 2:
        return False  # far from the limit: not worth listing thousands of fds
    # /proc/self/fd lists every open fd; its lowest free number would not tell a full
    # table from a fragmented one.
    return len(os.listdir("/proc/self/fd")) + HOST_SPAWNING + HOST_HANDOFF + HOST_SPARE > soft
