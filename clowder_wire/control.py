"""4xx: the control plane (client -> clowder-control), answered as each docstring says.

clowder-control speaks the same framing on its own socket.
"""

from __future__ import annotations

from .frame import Message, register

__all__ = ["AgentUp", "AgentDown", "AgentRestart", "GetStatus", "AgentInfo", "StatusReport",
           "MAX_LOG_LINES", "GetLogs", "LogEntries", "WatchAgentEvents", "AgentEvent"]

# The most journal entries one LogEntries carries (a client pages with ``after``).
MAX_LOG_LINES = 1000


@register
class AgentUp(Message):
    """Start an agent (and its shells) unless running. -> AgentInfo."""

    KIND = 400
    agent: str


@register
class AgentDown(Message):
    """Stop an agent and its shells, and keep it down. -> Ok."""

    KIND = 401
    agent: str


@register
class AgentRestart(Message):
    """Stop then start an agent with its normal command; its companion shells too
    only with ``shells`` (else they are left running). -> AgentInfo."""

    KIND = 402
    agent: str
    shells: bool = False


@register
class GetStatus(Message):
    """Everything the control daemon knows. -> StatusReport."""

    KIND = 403


@register
class AgentInfo(Message):
    """clowder-control -> client: one agent, as in StatusReport.agents."""

    KIND = 410
    agent: dict


@register
class StatusReport(Message):
    """clowder-control -> client: agents, plain sessions (``sessions``: no agent's),
    sessions named like an agent's that are not one (``unclaimed``) and any problems."""

    KIND = 411
    agents: list
    unclaimed: list = []
    sessions: list = []
    problems: list = []
    host: dict = {}
    # Sessions left out of ``sessions`` and ``unclaimed`` to keep the report within a
    # frame (clowder-control lists at most 512 KiB of them; `ps` lists every one).
    omitted: int = 0


@register
class GetLogs(Message):
    """An agent's lifecycle events from the journal, for a user who may drive it (a
    member cannot read the system journal). The newest ``lines`` (at most
    MAX_LOG_LINES) logged at or after ``since`` (seconds since the epoch), or the
    first ``lines`` after the journal cursor ``after``. -> LogEntries."""

    KIND = 404
    agent: str
    lines: int = 200
    since: int | None = None
    after: str = ""


@register
class LogEntries(Message):
    """clowder-control -> client: journal entries (dicts of journalctl -o json's field
    names, only clowder-control's own fields), oldest first; ``cursor`` is the last
    one's (or ``after`` again when there are none), to ask for what follows."""

    KIND = 412
    entries: list
    cursor: str = ""


@register
class WatchAgentEvents(Message):
    """Follow the agents' events (``agent``'s only, if given; else every agent the
    client may see, as status shows them). -> Ok, then AgentEvent frames until the
    client closes: first a ``state`` event per agent, then the events as they happen
    (controld/agentevents.py lists the kinds; ``lost`` says how many were dropped for
    a client that did not read them)."""

    KIND = 405
    agent: str | None = None


@register
class AgentEvent(Message):
    """clowder-control -> client: one event of WatchAgentEvents: its ``kind``, the
    ``agent``, ``time`` (milliseconds since the epoch) and the kind's ``fields``."""

    KIND = 413
    kind: str
    agent: str
    time: int  # milliseconds since the epoch
    fields: dict = {}
