"""6xx: the file service, on a "file" stream of clowder-control.

Every path is relative to the agent's working directory and may not leave it (no "..",
no absolute paths, no symlink out).
"""

from __future__ import annotations

from .frame import MAX_DATA, Message, register

__all__ = ["FileList", "FileRead", "FileWrite", "FileWatch", "FileUnwatch", "FileListing",
           "FileData", "FileEvents"]


@register
class FileList(Message):
    """List a directory. -> FileListing."""

    KIND = 600
    agent: str
    path: str = "."


@register
class FileRead(Message):
    """Read up to ``length`` bytes of a file from ``offset``. -> FileData."""

    KIND = 601
    agent: str
    path: str
    offset: int = 0
    length: int = MAX_DATA


@register
class FileWrite(Message):
    """Replace a file's contents with ``data`` (atomically), creating it if ``create``. -> Ok."""

    KIND = 602
    agent: str
    path: str
    create: bool = True
    data: bytes = b""


@register
class FileWatch(Message):
    """Watch a directory tree. -> Ok, then FileEvents (coalesced) until FileUnwatch."""

    KIND = 603
    agent: str
    path: str = "."


@register
class FileUnwatch(Message):
    """Stop the watch of this stream. -> Ok."""

    KIND = 604


@register
class FileListing(Message):
    """Entries of a directory: dicts with name, type ("file", "dir", "link", "other"),
    size and mtime; ``truncated`` when there were more than one listing carries."""

    KIND = 610
    path: str
    entries: list
    truncated: bool = False


@register
class FileData(Message):
    """Bytes of a file: ``size`` is the file's whole size, ``offset`` where data starts."""

    KIND = 611
    path: str
    size: int
    offset: int = 0
    data: bytes = b""


@register
class FileEvents(Message):
    """What changed under a watch since the last FileEvents: dicts with path (relative
    to the agent's working directory) and kind ("created", "modified", "deleted");
    ``overflow`` means events were lost and the client should list again."""

    KIND = 612
    events: list
    overflow: bool = False
