"""Recent output as plain text lines, from a session's raw backlog.

Scrollback is kept as raw bytes (a terminal model with history costs ~100x more memory);
this turns its tail into lines on request, by the line model of ``lines.py``: escape
sequences removed, a carriage return overwriting what came before it on the line, as a
terminal would show it, and a screen clear keeping what came before, as scrollback does.
"""

from __future__ import annotations

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


def fit(lines: list[str], budget: int) -> list[str]:
    """The last of ``lines`` whose UTF-8 text, one line each, fits in ``budget`` bytes."""
    used, first = 0, len(lines)
    while first > 0:
        size = len(lines[first - 1].encode("utf-8", "replace")) + 1
        if used + size > budget:
            break
        used += size
        first -= 1
    return lines[first:]


async def last_lines(ring, count: int, budget: int, width: int = MAX_COLUMN) -> list[str]:
    """The last ``count`` lines of a session's backlog ring (fewer if it holds fewer, or
    if more would not fit in ``budget`` bytes of text); ``width``: the session's."""
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
        lines = await screenwork.run(text_lines, raw, start > 0, count, width)
        if len(lines) >= count or start == ring.tail or size >= HISTORY_BYTES:
            return fit(lines[-count:], budget)
        size *= 4
