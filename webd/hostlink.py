"""clowder-web's side of the PTY host protocol: a list, and a read-only (or typing)
attach whose output is handed on; and clowder-control's status, for the agents.

Every request opens a connection of its own: the host's socket is held by systemd, so
a connection made while the host restarts waits in the backlog and is answered by the
new host, and nothing here has to notice a restart but an attach, which ends (the page
then attaches again by itself).
"""

from __future__ import annotations

import asyncio
from typing import Optional

import clowder_wire as protocol
from clowder_common import __version__

TIMEOUT = 5.0  # seconds for the host to greet and answer a list


class HostError(Exception):
    """The host refused (``code`` is its error code) or could not be reached."""

    def __init__(self, message: str, code: str = "host"):
        super().__init__(message)
        self.code = code


class Link:
    """One connection to the host, greeted."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: str) -> "Link":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path),
                                                    TIMEOUT)
            link = cls(reader, writer)
            link.send(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                     client=f"clowder-web {__version__}"))
            welcome = await asyncio.wait_for(link.read(), TIMEOUT)
        except asyncio.TimeoutError:
            raise HostError(f"the PTY host at {path} is not answering", "timeout") from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise HostError(f"cannot reach the PTY host at {path}: {exc}") from exc
        if not isinstance(welcome, protocol.Welcome):
            link.close()
            raise HostError(f"the PTY host answered Hello with {type(welcome).__name__}")
        return link

    def send(self, msg: protocol.Message) -> None:
        self.writer.write(protocol.encode(msg))

    async def read(self) -> protocol.Message:
        msg = await protocol.read_message(self.reader)
        if isinstance(msg, protocol.Error):
            raise HostError(msg.message, msg.code)
        return msg

    def close(self) -> None:
        self.writer.close()


async def list_sessions(path: str) -> list[dict]:
    """Every session the host shows root in `ps` (the caller filters by uid)."""
    link = await Link.open(path)
    try:
        out: list[dict] = []
        after: str | None = ""
        while after is not None:  # a long list comes in pages (SessionList.more)
            # peek: a browser never marks an end seen
            link.send(protocol.ListSessions(peek=True, after=after))
            reply = await asyncio.wait_for(link.read(), TIMEOUT)
            if not isinstance(reply, protocol.SessionList):
                raise HostError(f"the PTY host answered ListSessions with "
                                f"{type(reply).__name__}")
            out += reply.sessions
            after = protocol.next_page(reply, after)
        return out
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise HostError(f"the PTY host dropped the connection: {exc}") from exc
    except asyncio.TimeoutError:
        raise HostError("the PTY host did not answer ListSessions", "timeout") from None
    finally:
        link.close()


async def attach(path: str, sid: str, cols: int, rows: int, read_only: bool
                 ) -> tuple[Link, dict]:
    """An attach to session ``sid`` (its repaint, then live output, follows on the link)."""
    link = await Link.open(path)
    try:
        link.send(protocol.Attach(session=sid, cols=cols, rows=rows, read_only=read_only))
        reply = await asyncio.wait_for(link.read(), TIMEOUT)
    except BaseException:
        link.close()
        raise
    if not isinstance(reply, protocol.Attached):
        link.close()
        raise HostError(f"the PTY host answered Attach with {type(reply).__name__}")
    return link, reply.session


STATUS_TIMEOUT = 2.0  # seconds for clowder-control's status: the list is shown without it


async def agents(path: str) -> list[dict] | None:
    """Every agent clowder-control runs (the caller filters by uid); None when
    clowder-control is not there or slow: the page then shows sessions alone."""
    try:
        link = await asyncio.wait_for(Link.open(path), STATUS_TIMEOUT)
    except (HostError, asyncio.TimeoutError):
        return None
    try:
        link.send(protocol.GetStatus())
        reply = await asyncio.wait_for(link.read(), STATUS_TIMEOUT)
        return reply.agents if isinstance(reply, protocol.StatusReport) else None
    except (HostError, OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
            protocol.ProtocolError):
        return None
    finally:
        link.close()


def output_of(msg: protocol.Message) -> Optional[bytes]:
    """The bytes of an Output frame, None for anything else."""
    return msg.data if isinstance(msg, protocol.Output) else None
