"""The wire protocol between clowderctl (or any client) and ptyhostd.

Everything both sides must agree on lives in this one module.

A frame is a 6-byte header, ``!IH`` = (payload length, kind), then the payload.
The length is checked against ``MAX_FRAME`` *before* the body is read, so a hostile
length can never make the reader allocate.  A payload is a 4-byte length of a JSON
object (0 means ``{}``), the JSON object, then raw bytes for the message's ``data``
field if it has one.  JSON carries the typed fields; raw bytes carry terminal I/O so
the byte path never base64-encodes anything.

Every connection starts with HELLO from the client, answered by WELCOME (or by a
fatal ERROR on a version mismatch).  Kinds are numbered in blocks: 1xx handshake and
errors, 2xx PTY host requests, 3xx their replies and streams, 4xx the control plane
(clowder-control speaks the same framing on its own socket), 5xx multiplexed streams,
6xx the file service, 7xx the VCS service.  Unknown kinds are a fatal error.

Don't forget to bump PROTOCOL_VERSION if any of these change in a way an older peer
would misread; adding an optional field or a new kind does not need a bump.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 20  # 1 MiB: the largest payload either side accepts
HEADER = struct.Struct("!IH")
_JSON_LEN = struct.Struct("!I")
# The largest raw chunk a sender puts in one frame (leaves room for the JSON part).
MAX_DATA = MAX_FRAME - 64 * 1024
# Session names starting with this are clowder-control's agents (``agent:NAME`` and
# ``agent:NAME/SHELL``): the host takes them only from clowder-control (ptyhostd/peer.py).
AGENT_PREFIX = "agent:"


class ProtocolError(Exception):
    """A peer sent something that is not valid protocol; the connection must close."""

    def __init__(self, message: str, code: str = "protocol"):
        super().__init__(message)
        self.code = code


# --- messages -------------------------------------------------------------------------

_REGISTRY: dict[int, type["Message"]] = {}


def _register(cls):
    if cls.KIND in _REGISTRY:
        raise RuntimeError(f"kind {cls.KIND} registered twice")
    _REGISTRY[cls.KIND] = cls
    # Only __init__ is generated per class; equality and repr come from Message. Each
    # generated method costs an exec: ~6 ms of every clowder process's start for ~50 kinds.
    return dataclass(cls, eq=False, repr=False)


class Message:
    """Base of every payload type; ``KIND`` is its number on the wire."""

    KIND: ClassVar[int]

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # mutable, like a dataclass with eq

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                           for f in dataclasses.fields(self))
        return f"{type(self).__name__}({fields})"


# 1xx: handshake and errors


@_register
class Hello(Message):
    """Client -> host, first frame. Answered by Welcome or a fatal Error."""

    KIND = 100
    version: int
    client: str = ""


@_register
class Welcome(Message):
    """Host -> client: the handshake succeeded; ``uid`` is who the host thinks you are."""

    KIND = 101
    version: int
    server: str
    uid: int


@_register
class Error(Message):
    """Host -> client: a request failed. ``fatal`` means the host closes the connection."""

    KIND = 102
    message: str
    code: str = "error"
    fatal: bool = False


# 2xx: requests (client -> host); each is answered as its docstring says


@_register
class Spawn(Message):
    """Start a program on a new pty as its own systemd unit. -> SessionInfo."""

    KIND = 200
    argv: list
    name: Optional[str] = None
    cwd: Optional[str] = None
    env: dict = field(default_factory=dict)
    cols: int = 80
    rows: int = 24
    user: Optional[str] = None  # only root may name another user


@_register
class ListSessions(Message):
    """List the sessions this client may see. -> SessionList."""

    KIND = 201


@_register
class Send(Message):
    """Write ``data`` to a session's terminal input. -> Ok."""

    KIND = 202
    session: str
    data: bytes = b""


@_register
class GetBacklog(Message):
    """Ask for the retained raw output. -> Output frames, then Ok."""

    KIND = 203
    session: str


@_register
class Wait(Message):
    """Block until the session has ended. -> Exited."""

    KIND = 204
    session: str


@_register
class Kill(Message):
    """Send a signal to the session's program (its whole unit). -> Ok.

    ``escalate``: end the session: ``signal`` (SIGHUP), then SIGTERM, then SIGKILL, each
    after the host's grace time (ptyhostd.host.Host.ESCALATION); Ok only once it has ended
    (a Wait then says how).  A host without the field sends ``signal`` alone."""

    KIND = 205
    session: str
    signal: int = 15
    escalate: bool = False


@_register
class Attach(Message):
    """Stream a session. -> Attached, Output (a repaint, then live), ..., Exited."""

    KIND = 206
    session: str
    cols: int = 0  # 0: leave the size alone
    rows: int = 0
    read_only: bool = False
    replay: int = -1  # -1: the screen, repainted; N >= 0: the last N raw bytes instead
    # A client's random name for its input stream, the same on each reattach of one run:
    # the host then numbers what it wrote of it (Input.seq, Attached.input_seq).
    token: Optional[str] = None


@_register
class Input(Message):
    """Attached client -> host: keystrokes. Refused on a read-only attach."""

    KIND = 207
    data: bytes = b""
    seq: Optional[int] = None  # with a token: the stream offset of the end of ``data``


@_register
class Resize(Message):
    """Attached client -> host: its terminal's size changed. No answer."""

    KIND = 208
    cols: int
    rows: int


@_register
class Detach(Message):
    """Attached client -> host: stop streaming. -> Ok, then the host closes."""

    KIND = 209


@_register
class Remove(Message):
    """Forget an ended session and its backlog. -> Ok."""

    KIND = 210
    session: str


@_register
class UpgradeCheck(Message):
    """Run the hand-off pre-check against the installed code, change nothing. -> CheckReport."""

    KIND = 211


@_register
class GetSnapshot(Message):
    """The current screen as ``format`` text, ansi, html or json. -> SnapshotData."""

    KIND = 212
    session: str
    format: str = "text"


@_register
class GetHistory(Message):
    """The last ``lines`` lines of output as plain text. -> SnapshotData."""

    KIND = 213
    session: str
    lines: int = 100


# 3xx: replies and streams (host -> client)


@_register
class Ok(Message):
    """The request succeeded and has nothing more to say."""

    KIND = 300


@_register
class SessionInfo(Message):
    """One session, as a dict with the keys of ``SESSION_FIELDS``."""

    KIND = 301
    session: dict


@_register
class SessionList(Message):
    """Every session visible to the client."""

    KIND = 302
    sessions: list


@_register
class Output(Message):
    """Raw terminal output (backlog or live)."""

    KIND = 303
    data: bytes = b""


@_register
class Exited(Message):
    """The session ended: ``exit_code`` or ``signal`` is set, ``status`` says which."""

    KIND = 304
    session: str
    status: str  # "exited", "killed", "dumped" or "lost"
    exit_code: Optional[int] = None
    signal: Optional[int] = None


@_register
class Attached(Message):
    """The attach succeeded; Output frames follow."""

    KIND = 305
    session: dict
    # With a token: how much of its input stream the host wrote to the pty (resend what
    # follows); -1: the host has no record of that token (a new client, or lost).
    input_seq: Optional[int] = None


@_register
class InputAck(Message):
    """Host -> attached client with a token: its input up to ``seq`` is in the pty."""

    KIND = 309
    seq: int


# 4xx: the control plane (client -> clowder-control), answered as each docstring says


@_register
class AgentUp(Message):
    """Start an agent (and its shells) unless running. -> AgentInfo."""

    KIND = 400
    agent: str


@_register
class AgentDown(Message):
    """Stop an agent and its shells, and keep it down. -> Ok."""

    KIND = 401
    agent: str


@_register
class AgentRestart(Message):
    """Stop then start an agent with its normal command. -> AgentInfo."""

    KIND = 402
    agent: str


@_register
class GetStatus(Message):
    """Everything the control daemon knows. -> StatusReport."""

    KIND = 403


@_register
class AgentInfo(Message):
    """clowder-control -> client: one agent, as in StatusReport.agents."""

    KIND = 410
    agent: dict


@_register
class StatusReport(Message):
    """clowder-control -> client: agents, unclaimed sessions and any load problems."""

    KIND = 411
    agents: list
    unclaimed: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    host: dict = field(default_factory=dict)


@_register
class CheckReport(Message):
    """Host -> client: whether a hand-off to the installed code would be accepted."""

    KIND = 306
    ok: bool
    message: str
    version: str = ""
    new_version: str = ""


@_register
class SnapshotData(Message):
    """Host -> client: a snapshot or history, as UTF-8 bytes."""

    KIND = 307
    data: bytes = b""


# 5xx: multiplexing (client <-> clowder-control). After the handshake a client may open
# numbered streams instead of sending requests; from then on the connection carries only
# 5xx frames. Each stream is a byte stream of its own: for the session, status, file and
# vcs services it carries frames of this same protocol (already greeted), for forward the
# raw bytes of one TCP connection. Flow control is per stream: a sender keeps at most
# STREAM_WINDOW bytes of StreamData unacknowledged, so one stalled stream never holds up
# the others, and an error inside one stream (an oversize frame, a bad path) closes that
# stream only.

STREAM_WINDOW = 1 << 20  # unacknowledged StreamData bytes a sender may have per stream
STREAM_CHUNK = 64 * 1024  # the largest data of one StreamData frame
MAX_STREAMS = 64  # open streams per connection
SERVICES = ("session", "status", "file", "vcs", "forward")


@_register
class OpenStream(Message):
    """Client -> control: open ``stream`` (a new number) to ``service``. -> StreamOpened
    or StreamClose. ``port``: forward only, a TCP port on the remote's loopback."""

    KIND = 500
    stream: int
    service: str
    port: int = 0


@_register
class StreamOpened(Message):
    """Control -> client: the stream is open; StreamData may flow both ways."""

    KIND = 501
    stream: int


@_register
class StreamData(Message):
    """Either way: the next bytes of ``stream`` (at most STREAM_CHUNK)."""

    KIND = 502
    stream: int
    data: bytes = b""


@_register
class StreamAck(Message):
    """Either way: the receiver consumed ``size`` more bytes of ``stream``."""

    KIND = 503
    stream: int
    size: int


@_register
class StreamClose(Message):
    """Either way: ``stream`` is finished; ``code``/``message`` say why if it failed.

    Sent by the side that is done writing; the stream is closed once both sides have
    sent it (a side that receives it stops writing and answers with its own).
    """

    KIND = 504
    stream: int
    message: str = ""
    code: str = ""


# 6xx: the file service, on a "file" stream. Every path is relative to the agent's
# working directory and may not leave it (no "..", no absolute paths, no symlink out).


@_register
class FileList(Message):
    """List a directory. -> FileListing."""

    KIND = 600
    agent: str
    path: str = "."


@_register
class FileRead(Message):
    """Read up to ``length`` bytes of a file from ``offset``. -> FileData."""

    KIND = 601
    agent: str
    path: str
    offset: int = 0
    length: int = MAX_DATA


@_register
class FileWrite(Message):
    """Replace a file's contents with ``data`` (atomically), creating it if ``create``. -> Ok."""

    KIND = 602
    agent: str
    path: str
    create: bool = True
    data: bytes = b""


@_register
class FileWatch(Message):
    """Watch a directory tree. -> Ok, then FileEvents (coalesced) until FileUnwatch."""

    KIND = 603
    agent: str
    path: str = "."


@_register
class FileUnwatch(Message):
    """Stop the watch of this stream. -> Ok."""

    KIND = 604


@_register
class FileListing(Message):
    """Entries of a directory: dicts with name, type ("file", "dir", "link", "other"),
    size and mtime; ``truncated`` when there were more than one listing carries."""

    KIND = 610
    path: str
    entries: list
    truncated: bool = False


@_register
class FileData(Message):
    """Bytes of a file: ``size`` is the file's whole size, ``offset`` where data starts."""

    KIND = 611
    path: str
    size: int
    offset: int = 0
    data: bytes = b""


@_register
class FileEvents(Message):
    """What changed under a watch since the last FileEvents: dicts with path (relative
    to the agent's working directory) and kind ("created", "modified", "deleted");
    ``overflow`` means events were lost and the client should list again."""

    KIND = 612
    events: list
    overflow: bool = False


# 7xx: the VCS service, on a "vcs" stream: read-only views of the agent's git worktree;
# fixed git commands only, never a command or option chosen by the client.


@_register
class VcsStatus(Message):
    """Branch and changed files. -> VcsReport(kind="status")."""

    KIND = 700
    agent: str


@_register
class VcsDiff(Message):
    """The worktree's diff against the index (``staged``: the index against HEAD),
    optionally of one path. -> VcsReport(kind="diff") with the diff as data."""

    KIND = 701
    agent: str
    path: str = ""
    staged: bool = False


@_register
class VcsLog(Message):
    """The last ``limit`` commits. -> VcsReport(kind="log")."""

    KIND = 702
    agent: str
    limit: int = 20


@_register
class VcsReport(Message):
    """An answer of the VCS service: ``info`` (status: branch, upstream, ahead, behind),
    ``entries`` (status: dicts path, index, worktree; log: dicts commit, author, date,
    subject), ``data`` (diff text); ``truncated`` when a limit cut it."""

    KIND = 710
    kind: str
    info: dict = field(default_factory=dict)
    entries: list = field(default_factory=list)
    truncated: bool = False
    data: bytes = b""


SESSION_FIELDS = (
    "id", "name", "pid", "unit", "state", "exit_code", "signal", "cols", "rows",
    "created", "uid", "cwd", "argv",
    "agent",  # started by clowder-control (optional: older hosts omit it)
)

def refuse_hello(msg: Message, server: str) -> Optional[Error]:
    """The fatal Error for a first message that is not an acceptable Hello, else None.

    Both daemons answer version skew the same way: naming both versions, never hanging.
    """
    if not isinstance(msg, Hello):
        return Error(message=f"expected Hello first, got {type(msg).__name__}",
                     code="handshake", fatal=True)
    if msg.version != PROTOCOL_VERSION:
        return Error(message=f"protocol version {msg.version} is not supported: {server} "
                             f"speaks version {PROTOCOL_VERSION}", code="version", fatal=True)
    return None


# --- encoding --------------------------------------------------------------------------

_TYPES = {int: int, str: str, bool: bool, bytes: bytes, list: list, dict: dict}
_FIELD_CACHE: dict[type, list] = {}


def _fields(cls) -> list:
    """(name, base type, optional, has default) for each field of a message class."""
    cached = _FIELD_CACHE.get(cls)
    if cached is None:
        cached = []
        for f in dataclasses.fields(cls):
            text = f.type if isinstance(f.type, str) else f.type.__name__
            optional = text.startswith("Optional[")
            base = text[len("Optional["):-1] if optional else text
            has_default = not (f.default is dataclasses.MISSING
                               and f.default_factory is dataclasses.MISSING)
            cached.append((f.name, {"int": int, "str": str, "bool": bool, "bytes": bytes,
                                    "list": list, "dict": dict}[base], optional, has_default))
        _FIELD_CACHE[cls] = cached
    return cached


def encode(msg: Message) -> bytes:
    """One whole frame for ``msg``."""
    obj = {}
    data = b""
    for name, typ, _, _ in _fields(type(msg)):
        value = getattr(msg, name)
        if typ is bytes:
            data = bytes(value)
        else:
            obj[name] = value
    body = json.dumps(obj, separators=(",", ":")).encode() if obj else b""
    length = _JSON_LEN.size + len(body) + len(data)
    if length > MAX_FRAME:
        raise ProtocolError(f"{type(msg).__name__} frame of {length} bytes exceeds {MAX_FRAME}",
                            "oversize")
    return HEADER.pack(length, msg.KIND) + _JSON_LEN.pack(len(body)) + body + data


def encode_output(data) -> bytes:
    """Fast path for the hottest frame: Output with raw bytes and no JSON."""
    return HEADER.pack(_JSON_LEN.size + len(data), Output.KIND) + b"\0\0\0\0" + bytes(data)


def check_header(header: bytes) -> tuple[int, int]:
    """(length, kind) of a frame header; raises ProtocolError before any body is read."""
    length, kind = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds the maximum of {MAX_FRAME}",
                            "oversize")
    if kind not in _REGISTRY:
        raise ProtocolError(f"unknown message kind {kind}", "unknown-kind")
    if length < _JSON_LEN.size:
        raise ProtocolError(f"frame of kind {kind} is too short ({length} bytes)", "truncated")
    return length, kind


def decode(kind: int, payload: bytes) -> Message:
    """The message of ``kind`` carried by ``payload``; raises ProtocolError if invalid."""
    cls = _REGISTRY.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind}", "unknown-kind")
    if len(payload) < _JSON_LEN.size:
        raise ProtocolError(f"{cls.__name__}: payload too short", "truncated")
    (jlen,) = _JSON_LEN.unpack_from(payload)
    if jlen > len(payload) - _JSON_LEN.size:
        raise ProtocolError(f"{cls.__name__}: JSON length {jlen} runs past the frame",
                            "truncated")
    obj: Any = {}
    if jlen:
        try:
            obj = json.loads(payload[_JSON_LEN.size:_JSON_LEN.size + jlen])
        except RecursionError:
            # e.g. 200,000 nested brackets (they fit in a frame): the parser's limit, not
            # a daemon's failure, so the peer gets the Error frame like any bad JSON.
            raise ProtocolError(f"{cls.__name__}: JSON nested too deeply", "bad-json") \
                from None
        except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            raise ProtocolError(f"{cls.__name__}: invalid JSON ({exc})", "bad-json") from None
        if not isinstance(obj, dict):
            raise ProtocolError(f"{cls.__name__}: payload is not a JSON object", "bad-json")
    data = payload[_JSON_LEN.size + jlen:]
    kwargs = {}
    for name, typ, optional, has_default in _fields(cls):
        if typ is bytes:
            kwargs[name] = bytes(data)
            continue
        if name not in obj:
            if not has_default:
                raise ProtocolError(f"{cls.__name__}: missing field {name!r}", "bad-field")
            continue
        value = obj[name]
        if value is None and optional:
            kwargs[name] = None
            continue
        # bool is an int in Python: keep them apart so `true` is never a size.
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise ProtocolError(
                f"{cls.__name__}: field {name!r} must be {typ.__name__}, "
                f"got {type(value).__name__}", "bad-field")
        kwargs[name] = value
    return cls(**kwargs)


async def read_message(reader) -> Message:
    """The next message from an asyncio-style reader (``readexactly``); the header is
    checked before the body is read. Raises ProtocolError, or the reader's EOF error."""
    length, kind = check_header(await reader.readexactly(HEADER.size))
    return decode(kind, await reader.readexactly(length))


class FrameReader:
    """Incremental decoder: feed bytes, get whole messages out.

    Used by both sides.  The header is validated as soon as its 6 bytes arrive, so an
    oversize or unknown frame is refused before its body is buffered.
    """

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        """Messages completed by ``data``; raises ProtocolError at the first bad frame."""
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            length, kind = check_header(bytes(self._buf[:HEADER.size]))
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            payload = bytes(self._buf[HEADER.size:end])
            del self._buf[:end]
            out.append(decode(kind, payload))
        return out

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)
