"""Recent output as plain text lines, from a session's raw backlog.

Scrollback is kept as raw bytes (a terminal model with history costs ~100x more memory);
this turns its tail into lines on request, by the line model of ``lines.py``: escape
sequences removed, a carriage return overwriting what came before it on the line, as a
terminal would show it, and a screen clear keeping what came before, as scrollback does.
"""

from __future__ import annotations

import re
from typing import Optional

from . import screenwork
from clowder_common.lines import MAX_COLUMN, render

HISTORY_BYTES = 1 << 20  # the most raw backlog turned into text for one request


def text_lines(raw: bytes, cut: bool = False, keep: int | None = None,
               width: int = MAX_COLUMN) -> list[str]:
    """The visible lines of ``raw`` terminal output (``cut``: its start was lost);
    ``keep``: only the last that many are needed; ``width``: the terminal's."""
    lines = [line.rstrip() for line in render(raw, cut=cut, keep_cleared=True, keep=keep,
                                              width=width)]
    if lines and not lines[-1]:
        lines.pop()
    return lines


def as_text(lines: list[str]) -> bytes:
    """History lines as a SnapshotData carries them: one line each, newline-ended."""
    return "\n".join(lines).encode() + b"\n" * bool(lines)


def fit(lines: list[str], budget: int) -> list[str]:
    """The last of ``lines`` whose UTF-8 text, one line each, fits in ``budget`` bytes;
    a last line longer than that on its own gives its end (a program that printed
    megabytes without a newline still has its last output in the scrollback)."""
    used, first = 0, len(lines)
    while first > 0:
        size = len(lines[first - 1].encode("utf-8", "replace")) + 1
        if used + size > budget:
            break
        used += size
        first -= 1
    if first == len(lines) and lines and budget > 1:
        return [_tail(lines[-1], budget - 1)]
    return lines[first:]


# An escape sequence (CSI, OSC, or a two-byte one), as a line with its SGR holds them.
ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]*[0-~])")


def _tail(line: str, budget: int) -> str:
    """The end of ``line`` in at most ``budget`` bytes of UTF-8, starting neither inside
    a character nor inside an escape sequence (what a cut one leaves would be shown)."""
    raw = line.encode("utf-8", "replace")
    cut = len(line) - len(raw[len(raw) - budget:].decode("utf-8", "ignore"))
    esc = line.rfind("\x1b", max(0, cut - 256), cut)
    if esc >= 0:
        seq = ESCAPE.match(line, esc)
        if seq is not None and seq.end() > cut:
            cut = seq.end()
    return line[cut:]


async def last_lines(ring, count: int, budget: int, width: int = MAX_COLUMN,
                     owner: Optional[int] = None) -> list[str]:
    """The last ``count`` lines of a session's backlog ring (fewer if it holds fewer, or
    if more would not fit in ``budget`` bytes of text); ``width``: the session's;
    ``owner``: its user, whose turn in the screen pool this takes (screenpool.py)."""
    if count <= 0:
        return []
    # Read back only as far as the lines asked for need.  The line model costs ~90 ms a
    # MiB of ordinary output (more for output made to be costly), so it runs in the
    # screen pool, beside the terminal models' work (never more than its two threads
    # against the loop's GIL): the loop that forwards every session's output only copies
    # the bytes.
    size = max(64 * 1024, count * 160)
    while True:
        start = max(ring.tail, ring.head - min(size, HISTORY_BYTES))
        raw = ring.read(start)
        lines = await screenwork.run(text_lines, raw, start > 0, count, width, owner=owner,
                                     request=True)
        if len(lines) >= count or start == ring.tail or size >= HISTORY_BYTES:
            return fit(lines[-count:], budget)
        size *= 4
