"""4xx: the control plane (client -> clowder-control), answered as each docstring says.

clowder-control speaks the same framing on its own socket.
"""

from __future__ import annotations

from .frame import Message, register

__all__ = ["AgentUp", "AgentDown", "AgentRestart", "GetStatus", "AgentInfo", "StatusReport"]


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
