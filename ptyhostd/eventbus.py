"""The event bus: the host's events, kept a little and handed to the clients watching.

Each event is a dict (clowder_wire.host.EVENT_KINDS) encoded once into its Event frame;
the frame is what the recent buffer and every watcher's queue hold, shared.  Who sees an
event is the rule of ListSessions: a session's events go to its owner's uid and root,
the host's own (``uid`` None) to everyone.

Memory: RECENT events in all, and per watcher a queue of at most QUEUE_EVENTS events or
QUEUE_BYTES of frames; past either the oldest are dropped and counted, and the watcher is
sent one ``events-lost`` event (with the count) before the rest when it reads again.  The
connection's own send buffer is capped at WATCH_HIGH_WATER (connection.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Optional

import clowder_wire as protocol

RECENT = 256  # events kept for a WatchEvents without follow, or a reconnecting watcher
QUEUE_EVENTS = 1000  # a watcher's unsent events, at most
QUEUE_BYTES = 256 << 10  # ... and their frames' bytes
# A following connection's send buffer (asyncio's limits; the kernel's socket buffer,
# ~200 KiB, comes first): past it, events wait in the queue as shared frames.
WATCH_HIGH_WATER = 4 << 10
WATCH_LOW_WATER = 1 << 10


class Watcher:
    """One client's subscription: its uid, the session it asked about (an id, or None
    for all), and the frames waiting for it."""

    def __init__(self, uid: int, session: Optional[str] = None):
        self.uid = uid
        self.session = session
        self.queue: deque = deque()
        self.queued_bytes = 0
        self.lost = 0
        self.wake = asyncio.Event()

    def sees(self, event: dict) -> bool:
        uid, sid = event.get("uid"), event.get("session")
        if sid is not None and self.session is not None and sid != self.session:
            return False
        return uid is None or self.uid == 0 or uid == self.uid

    def offer(self, frame: bytes) -> None:
        self.queue.append(frame)
        self.queued_bytes += len(frame)
        while len(self.queue) > QUEUE_EVENTS or self.queued_bytes > QUEUE_BYTES:
            self.queued_bytes -= len(self.queue.popleft())
            self.lost += 1
        self.wake.set()

    def take(self) -> Optional[bytes]:
        """The next frame to send (an ``events-lost`` first if any were dropped), or None."""
        if self.lost:
            lost, self.lost = self.lost, 0
            return protocol.encode(protocol.Event(event={
                "kind": "events-lost", "time": time.time(), "session": None, "name": None,
                "uid": None, "count": lost}))
        if not self.queue:
            return None
        frame = self.queue.popleft()
        self.queued_bytes -= len(frame)
        return frame


class EventBus:
    """The recent events and the watchers of one host."""

    def __init__(self):
        self.recent: deque = deque(maxlen=RECENT)  # (event, frame)
        self.watchers: set[Watcher] = set()

    def publish(self, kind: str, session=None, **fields) -> dict:
        """Record an event of ``kind``, about ``session`` (a Session, or None: the host's
        own), and offer it to every watcher that may see it."""
        event = {"kind": kind, "time": time.time(),
                 "session": session.id if session is not None else None,
                 "name": session.name if session is not None else None,
                 "uid": session.uid if session is not None else None, **fields}
        frame = protocol.encode(protocol.Event(event=event))
        self.recent.append((event, frame))
        for w in self.watchers:
            if w.sees(event):
                w.offer(frame)
        return event

    def since(self, watcher: Watcher, since: Optional[float]) -> list[bytes]:
        """The frames of the recent events ``watcher`` may see, newer than ``since``."""
        return [frame for event, frame in self.recent
                if (since is None or event["time"] > since) and watcher.sees(event)]
