"""A session's events from its output: busy and idle, bells, notifications.

The rule: a session turns busy when output arrives after QUIET seconds (or more) of
none, or its first output; idle once QUIET seconds pass without output.  The cost on the
byte path is a time read and a flag per chunk: one timer per session, armed when it
turns busy and re-armed at most once per QUIET while output goes on (never per byte).
Bells are coalesced to one per BELL_INTERVAL per session; notifications to at most
NOTIFY_BURST per second per session (the rest are dropped, and counted in the log).

The journal: each kind has its MESSAGE_ID (clowder_common/events.py), at info level, but
at most one line per kind per session per JOURNAL_INTERVAL (busy, idle, bell) or
NOTIFY_JOURNAL_INTERVAL (notifications); a line says how many it stands for.  The event
stream (eventbus.py) gets every event these rules let through.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from clowder_common import events

from .alerts import Alerts

if TYPE_CHECKING:
    import asyncio

    from .eventbus import EventBus
    from .session import Session

log = logging.getLogger("ptyhostd")

QUIET = 2.0  # seconds without output after which a session is idle
BELL_INTERVAL = 1.0  # at most one bell event per session per this many seconds
NOTIFY_BURST = 5  # notification events per session per second, at most
JOURNAL_INTERVAL = 10.0  # seconds between two journal lines of busy, idle or bell
NOTIFY_JOURNAL_INTERVAL = 1.0  # ... of a notification


class SessionEvents:
    """The event side of one session's output."""

    def __init__(self, session: "Session", bus: "EventBus", loop: "asyncio.AbstractEventLoop"):
        self.session = session
        self.bus = bus
        self.loop = loop
        self.alerts = Alerts()
        self.busy = False
        self.last = 0.0  # monotonic time of the last output
        self._timer = None
        self._bell_at = -BELL_INTERVAL
        self._notify_second = 0.0
        self._notify_count = 0
        self._journal: dict[str, list] = {}  # kind -> [last logged at, events since]

    def output(self, data: bytes) -> None:
        """A chunk came from the pty (the byte path: keep it cheap)."""
        now = time.monotonic()
        self.last = now
        if not self.busy:
            self._wake(now)
        alerts = self.alerts.feed(data)
        for kind, fields in alerts:
            if kind == "bell":
                if now - self._bell_at >= BELL_INTERVAL:
                    self._bell_at = now
                    self._emit("session-bell", "bell", now)
            else:
                if now - self._notify_second >= 1.0:
                    self._notify_second, self._notify_count = now, 0
                self._notify_count += 1
                if self._notify_count <= NOTIFY_BURST:
                    text = " - ".join(t for t in (fields["title"], fields["body"]) if t)
                    self._emit("session-notification", f"notification ({fields['source']}): "
                               f"{text}", now, NOTIFY_JOURNAL_INTERVAL, **fields)

    def started(self) -> None:
        """The session is running (its started event is out): output that came before
        (the program starts before its unit's start job is done) makes it busy now."""
        if self.last and not self.busy:
            self._wake(time.monotonic())

    def _wake(self, now: float) -> None:
        if self.session.state != "running":
            return  # not yet started: started() says busy after the started event
        self.busy = True
        self._emit("session-busy", "busy: output after quiet", now)
        self._timer = self.loop.call_later(max(0.0, self.last + QUIET - now), self._check)

    def _check(self) -> None:
        """The quiet timer: idle if nothing came for QUIET seconds, else wait the rest."""
        left = self.last + QUIET - time.monotonic()
        if left > 0:
            self._timer = self.loop.call_later(left, self._check)
            return
        self._timer = None
        self.busy = False
        self._emit("session-idle", f"idle: no output for {QUIET:g} s", time.monotonic())

    def close(self) -> None:
        """The session ended: no more idle to report."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _emit(self, kind: str, text: str, now: float, interval: float = JOURNAL_INTERVAL,
              **fields) -> None:
        s = self.session
        self.bus.publish(kind, s, **fields)
        entry = self._journal.setdefault(kind, [-interval, 0])
        entry[1] += 1
        if now - entry[0] < interval:
            return
        more = f" ({entry[1] - 1} more since the last line)" if entry[1] > 1 else ""
        entry[0], entry[1] = now, 0
        log.info("session %s: %s%s", s.id, text, more,
                 extra={"CLOWDER_SESSION": s.id, "CLOWDER_CAUSE": kind,
                        **events.fields(kind)})
