"""7xx: the VCS service, on a "vcs" stream of clowder-control.

Read-only views of the agent's git worktree; fixed git commands only, never a command
or option chosen by the client.
"""

from __future__ import annotations

from .frame import Message, register

__all__ = ["VcsStatus", "VcsDiff", "VcsLog", "VcsReport"]


@register
class VcsStatus(Message):
    """Branch and changed files. -> VcsReport(kind="status")."""

    KIND = 700
    agent: str


@register
class VcsDiff(Message):
    """The worktree's diff against the index (``staged``: the index against HEAD),
    optionally of one path. -> VcsReport(kind="diff") with the diff as data."""

    KIND = 701
    agent: str
    path: str = ""
    staged: bool = False


@register
class VcsLog(Message):
    """The last ``limit`` commits. -> VcsReport(kind="log")."""

    KIND = 702
    agent: str
    limit: int = 20


@register
class VcsReport(Message):
    """An answer of the VCS service: ``info`` (status: branch, upstream, ahead, behind),
    ``entries`` (status: dicts path, index, worktree; log: dicts commit, author, date,
    subject), ``data`` (diff text); ``truncated`` when a limit cut it."""

    KIND = 710
    kind: str
    info: dict = {}
    entries: list = []
    truncated: bool = False
    data: bytes = b""
