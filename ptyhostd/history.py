"""Recent output as plain text lines, from a session's raw backlog.

Scrollback is kept as raw bytes (a terminal model with history costs ~100x more memory);
this turns its tail into lines on request: escape sequences removed, a carriage return
overwriting what came before it on the line, as a terminal would show it.
"""

from __future__ import annotations

import re

# CSI ... final, OSC/DCS/APC/PM/SOS strings up to BEL or ST, other two-byte escapes.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]P_^X].*?(?:\x07|\x1b\\)"
    r"|\x1b[ -/]*[0-~]", re.S)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")


def text_lines(raw: bytes) -> list[str]:
    """The visible lines of ``raw`` terminal output (the first may be cut)."""
    text = _ESCAPES.sub("", raw.decode("utf-8", errors="replace"))
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = line.rstrip("\r").split("\r")
            # Each part overwrites the start of what is there: overlay them in order.
            shown = ""
            for part in parts:
                shown = part + shown[len(part):]
            line = shown
        lines.append(_CONTROLS.sub("", line).rstrip())
    if lines and not lines[-1]:
        lines.pop()
    return lines
