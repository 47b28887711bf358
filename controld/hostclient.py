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

import clowder_wire as protocol
from clowder_common import __version__

log = logging.getLogger("clowder-control")


class HostError(Exception):
    """The host refused a request (``code`` is its error code) or cannot be reached."""

    def __init__(self, message: str, code: str = "host"):
        super().__init__(message)
        self.code = code


async def open_host(path: str, timeout: float
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the host that has passed the handshake, within ``timeout`` seconds
    in all (the connect and the greeting share it: a caller's own deadline holds)."""
    end = asyncio.get_running_loop().time() + timeout
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        writer.write(protocol.encode(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                                    client=f"clowder-control {__version__}")))
        welcome = await asyncio.wait_for(_read(reader),
                                         end - asyncio.get_running_loop().time())
    except asyncio.TimeoutError:
        raise HostError(f"the PTY host at {path} is not answering (no greeting within "
                        f"{timeout:g} s)", "host-not-answering") from None
    except (OSError, asyncio.IncompleteReadError) as exc:
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


# Requests the host answers at once (a list, a spawn, a remove) get REQUEST_TIMEOUT, the
# wait for the shared connection included, so a frozen host holds nothing up for longer;
# status and the user's requests ask with shorter deadlines of their own.
REQUEST_TIMEOUT = 5.0
HELLO_TIMEOUT = 3.0  # a connection of its own (ending a session): greeted within this
# up/down/restart first ask the host for its list with this deadline: a host that is
# restarting answers within it (seen: under 2 s), a frozen one fails the request early.
PROBE_TIMEOUT = 2.0
# Ending a session: the host's escalation (ptyhostd.host.Host.ESCALATION, 8 s) and room.
END_TIMEOUT = 8.0 + 7.0


class HostConnection:
    """Requests to the host, one at a time, re-connecting after a host restart.

    Only short requests use this shared connection; a long wait (ending a session) gets
    a connection of its own (``end_session``) so it never holds the others up.
    """

    def __init__(self, path: str, timeout: float = REQUEST_TIMEOUT):
        self.path = path
        self.timeout = timeout
        self._conn: Optional[tuple] = None
        self._lock = asyncio.Lock()
        self.unanswered: Optional[str] = None  # why the host is taken as not answering

    async def request(self, msg: protocol.Message, expect: type,
                      timeout: Optional[float] = None) -> protocol.Message:
        """Send ``msg``; the answer of type ``expect``, or HostError.  ``timeout`` bounds
        the whole request, the wait for the connection included."""
        limit = self.timeout if timeout is None else timeout
        what = type(msg).__name__
        try:
            reply = await asyncio.wait_for(self._exchange(msg), limit)
        except asyncio.TimeoutError:
            why = f"the PTY host is not answering ({what} got no answer within {limit:g} s)"
            if not self.unanswered:  # once per outage, not once per status
                log.warning("%s", why, extra={"CLOWDER_CAUSE": "host-not-answering"})
            self.unanswered = why
            raise HostError(why, "host-not-answering") from None
        if self.unanswered:
            log.info("the PTY host answers again", extra={"CLOWDER_CAUSE": "host-answering"})
            self.unanswered = None
        return _expect(reply, msg, expect)

    async def _exchange(self, msg: protocol.Message) -> protocol.Message:
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = await open_host(self.path, self.timeout)
                    reader, writer = self._conn
                    writer.write(protocol.encode(msg))
                    return await _read(reader)
                except asyncio.CancelledError:
                    self._drop()  # an answer may still come: it must not answer the next
                    raise
                except (OSError, asyncio.IncompleteReadError) as exc:
                    self._drop()
                    # A request that may have been done must not be done twice.
                    if attempt == 2 or isinstance(msg, protocol.Spawn):
                        raise HostError(f"the PTY host connection failed during "
                                        f"{type(msg).__name__}: {exc!r}") from exc
                except HostError:
                    self._drop()
                    raise
        raise AssertionError("unreachable")

    async def sessions(self, timeout: Optional[float] = None) -> dict[str, dict]:
        # all: ended sessions too, seen or not (how an agent's session ended).  A long
        # list comes in pages (SessionList.more), each asked for in turn.
        out: dict[str, dict] = {}
        after: Optional[str] = ""
        while after is not None:
            reply = await self.request(protocol.ListSessions(all=True, after=after),
                                       protocol.SessionList, timeout)
            out.update((s["id"], s) for s in reply.sessions)
            after = protocol.next_page(reply, after)
        return out

    async def end_session(self, sid: str) -> protocol.Exited:
        """End session ``sid`` (the host escalates SIGHUP, SIGTERM, SIGKILL) and forget it;
        how it ended.  On a connection of its own: the shared one stays free meanwhile."""
        if self.unanswered:
            raise HostError(self.unanswered, "host-not-answering")
        reader, writer = await open_host(self.path, HELLO_TIMEOUT)
        try:
            async def ask(msg, expect):
                writer.write(protocol.encode(msg))
                return _expect(await _read(reader), msg, expect)
            try:
                await asyncio.wait_for(ask(protocol.Kill(session=sid, signal=1,
                                                         escalate=True), protocol.Ok),
                                       END_TIMEOUT)
            except HostError as exc:
                if exc.code != "not-running":
                    raise
            ended = await asyncio.wait_for(ask(protocol.Wait(session=sid), protocol.Exited),
                                           REQUEST_TIMEOUT)
            try:
                await asyncio.wait_for(ask(protocol.Remove(session=sid), protocol.Ok),
                                       REQUEST_TIMEOUT)
            except HostError:
                pass  # already forgotten: the host caps what it keeps
            return ended
        except asyncio.TimeoutError:
            raise HostError(f"the PTY host did not end session {sid} within "
                            f"{END_TIMEOUT:g} s", "host-not-answering") from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise HostError(f"the PTY host connection failed while ending {sid}: "
                            f"{exc!r}") from exc
        finally:
            writer.close()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def close(self) -> None:
        self._drop()


def _expect(reply: protocol.Message, msg: protocol.Message, expect: type):
    if isinstance(reply, protocol.Error):
        raise HostError(reply.message, reply.code)
    if not isinstance(reply, expect):
        raise HostError(f"unexpected {type(reply).__name__} for {type(msg).__name__}")
    return reply


class SessionWatch:
    """A read-only attach to one session that outlives host restarts."""

    def __init__(self, path: str, session: str, on_output: Callable[[bytes], None],
                 on_exit: Callable[[protocol.Exited], Awaitable[None]], replay: int = 4096,
                 on_attached: Optional[Callable[[int], None]] = None):
        self.path = path
        self.session = session
        self.on_output = on_output
        self.on_exit = on_exit
        self.replay = replay
        # Called with the bytes asked to be replayed when the host says Attached: the
        # replay follows at once, before any live output.
        self.on_attached = on_attached
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
                    elif isinstance(msg, protocol.Attached):
                        if self.on_attached is not None:
                            self.on_attached(self.replay)
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
