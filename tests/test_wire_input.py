"""The Input frame's fast paths (clowder_wire/host.py: encode_input and the decoder it
registers) make and read exactly what the general encoder and decoder do: the same
bytes, the same message, or the same refusal, for every spelling a peer may send."""

from __future__ import annotations

import random

import pytest

import clowder_wire as P
from clowder_wire import frame

SEQS = [None, 0, 1, 9, 10, 4095, 2**31, 2**62 - 1, 10**18, 10**19 - 1]
DATAS = [b"", b"x", b"\x1b[A", bytes(range(256)), b"y" * P.MAX_DATA]


def _general(kind: int, payload: bytes):
    """What the general decoder alone says: the message, or the refusal's code."""
    saved = frame.FAST_DECODERS.pop(kind, None)
    try:
        return frame.decode(kind, payload)
    except P.ProtocolError as exc:
        return exc.code
    finally:
        if saved is not None:
            frame.FAST_DECODERS[kind] = saved


def _decoded(kind: int, payload: bytes):
    try:
        return frame.decode(kind, payload)
    except P.ProtocolError as exc:
        return exc.code


def test_input_has_the_fields_the_fast_paths_know():
    # A field added to Input must be added to encode_input and its decoder too.
    assert [f[0] for f in P.Input._FIELDS] == ["data", "seq"]
    assert frame.FAST_DECODERS.get(P.Input.KIND) is not None


@pytest.mark.parametrize("seq", SEQS)
def test_encode_input_is_the_general_encoding(seq):
    for data in DATAS:
        assert P.encode_input(data, seq) == P.encode(P.Input(data=data, seq=seq))
        assert P.encode_input(bytearray(data), seq) == P.encode(P.Input(data=data, seq=seq))


@pytest.mark.parametrize("seq", SEQS)
def test_what_encode_input_writes_reads_back_as_the_general_decoder_reads_it(seq):
    for data in DATAS:
        wire = P.encode_input(data, seq)
        [(kind, payload)] = P.FrameReader().frames(wire)
        fast = frame.decode(kind, payload)
        assert type(fast) is P.Input and fast == _general(kind, payload)
        assert type(fast.data) is bytes and fast.seq == seq


def _payload(json_part: bytes, data: bytes = b"k", jlen: int | None = None) -> bytes:
    return (len(json_part) if jlen is None else jlen).to_bytes(4, "big") + json_part + data


ODD = [b'{"seq": 5}', b'{"seq":05}', b'{"seq":00}', b'{"seq":-1}', b'{"seq":1e3}',
       b'{"seq":5.0}', b'{"seq":true}', b'{"seq":"5"}', b'{}', b'', b'{"seq":5,"x":1}',
       b'{"x":1,"seq":5}', b'{"seq":null }', b'{"seq":nul}', b'{"seq":}', b'{"seq":5',
       b'{"seq":' + b"9" * 25 + b"}", b'{"seq":' + b"9" * 5000 + b"}", b'{"seq":\xd9\xa5}',
       b'[1]', b'{"seq":1}}', b'{"seq":\x001}']


@pytest.mark.parametrize("json_part", ODD)
def test_any_other_spelling_gets_the_general_decoders_answer(json_part):
    kind = P.Input.KIND
    for payload in (_payload(json_part), _payload(json_part, b""),
                    _payload(json_part, jlen=len(json_part) + 1),
                    _payload(json_part, jlen=max(0, len(json_part) - 1))):
        assert _decoded(kind, payload) == _general(kind, payload), payload


def test_truncated_payloads_get_the_general_decoders_answer():
    kind = P.Input.KIND
    whole = P.encode_input(b"abc", 12345)[frame.HEADER.size:]
    for cut in range(len(whole) + 1):
        payload = whole[:cut]
        assert _decoded(kind, payload) == _general(kind, payload), payload


def test_random_payloads_get_the_general_decoders_answer():
    rng = random.Random(7)
    pieces = [b'{"seq":', b"null", b"}", b"0", b"1", b"9", b"-", b" ", b'"', b"{", b",",
              b'"x":1', b"\xff", b"e", b"."]
    kind = P.Input.KIND
    for _ in range(3000):
        json_part = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        if rng.random() < 0.5:
            json_part = b'{"seq":' + json_part
        jlen = len(json_part) + rng.choice([0, 0, 0, -1, 1, 3])
        payload = _payload(json_part, bytes(rng.randrange(256) for _ in range(3)),
                           jlen=max(0, jlen))
        assert _decoded(kind, payload) == _general(kind, payload), payload
