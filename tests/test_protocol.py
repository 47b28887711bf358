"""The frame codec: round trips, and a property test that hostile input never crashes it.

Acceptance point 6 of issue 2 is covered twice: here against the decoder itself
(thousands of generated inputs), and in test_hostile_frames.py against a live host.
"""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clowder_wire as P
from clowder_wire.jsonpart import dumps


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


# Frames encoded by the last version (ptyhostd/protocol.py at 8f87615), byte for byte.
LAST_VERSION_FRAMES = [
    ("Hello(version=1, client='clowderctl 0.1.0')",
     '0000002d0064000000297b2276657273696f6e223a312c22636c69656e74223a22636c6f7764'
     '657263746c20302e312e30227d'),
    ("Welcome(version=1, server='ptyhostd 0.1.0', uid=1000)",
     '000000360065000000327b2276657273696f6e223a312c22736572766572223a22707479686f'
     '73746420302e312e30222c22756964223a313030307d'),
    ("Error(message='no such session', code='not-found', fatal=False)",
     '0000004200660000003e7b226d657373616765223a226e6f20737563682073657373696f6e22'
     '2c22636f6465223a226e6f742d666f756e64222c22666174616c223a66616c73657d'),
    ("Spawn(argv=['bash', '-l'], name='w', cwd='/tmp', env={'TERM': 'xterm'}, cols=120, rows=40)",
     '0000006a00c8000000667b2261726776223a5b2262617368222c222d6c225d2c226e616d6522'
     '3a2277222c22637764223a222f746d70222c22656e76223a7b225445524d223a22787465726d'
     '227d2c22636f6c73223a3132302c22726f7773223a34302c2275736572223a6e756c6c7d'),
    ("Attach(session='ab12', cols=80, rows=24, token='t0')",
     '0000005500ce000000517b2273657373696f6e223a2261623132222c22636f6c73223a38302c'
     '22726f7773223a32342c22726561645f6f6e6c79223a66616c73652c227265706c6179223a2d'
     '312c22746f6b656e223a227430227d'),
    ("Input(data=b'ls\\r', seq=3)",
     '0000001000cf000000097b22736571223a337d6c730d'),
    ("Output(data=b'\\x1b[1mhi\\x1b[0m')",
     '0000000e012f000000001b5b316d68691b5b306d'),
    ("Exited(session='ab12', status='exited', exit_code=0)",
     '000000440130000000407b2273657373696f6e223a2261623132222c22737461747573223a22'
     '657869746564222c22657869745f636f6465223a302c227369676e616c223a6e756c6c7d'),
    ("SessionList(sessions=[{'id': 'ab12', 'state': 'running'}])",
     '00000032012e0000002e7b2273657373696f6e73223a5b7b226964223a2261623132222c2273'
     '74617465223a2272756e6e696e67227d5d7d'),
    ("StatusReport(agents=[{'name': 'a'}])",
     '00000044019b000000407b226167656e7473223a5b7b226e616d65223a2261227d5d2c22756e'
     '636c61696d6564223a5b5d2c2270726f626c656d73223a5b5d2c22686f7374223a7b7d7d'),
    ("OpenStream(stream=1, service='file')",
     '0000002a01f4000000267b2273747265616d223a312c2273657276696365223a2266696c6522'
     '2c22706f7274223a307d'),
    ("StreamData(stream=1, data=b'\\x00\\x01')",
     '0000001201f60000000c7b2273747265616d223a317d0001'),
    ("FileRead(agent='a', path='x.txt')",
     '0000003b0259000000377b226167656e74223a2261222c2270617468223a22782e747874222c'
     '226f6666736574223a302c226c656e677468223a3938333034307d'),
    ("VcsReport(kind='diff', data=b'+x\\n', truncated=True)",
     '0000003e02c6000000377b226b696e64223a2264696666222c22696e666f223a7b7d2c22656e'
     '7472696573223a5b5d2c227472756e6361746564223a747275657d2b780a'),
]


@pytest.mark.parametrize("text, frame", LAST_VERSION_FRAMES, ids=lambda v: str(v)[:20])
def test_frames_of_the_last_version_are_read_and_written_alike(text, frame):
    """The move to clowder_wire changed no byte: a client of this version talks to a
    daemon of the last one, and the other way round.  A message that grew an optional
    field since (GROWN) is the same frame without it (a reader skips fields it does not
    know), and its old frame reads with the field's default."""
    msg = eval("P." + text)
    grown = GROWN.get(type(msg).__name__, ())
    if grown:
        new = json.loads(P.encode(msg)[P.HEADER.size + P.JSON_LEN.size:])
        old = json.loads(bytes.fromhex(frame)[P.HEADER.size + P.JSON_LEN.size:])
        assert {k: v for k, v in new.items() if k not in grown} == old
    else:
        assert P.encode(msg).hex() == frame
    assert P.FrameReader().feed(bytes.fromhex(frame)) == [msg]


# Optional fields added since LAST_VERSION_FRAMES were taken.
GROWN = {"Welcome": ("pid",),  # the daemon's pid, for ptyhostd --hand-off
         "StatusReport": ("sessions", "omitted"),  # plain sessions (issue 14); a bound
         "Spawn": ("resumes",),  # the session of a previous boot it opens on (issue 17)
         # Scrollback sent with the repaint, from the same look (issue 13).
         # And the client's terminal for the host to write itself (ptyhostd/terminal.py).
         "Attach": ("history", "history_format", "terminal"),
         # A list too large for one frame comes in pages (test_hostile_listing.py).
         "SessionList": ("more",), "ListSessions": ("after",)}


def test_fast_output_frame_matches_generic_encoding():
    assert P.encode_output(b"abc") == P.encode(P.Output(data=b"abc"))


def test_session_list_from_encoded_sessions_matches_generic_encoding():
    """The host's SessionList from its sessions' kept JSON (ptyhostd/session.py
    info_json) is the frame ``encode`` makes, and the limit on one is checked."""
    sessions = [{"id": "ab12", "argv": ["sh", "-c", "\u00e9\U0001f600\x7f\"\\"],
                 "created": 1765000000.125, "pid": 7, "agent": False, "cwd": None},
                {"id": "cd34", "argv": [], "exit_code": -1, "signal": 9}]
    for listed, more in ((sessions, ""), (sessions[:1], "ab12"), ([], "")):
        assert P.session_list_frame([dumps(s) for s in listed], more) == \
            P.encode(P.SessionList(sessions=listed, more=more))
    with pytest.raises(P.ProtocolError, match="exceeds"):
        P.session_list_frame(['"' + "x" * P.MAX_FRAME + '"'])
    assert P.argv_bytes(["sh", "\u00e9"]) == 3 + 3  # UTF-8 and a NUL each


@pytest.mark.parametrize("more, after, want", [
    ("", "", None), ("", "ab12", None),  # the last page
    ("ab12", "", "ab12"), ("cd34", "ab12", "cd34"),  # on after this page's last id
    ("ab12", "ab12", None), ("0000", "ab12", None),  # a host whose pages go nowhere
])
def test_the_next_page_of_a_listing_is_asked_after_its_last_id_and_only_forward(
        more, after, want):
    """Every client pages a listing by this one rule (clowder_wire.next_page)."""
    assert P.next_page(P.SessionList(sessions=[], more=more), after) == want


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


def test_search_dirs_are_what_systemd_takes():
    """A Spawn's PATH as ExecSearchPath=: absolute and normalised, each once."""
    path = "/usr/bin/://usr//local/bin:.:bin::/a/../b:/x/./y:/usr/bin:/ok\nUser=root:/"
    assert P.search_dirs(path) == ["/usr/bin", "/usr/local/bin", "/"]
    assert P.search_dirs("") == []


any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    | st.characters(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5) | st.integers() | st.floats() | st.booleans()
                      | st.none(), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=3000, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_values | st.floats() | st.characters(),
                       max_size=6) | any_json,
       st.sampled_from([(",", ":"), (", ", ": ")]))
def test_json_parts_are_what_json_dumps_writes(value, separators):
    """JSON is written without importing json (clowder_wire/jsonpart.py): byte for byte
    what json.dumps writes, flat objects (the frames' own path) and nested ones, lone
    surrogates and non-ASCII text, bools, huge integers, floats and non-string keys
    included, with the wire's separators and json's default ones (`ps --json`), and
    read back as written."""
    from clowder_wire import jsonpart
    want = json.dumps(value, separators=separators)
    assert jsonpart.dumps(value, separators) == want
    if separators == jsonpart.COMPACT:  # and the host's encoder of session info
        assert jsonpart.dumps_acyclic(value) == want
    # Read back as json reads it (1 and "1" as keys are one key then: compare as written).
    assert json.dumps(jsonpart.loads(want.encode())) == json.dumps(json.loads(want))


def test_json_refusals_are_json_dumps_refusals():
    """What json.dumps refuses is refused in its words, and a refusal midway leaves
    nothing behind: the same containers written afterwards are no circular reference."""
    from clowder_wire import jsonpart
    shared = [1, 2]
    bad = {"a": shared, "b": {"c": [shared, object()]}}
    for value in (bad, [object()], {"x": b"bytes"}):
        with pytest.raises(TypeError) as ours:
            jsonpart.dumps(value)
        with pytest.raises(TypeError) as theirs:
            json.dumps(value)
        assert str(ours.value) == str(theirs.value)
    circular: list = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        jsonpart.dumps({"a": circular})
    bad["b"]["c"].pop()  # what was refused, gone: the same containers, written again
    assert jsonpart.dumps(bad) == json.dumps(bad, separators=(",", ":"))


@settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.recursive(json_values | st.floats(),
                 lambda inner: st.lists(inner, max_size=4)
                 | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12)
    .map(lambda v: json.dumps(v, indent=None)),  # well formed, every kind of value
    st.text(alphabet=' \t\n\r\x0c{}[]",:0123456789.eE+-\\ntrufalsNIy\u00e9\ud800',
            max_size=20),  # mostly malformed
    st.sampled_from(['  {"a": 1} ', '{"a":1}{', '[1,]', '01', '"\\ud800"', 'NaN', '-Infinity',
                     '1e400', '"\\u00e9"', '\x0c{}', '{"a":1}\x0c', '', ' ', '"a\tb"', '1' * 5000]),
))
def test_json_parts_decode_as_json_loads_does(text):
    """jsonpart.loads (json's C scanner, without importing json) gives json.loads's value
    for every UTF-8 text, and a ValueError wherever json.loads raises one."""
    from clowder_wire.jsonpart import loads as _loads
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate in the text itself: not UTF-8
        data = text.encode("utf-8", "surrogatepass")
    try:
        want = json.loads(data)
    except ValueError:
        with pytest.raises(ValueError):
            _loads(data)
        return
    got = _loads(data)
    assert json.dumps(got) == json.dumps(want)  # NaN != NaN: compare as written


def test_frames_split_without_decoding():
    """FrameReader.frames gives (kind, payload) as feed would decode them, and data_of
    the raw part, across any cut of the stream (ctl/firstpaint.py reads these)."""
    stream = P.encode(P.Welcome(version=1, server="s", uid=0)) + \
        P.encode(P.Output(data=b"\x1b[Hrow")) + P.encode(P.SnapshotData(data=b""))
    for cut in range(len(stream) + 1):
        reader = P.FrameReader()
        frames = reader.frames(stream[:cut]) + reader.frames(stream[cut:])
        assert [k for k, _ in frames] == [101, 303, 307]
        assert [P.data_of(p) for _, p in frames[1:]] == [b"\x1b[Hrow", b""]
        assert P.decode(*frames[0]) == P.Welcome(version=1, server="s", uid=0)
    with pytest.raises(P.ProtocolError):
        P.data_of(struct.pack("!I", 9) + b"{}")
