"""A frame's JSON part, written and read without importing json.

``import json`` imports re (4-5 ms of a start here, Python 3.11), which attach's first
paint and `clowderctl ps` must not pay (ctl/firstpaint.py, ctl/quickps.py).  json's own
C accelerator (``_json``, built into CPython) holds both halves of the work, and this
module calls it directly, as json.dumps and json.loads do inside: ``dumps`` writes what
``json.dumps(value, separators=...)`` writes, byte for byte, and ``loads`` gives what
``json.loads`` gives for UTF-8 text, and a ValueError wherever it raises one
(tests/test_protocol.py holds both to json over thousands of values).  On an
interpreter without ``_json``, both are json's own.
"""

from __future__ import annotations

__all__ = ["dumps", "dumps_acyclic", "loads"]

COMPACT = (",", ":")  # the wire's
_WHITESPACE = " \t\n\r"  # JSON's own (RFC 8259): nothing else may stand around a value


class _Decoding:
    """What json's C scanner reads off its decoder (json.decoder.JSONDecoder's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


def _unserializable(value):
    """json.JSONEncoder.default's refusal, in its words."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_encoder as _make_encoder
    from _json import make_scanner as _make_scanner
    _scan = _make_scanner(_Decoding())
except ImportError:  # an interpreter without the accelerator
    _quote = _make_encoder = _scan = None


def dumps(value, separators: tuple[str, str] = COMPACT) -> str:
    """``json.dumps(value, separators=separators)``: ensure_ascii, NaN and the
    infinities allowed, circular references refused, keys in their order."""
    if _make_encoder is None:
        import json
        return json.dumps(value, separators=separators)
    kind = type(value)
    if kind is dict:
        flat = _flat(value, separators)
        if flat is not None:
            return flat
    elif kind is str:
        return _quote(value)  # as json.dumps does: the C encoder wants a container
    item, key = separators
    # A new encoder each time, as json.dumps makes: its record of the containers being
    # written (for circular references) is not cleared when a value is refused midway,
    # and must not be shared by two threads.
    return "".join(_make_encoder({}, _unserializable, _quote, None, key, item,
                                 False, False, True)(value, 0))


_acyclic = None  # dumps_acyclic's encoder, made at its first call


def dumps_acyclic(value) -> str:
    """``dumps(value)`` for a value its caller built and knows holds no cycle (a
    session's info): one encoder for every call, without the record of containers
    that catches cycles, about twice as fast a call (1,000 sessions' info: 1.4 against
    3.0 ms here).  A cycle would exhaust the recursion limit instead of a ValueError."""
    global _acyclic
    if _make_encoder is None:
        import json
        return json.dumps(value, separators=COMPACT)
    if _acyclic is None:
        _acyclic = _make_encoder(None, _unserializable, _quote, None, COMPACT[1], COMPACT[0],
                                 False, False, True)
    if type(value) is str:
        return _quote(value)
    return "".join(_acyclic(value, 0))


def _flat(obj: dict, separators: tuple[str, str]) -> str | None:
    """``obj`` written here when every key is a string and every value a string, an
    integer, a bool or None (most frames: faster than the C encoder's set-up); else
    None."""
    item, key_sep = separators
    parts = []
    for key, value in obj.items():
        kind = type(value)
        if kind is str:
            text = _quote(value)
        elif value is None:
            text = "null"
        elif kind is bool:
            text = "true" if value else "false"
        elif kind is int:
            text = int.__repr__(value)
        else:  # a list, a dict, a float (inf, nan, repr's rules), anything else
            return None
        if type(key) is not str:
            return None  # json.dumps writes 1 as "1", True as "true" ...
        parts.append(_quote(key) + key_sep + text)
    return "{" + item.join(parts) + "}"


def loads(text: bytes):
    """``json.loads(text)`` for UTF-8 text (a frame's JSON part is UTF-8: a byte-order
    mark or UTF-16 is refused here where json.loads would guess): the same value, and a
    ValueError wherever it raises one."""
    s = text.decode()  # strict: a UnicodeDecodeError is a ValueError
    if _scan is None:
        import json
        return json.loads(s)
    start = len(s) - len(s.lstrip(_WHITESPACE))
    try:
        value, end = _scan(s, start)
    except StopIteration as exc:  # the scanner's "no value here"
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if s[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value
