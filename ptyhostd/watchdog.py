"""systemd's watchdog, fed from the host's event loop.

The ping is a timer on the asyncio loop, so it stops when the loop stops turning: a
host that is frozen (SIGSTOP) or wedged (a callback that never returns) misses its
pings, and systemd replaces it as it replaces a crashed one (``Restart=always``),
adopting every session from the FD store.  What systemd 252 does then, measured, and
why the unit's settings are what they are: docs/design.md, "The watchdog".

``$WATCHDOG_USEC``/``$WATCHDOG_PID`` are read, never unset: they must survive the
hand-off's ``execve`` (same PID, same watchdog), and a child that inherits them (the
hand-off's pre-check) sees another PID in ``$WATCHDOG_PID`` and never pings.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Callable

from clowder_common import sdnotify

log = logging.getLogger("ptyhostd")

# Pings per watchdog period: the loop may then be blocked for 3/4 of WatchdogSec
# before systemd acts.  A ping is one datagram; four per period cost nothing.
PINGS_PER_PERIOD = 4
# Fault injection for tests: with this set, SIGUSR2 blocks the event loop for good.
WEDGE_ENV = "CLOWDER_FAULT_WEDGE"


class Watchdog:
    """Pings systemd every ``period / PINGS_PER_PERIOD`` s while the loop turns."""

    def __init__(self, period: float):
        self.period = period
        self.interval = period / PINGS_PER_PERIOD
        self._handle: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._failing = False
        # Told at each ping too: the standby's sign that the loop runs (standby.py).
        self.also: Callable[[], None] | None = None

    @classmethod
    def from_env(cls) -> "Watchdog | None":
        """The watchdog systemd set for this process, or None (not enabled, not ours)."""
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if not usec.isdigit() or int(usec) == 0 or not sdnotify.under_systemd():
            return None
        if pid and (not pid.isdigit() or int(pid) != os.getpid()):
            return None  # inherited from the process systemd watches: not ours to feed
        return cls(int(usec) / 1e6)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Ping now, then from the loop until stopped."""
        self._loop = loop
        self._tick()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        now = time.monotonic()
        if self._last and now - self._last > 2 * self.interval:
            # Still in time (or we would be dead), but the loop was held up: say by how
            # much, so a WatchdogSec that is too tight shows before it trips.
            log.warning("event loop blocked for %.1f s (watchdog %.0f s)",
                        now - self._last - self.interval, self.period,
                        extra={"CLOWDER_CAUSE": "watchdog-late"})
        self._last = now
        self.ping()
        if self.also is not None:
            self.also()
        self._handle = self._loop.call_later(self.interval, self._tick)

    def ping(self) -> None:
        try:
            sdnotify.notify("WATCHDOG=1")
            self._failing = False
        except (sdnotify.NotifyError, OSError) as exc:
            if not self._failing:  # once per outage, not four times a period
                log.error("watchdog ping not delivered: %s", exc,
                          extra={"CLOWDER_CAUSE": "watchdog-ping-failed"})
            self._failing = True


def install_wedge_fault(loop: asyncio.AbstractEventLoop) -> None:
    """If ``$CLOWDER_FAULT_WEDGE`` is set, SIGUSR2 blocks the loop forever (tests only)."""
    if not os.environ.get(WEDGE_ENV):
        return

    def wedge() -> None:
        log.warning("fault injection: blocking the event loop for good",
                    extra={"CLOWDER_CAUSE": "fault-wedge"})
        while True:
            time.sleep(3600)
    loop.add_signal_handler(signal.SIGUSR2, wedge)
