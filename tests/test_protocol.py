"""The frame codec: round trips, and a property test that hostile input never crashes it.

Acceptance point 6 of issue 2 is covered twice: here against the decoder itself
(thousands of generated inputs), and in test_hostile_frames.py against a live host.
"""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clowder_wire as P


def roundtrip(msg):
    frames = P.FrameReader().feed(P.encode(msg))
    assert frames == [msg]


def test_roundtrip_every_kind():
    roundtrip(P.Hello(version=1, client="t"))
    roundtrip(P.Spawn(argv=["sh", "-c", "x"], name=None, cwd="/", env={"A": "b"},
                      cols=100, rows=30))
    roundtrip(P.Send(session="ab", data=b"\x00\xff bytes"))
    roundtrip(P.Output(data=b"x" * 1000))
    roundtrip(P.Exited(session="a", status="killed", signal=9))
    roundtrip(P.Error(message="no", code="x", fatal=True))
    roundtrip(P.Ok())


def test_fast_output_frame_matches_generic_encoding():
    assert P.encode_output(b"abc") == P.encode(P.Output(data=b"abc"))


def test_split_anywhere_reassembles():
    data = P.encode(P.Send(session="s", data=b"0123456789")) + P.encode(P.Ok())
    for cut in range(len(data) + 1):
        r = P.FrameReader()
        got = r.feed(data[:cut]) + r.feed(data[cut:])
        assert got == [P.Send(session="s", data=b"0123456789"), P.Ok()]


def test_oversize_refused_before_body():
    r = P.FrameReader()
    with pytest.raises(P.ProtocolError) as e:
        r.feed(P.HEADER.pack(P.MAX_FRAME + 1, P.Ok.KIND))  # header only: no body sent
    assert e.value.code == "oversize"


def test_unknown_kind_and_bad_fields():
    with pytest.raises(P.ProtocolError) as e:
        P.FrameReader().feed(P.HEADER.pack(4, 9999) + b"\0\0\0\0")
    assert e.value.code == "unknown-kind"
    body = b'{"argv": "sh"}'
    frame = P.HEADER.pack(4 + len(body), P.Spawn.KIND) + struct.pack("!I", len(body)) + body
    with pytest.raises(P.ProtocolError, match="argv"):
        P.FrameReader().feed(frame)
    body = b'{"version": true}'
    frame = P.HEADER.pack(4 + len(body), P.Hello.KIND) + struct.pack("!I", len(body)) + body
    with pytest.raises(P.ProtocolError, match="version"):
        P.FrameReader().feed(frame)


def test_missing_required_field():
    frame = P.HEADER.pack(4, P.Send.KIND) + b"\0\0\0\0"
    with pytest.raises(P.ProtocolError, match="missing field 'session'"):
        P.FrameReader().feed(frame)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_garbage_never_crashes(data):
    """Arbitrary bytes: whole messages or a ProtocolError, nothing else."""
    r = P.FrameReader()
    try:
        for msg in r.feed(data):
            assert isinstance(msg, P.Message)
    except P.ProtocolError as exc:
        assert str(exc)


kinds = st.sampled_from(sorted(P.KINDS))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=3),
    max_leaves=8)


@settings(max_examples=3000, deadline=None)
@given(kinds, st.dictionaries(st.sampled_from(
    ["version", "argv", "session", "cols", "rows", "data", "env", "name", "signal", "x"]),
    json_values, max_size=5), st.binary(max_size=20))
def test_fuzz_wellformed_frames_with_hostile_fields(kind, obj, tail):
    """Valid framing, hostile JSON: decoded with the right types, or refused clearly."""
    import json
    body = json.dumps(obj).encode()
    frame = P.HEADER.pack(4 + len(body) + len(tail), kind) + struct.pack("!I", len(body)) \
        + body + tail
    try:
        (msg,) = P.FrameReader().feed(frame)
    except P.ProtocolError as exc:
        assert exc.code in ("bad-field", "bad-json", "truncated")
        return
    assert msg.KIND == kind
    for name, typ, optional, _ in P.fields_of(type(msg)):
        value = getattr(msg, name)
        assert isinstance(value, typ) or (optional and value is None)
