"""clowder-control's socket: the control-plane requests of clowderctl (and relays).

The same framing and handshake as the PTY host (ptyhostd.protocol), kinds 4xx.
Status is open to anyone who can connect; changing an agent needs root or the
daemon's own uid.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct

from ptyhostd import __version__, protocol

from .supervisor import Supervisor

log = logging.getLogger("clowder-control")
_CREDS = struct.Struct("3i")


class ControlServer:
    def __init__(self, supervisor: Supervisor, host_status):
        self.supervisor = supervisor
        self.host_status = host_status  # async () -> dict
        self.uid = os.getuid()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        sock = writer.get_extra_info("socket")
        _pid, uid, _gid = _CREDS.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))
        try:
            greeted = False
            while True:
                try:
                    header = await reader.readexactly(protocol.HEADER.size)
                    length, kind = protocol.check_header(header)
                    msg = protocol.decode(kind, await reader.readexactly(length))
                except protocol.ProtocolError as exc:
                    writer.write(protocol.encode(protocol.Error(message=str(exc),
                                                                code=exc.code, fatal=True)))
                    break
                if not greeted:
                    if not isinstance(msg, protocol.Hello) or \
                            msg.version != protocol.PROTOCOL_VERSION:
                        writer.write(protocol.encode(protocol.Error(
                            message=f"expected Hello with protocol version "
                                    f"{protocol.PROTOCOL_VERSION}", code="version", fatal=True)))
                        break
                    greeted = True
                    writer.write(protocol.encode(protocol.Welcome(
                        version=protocol.PROTOCOL_VERSION,
                        server=f"clowder-control {__version__}", uid=uid)))
                    continue
                writer.write(protocol.encode(await self._answer(msg, uid)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, msg: protocol.Message, uid: int) -> protocol.Message:
        P = protocol
        sup = self.supervisor
        try:
            if isinstance(msg, P.GetStatus):
                st = sup.status()
                return P.StatusReport(agents=st["agents"], unclaimed=st["unclaimed"],
                                      problems=st["problems"], host=await self.host_status())
            if not isinstance(msg, (P.AgentUp, P.AgentDown, P.AgentRestart)):
                return P.Error(message=f"{type(msg).__name__} is not a control request",
                               code="bad-request")
            if uid not in (0, self.uid):
                return P.Error(message=f"uid {uid} may not change agents", code="permission")
            if isinstance(msg, P.AgentUp):
                return P.AgentInfo(agent=await sup.up(msg.agent))
            if isinstance(msg, P.AgentDown):
                await sup.down(msg.agent)
                return P.Ok()
            return P.AgentInfo(agent=await sup.restart(msg.agent))
        except KeyError:
            return P.Error(message=f"no such agent: {getattr(msg, 'agent', '?')!r}",
                           code="no-agent")
        except Exception as exc:
            log.exception("control request %s failed", type(msg).__name__)
            return P.Error(message=f"internal error: {exc!r}", code="internal")
