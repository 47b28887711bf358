"""Recent output as plain text lines, from a session's raw backlog.

Scrollback is kept as raw bytes (a terminal model with history costs ~100x more memory);
this turns its tail into lines on request, by the line model of ``lines.py``: escape
sequences removed, a carriage return overwriting what came before it on the line, as a
terminal would show it, and a screen clear keeping what came before, as scrollback does.
"""

from __future__ import annotations

from .lines import render


def text_lines(raw: bytes, cut: bool = False) -> list[str]:
    """The visible lines of ``raw`` terminal output (``cut``: its start was lost)."""
    lines = [line.rstrip() for line in render(raw, cut=cut, keep_cleared=True)]
    if lines and not lines[-1]:
        lines.pop()
    return lines
