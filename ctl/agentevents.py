"""The agents' events from clowder-control (WatchAgentEvents), as dicts.

``follow`` is what `clowderctl wait --idle/--attention` reads, and what `clowderctl
events` can merge with the PTY host's session events: each event a dict with ``kind``
(state, busy, idle, attention, agent-spawned, agent-restarted, agent-ended, lost;
controld/agentevents.py), ``agent``, ``time`` (seconds since the epoch) and the kind's
``fields``.  The first events are one ``state`` per agent (as it is now).
"""

from __future__ import annotations

import time
from typing import Iterator

import clowder_wire as protocol

from .client import Client, TimedOut, default_control_socket


def as_dict(msg: protocol.AgentEvent) -> dict:
    return {"kind": msg.kind, "agent": msg.agent, "time": msg.time / 1000,
            "fields": dict(msg.fields)}


def follow(opts, agent: str | None = None, until: float | None = None) -> Iterator[dict]:
    """The events of ``agent`` (None: every agent the caller may see) until the caller
    stops iterating; ``opts``: parsed clowderctl options (control_socket); ``until``: a
    time.monotonic() after which TimedOut is raised.  Raises ctl.client's errors
    (RequestFailed: refused, e.g. not the caller's agent)."""
    path = getattr(opts, "control_socket", None) or default_control_socket()
    with Client(path, peer="clowder-control") as c:
        c.request(protocol.WatchAgentEvents(agent=agent), protocol.Ok)
        while True:
            if until is not None:
                left = until - time.monotonic()
                if left <= 0 and not c.pending:
                    raise TimedOut("the time to wait ran out")
                c.sock.settimeout(max(left, 0.001))
            msg = c.recv()
            if isinstance(msg, protocol.AgentEvent):
                yield as_dict(msg)
