"""clowder-control's side of the PTY host protocol (asyncio).

Two kinds of connection: one ``HostConnection`` for requests (the host answers them in
order), and one ``SessionWatch`` per watched session, a read-only attach that feeds
output to a callback and reports the session's end.  Both survive host restarts: a
dropped connection is re-opened (the host socket is held by systemd, so connecting
never fails while the host restarts; it waits in the backlog).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional

from ptyhostd import __version__, protocol

log = logging.getLogger("clowder-control")


class HostError(Exception):
    """The host refused a request (``code`` is its error code) or cannot be reached."""

    def __init__(self, message: str, code: str = "host"):
        super().__init__(message)
        self.code = code


async def open_host(path: str, timeout: float
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the host that has passed the handshake."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        writer.write(protocol.encode(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                                    client=f"clowder-control {__version__}")))
        welcome = await asyncio.wait_for(_read(reader), timeout)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
        raise HostError(f"cannot reach the PTY host at {path}: {exc!r}") from exc
    if not isinstance(welcome, protocol.Welcome):
        writer.close()
        raise HostError(f"the PTY host answered Hello with {type(welcome).__name__}")
    return reader, writer


async def _read(reader: asyncio.StreamReader) -> protocol.Message:
    msg = await protocol.read_message(reader)
    if isinstance(msg, protocol.Error) and msg.fatal:
        raise HostError(f"the PTY host closed the connection: {msg.message}", msg.code)
    return msg


class HostConnection:
    """Requests to the host, one at a time, re-connecting after a host restart."""

    def __init__(self, path: str, timeout: float = 30.0):
        self.path = path
        self.timeout = timeout
        self._conn: Optional[tuple] = None
        self._lock = asyncio.Lock()

    async def request(self, msg: protocol.Message, expect: type) -> protocol.Message:
        """Send ``msg``; the answer of type ``expect``, or HostError."""
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = await open_host(self.path, self.timeout)
                    reader, writer = self._conn
                    writer.write(protocol.encode(msg))
                    reply = await asyncio.wait_for(_read(reader), self.timeout)
                    break
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                    self._drop()
                    # A request that may have been done must not be done twice.
                    if attempt == 2 or isinstance(msg, protocol.Spawn):
                        raise HostError(f"the PTY host connection failed during "
                                        f"{type(msg).__name__}: {exc!r}") from exc
        if isinstance(reply, protocol.Error):
            raise HostError(reply.message, reply.code)
        if not isinstance(reply, expect):
            raise HostError(f"unexpected {type(reply).__name__} for {type(msg).__name__}")
        return reply

    async def sessions(self) -> dict[str, dict]:
        reply = await self.request(protocol.ListSessions(), protocol.SessionList)
        return {s["id"]: s for s in reply.sessions}

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def close(self) -> None:
        self._drop()


class SessionWatch:
    """A read-only attach to one session that outlives host restarts."""

    def __init__(self, path: str, session: str, on_output: Callable[[bytes], None],
                 on_exit: Callable[[protocol.Exited], Awaitable[None]], replay: int = 4096):
        self.path = path
        self.session = session
        self.on_output = on_output
        self.on_exit = on_exit
        self.replay = replay
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        delay = 0.05
        while True:
            try:
                reader, writer = await open_host(self.path, 30.0)
            except HostError as exc:
                log.warning("watching %s: %s", self.session, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            try:
                writer.write(protocol.encode(protocol.Attach(
                    session=self.session, read_only=True, replay=self.replay)))
                while True:
                    msg = await _read(reader)
                    if isinstance(msg, protocol.Output):
                        self.on_output(msg.data)
                    elif isinstance(msg, protocol.Exited):
                        await self.on_exit(msg)
                        return
                    elif isinstance(msg, protocol.Error):
                        if msg.code == "no-session":
                            await self.on_exit(protocol.Exited(session=self.session,
                                                               status="lost"))
                            return
                        log.warning("watching %s: %s", self.session, msg.message)
            except (OSError, asyncio.IncompleteReadError, HostError):
                # The host restarted: attach again, replaying nothing already seen.
                self.replay = 0
                delay = 0.05
            finally:
                writer.close()

    def cancel(self) -> None:
        self.task.cancel()
