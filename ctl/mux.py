"""The client side of multiplexed streams (controld/mux.py has the daemon's side).

``Mux(target)`` greets clowder-control (a local socket or a ``Remote`` through ssh) and
then carries any number of streams over that one connection. ``open(service)`` returns
a plain connected socket per stream (one end of a socketpair): the code using a stream
is the code that would use a connection of its own, e.g. ``Client.on_stream`` for the
framed services, or a TCP socket's bytes for ``forward``.

One thread moves bytes between the connection and the socketpairs. It sends a stream's
bytes only while the daemon has given credit for them, and acknowledges the daemon's
bytes only once the local reader's socket buffer took them: a local reader that stops
stalls its own stream, never the others.
"""

from __future__ import annotations

import os
import select
import socket
import threading

import clowder_wire as protocol

from .client import Client, ClientError, TimedOut, Unreachable
from .portable import nonblocking_pipe
from .transport import Remote

P = protocol
OPEN_TIMEOUT = 30.0


class _Stream:
    def __init__(self, number: int, service: str):
        self.number = number
        self.service = service
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ours.setblocking(False)
        self.opened = threading.Event()
        self.error: tuple[str, str] | None = None  # (message, code) of a refusal or failure
        self.credit = P.STREAM_WINDOW  # bytes we may still send
        self.pending = bytearray()  # from the daemon, not yet taken by the local reader
        self.sent_close = False  # we sent StreamClose (the local side reached EOF)
        self.got_close = False


class Mux:
    """One multiplexed connection; ``open`` streams on it, ``close`` it once."""

    def __init__(self, target: str | Remote):
        self.client = Client(target, peer="clowder-control")
        self.peer = self.client.peer
        self.sock = self.client.sock
        self.sock.setblocking(True)
        self._streams: dict[int, _Stream] = {}
        self._next = 1
        self._lock = threading.Lock()  # the stream table and writes to the connection
        self._wake_r, self._wake_w = nonblocking_pipe()
        self.dead: str | None = None  # why the connection ended
        self._thread = threading.Thread(target=self._loop, name="clowder-mux", daemon=True)
        self._thread.start()

    def open(self, service: str, port: int = 0, timeout: float = OPEN_TIMEOUT
             ) -> socket.socket:
        """A connected socket for a new stream to ``service``; ClientError if refused."""
        with self._lock:
            if self.dead:
                raise Unreachable(f"the connection to {self.peer} is closed: {self.dead}")
            st = _Stream(self._next, service)
            self._next += 1
            self._streams[st.number] = st
            try:
                self._send(P.OpenStream(stream=st.number, service=service, port=port))
            except OSError as exc:
                self.dead = f"cannot write to {self.peer}: {exc.strerror or exc}"
                raise Unreachable(f"the connection to {self.peer} is closed: "
                                  f"{self.dead}") from None
        self._wake()
        if not st.opened.wait(timeout):
            raise TimedOut(f"{self.peer} did not open the {service} stream in time")
        if st.error:
            message, code = st.error
            raise ClientError(f"{service} stream refused by {self.peer}: {message}"
                              + (f" ({code})" if code else ""))
        return st.theirs

    def request_client(self, service: str) -> Client:
        """A Client speaking framed requests on a new stream to ``service``."""
        where = f"{self.client.location} ({service} stream)"
        return Client.on_stream(self.open(service), f"{self.peer} ({service} stream)",
                                self.client.daemon, where)

    def close(self) -> None:
        with self._lock:
            if not self.dead:
                self.dead = "closed by us"
        self._wake()
        self._thread.join(10)
        self.client.close()  # reaps ssh when it ran through ssh
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the mover thread ---------------------------------------------------------------

    def _send(self, msg: protocol.Message) -> None:
        """Called with self._lock held: one whole frame onto the connection."""
        self.sock.sendall(protocol.encode(msg))

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _loop(self) -> None:
        reader = protocol.FrameReader()
        try:
            while not self.dead:
                with self._lock:
                    streams = list(self._streams.values())
                rlist = [self.sock, self._wake_r] + [
                    s.ours for s in streams
                    if s.opened.is_set() and not s.sent_close and s.credit > 0]
                wlist = [s.ours for s in streams if s.pending]
                readable, writable, _ = select.select(rlist, wlist, [])
                if self._wake_r in readable:
                    os.read(self._wake_r, 4096)
                by_sock = {s.ours: s for s in streams}
                for sock in writable:
                    self._flush(by_sock[sock])
                for sock in readable:
                    if sock in by_sock:
                        self._upload(by_sock[sock])
                if self.sock in readable:
                    data = self.sock.recv(1 << 18)
                    if not data:
                        raise ConnectionError(self.client._closed(f"{self.peer} closed "
                                                                  f"the connection"))
                    for msg in reader.feed(data):
                        self._receive(msg)
        except (OSError, ConnectionError, protocol.ProtocolError) as exc:
            with self._lock:
                if not self.dead:
                    self.dead = str(exc) or type(exc).__name__
        finally:
            with self._lock:
                streams = list(self._streams.values())
                self._streams.clear()
            for st in streams:  # every local reader sees EOF; waiting opens give up
                if st.error is None and not st.opened.is_set():
                    st.error = (self.dead or "connection closed", "closed")
                st.opened.set()
                st.ours.close()

    def _upload(self, st: _Stream) -> None:
        """Local bytes of a stream -> StreamData, within its credit."""
        try:
            data = st.ours.recv(min(st.credit, P.STREAM_CHUNK))
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            data = b""
        with self._lock:
            if data:
                st.credit -= len(data)
                self._send(P.StreamData(stream=st.number, data=data))
            else:
                st.sent_close = True
                self._send(P.StreamClose(stream=st.number))
                self._maybe_forget(st)

    def _flush(self, st: _Stream) -> None:
        """The daemon's bytes of a stream -> its socketpair; acknowledged once taken."""
        try:
            n = st.ours.send(st.pending)
        except (BlockingIOError, InterruptedError):
            return
        except (BrokenPipeError, ConnectionResetError):
            n = len(st.pending)  # the local reader is gone: nobody will read these
        del st.pending[:n]
        with self._lock:
            self._send(P.StreamAck(stream=st.number, size=n))
            self._maybe_forget(st)

    def _receive(self, msg: protocol.Message) -> None:
        if isinstance(msg, P.Error):
            raise ConnectionError(f"{self.peer}: {msg.message}")
        st = self._streams.get(getattr(msg, "stream", 0))
        if st is None:
            return
        if isinstance(msg, P.StreamOpened):
            st.opened.set()
        elif isinstance(msg, P.StreamData):
            st.pending += msg.data
            self._flush(st)
        elif isinstance(msg, P.StreamAck):
            st.credit += msg.size
        elif isinstance(msg, P.StreamClose):
            st.got_close = True
            if msg.message or msg.code:
                st.error = (msg.message, msg.code)
            st.opened.set()
            with self._lock:
                if not st.sent_close:  # a side that receives a close answers with its own
                    st.sent_close = True
                    self._send(P.StreamClose(stream=st.number))
                self._maybe_forget(st)

    def _maybe_forget(self, st: _Stream) -> None:
        """Called with the lock held: a stream closed both ways and flushed is done."""
        if st.got_close and st.sent_close and not st.pending \
                and self._streams.get(st.number) is st:
            del self._streams[st.number]
            st.ours.close()  # the local reader reads what is buffered, then EOF
