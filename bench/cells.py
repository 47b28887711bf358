"""What a ghostty screen's JSON snapshot and its view for a client of another size cost,
read from ghostty's own cells (screen_cells.py) and, for the record, the way they were
made before: a pyte copy fed ghostty's repaint (``GhosttyScreen._pyte_copy``, removed;
its four lines are ``_via_pyte`` here).

In this process, no host: each figure is the median of a few calls, in ms, on a screen
filled with runs of random colours and attributes (every row full), at 80x24, 200x50 and
the largest screens clowder_wire allows (MAX_COLS, MAX_ROWS, MAX_CELLS: 500x500, and
1000x250).  The view is for a client 10 columns and 5 rows smaller.  Also the size of
the JSON.  Nothing is asserted.  ``python3 bench/cells.py``.
"""

from __future__ import annotations

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]

from clowder_wire import MAX_CELLS, MAX_COLS  # noqa: E402
from engines import timed_ms  # noqa: E402  (bench/engines.py, beside this file)
from ptyhostd.screen import Screen  # noqa: E402
from ptyhostd.screen_ghostty import GhosttyScreen  # noqa: E402

SIZES = [(80, 24), (200, 50), (500, MAX_CELLS // 500), (MAX_COLS, MAX_CELLS // MAX_COLS)]


def coloured(cols: int, rows: int, seed: int = 0) -> bytes:
    """Every row full of runs of 1-12 cells of random colours and attributes."""
    rng = random.Random(seed)
    out = []
    for y in range(rows):
        out.append(b"\x1b[%dH" % (y + 1))
        x = 0
        while x < cols:
            n = min(rng.randint(1, 12), cols - x)
            out.append(b"\x1b[0;%d;38;5;%d;48;5;%dm" % (rng.choice((1, 2, 3, 4, 7)),
                                                        rng.randint(0, 255), rng.randint(0, 255)))
            out.append(bytes(rng.choice(b"abcdefghijklmnop") for _ in range(n)))
            x += n
    return b"".join(out) + b"\x1b[0m\x1b[H"


def _via_pyte(screen: GhosttyScreen) -> Screen:
    copy = Screen(screen.cols, screen.rows)
    copy.feed(screen.repaint())
    copy.engine = "ghostty"
    return copy




def main() -> None:
    print("| size | JSON before (pyte copy) | JSON now (cells) | view before | view now | JSON bytes |")
    print("|---|---|---|---|---|---|")
    for cols, rows in SIZES:
        screen = GhosttyScreen(cols, rows)
        screen.feed(coloured(cols, rows))
        small = (cols - 10, rows - 5)
        times = 3 if cols * rows <= 10_000 else 1
        json_before = timed_ms(lambda: _via_pyte(screen).snapshot("json"), times)
        json_now = timed_ms(lambda: screen.snapshot("json"), max(times, 3))
        view_before = timed_ms(lambda: _via_pyte(screen).view(*small), times)
        view_now = timed_ms(lambda: screen.view(*small), max(times, 3))
        size = len(screen.snapshot("json").encode())
        print(f"| {cols}x{rows} | {json_before:.0f} ms | {json_now:.0f} ms | "
              f"{view_before:.0f} ms | {view_now:.0f} ms | {size // 1024} KiB |", flush=True)


if __name__ == "__main__":
    main()
