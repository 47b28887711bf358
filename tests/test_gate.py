"""clowder-web's Gate (webd/gate.py) alone: where request heads end, however the bytes
are split, and when it stops and resumes reading.  The connection's real behaviour,
with aiohttp behind it and its own bound lifted, is tests/test_web_gate.py's."""

from __future__ import annotations

import os
import socket

import pytest

from webd import gate as gate_mod
from webd.gate import MAX_AHEAD, MAX_PER_UID, Gates


class Transport:
    """The transport side of one real unix socket pair (so peer.py reads our uid)."""

    def __init__(self):
        self.sock, self.other = socket.socketpair()
        self.paused = False
        self.written = b""
        self.closed = False

    def get_extra_info(self, name):
        return {"socket": self.sock, "peername": "", "sockname": ""}.get(name)

    def pause_reading(self):
        assert not self.paused, "paused twice"
        self.paused = True

    def resume_reading(self):
        assert self.paused, "resumed while reading"
        self.paused = False

    def is_closing(self):
        return self.closed

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True


class Inner:
    """What aiohttp's protocol was handed."""

    def __init__(self):
        self.data = b""
        self.made = self.lost = False

    def connection_made(self, transport):
        self.made = True

    def data_received(self, data):
        self.data += data

    def connection_lost(self, exc):
        self.lost = True


HEAD = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
BARE = b"GET /a HTTP/1.1\nHost: x\n\n"  # bare LF: aiohttp takes it


def opened(gates):
    inner, transport = Inner(), Transport()
    g = gates.protocol(inner)
    g.connection_made(transport)
    return g, inner, transport


@pytest.fixture
def gates():
    return Gates(frozenset(), lambda who, held: None)


def pump(g, transport, kernel: list) -> None:
    """What the event loop does: reads waiting in the socket are delivered while the
    transport reads."""
    while kernel and not transport.paused:
        g.data_received(kernel.pop(0))


@pytest.mark.parametrize("stream", [HEAD * 10, BARE * 10, (HEAD + BARE) * 5,
                                    b"\r\n\r\n" + HEAD * 10])
def test_heads_are_counted_however_the_bytes_are_split(gates, stream):
    """Every split point of the stream, one byte at a time and in two reads: exactly
    MAX_AHEAD heads are passed on, then reading stops; each begun request lets one
    more through, and every byte arrives once, in order."""
    heads = stream.count(b"GET")
    for cut in [None] + list(range(1, len(stream))):
        g, inner, transport = opened(gates)
        kernel = [stream[i:i + 1] for i in range(len(stream))] if cut is None \
            else [stream[:cut], stream[cut:]]
        pump(g, transport, kernel)
        assert inner.data.count(b"GET") == MAX_AHEAD, (cut, inner.data)
        assert transport.paused, cut
        for begun in range(1, heads - MAX_AHEAD + 1):
            g.started()
            pump(g, transport, kernel)
            assert inner.data.count(b"GET") == MAX_AHEAD + begun, (cut, begun)
        for _ in range(MAX_AHEAD):
            g.started()
            pump(g, transport, kernel)
        assert inner.data == stream and not transport.paused and not kernel, cut
        g.connection_lost(None)


def test_a_head_in_pieces_passes_on_at_once(gates):
    """Bytes of a head still coming go on to aiohttp as they come (its own limits bound
    a head's size), and count once it ends."""
    g, inner, transport = opened(gates)
    g.data_received(b"GET / HTTP/1.1\r\nX: " + b"y" * 100000)
    assert len(inner.data) > 100000 and g.ahead == 0
    g.data_received(b"\r\n\r\n")
    assert g.ahead == 1 and not transport.paused


def test_a_websocket_passes_everything(gates):
    """Once answered 101, frames pass whatever they hold, and reading resumes."""
    g, inner, transport = opened(gates)
    frames = b"\x81\x05hello\n\n\n\n" * 1000
    g.data_received(HEAD * MAX_AHEAD + frames)
    assert transport.paused and not inner.data.endswith(frames)
    g.started()
    gates.upgraded(transport)
    assert inner.data.endswith(frames) and not transport.paused
    g.data_received(HEAD * 100)
    assert inner.data.endswith(HEAD * 100) and not transport.paused


def test_connections_over_the_cap_are_answered_and_closed():
    refused = []
    gates = Gates(frozenset(), lambda who, held: refused.append((who, held)))
    held = [opened(gates) for _ in range(MAX_PER_UID)]
    assert all(inner.made and not transport.closed for _, inner, transport in held)
    g, inner, transport = opened(gates)
    assert transport.closed and not inner.made
    assert transport.written.startswith(b"HTTP/1.1 503 ")
    assert refused == [(os.getuid(), MAX_PER_UID)]
    g.data_received(HEAD)  # nothing of it reaches aiohttp
    g.connection_lost(None)
    assert not inner.data and not inner.lost
    held[0][0].connection_lost(None)  # one closed: room for one more
    assert not opened(gates)[2].closed
    assert gates.held == {os.getuid(): MAX_PER_UID}


def test_exempt_uids_are_not_counted():
    gates = Gates(frozenset({os.getuid()}), lambda who, held: None)
    opened_ = [opened(gates) for _ in range(MAX_PER_UID + 5)]
    assert not any(t.closed for _, _, t in opened_) and gates.held == {}


def test_a_remote_peer_is_counted_by_its_address(gates, monkeypatch):
    """A peer on another machine has no uid here (peer.py): its address is counted."""
    monkeypatch.setattr(gate_mod.peer, "uid_of", lambda transport: None)
    transport = Transport()
    transport.get_extra_info = lambda name: ("192.0.2.7", 4000) if name == "peername" \
        else None
    both = [gates.protocol(Inner()) for _ in range(2)]
    for g in both:
        g.connection_made(transport)
    assert gates.held == {"address 192.0.2.7": 2}
    for g in both:
        g.connection_lost(None)
    assert gates.held == {}
