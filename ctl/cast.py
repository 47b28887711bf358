"""An asciinema v2 cast (https://docs.asciinema.org/manual/asciicast/v2/) of a session's
retained output, from its bytes and the host's stamps (clowder_wire's ExportHead).

Each stamp (ring offset, unix time) times the bytes from its offset to the next stamp's:
they become one "o" event at the stamp's time, relative to the first stamp that times a
byte held.  Bytes older than every stamp (a ring written by older code) are at time 0.
The bytes are decoded as UTF-8 (invalid ones replaced) by one incremental decoder across
events, so a character split between two stamps goes whole into the later event; the
events' data joined is the whole output decoded at once.
"""

from __future__ import annotations

import codecs
import json

TERM = "xterm-256color"


def segments(data: bytes, start: int, stamps: list) -> list[tuple[float, bytes]]:
    """(unix time or None, bytes) runs of ``data`` (ring offsets ``start`` on) by stamp."""
    end = start + len(data)
    out: list[tuple[float | None, bytes]] = []
    held = [(int(off), float(t)) for off, t in stamps if int(off) < end]
    first = held[0][0] if held else end
    if first > start:
        out.append((None, data[:first - start]))
    for i, (off, t) in enumerate(held):
        upto = held[i + 1][0] if i + 1 < len(held) else end
        lo, hi = max(off, start), min(upto, end)
        if hi > lo:
            out.append((t, data[lo - start:hi - start]))
    return out


def events(data: bytes, start: int, stamps: list) -> tuple[float, list[list]]:
    """(the unix time of time 0, [[seconds, "o", text], ...]) with times non-decreasing."""
    runs = segments(data, start, stamps)
    times = [t for t, _ in runs if t is not None]
    t0 = times[0] if times else 0.0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    out: list[list] = []
    last = 0.0
    for t, chunk in runs:
        rel = max(last, round(t - t0, 6)) if t is not None else 0.0
        text = decoder.decode(chunk)
        if text:
            out.append([rel, "o", text])
            last = rel
    text = decoder.decode(b"", final=True)
    if text:
        out.append([last, "o", text])
    return t0, out


def cast(data: bytes, start: int, stamps: list, cols: int, rows: int,
         title: str = "") -> str:
    """The whole .cast file: its header line, then one line per event."""
    t0, evs = events(data, start, stamps)
    header = {"version": 2, "width": cols or 80, "height": rows or 24,
              "timestamp": int(t0), "env": {"TERM": TERM}}
    if title:
        header["title"] = title
    lines = [json.dumps(header)] + [json.dumps(e, ensure_ascii=False) for e in evs]
    return "\n".join(lines) + "\n"
