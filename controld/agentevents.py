"""The agents' event stream: what WatchAgentEvents subscribers are sent.

The supervisor publishes each event once (``AgentEvents.publish``); every subscriber
whose filter takes it gets it in its own queue, and a writer task per subscriber sends
the queue on its connection.  A subscriber that does not read never makes us hold more
than QUEUE_MAX events (plus what its connection's write buffer holds, EVENTS_HIGH_WATER
of controld/server.py): past that, events are dropped and counted, and once the queue has
been sent the subscriber is sent one ``lost`` event saying how many it missed (then
events are queued again).
Publishing never waits on a subscriber.

Kinds: ``state`` (one per agent the subscriber may see, first, as it is now), ``busy``,
``idle``, ``attention``, ``agent-spawned``, ``agent-restarted``, ``agent-ended`` and
``lost``.  Each event is a dict: kind, agent, time (ms since the epoch), fields.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

QUEUE_MAX = 128  # events one subscriber may have waiting (each well under 1 KiB)
MAX_PER_UID = 16  # subscribers of one uid at once; one more is refused
MAX_SUBSCRIBERS = 128  # at once, over all members' connections (root's are not counted)
KINDS = ("state", "busy", "idle", "attention", "agent-spawned", "agent-restarted",
         "agent-ended", "lost")


def make(kind: str, agent: str, **fields) -> dict:
    """An event; ``time`` in milliseconds since the epoch, as AgentEvent carries it."""
    return {"kind": kind, "agent": agent, "time": int(time.time() * 1000), "fields": fields}


class Subscriber:
    """One subscriber's queue: ``wants(agent)`` says which agents' events it takes."""

    def __init__(self, wants: Callable[[str], bool], uid: int):
        self.wants = wants
        self.uid = uid
        self.queue: deque = deque()
        self.lost = 0
        self.privileged = False
        self.ready = asyncio.Event()

    def put(self, event: dict) -> None:
        # Once one is dropped, all are until the queue has been sent and the gap said,
        # so that the ``lost`` event stands exactly where the events are missing.
        if self.lost or len(self.queue) >= QUEUE_MAX:
            self.lost += 1
            return
        self.queue.append(event)
        self.ready.set()

    async def get(self) -> dict:
        """The next event; after the queue, a ``lost`` one if events were dropped."""
        while True:
            if self.queue:
                return self.queue.popleft()
            if self.lost:
                lost, self.lost = self.lost, 0
                return make("lost", "", lost=lost)
            self.ready.clear()
            await self.ready.wait()


class AgentEvents:
    """The subscribers of one daemon."""

    def __init__(self):
        self.subscribers: set[Subscriber] = set()

    def subscribe(self, wants: Callable[[str], bool], uid: int,
                  privileged: bool) -> str | Subscriber:
        """A new subscriber of ``uid``, or why not (a limit)."""
        if sum(s.uid == uid for s in self.subscribers) >= MAX_PER_UID:
            return f"uid {uid} already follows agents' events {MAX_PER_UID} times"
        if not privileged and \
                sum(not s.privileged for s in self.subscribers) >= MAX_SUBSCRIBERS:
            return f"{MAX_SUBSCRIBERS} clients already follow agents' events"
        sub = Subscriber(wants, uid)
        sub.privileged = privileged
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def publish(self, event: dict) -> None:
        for sub in self.subscribers:
            if sub.wants(event["agent"]):
                sub.put(event)
