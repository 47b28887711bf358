"""clowder-control's socket: the control-plane requests of clowderctl (and relays).

The same framing and handshake as the PTY host (clowder_wire), kinds 4xx; a
connection whose first request is OpenStream becomes multiplexed (controld.mux).
Status is open to anyone who can connect, and shows a member only their own sessions
and agents (root and the daemon's own uid see all), as do the agents' events
(WatchAgentEvents, controld/agentevents.py); changing an agent and attaching to
it need root, the daemon's own uid or the agent's ``user:``; its files, its git
worktree and forwarded ports need root or the daemon's own uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Optional

import clowder_wire as protocol
from clowder_common import __version__
from clowder_common.peercred import peer_creds

from . import journal
from .hostclient import HostError, open_host
from .mux import Mux
from .supervisor import Supervisor

log = logging.getLogger("clowder-control")
# An attach through us fails this soon when the host does not greet it and send its
# first bytes (frozen, or not back from a restart that takes this long): the client says
# why and may retry.  One deadline for both, well inside a client's wait for an answer
# (10 s, ctl/client.py), so the client gets our error, not a silence.
ATTACH_TIMEOUT = 5.0
WRITE_HIGH_WATER = 1 << 20
# A WatchAgentEvents connection's write buffer: past it the events wait in the
# subscriber's bounded queue (controld/agentevents.py), then are dropped and counted.
EVENTS_HIGH_WATER = 64 << 10


async def splice(reader, writer, host_reader: asyncio.StreamReader,
                 host_writer: asyncio.StreamWriter) -> None:
    """Copy bytes both ways between a client and the host until either side ends.

    Each direction drains its writer before its first read: what the caller wrote
    already (the host's first bytes: Attached and the repaint) must go out even if the
    host sends nothing more.  On a multiplexed stream a write only queues; the drain
    sends it.  Draining only after the next read from the host left an attach to a quiet
    session unanswered whenever the host's whole answer came in one read (the client
    gave up after 10 s: `test_streams.py` and `test_remote.py`, now and then in CI)."""
    async def pipe(src, dst) -> None:
        await dst.drain()
        while data := await src.read(1 << 16):
            dst.write(data)
            await dst.drain()
    tasks = [asyncio.ensure_future(pipe(host_reader, writer)),
             asyncio.ensure_future(pipe(reader, host_writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        host_writer.close()


class ControlServer:
    def __init__(self, supervisor: Supervisor, host_status):
        self.supervisor = supervisor
        self.host_status = host_status  # async () -> dict
        self.uid = os.getuid()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        sock = writer.get_extra_info("socket")
        _pid, uid, _gid = peer_creds(sock)
        # Each answer is drained before the next request is read (serve, Mux): what a
        # client leaves unread stays near this, plus one frame.
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        try:
            try:
                refusal = protocol.refuse_hello(await protocol.read_message(reader),
                                                f"clowder-control {__version__}")
                if refusal is not None:
                    writer.write(protocol.encode(refusal))
                    return
                writer.write(protocol.encode(protocol.Welcome(
                    version=protocol.PROTOCOL_VERSION,
                    server=f"clowder-control {__version__}", uid=uid)))
                first = await protocol.read_message(reader)
            except protocol.ProtocolError as exc:
                writer.write(protocol.encode(protocol.Error(message=str(exc), code=exc.code,
                                                            fatal=True)))
                return
            log.debug("accepted a client: uid %d, first request %s", uid, type(first).__name__,
                      extra={"CLOWDER_CAUSE": "accept"})
            if isinstance(first, protocol.OpenStream):
                await Mux(self, uid, reader, writer).run(first)
            else:
                await self.serve(reader, writer, uid, first)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve(self, reader, writer, uid: int,
                    msg: Optional[protocol.Message] = None) -> None:
        """The requests of one greeted connection, or of one session/status stream
        (``controld.mux.Stream`` reads and writes like a connection)."""
        while True:
            if msg is None:
                try:
                    msg = await protocol.read_message(reader)
                except protocol.ProtocolError as exc:
                    writer.write(protocol.encode(protocol.Error(
                        message=str(exc), code=exc.code, fatal=True)))
                    await writer.drain()
                    return
            if isinstance(msg, protocol.Attach):
                await self._proxy_attach(msg, uid, reader, writer)
                return
            if isinstance(msg, protocol.WatchAgentEvents):
                await self._agent_events(msg, uid, reader, writer)
                return
            writer.write(protocol.encode(await self._answer(msg, uid)))
            await writer.drain()
            msg = None

    async def _proxy_attach(self, msg: protocol.Attach, uid: int,
                            reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """Attach to an agent (``NAME`` or ``NAME/SHELL``) on the host, through us.

        After the host accepts, bytes are copied both ways unchanged; when this daemon
        restarts the client re-attaches (and is repainted) like after a host restart.
        """
        agent = msg.session.partition("/")[0]
        if not self.supervisor.may_drive(uid, agent):
            writer.write(protocol.encode(protocol.Error(
                message=f"uid {uid} may not attach to agent {agent!r}: it is not theirs",
                code="permission")))
            return
        sid = self.supervisor.session_of(msg.session)
        if sid is None:
            writer.write(protocol.encode(protocol.Error(
                message=f"no running agent or shell {msg.session!r}", code="no-session")))
            return
        # On a multiplexed connection its attaches are set up a few at a time (the
        # mux's answer slots, held until the host's first bytes, the repaint, came):
        # a client attaching in 64 streams at once, again and again, otherwise kept
        # the host making its repaints while everyone's status waited (p99 > 1 s).
        mux = getattr(writer, "mux", None)
        async with (mux.replies if mux is not None else contextlib.nullcontext()):
            loop = asyncio.get_running_loop()
            end = loop.time() + ATTACH_TIMEOUT
            try:
                host_reader, host_writer = await open_host(self.supervisor.host_path,
                                                           ATTACH_TIMEOUT)
            except HostError as exc:
                log.warning("attach to %s: %s", msg.session, exc,
                            extra={"CLOWDER_AGENT": agent, "CLOWDER_CAUSE": "attach-failed"})
                writer.write(protocol.encode(protocol.Error(message=str(exc), code="host")))
                return
            # Not the client's terminal (Attach.terminal): the host would check it
            # against our uid, not the client's, so agents' attaches stay in frames.
            host_writer.write(protocol.encode(protocol.Attach(
                session=sid, cols=msg.cols, rows=msg.rows, read_only=msg.read_only,
                replay=msg.replay, token=msg.token, history=msg.history,
                history_format=msg.history_format)))
            try:
                first = await asyncio.wait_for(host_reader.read(1 << 16),
                                               max(0.0, end - loop.time()))
                why = "closed the connection"
            except asyncio.TimeoutError:
                first, why = b"", f"sent nothing within {ATTACH_TIMEOUT:g} s"
            except ConnectionError as exc:
                first, why = b"", f"broke the connection ({exc})"
            if not first:
                host_writer.close()
                log.warning("attach to %s: the PTY host %s", msg.session, why,
                            extra={"CLOWDER_AGENT": agent, "CLOWDER_CAUSE": "attach-failed"})
                writer.write(protocol.encode(protocol.Error(
                    message=f"the PTY host did not answer the attach to {msg.session!r}: "
                            f"it {why}", code="host")))
                return
            writer.write(first)  # sent by splice's first drain, outside the slot
        await splice(reader, writer, host_reader, host_writer)

    async def _agent_events(self, msg: protocol.WatchAgentEvents, uid: int,
                            reader, writer) -> None:
        """Send the agents' events the client may see until it closes the connection
        (or the stream).  Nothing may follow the request: more bytes end it."""
        P = protocol
        sup = self.supervisor
        everything = uid in (0, self.uid)
        if msg.agent is not None:
            if not sup.may_drive(uid, msg.agent):
                writer.write(P.encode(P.Error(
                    message=f"uid {uid} may not watch agent {msg.agent!r}: it is not theirs",
                    code="permission")))
                return
            if msg.agent not in sup.runtimes:
                writer.write(P.encode(P.Error(message=f"no such agent: {msg.agent!r}",
                                              code="no-agent")))
                return

        def wants(agent: str) -> bool:
            if msg.agent is not None and agent != msg.agent:
                return False
            return everything or not agent or sup.may_drive(uid, agent)
        sub = sup.events.subscribe(wants, uid, everything)
        if isinstance(sub, str):
            writer.write(P.encode(P.Error(message=sub, code="busy")))
            return
        try:
            # The state now, built before any await: what the queue gets comes after.
            first = [sup.agent_event_state(n) for n in sorted(sup.runtimes)
                     if n == msg.agent or (msg.agent is None and wants(n))]
            transport = getattr(writer, "transport", None)
            if transport is not None:
                transport.set_write_buffer_limits(high=EVENTS_HIGH_WATER)
            writer.write(P.encode(P.Ok()))

            async def send() -> None:
                for event in first:
                    writer.write(P.encode(P.AgentEvent(**event)))
                    await writer.drain()
                first.clear()
                while True:
                    writer.write(P.encode(P.AgentEvent(**await sub.get())))
                    await writer.drain()

            async def more() -> None:
                if await reader.read(1):
                    writer.write(P.encode(P.Error(
                        message="nothing may follow WatchAgentEvents on its connection",
                        code="bad-request", fatal=True)))

            tasks = [asyncio.ensure_future(send()), asyncio.ensure_future(more())]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
        finally:
            sup.events.unsubscribe(sub)

    async def _answer(self, msg: protocol.Message, uid: int) -> protocol.Message:
        P = protocol
        sup = self.supervisor
        try:
            if isinstance(msg, P.GetStatus):
                # A member is shown only their own (supervisor.status), and not how
                # many sessions the host holds for everyone.
                st = sup.status(uid)
                host = await self.host_status()
                if uid not in (0, self.uid):
                    host.pop("sessions", None)
                return P.StatusReport(agents=st["agents"], unclaimed=st["unclaimed"],
                                      sessions=st["sessions"], problems=st["problems"],
                                      host=host, omitted=st["omitted"])
            if isinstance(msg, P.GetLogs):
                if not sup.may_drive(uid, msg.agent):
                    return P.Error(message=f"uid {uid} may not read the logs of agent "
                                   f"{msg.agent!r}: it is not theirs", code="permission")
                try:
                    entries, cursor = await asyncio.get_running_loop().run_in_executor(
                        None, journal.read, msg.agent, msg.lines, msg.since, msg.after)
                except (OSError, ValueError) as exc:  # a bad cursor, no journal
                    return P.Error(message=f"cannot read the journal: {exc}",
                                   code="bad-request")
                return P.LogEntries(entries=entries, cursor=cursor)
            if not isinstance(msg, (P.AgentUp, P.AgentDown, P.AgentRestart)):
                return P.Error(message=f"{type(msg).__name__} is not a control request",
                               code="bad-request")
            if not sup.may_drive(uid, msg.agent):
                return P.Error(message=f"uid {uid} may not change agent {msg.agent!r}: "
                               "it is not theirs", code="permission")
            if isinstance(msg, P.AgentUp):
                return P.AgentInfo(agent=await sup.up(msg.agent))
            if isinstance(msg, P.AgentDown):
                await sup.down(msg.agent)
                return P.Ok()
            return P.AgentInfo(agent=await sup.restart(msg.agent, shells=msg.shells))
        except KeyError:
            return P.Error(message=f"no such agent: {getattr(msg, 'agent', '?')!r}",
                           code="no-agent")
        except HostError as exc:
            log.warning("control request %s for %s: %s", type(msg).__name__,
                        getattr(msg, "agent", "?"), exc,
                        extra={"CLOWDER_CAUSE": exc.code,
                               "CLOWDER_AGENT": getattr(msg, "agent", "")})
            return P.Error(message=str(exc), code=exc.code)
        except Exception as exc:
            log.exception("control request %s failed", type(msg).__name__)
            return P.Error(message=f"internal error: {exc!r}", code="internal")
