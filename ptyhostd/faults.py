"""Fault injection for the acceptance tests: ``$CLOWDER_FAULT`` names the points that fail.

``CLOWDER_FAULT=adopt:1a2b3c4d,exec`` makes ``maybe_fail("adopt", "1a2b3c4d")`` and every
``maybe_fail("exec")`` raise.  The variable is read once at import; unset (always, in
production) a call is one falsy test, so the restart blackout does not pay for it.

Points: ``adopt`` (taking one session's parked fds back), ``ask`` (asking systemd how a
session's unit is, at start), ``check`` (preparing the hand-off check), ``screens``
(packing the screens for a hand-off), ``exec`` (the hand-off's exec).
"""

from __future__ import annotations

import errno
import os

ENV = "CLOWDER_FAULT"
_POINTS = frozenset(p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip())


class InjectedFault(OSError):
    """A failure asked for by $CLOWDER_FAULT (an OSError, as the real ones mostly are)."""


def maybe_fail(point: str, key: str = "") -> None:
    """Raise InjectedFault if ``point`` (or ``point:key``) is listed in $CLOWDER_FAULT."""
    if _POINTS and (point in _POINTS or f"{point}:{key}" in _POINTS):
        raise InjectedFault(errno.EIO, f"injected fault at {point}"
                            + (f" ({key})" if key else ""))
