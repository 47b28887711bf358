"""The multiplexer under hostile input (issue 7: every service's parser under a fuzzer).

clowder-control's connection handler (ControlServer.handle, with controld.mux behind it)
runs in-process on a real unix socket; only the supervisor is a stub (an agent whose
working directory is a temporary directory). Hypothesis drives sequences of stream
frames, valid and hostile: unknown and reused stream numbers, data past the window,
acknowledgements of any size, frames after a close, bytes that are not frames at all.
Whatever comes, the daemon answers or closes within a deadline, never hangs, never
raises out of its handler, and serves the next connection as before.
The same services under real daemons and systemd are in test_streams.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controld import agentevents
from controld.agentevents import AgentEvents
from controld.server import ControlServer
from ctl.mux import Mux
import clowder_wire as P


class _Supervisor:
    def __init__(self, root: str):
        self.root = root
        self.host_path = "/nonexistent/ptyhost.sock"
        self.runtimes = {"a": None}
        self.events = AgentEvents()

    def agent_event_state(self, name: str) -> dict:
        return agentevents.make("state", name, activity="idle", attention="none")

    def status(self, viewer=None):
        return {"agents": [{"name": "a"}], "sessions": [], "unclaimed": [], "problems": [],
                "omitted": 0}

    def may_drive(self, uid: int, name: str) -> bool:
        return True  # the tests' client is the daemon's own uid

    def workdir(self, name: str) -> str:
        if name != "a":
            raise KeyError(name)
        return self.root

    def session_of(self, ref: str):
        return None

    async def up(self, name, shells=False):
        raise KeyError(name)

    down = restart = up


class _Daemon:
    """ControlServer on a unix socket in a thread of its own; records handler crashes."""

    def __init__(self, tmp: str):
        self.path = os.path.join(tmp, "control.sock")
        os.makedirs(os.path.join(tmp, "root"), exist_ok=True)
        with open(os.path.join(tmp, "root", "file"), "w") as f:
            f.write("content")
        self.server = ControlServer(_Supervisor(os.path.join(tmp, "root")), self._host)
        self.crashes: list[BaseException] = []
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(lambda loop, ctx: self.crashes.append(
            ctx.get("exception") or RuntimeError(ctx["message"])))
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10), "the in-process daemon did not start"

    @staticmethod
    async def _host():
        return {}

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)

        async def handle(reader, writer):
            try:
                await self.server.handle(reader, writer)
            except BaseException as exc:  # what would kill a connection's task
                if not isinstance(exc, asyncio.CancelledError):
                    self.crashes.append(exc)
                raise

        async def main():
            self.srv = await asyncio.start_unix_server(handle, path=self.path)
            ready.set()
            await self.srv.serve_forever()
        try:
            self.loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass

    def stop(self):
        def cancel():
            self.srv.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
        self.loop.call_soon_threadsafe(cancel)
        self.thread.join(10)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = _Daemon(str(tmp_path_factory.mktemp("mux")))
    yield d
    d.stop()


def _connect(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)))
    return s


def _drain(s: socket.socket, deadline: float, quiet: float | None = 0.3) -> list:
    """Everything the daemon says until it closes (or, with ``quiet``, goes quiet for
    that long); not closing within ``deadline`` is a failure."""
    reader = P.FrameReader()
    out = []
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        s.settimeout(quiet if quiet else max(0.01, end - time.monotonic()))
        try:
            data = s.recv(1 << 16)
        except socket.timeout:
            if quiet:
                return out  # nothing more to say about what we sent
            continue
        except ConnectionResetError:
            return out  # closed with our bytes unread: a close all the same
        if not data:
            return out
        try:
            out += reader.feed(data)
        except P.ProtocolError as exc:
            pytest.fail(f"the daemon sent an invalid frame: {exc}")
    pytest.fail(f"the daemon neither closed nor went quiet within {deadline} s")


numbers = st.one_of(st.integers(min_value=-2, max_value=5),
                    st.sampled_from([0, 1 << 31, (1 << 32) - 1, -(1 << 40)]))
services = st.one_of(st.sampled_from(P.SERVICES), st.text(max_size=8))
file_requests = st.sampled_from([
    P.FileList(agent="a"), P.FileRead(agent="a", path="file"),
    P.FileRead(agent="a", path="../../etc/passwd"), P.FileList(agent="zz"),
    P.FileWatch(agent="a"), P.FileUnwatch(), P.GetStatus(), P.VcsStatus(agent="a"),
    P.Hello(version=1)])
payloads = st.one_of(
    st.binary(max_size=64),
    file_requests.map(P.encode),
    st.just(P.HEADER.pack(P.MAX_FRAME + 5, P.FileList.KIND)),
    st.just(b"x" * P.STREAM_CHUNK))
frames = st.one_of(
    st.builds(P.OpenStream, stream=numbers, service=services,
              port=st.integers(min_value=-1, max_value=70000)),
    st.builds(P.StreamData, stream=numbers, data=payloads),
    st.builds(P.StreamAck, stream=numbers, size=st.integers(min_value=-(1 << 40),
                                                            max_value=1 << 40)),
    st.builds(P.StreamClose, stream=numbers, message=st.text(max_size=10),
              code=st.text(max_size=5)),
    st.builds(P.GetStatus))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.builds(P.OpenStream, stream=st.integers(1, 3),
                       service=st.sampled_from(["status", "file", "vcs"])),
       rest=st.lists(frames, max_size=12), junk=st.binary(max_size=16))
def test_hostile_stream_frames_never_crash_or_hang(daemon, first, rest, junk):
    s = _connect(daemon.path)
    try:
        wire = P.encode(first)
        for msg in rest:
            try:
                wire += P.encode(msg)
            except P.ProtocolError:
                pass  # too big to encode: the sender's problem, not the daemon's
        try:
            s.sendall(wire + junk)
            s.shutdown(socket.SHUT_WR)  # our EOF: the daemon must end the connection
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon closed on a bad frame before reading all of it
        _drain(s, 20, quiet=None)
    finally:
        s.close()
    assert not daemon.crashes, daemon.crashes
    # The daemon still serves a well-behaved client on a new connection.
    with Mux(daemon.path) as mux:
        c = mux.request_client("status")
        assert c.request(P.GetStatus(), P.StatusReport).agents == [{"name": "a"}]


def test_window_overrun_closes_only_that_stream(daemon):
    """A client that sends past its credit loses that stream (code "window"); the
    connection and its other streams carry on."""
    s = _connect(daemon.path)
    try:
        s.sendall(P.encode(P.OpenStream(stream=1, service="status")) +
                  P.encode(P.OpenStream(stream=2, service="file")))
        # Bytes that are one never-completed frame, so the service consumes none of them.
        header = P.HEADER.pack(P.MAX_FRAME, P.FileList.KIND)
        blob = header + b"\0" * (P.STREAM_CHUNK - len(header))
        for _ in range(P.STREAM_WINDOW // P.STREAM_CHUNK + 1):
            s.sendall(P.encode(P.StreamData(stream=2, data=blob)))
            blob = b"\0" * P.STREAM_CHUNK
        s.sendall(P.encode(P.StreamData(stream=1, data=P.encode(P.GetStatus()))))
        got = _drain(s, 20)
    finally:
        s.close()
    closes = {m.stream: m for m in got if isinstance(m, P.StreamClose)}
    assert closes[2].code == "window", closes
    assert 1 not in closes
    data = b"".join(m.data for m in got if isinstance(m, P.StreamData) and m.stream == 1)
    assert isinstance(P.FrameReader().feed(data)[0], P.StatusReport)


def test_negative_ack_is_a_protocol_error(daemon):
    s = _connect(daemon.path)
    try:
        s.sendall(P.encode(P.OpenStream(stream=1, service="status")) +
                  P.encode(P.StreamAck(stream=1, size=-5)))
        got = _drain(s, 10)
    finally:
        s.close()
    errors = [m for m in got if isinstance(m, P.Error)]
    assert errors and errors[-1].fatal and "acknowledges -5 bytes" in errors[-1].message


def test_forward_throughput_and_order(daemon):
    """A forward stream moves 20 MB through the window unchanged, in order."""
    srv = socket.create_server(("127.0.0.1", 0))

    def echo():
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)
    threading.Thread(target=echo, daemon=True).start()
    payload = os.urandom(20 << 20)
    with Mux(daemon.path) as mux:
        s = mux.open("forward", port=srv.getsockname()[1])
        threading.Thread(target=s.sendall, args=(payload,), daemon=True).start()
        got = bytearray()
        s.settimeout(30)
        while len(got) < len(payload):
            chunk = s.recv(1 << 20)
            assert chunk, f"forward ended after {len(got)} bytes"
            got += chunk
        assert bytes(got) == payload
        s.close()
    srv.close()


_VALUES = {int: st.integers(-(1 << 40), 1 << 40), str: st.text(max_size=12),
           bool: st.booleans(), bytes: st.binary(max_size=32),
           float: st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 1 << 40),
           list: st.lists(st.text(max_size=5) | st.integers(), max_size=3),
           dict: st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)}


def _message(cls):
    fields = {name: (st.none() | _VALUES[typ]) if optional else _VALUES[typ]
              for name, typ, optional, _ in P.fields_of(cls)}
    return st.builds(cls, **fields)


any_message = st.sampled_from(sorted(P.KINDS.values(), key=lambda c: c.KIND)
                              ).flatmap(_message)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=st.lists(any_message, min_size=1, max_size=6), in_stream=st.booleans())
def test_any_request_of_any_kind_gets_an_answer_or_a_close(daemon, msgs, in_stream):
    """The control request parser: every message kind, fields of the right types and
    hostile values, on a plain connection or inside a stream."""
    s = _connect(daemon.path)
    try:
        wire = b""
        for msg in msgs:
            try:
                wire += P.encode(msg)
            except P.ProtocolError:
                pass
        if in_stream:
            wire = P.encode(P.OpenStream(stream=1, service="status")) + b"".join(
                P.encode(P.StreamData(stream=1, data=wire[i:i + P.STREAM_CHUNK]))
                for i in range(0, len(wire), P.STREAM_CHUNK))
        try:
            s.sendall(wire)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        _drain(s, 20, quiet=None)
    finally:
        s.close()
    assert not daemon.crashes, daemon.crashes


logging.getLogger("clowder-control").setLevel(logging.CRITICAL)
