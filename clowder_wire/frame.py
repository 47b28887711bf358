"""The framing every clowder connection speaks, its version, and the message base class.

A frame is a 6-byte header, ``!IH`` = (payload length, kind), then the payload.
The length is checked against ``MAX_FRAME`` *before* the body is read, so a hostile
length can never make the reader allocate.  A payload is a 4-byte length of a JSON
object (0 means ``{}``), the JSON object, then raw bytes for the message's ``data``
field if it has one.  JSON carries the typed fields; raw bytes carry terminal I/O so
the byte path never base64-encodes anything.

Kinds are numbered in blocks, one file of this package each: 1xx handshake and errors
(handshake.py), 2xx PTY host requests and 3xx their replies and streams (host.py), 4xx
the control plane (control.py), 5xx multiplexed streams (streams.py), 6xx the file
service (files.py), 7xx the VCS service (vcs.py).  Unknown kinds are a fatal error.

Don't forget to bump PROTOCOL_VERSION if any message changes in a way an older peer
would misread; adding an optional field or a new kind does not need a bump.

Messages are plain classes (fields declared as annotations, defaults as class
attributes), not dataclasses: generating ~60 dataclasses cost ~20 ms of every clowder
program's start (docs/design.md, "the wire package").  For the same reason the json
module is not imported (it imports re, ~4-8 ms of a start here): the JSON parts are
written and read by jsonpart.py, byte for byte and value for value as json would.
"""

from __future__ import annotations

import struct

from .jsonpart import dumps, loads

__all__ = ["PROTOCOL_VERSION", "MAX_FRAME", "MAX_DATA", "HEADER", "JSON_LEN", "KINDS",
           "ProtocolError", "Message", "register", "fields_of", "encode", "frame_of",
           "check_header",
           "decode", "data_of", "read_message", "FrameReader"]

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 20  # 1 MiB: the largest payload either side accepts
HEADER = struct.Struct("!IH")
JSON_LEN = struct.Struct("!I")
# The largest raw chunk a sender puts in one frame (leaves room for the JSON part).
MAX_DATA = MAX_FRAME - 64 * 1024

KINDS: dict[int, type["Message"]] = {}  # every registered message class by its kind
# The blocks of kinds (kind // 100) whose files are loaded at first use, not with the
# package (clowder_wire/__init__.py): a frame of one of them loads its file first.
LAZY_BLOCKS = {4: "control", 5: "streams", 6: "files", 7: "vcs"}
_MISSING = object()
_BASE_TYPES = {"int": int, "str": str, "bool": bool, "bytes": bytes, "list": list,
               "dict": dict, "float": float}


class ProtocolError(Exception):
    """A peer sent something that is not valid protocol; the connection must close."""

    def __init__(self, message: str, code: str = "protocol"):
        super().__init__(message)
        self.code = code


class Message:
    """Base of every payload type; ``KIND`` is its number on the wire.

    A subclass declares its fields as annotations (``int``, ``str``, ``bool``, ``bytes``,
    ``list``, ``dict``, ``float`` (a JSON integer is taken as one), or ``X | None``) with
    optional defaults, and is ``@register``ed.
    """

    KIND = -1
    # (name, type, optional, default or _MISSING), set by register().
    _FIELDS: tuple = ()

    def __init__(self, **values):
        for name, _typ, _optional, default in self._FIELDS:
            value = values.pop(name, _MISSING)
            if value is _MISSING:
                if default is _MISSING:
                    raise TypeError(f"{type(self).__name__}: missing field {name!r}")
                # An empty list or dict default is fresh per message, never shared.
                value = type(default)(default) if isinstance(default, (list, dict)) \
                    else default
            setattr(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__}: unknown fields {sorted(values)}")

    def _values(self) -> tuple:
        return tuple(getattr(self, f[0]) for f in self._FIELDS)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        fields = ", ".join(f"{f[0]}={getattr(self, f[0])!r}" for f in self._FIELDS)
        return f"{type(self).__name__}({fields})"


def register(cls):
    """Class decorator: read the fields of a message class and enter it in KINDS."""
    if cls.KIND in KINDS:
        raise RuntimeError(f"kind {cls.KIND} registered twice")
    fields = []
    for name, text in cls.__dict__.get("__annotations__", {}).items():
        optional = text.endswith(" | None")
        base = text[:-len(" | None")] if optional else text
        if base not in _BASE_TYPES:
            raise TypeError(f"{cls.__name__}.{name}: unsupported field type {text!r}")
        default = cls.__dict__.get(name, _MISSING)
        fields.append((name, _BASE_TYPES[base], optional, default))
    cls._FIELDS = tuple(fields)
    KINDS[cls.KIND] = cls
    return cls


def load_blocks(*blocks: int) -> list:
    """The files of ``blocks`` (all of LAZY_BLOCKS when none is given), imported: their
    messages are then in KINDS."""
    from importlib import import_module
    return [import_module(f"{__package__}.{LAZY_BLOCKS[b]}") for b in blocks or LAZY_BLOCKS]


def _class_of(kind: int):
    """The message class of ``kind``, its file loaded if it is in a lazy block; None if
    there is no such kind."""
    cls = KINDS.get(kind)
    if cls is None and kind // 100 in LAZY_BLOCKS:
        load_blocks(kind // 100)
        cls = KINDS.get(kind)
    return cls


def fields_of(cls) -> list:
    """(name, base type, optional, has default) for each field of a message class."""
    return [(name, typ, optional, default is not _MISSING)
            for name, typ, optional, default in cls._FIELDS]


def encode(msg: Message) -> bytes:
    """One whole frame for ``msg``."""
    obj = {}
    data = b""
    for name, typ, _, _ in msg._FIELDS:
        value = getattr(msg, name)
        if typ is bytes:
            data = bytes(value)
        else:
            obj[name] = value
    return frame_of(type(msg), dumps(obj).encode() if obj else b"", data)


def frame_of(cls: type[Message], body: bytes, data: bytes = b"") -> bytes:
    """The frame of a ``cls`` message whose JSON part, already encoded, is ``body``
    (what ``encode`` makes, for a sender that keeps parts of its JSON encoded)."""
    length = JSON_LEN.size + len(body) + len(data)
    if length > MAX_FRAME:
        raise ProtocolError(f"{cls.__name__} frame of {length} bytes exceeds {MAX_FRAME}",
                            "oversize")
    return HEADER.pack(length, cls.KIND) + JSON_LEN.pack(len(body)) + body + data


def check_header(header: bytes) -> tuple[int, int]:
    """(length, kind) of a frame header; raises ProtocolError before any body is read."""
    length, kind = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds the maximum of {MAX_FRAME}",
                            "oversize")
    if _class_of(kind) is None:
        raise ProtocolError(f"unknown message kind {kind}", "unknown-kind")
    if length < JSON_LEN.size:
        raise ProtocolError(f"frame of kind {kind} is too short ({length} bytes)", "truncated")
    return length, kind


# kind -> a reader of that kind's usual spelling (payload -> Message, or None for any
# other spelling, which the general decoder below then reads or refuses): the hottest
# request's (host.py: Input) cost ~1.5 us here, most of it this general field walk.
FAST_DECODERS: dict = {}


def decode(kind: int, payload: bytes) -> Message:
    """The message of ``kind`` carried by ``payload``; raises ProtocolError if invalid."""
    fast = FAST_DECODERS.get(kind)
    if fast is not None:
        msg = fast(payload)
        if msg is not None:
            return msg
    cls = _class_of(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind}", "unknown-kind")
    if len(payload) < JSON_LEN.size:
        raise ProtocolError(f"{cls.__name__}: payload too short", "truncated")
    (jlen,) = JSON_LEN.unpack_from(payload)
    if jlen > len(payload) - JSON_LEN.size:
        raise ProtocolError(f"{cls.__name__}: JSON length {jlen} runs past the frame",
                            "truncated")
    obj = {}
    if jlen:
        try:
            obj = loads(payload[JSON_LEN.size:JSON_LEN.size + jlen])
        except RecursionError:
            # e.g. 200,000 nested brackets (they fit in a frame): the parser's limit, not
            # a daemon's failure, so the peer gets the Error frame like any bad JSON.
            raise ProtocolError(f"{cls.__name__}: JSON nested too deeply", "bad-json") \
                from None
        except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            raise ProtocolError(f"{cls.__name__}: invalid JSON ({exc})", "bad-json") from None
        if not isinstance(obj, dict):
            raise ProtocolError(f"{cls.__name__}: payload is not a JSON object", "bad-json")
    data = payload[JSON_LEN.size + jlen:]
    kwargs = {}
    for name, typ, optional, default in cls._FIELDS:
        if typ is bytes:
            kwargs[name] = bytes(data)
            continue
        if name not in obj:
            if default is _MISSING:
                raise ProtocolError(f"{cls.__name__}: missing field {name!r}", "bad-field")
            continue
        value = obj[name]
        if value is None and optional:
            kwargs[name] = None
            continue
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            try:  # an encoder may write 2.0 as 2
                value = float(value)
            except OverflowError:  # 1e400 written out as an integer
                raise ProtocolError(f"{cls.__name__}: field {name!r} is out of range",
                                    "bad-field") from None
        # bool is an int in Python: keep them apart so `true` is never a size.
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise ProtocolError(
                f"{cls.__name__}: field {name!r} must be {typ.__name__}, "
                f"got {type(value).__name__}", "bad-field")
        kwargs[name] = value
    return cls(**kwargs)


def data_of(payload: bytes) -> bytes:
    """The raw ``data`` of a frame's payload (what follows its JSON part), without
    decoding the JSON: what attach's first paint writes (ctl/firstpaint.py)."""
    (jlen,) = JSON_LEN.unpack_from(payload)
    if jlen > len(payload) - JSON_LEN.size:
        raise ProtocolError(f"JSON length {jlen} runs past the frame", "truncated")
    return payload[JSON_LEN.size + jlen:]


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
        return [decode(kind, payload) for kind, payload in self.frames(data)]

    def frames(self, data: bytes) -> list[tuple[int, bytes]]:
        """(kind, payload) of each frame completed by ``data``, not decoded (see
        ``data_of``); raises ProtocolError at the first bad header."""
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            length, kind = check_header(bytes(self._buf[:HEADER.size]))
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            out.append((kind, bytes(self._buf[HEADER.size:end])))
            del self._buf[:end]
        return out

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)
