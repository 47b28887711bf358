"""systemd's notify protocol and file-descriptor store: the host's only link to them.

What systemd 252 does with the store, measured (see docs/design.md): it keeps parked fds
across restart, ``kill -9`` and daemon-reload, hands them back in ``LISTEN_FDS`` after
the socket unit's fds, stores one object once whatever its name, and drops a stored fd
when it polls EPOLLHUP on it unless ``FDPOLL=0`` was given.  Closing our own copy never
closes the parked one: ending a session needs ``unpark`` too.
"""

from __future__ import annotations

import os
import re

from systemd import daemon

_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")


class FdStoreError(Exception):
    """systemd refused or could not be reached."""


def under_systemd() -> bool:
    """Whether a notify socket was given to us."""
    return bool(os.environ.get("NOTIFY_SOCKET"))


def notify(state: str, fds: list[int] | None = None) -> None:
    """Send ``state`` (and fds) to the service manager; a no-op outside systemd."""
    if not under_systemd():
        return
    ok = daemon.notify(state, fds=fds or [])
    if not ok:
        raise FdStoreError(f"sd_notify({state.splitlines()[0]!r}) was not delivered")


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
