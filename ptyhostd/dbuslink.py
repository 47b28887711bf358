"""The link to systemd's private socket: one authenticated peer-to-peer D-Bus connection.

That socket has no ``org.freedesktop.DBus`` object: we must not send ``Hello`` (jeepney's
high-level opener does), so the connection is set up here by hand.  A link ends for good
when the peer hangs up (``systemctl daemon-reexec`` closes every connection); the
Manager (manager.py) opens the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Callable, Optional

from jeepney import DBusAddress, HeaderFields, Message, MessageType, new_method_call
from jeepney.auth import BEGIN, Authenticator
from jeepney.io.asyncio import DBusConnection

from .linkerror import LinkLost, ManagerError

SYSTEMD = "org.freedesktop.systemd1"
MANAGER = DBusAddress("/org/freedesktop/systemd1", bus_name=SYSTEMD,
                      interface=SYSTEMD + ".Manager")
_PEER = DBusAddress("/org/freedesktop/systemd1", bus_name=SYSTEMD,
                    interface="org.freedesktop.DBus.Peer")


class Link:
    """One authenticated connection to the manager: sends calls, matches their replies,
    hands JobRemoved signals to ``on_job_removed``; ``task`` ends when the peer hangs up."""

    def __init__(self, conn: DBusConnection, on_job_removed: Callable[[Message], None]):
        self.conn = conn
        self._replies: dict[int, asyncio.Future] = {}
        self._on_job_removed = on_job_removed
        self.why = ""  # why it ended
        self.task = asyncio.ensure_future(self._receive())
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @property
    def alive(self) -> bool:
        return not self.task.done()

    @staticmethod
    def method_call(addr: tuple[str, str], method: str, sig: Optional[str] = None,
                    body: tuple = ()) -> Message:
        """A call of ``method`` on systemd's object and interface ``addr``: (path,
        interface), as manager.py names them without importing jeepney."""
        path, interface = addr
        return new_method_call(DBusAddress(path, bus_name=SYSTEMD, interface=interface),
                               method, sig, body)

    @staticmethod
    def error_of(reply: Message) -> Optional[tuple[str, str]]:
        """(D-Bus error name, its text) if ``reply`` is an error, else None."""
        if reply.header.message_type != MessageType.error:
            return None
        name = reply.header.fields.get(HeaderFields.error_name, "error")
        return name, reply.body[0] if reply.body else ""

    async def send(self, msg: Message) -> None:
        """Send without waiting for a reply."""
        try:
            await self.conn.send(msg)
        except OSError as exc:
            self.abort(f"sending: {exc}")
            raise LinkLost(f"the link dropped ({exc})") from exc

    async def call(self, msg: Message) -> Message:
        """Send a method call; its reply (LinkLost if the link ends first)."""
        if not self.alive:
            raise LinkLost(f"the link dropped ({self.why})")
        serial = next(self.conn.outgoing_serial)
        fut = asyncio.get_running_loop().create_future()
        self._replies[serial] = fut
        try:
            try:
                await self.conn.send(msg, serial=serial)
            except OSError as exc:
                self.abort(f"sending: {exc}")
                raise LinkLost(f"the link dropped ({exc})") from exc
            return await fut
        finally:
            self._replies.pop(serial, None)

    async def _receive(self) -> None:
        try:
            while True:
                msg = await self.conn.receive()
                fields = msg.header.fields
                if msg.header.message_type == MessageType.signal:
                    if fields.get(HeaderFields.member) == "JobRemoved":
                        self._on_job_removed(msg)
                    continue
                fut = self._replies.get(fields.get(HeaderFields.reply_serial))
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except EOFError:
            self.why = self.why or "closed by the service manager"
        except Exception as exc:  # a reset, or bytes we cannot parse: the link is done
            self.why = self.why or repr(exc)
        finally:
            for fut in self._replies.values():
                if not fut.done():
                    fut.set_exception(LinkLost(f"the link dropped ({self.why})"))

    def abort(self, why: str) -> None:
        """End the link now (the manager notices and opens a new one)."""
        self.why = self.why or why
        self.conn.writer.close()
        self.task.cancel()

    async def close(self) -> None:
        self.abort("closed")
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await self.task
        with contextlib.suppress(Exception):
            await self.conn.writer.wait_closed()


async def open_link(path: str, on_job_removed: Callable[[Message], None]) -> Link:
    """An authenticated link to the manager at ``path``, subscribed to job signals."""
    try:
        reader, writer = await asyncio.open_unix_connection(path)
    except OSError as exc:
        raise ManagerError(f"cannot reach the service manager at {path}: {exc}") from exc
    try:
        auth = Authenticator()
        for req in auth:
            writer.write(req)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(1024), 10)
            if not data:
                raise EOFError("closed during authentication")
            auth.feed(data)
        writer.write(BEGIN)
        await writer.drain()
    except Exception as exc:  # reset, closed, timed out, or authentication refused
        writer.close()
        raise ManagerError(f"cannot reach the service manager at {path}: {exc!r}") from exc
    link = Link(DBusConnection(reader, writer), on_job_removed)
    # Measured on systemd 252: a message that arrives in the same read as the
    # client's BEGIN stays unprocessed in systemd's buffer until more bytes arrive
    # (79 of 100 fresh connections stalled in one run; never once poked).  So the
    # first call is followed at once, and then while it has no answer, by harmless
    # Peer.Ping pokes.
    first = asyncio.ensure_future(link.call(new_method_call(MANAGER, "Subscribe")))
    try:
        for _ in range(200):
            await link.send(new_method_call(_PEER, "Ping"))
            done, _pending = await asyncio.wait({first}, timeout=0.02)
            if done:
                break
        else:
            raise ManagerError(f"the service manager at {path} does not answer")
        reply = first.result()
        if reply.header.message_type == MessageType.error:
            raise ManagerError(f"Subscribe refused: {reply.body}")
    except BaseException:
        first.cancel()
        await link.close()
        raise
    return link
