"""A session's screen for a client whose terminal is not the session's size.

The size of a session belongs to one client (the one that typed last); another client
attached with a terminal of a different size cannot be sent the program's bytes, which
address the session's rows and columns: its terminal would clamp them into its own
corner (a status line drawn on row 50 of a 40-row terminal lands on row 40, over other
text).  Such a client is sent frames instead, rendered from the model, as tmux does:
the top-left part of the session that fits its terminal, and past the session's right
and bottom edges the unused area filled with ``FILL``.

Any engine can be shown so; it provides ``cols``, ``rows``, ``alt``,
``view_buffer(cols, rows)`` (the active screen's rows of ``screen_render.Cell``, by row
number, at least its top-left ``cols`` x ``rows``), ``private_modes()`` (the DEC private
modes set), ``keyboard_stack()`` (the shown screen's kitty keyboard flags), ``pen()``
(the cursor's attributes) and screen_json's ``read_cursor()`` and ``read_modes()``.
"""

from __future__ import annotations

from .screen_render import KNOWN_PRIVATE, DefaultRow, buffer_row, is_wide, paint_rows, sgr

FILL = "."  # the unused area's mark (tmux's default fill is the same dot)
FILL_SGR = "\x1b[0;2m"  # dim, so that it reads as background, not as output


def view(screen, cols: int, rows: int) -> bytes:
    """VT bytes that show ``screen`` on a terminal of ``cols`` x ``rows``.

    Each frame is whole (every row of the client's terminal written), so a client can
    be sent the latest frame and skip any before it.  The modes that change what keys
    send (cursor keys, keypad, mouse, bracketed paste, focus, keyboard protocol) are
    the session's, so that what the client types reaches the program as it expects.
    """
    width, height = screen.cols, screen.rows
    seen_cols, seen_rows = min(cols, width), min(rows, height)
    modes = screen.private_modes()
    cursor = screen.read_cursor()
    out = ["\x1b[?2026h\x1b[?25l\x1b[0m\x1b]8;;\x1b\\\x1b(B\x0f\x1b[4l\x1b[?6l\x1b[r\x1b[?7l",
           "\x1b[?1049h" if screen.alt else "\x1b[?1049l"]
    seen = _Clipped(screen.view_buffer(seen_cols, seen_rows), seen_cols)
    paint_rows(out, seen, seen_cols, seen_rows)
    if cols > width:
        fill = FILL * (cols - width)
        for y in range(seen_rows):
            out.append(f"\x1b[{y + 1};{width + 1}H{FILL_SGR}{fill}")
    for y in range(height, rows):
        out.append(f"\x1b[{y + 1}H{FILL_SGR}{FILL * cols}")
    out.append("\x1b[0m")
    out.extend(f"\x1b[?{mode}l" for mode in KNOWN_PRIVATE if mode not in modes)
    out.extend(f"\x1b[?{mode}h" for mode in sorted(modes)
               if mode in KNOWN_PRIVATE and mode != 6)  # origin: rows are absolute here
    out.append("\x1b=" if screen.read_modes()["application_keypad"] else "\x1b>")
    out.append(f"\x1b[{cursor.style} q")
    out.append("\x1b[<99u" + "".join(f"\x1b[>{flags}u" for flags in screen.keyboard_stack()))
    if cursor.x < seen_cols and cursor.y < seen_rows:
        out.append(f"\x1b[{cursor.y + 1};{cursor.x + 1}H")
        if cursor.visible:
            out.append("\x1b[?25h")
    out.append(sgr(screen.pen()))
    out.append("\x1b[?2026l")
    return "".join(out).encode("utf-8", "replace")


class _Clipped:
    """A buffer's rows as ``paint_rows`` reads them, with a wide character cut by the
    client's right edge left out (half of it does not fit; a terminal would wrap it or
    drop it)."""

    def __init__(self, buffer, cols: int):
        self._buffer = buffer
        self._cols = cols

    def get(self, y: int):
        line = buffer_row(self._buffer, y)
        last = self._cols - 1
        if last in line and is_wide(line[last].data):
            copy = DefaultRow(line.default)
            copy.update(line)
            copy[last] = line[last]._replace(data=" ")
            return copy
        return line
