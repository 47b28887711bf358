"""A ghostty model's scrollback is bounded by its byte limit alone (ptyhostd/
screen_ghostty.py, ``_limit_scrollback``: the model's share of the host's screen memory,
or what SCROLLBACK_LINES lines of text take at its width if less), never by ghostty's
line limit: once its line limit bound, ghostty parsed text ~4x slower (93 against 332
MB/s at 80x24: bench/scrollback_limit.py, docs/design.md "Screen memory").  A test
cannot time that, so it checks which limit binds: lifting the line limit of a twin model
changes nothing it keeps, at any width, after a resize either way and under a lowered
share.  And what it keeps of plain text is about SCROLLBACK_LINES lines, or what the
share holds at 10 bytes a cell if fewer."""

from __future__ import annotations

import pytest

g = pytest.importorskip("ptyhostd.screen_ghostty", reason="pyghostty not installed",
                        exc_type=ImportError)

MiB = 1 << 20
PLAIN_CELL_BYTES = 10  # 9.1-11.3 at 10 to 500 columns: bench/scrollback_limit.py


def _kept(screen) -> int:
    return screen.get("total_rows", "size_t") - screen.rows


def _lift_line_limit(screen):
    g._set_size_t(screen._t, g.lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_LINES, 10 ** 9,
                  "lifting the line limit")
    return screen


def _rows_kept_while_printing(screen, cols: int, share: int) -> list[int]:
    """Print about twice what the model keeps, then line by line past a few of
    ghostty's page drops: the rows kept after each of those lines."""
    line = b"x" * (cols - 1) + b"\r\n"
    screen.feed(line * min(2 * g.SCROLLBACK_LINES, 2 * share // (cols * 9)))
    seen = []
    for _ in range(3000):
        screen.feed(line)
        seen.append(_kept(screen))
    return seen


@pytest.mark.parametrize("cols,made_at,share", [
    (10, 10, None), (80, 80, None), (200, 200, None), (500, 500, None),
    (80, 200, None),  # made wide and narrowed before the output
    (200, 80, None),  # and widened
    (80, 80, 2 * MiB), (500, 500, 2 * MiB),  # a lowered share (screenmemory.FLOOR)
])
def test_the_byte_limit_binds_never_the_line_limit(cols, made_at, share):
    shipped = g.GhosttyScreen(made_at, 24)
    twin = _lift_line_limit(g.GhosttyScreen(made_at, 24))
    try:
        for screen in (shipped, twin):
            if share is not None:
                screen.set_scrollback_bytes(share)
            screen.resize(cols, 24)
        share = share or g.SCROLLBACK_BYTES
        kept = _rows_kept_while_printing(shipped, cols, share)
        assert kept == _rows_kept_while_printing(twin, cols, share), \
            "the line limit decided what the shipped model kept"
        assert min(kept) < max(kept), "no page was dropped: the scrollback never filled"
        want = min(g.SCROLLBACK_LINES, share / (cols * PLAIN_CELL_BYTES))
        assert 0.75 * want <= max(kept) <= 1.3 * want, (max(kept), want)
    finally:
        shipped.close()
        twin.close()
