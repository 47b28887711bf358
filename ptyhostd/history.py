"""Recent output as plain text lines, from a session's raw backlog.

Scrollback is kept as raw bytes (a terminal model with history costs ~100x more memory);
this turns its tail into lines on request, by the line model of ``lines.py``: escape
sequences removed, a carriage return overwriting what came before it on the line, as a
terminal would show it, and a screen clear keeping what came before, as scrollback does.
"""

from __future__ import annotations

from .lines import render

HISTORY_BYTES = 1 << 20  # the most raw backlog turned into text for one request


def text_lines(raw: bytes, cut: bool = False) -> list[str]:
    """The visible lines of ``raw`` terminal output (``cut``: its start was lost)."""
    lines = [line.rstrip() for line in render(raw, cut=cut, keep_cleared=True)]
    if lines and not lines[-1]:
        lines.pop()
    return lines


def last_lines(ring, count: int) -> list[str]:
    """The last ``count`` lines of a session's backlog ring (fewer if it holds fewer)."""
    if count <= 0:
        return []
    # Read back only as far as the lines asked for need: the line model costs ~90 ms
    # a MiB, on the loop that forwards every session's output.
    size = max(64 * 1024, count * 160)
    while True:
        start = max(ring.tail, ring.head - min(size, HISTORY_BYTES))
        lines = text_lines(ring.read(start), cut=start > 0)
        if len(lines) >= count or start == ring.tail or size >= HISTORY_BYTES:
            return lines[-count:]
        size *= 4
