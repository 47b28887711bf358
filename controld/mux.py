"""Multiplexed streams on one clowder-control connection: what a remote client uses.

``ssh HOST clowderctl relay`` is one byte stream.  A client that wants more than one
thing from it at once (a session attached, status, files, git, a forwarded port) sends
OpenStream frames after the handshake; from then on the connection carries only 5xx
frames (clowder_wire) and each numbered stream is a byte stream of its own:

- ``session`` and ``status``: the control requests, framed as on a connection of their
  own but already greeted (``ControlServer.serve``): status, up/down/restart, attach.
- ``file`` and ``vcs``: FileService / VcsService requests, one answer each.
- ``forward``: the raw bytes of one TCP connection to a port on this machine's loopback.

Each stream has its own credit (STREAM_WINDOW bytes unacknowledged per direction), so a
stream whose reader stalls stops only itself.  Anything wrong inside a stream (an
oversize or malformed frame, a refused path) ends that stream, with the reason in an
Error frame inside it or in its StreamClose; the other streams carry on.  A malformed
5xx frame, though, breaks the framing every stream rides on: that closes the connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

import clowder_wire as protocol

log = logging.getLogger("clowder-control")
P = protocol
_PRIVILEGED = ("file", "vcs", "forward")  # the services that act as the daemon's user
FORWARD_CONNECT_TIMEOUT = 10.0
# What one connection may make us hold, whatever the client sends (docs/design.md,
# "What one client can make a daemon hold").  Stream data we send is bounded by each
# stream's credit and by WRITE_HIGH_WATER (a stream waits for the writer to drain after
# each chunk); OUT_BUDGET bounds the rest, the frames the client's own frames cause
# (acknowledgements, refusals of opens): past it we stop reading the client until it
# reads.  It is well above what credit-bounded data can queue (WRITE_HIGH_WATER plus a
# chunk a stream), so a client that reads and writes from one thread never deadlocks.
WRITE_HIGH_WATER = 256 << 10
OUT_BUDGET = WRITE_HIGH_WATER + P.MAX_STREAMS * P.STREAM_CHUNK + (1 << 20)
# Received stream data that no service has consumed yet, over all streams: each stream
# may hold STREAM_WINDOW, but not all MAX_STREAMS of them at once.  A stream that would
# pass it is ended (a stalled reader cannot be waited for: its partial frame may need
# the very bytes we would stop reading).
IN_BUDGET = 8 << 20
# File and vcs requests of one connection answered at once, over all its streams.  An
# answer (a FileData, a diff) is up to a frame, made whole before it waits for credit:
# without this a client that opens MAX_STREAMS streams, asks in each and never reads
# made us hold one answer a stream (+83 MiB measured for FileRead).  A request holds
# its slot until its answer has been sent, so REPLY_SLOTS streams whose reader stalls
# make the others' requests wait (not fail); one stalled stream stops only itself.
REPLY_SLOTS = 2


def _show(name: str, limit: int = 64) -> str:
    """A client's name in our messages: quoted, and cut (a name may be a megabyte)."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} chars)"


class StreamError(Exception):
    """A stream cannot be opened or must end; ``code`` goes into its StreamClose."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


class Stream:
    """One stream, seen by a service as a connection: ``read``/``readexactly`` and
    ``write``/``drain``. Reads acknowledge what they consume; ``drain`` waits for credit."""

    def __init__(self, mux: "Mux", number: int, service: str):
        self.mux = mux
        self.number = number
        self.service = service
        self._in = asyncio.StreamReader(limit=2 * P.STREAM_WINDOW)
        self._buffered = 0  # received and not yet consumed: bounded by our window
        self._out = bytearray()
        self._credit = P.STREAM_WINDOW
        self._credit_more = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self.sent_close = False
        self.got_close = False
        self.tasks: list[asyncio.Task] = []
        self.on_close = []  # callables run once when the stream is forgotten

    # --- what the client sent -----------------------------------------------------------

    def receive(self, data: bytes) -> None:
        if self.got_close:
            raise StreamError(f"stream {self.number}: data after its StreamClose", "bad-stream")
        if self._buffered + len(data) > P.STREAM_WINDOW:
            raise StreamError(f"stream {self.number}: more than {P.STREAM_WINDOW} bytes "
                              f"sent without acknowledgement", "window")
        if self.mux.buffered + len(data) > IN_BUDGET:
            raise StreamError(f"stream {self.number}: the connection's streams hold more "
                              f"than {IN_BUDGET} bytes not yet consumed", "budget")
        self._buffered += len(data)
        self.mux.buffered += len(data)
        self._in.feed_data(data)

    def receive_close(self) -> None:
        if not self.got_close:
            self.got_close = True
            self._in.feed_eof()

    def acked(self, size: int) -> None:
        self._credit += size
        self._credit_more.set()

    async def read(self, n: int = -1) -> bytes:
        return self._consumed(await self._in.read(n))

    async def readexactly(self, n: int) -> bytes:
        return self._consumed(await self._in.readexactly(n))

    def _consumed(self, data: bytes) -> bytes:
        if data:
            self._buffered -= len(data)
            if self.mux.streams.get(self.number) is self:  # else _forget counted it
                self.mux.buffered -= len(data)
            self.mux.send(P.StreamAck(stream=self.number, size=len(data)))
        return data

    # --- what we send -------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self._out += data

    async def drain(self) -> None:
        while self._out:
            if self.sent_close or self.mux.closed:
                raise ConnectionResetError(f"stream {self.number} is closed")
            if self._credit <= 0:
                self._credit_more.clear()
                await self._credit_more.wait()
                continue
            n = min(len(self._out), self._credit, P.STREAM_CHUNK)
            chunk = bytes(self._out[:n])
            del self._out[:n]
            self._credit -= n
            self.mux.send(P.StreamData(stream=self.number, data=chunk))
            await self.mux.drain()

    async def send(self, msg: protocol.Message) -> None:
        """One whole message into the stream (services' answers, a watch's events)."""
        async with self._send_lock:
            self.write(protocol.encode(msg))
            await self.drain()

    def close(self) -> None:
        """Services call this as on a connection; the stream's runner sends the close."""


class Mux:
    """The streams of one connection (after the handshake and the first OpenStream)."""

    def __init__(self, server, uid: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter):
        self.server = server
        self.uid = uid
        self.reader = reader
        self.writer = writer
        self.streams: dict[int, Stream] = {}
        self.closed = False
        self.buffered = 0  # stream data received and not consumed, over all streams
        self.replies = asyncio.Semaphore(REPLY_SLOTS)
        writer.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def send(self, msg: protocol.Message) -> None:
        if not self.closed:
            self.writer.write(protocol.encode(msg))

    async def drain(self) -> None:
        await self.writer.drain()

    async def run(self, first: protocol.OpenStream) -> None:
        msg: Optional[protocol.Message] = first
        try:
            while True:
                if msg is None:
                    if self.writer.transport.get_write_buffer_size() > OUT_BUDGET:
                        # Not a drain per frame: a client blocked writing to us while we
                        # wait for it to read would deadlock.  Past OUT_BUDGET the client
                        # has left megabytes of answers to its own frames unread.
                        await self.writer.drain()
                    msg = await protocol.read_message(self.reader)
                self._dispatch(msg)
                msg = None
        except protocol.ProtocolError as exc:
            self.send(P.Error(message=str(exc), code=exc.code, fatal=True))
        finally:
            self.closed = True
            for stream in list(self.streams.values()):
                self._forget(stream)

    def _dispatch(self, msg: protocol.Message) -> None:
        if isinstance(msg, P.OpenStream):
            self._open(msg)
            return
        if not isinstance(msg, (P.StreamData, P.StreamAck, P.StreamClose)):
            raise protocol.ProtocolError(
                f"{type(msg).__name__} on a multiplexed connection: only stream frames "
                f"(5xx) may follow OpenStream", "bad-request")
        if isinstance(msg, P.StreamAck) and msg.size < 0:
            raise protocol.ProtocolError(f"stream {msg.stream}: StreamAck acknowledges "
                                         f"{msg.size} bytes", "bad-ack")
        stream = self.streams.get(msg.stream)
        if stream is None:
            return  # a stream we already ended: frames still in flight are dropped
        try:
            if isinstance(msg, P.StreamData):
                stream.receive(msg.data)
            elif isinstance(msg, P.StreamAck):
                stream.acked(msg.size)
            else:
                stream.receive_close()
                if stream.sent_close:
                    self._forget(stream)
        except StreamError as exc:
            self._end(stream, str(exc), exc.code)

    def _open(self, msg: protocol.OpenStream) -> None:
        number = msg.stream
        try:
            if not 0 < number < 1 << 31:
                raise StreamError(f"stream number {number} is out of range", "bad-stream")
            if number in self.streams:
                raise StreamError(f"stream {number} is already open", "bad-stream")
            if len(self.streams) >= P.MAX_STREAMS:
                raise StreamError(f"too many open streams (at most {P.MAX_STREAMS})",
                                  "too-many-streams")
            if msg.service not in P.SERVICES:
                raise StreamError(f"unknown service {_show(msg.service)}: expected one of "
                                  f"{', '.join(P.SERVICES)}", "unknown-service")
            if msg.service in _PRIVILEGED and self.uid not in (0, self.server.uid):
                raise StreamError(f"uid {self.uid} may not use the {msg.service} service",
                                  "permission")
            if msg.service == "forward" and not 0 < msg.port < 65536:
                raise StreamError(f"invalid port {msg.port}: expected 1-65535", "bad-port")
        except StreamError as exc:
            self.send(P.StreamClose(stream=number, message=str(exc), code=exc.code))
            return
        stream = Stream(self, number, msg.service)
        self.streams[number] = stream
        stream.tasks.append(asyncio.ensure_future(self._run(stream, msg)))

    async def _run(self, stream: Stream, msg: protocol.OpenStream) -> None:
        """Serve one stream until its service is done, then close our side of it."""
        message = code = ""
        try:
            if stream.service == "forward":
                await self._forward(stream, msg.port)
            else:
                self.send(P.StreamOpened(stream=stream.number))
                if stream.service in ("session", "status"):
                    await self.server.serve(stream, stream, self.uid)
                else:
                    await self._serve_requests(stream)
            await stream.drain()
        except StreamError as exc:
            message, code = str(exc), exc.code
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:
            log.exception("stream %d (%s) failed", stream.number, stream.service)
            message, code = f"internal error: {exc!r}", "internal"
        self._end(stream, message, code)

    def _end(self, stream: Stream, message: str = "", code: str = "") -> None:
        """Send our StreamClose (once); forget the stream if the client has closed too."""
        if not stream.sent_close:
            stream.sent_close = True
            self.send(P.StreamClose(stream=stream.number, message=message, code=code))
        stream._credit_more.set()  # a drain waiting for credit gives up
        if stream.got_close or code:
            # After an error the client's frames for this stream are dropped anyway.
            self._forget(stream)

    def _forget(self, stream: Stream) -> None:
        if self.streams.get(stream.number) is stream:
            del self.streams[stream.number]
            self.buffered -= stream._buffered  # what it held unconsumed is dropped
            stream._buffered = 0
            # Its buffers go now, not when the cyclic GC finds the stream and its
            # cancelled tasks: a client opening and overrunning streams in a loop
            # otherwise keeps tens of dead megabytes waiting for a collection.
            stream._out = bytearray()
            stream._in = asyncio.StreamReader(limit=2 * P.STREAM_WINDOW)
            stream._in.feed_eof()
        current = asyncio.current_task()
        # The list goes too: a cancelled task keeps its CancelledError, whose traceback
        # keeps the frames and their locals (an answer being sent, a file just read)
        # while the task is referenced, and stream -> tasks -> traceback -> frame ->
        # stream is a cycle only the cyclic GC would free (a FileRead flood held ~60 MiB
        # of read files that way).
        tasks, stream.tasks = stream.tasks, []
        for task in tasks:
            if task is not current:
                task.cancel()
        for fn in stream.on_close:
            fn()
        stream.on_close.clear()

    async def _serve_requests(self, stream: Stream) -> None:
        """A file or vcs stream: one answer per request, until the client closes."""
        # Imported when first used: most connections never open these services.
        if stream.service == "file":
            from .files import FileService as Service
        else:
            from .vcs import VcsService as Service
        # Only uids allowed these services got this far (_open): no check per request.
        service = Service(self.server.supervisor.workdir, stream.send)
        try:  # a cancelled stream (forgotten) closes its service here too
            while True:
                try:
                    # The header is awaited without a slot (an idle stream holds none);
                    # the body is read, and the answer made and sent, holding one.
                    length, kind = P.check_header(await stream.readexactly(P.HEADER.size))
                    async with self.replies:
                        req = P.decode(kind, await stream.readexactly(length))
                        await service.handle(req)
                except protocol.ProtocolError as exc:
                    await stream.send(P.Error(message=str(exc), code=exc.code, fatal=True))
                    return
        finally:
            await service.close()

    async def _forward(self, stream: Stream, port: int) -> None:
        """Copy bytes between the stream and a TCP connection to loopback:``port``."""
        errors = []
        for address in ("127.0.0.1", "::1"):
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port), FORWARD_CONNECT_TIMEOUT)
                break
            except (OSError, asyncio.TimeoutError) as exc:
                errors.append(f"{address}: {getattr(exc, 'strerror', None) or exc!r}")
        else:
            raise StreamError(f"cannot connect to port {port} on the loopback "
                              f"({'; '.join(errors)})", "forward")
        stream.on_close.append(writer.close)
        self.send(P.StreamOpened(stream=stream.number))

        async def upstream() -> None:  # client -> port, until the client's StreamClose
            try:
                while data := await stream.read(P.STREAM_CHUNK):
                    writer.write(data)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
            except (ConnectionError, OSError):
                pass
        stream.tasks.append(asyncio.ensure_future(upstream()))
        while data := await reader.read(P.STREAM_CHUNK):
            stream.write(data)
            await stream.drain()
