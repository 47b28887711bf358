"""Bad input against a live host (issue 2, acceptance 6): garbage, oversize frames,
unknown kinds and wrong versions each get an Error frame and a closed connection, and
the host and every session carry on."""

from __future__ import annotations

import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clowder_wire as P


def exchange(path: str, data: bytes, hello: bool = True) -> list:
    """Send ``data`` (after a valid Hello unless told not to); everything until close."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    if hello:
        s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)))
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        pass
    buf = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    s.close()
    return P.FrameReader().feed(buf)


def test_each_kind_of_bad_input(host):
    sid = host.spawn("sh", "-c", "echo alive; exec sleep 100000")
    cases = {
        "garbage": (b"GET / HTTP/1.1\r\n\r\n", False),
        "oversize": (P.HEADER.pack(P.MAX_FRAME + 1, P.Send.KIND), True),
        "unknown-kind": (P.HEADER.pack(4, 4242) + b"\0\0\0\0", True),
        "version": (P.encode(P.Hello(version=999)), False),
        "bad-json": (P.HEADER.pack(7, P.Spawn.KIND) + b"\0\0\0\3{{{", True),
        "handshake": (P.encode(P.ListSessions()), False),
    }
    for name, (data, hello) in cases.items():
        frames = exchange(host.socket, data, hello)
        errors = [f for f in frames if isinstance(f, P.Error)]
        assert errors and errors[-1].fatal and errors[-1].message, f"{name}: {frames}"
    # A bad request that is valid protocol is refused without closing anything.
    frames = exchange(host.socket, P.encode(P.Send(session="nope", data=b"x"))
                      + P.encode(P.ListSessions()))
    assert isinstance(frames[1], P.Error) and not frames[1].fatal
    assert isinstance(frames[2], P.SessionList)
    assert host.ps()[sid]["state"] == "running"
    assert b"alive" in host.backlog(sid)


def test_fuzz_live_host(host):
    pid = host.main_pid()
    sid = host.spawn("sleep", "100000")

    @settings(max_examples=400, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=200), st.booleans())
    def one(data, hello):
        for f in exchange(host.socket, data, hello):
            assert isinstance(f, P.Message)

    one()
    assert host.main_pid() == pid, "the host restarted: a client's bytes crashed it"
    assert host.ps()[sid]["state"] == "running"


def test_version_skew_gets_a_clear_answer_not_a_hang(host):
    """A client of another protocol version (older or newer) is told both versions and
    closed at once, by the host and by the control daemon."""
    control = "/run/clowder/control.sock" if host.scope == "system" else \
        f"/run/user/{host.uid}/clowder/control.sock"
    for path in (host.socket, control):
        for version in (P.PROTOCOL_VERSION + 1, P.PROTOCOL_VERSION - 1):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)  # a hang fails here, with a timeout error
            s.connect(path)
            s.sendall(P.encode(P.Hello(version=version)))
            buf = b""
            while chunk := s.recv(65536):
                buf += chunk
            s.close()
            (err,) = P.FrameReader().feed(buf)
            assert isinstance(err, P.Error) and err.fatal, err
            assert str(P.PROTOCOL_VERSION) in err.message, err.message
