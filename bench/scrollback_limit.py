"""Which of ghostty's two scrollback limits binds, and what it costs: the model's rate,
the rows kept, and the repaint of an alternate screen over a full scrollback.

A model keeps what scrolled off within a line limit and a byte limit (ghostty's
SCROLLBACK_MAX_LINES and SCROLLBACK_MAX_BYTES options).  Fed the throughput figure's
log-like lines (MB megabytes, 64 KiB a feed, as the screen pool feeds), enough for the
scrollback to fill many times over, at 80x24 and 200x50, each arrangement in turn
(ROUNDS, medians):
- "old": the line limit 10,000 and the byte limit 16 MiB (the host before 2026-12-04):
  10,000 lines of 80 columns take ~8 MB, so at 80 columns the line limit bound; at 200
  columns they take ~19 MB, so the byte limit did;
- "share alone": the line limit lifted, the byte limit 16 MiB;
- "shipped": the model as it is (screen_ghostty._limit_scrollback: the byte limit
  min(share, 10,000 x columns x CELL_BYTES), the line limit twice as far);
then, for each, the median of 5 repaints after switching to the alternate screen (the
repaint copies the whole model, scrollback included: screen_ghostty._Copy).  And, per
width from 10 to 500 columns, the rows a byte limit of 2 and 8 MiB keeps of plain text
(what CELL_BYTES and tests/test_scrollback_limit.py read).  In this process: no host,
no systemd.  Nothing asserted.

    python3 bench/scrollback_limit.py [MB [ROUNDS]]
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import fig_throughput  # noqa: E402
from common import median  # noqa: E402
from ptyhostd import screen_ghostty as g  # noqa: E402

CHUNK = 64 * 1024
ARRANGEMENTS = ("old", "share alone", "shipped")


def model(cols: int, rows: int, how: str) -> g.GhosttyScreen:
    screen = g.GhosttyScreen(cols, rows)
    if how != "shipped":  # set through the same C options
        g._set_size_t(screen._t, g.lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_LINES,
                      10_000 if how == "old" else 10 ** 9, "setting the scrollback's lines")
        g._set_size_t(screen._t, g.lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES,
                      16 << 20, "setting the scrollback's bytes")
    return screen


def rate(screen: g.GhosttyScreen, data: bytes) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        screen.feed(data[i:i + CHUNK])
    return len(data) / (time.perf_counter() - t0) / 1e6


def kept(screen: g.GhosttyScreen) -> int:
    return screen.get("total_rows", "size_t") - screen.rows


def alt_repaint_ms(screen: g.GhosttyScreen) -> float:
    screen.feed(b"\x1b[?1049h\x1b[Ha full-screen program")
    screen.repaint()  # the first one warms up
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        screen.repaint()
        times.append(time.perf_counter() - t0)
    return median(times) * 1e3


def main() -> None:
    mb = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    data = open(fig_throughput.make_file(int(mb * 1e6)), "rb").read().replace(b"\n", b"\r\n")
    print(f"| size | limits | MB/s (median of {rounds}) | each round | rows kept | "
          "alternate screen repaint, ms |")
    print("|---|---|---|---|---|---|")
    for cols, rows in ((80, 24), (200, 50)):
        got: dict[str, list] = {how: [] for how in ARRANGEMENTS}
        rows_kept, repaint = {}, {}
        for _ in range(rounds):
            for how in ARRANGEMENTS:
                screen = model(cols, rows, how)
                got[how].append(rate(screen, data))
                rows_kept[how] = kept(screen)
                repaint[how] = alt_repaint_ms(screen)
                screen.close()
        for how in ARRANGEMENTS:
            each = ", ".join(f"{x:.0f}" for x in got[how])
            print(f"| {cols}x{rows} | {how} | {median(got[how]):.0f} | {each} | "
                  f"{rows_kept[how]} | {repaint[how]:.1f} |")
    print()
    print("| columns | byte limit | rows kept | bytes a cell |")
    print("|---|---|---|---|")
    sample = data[:8_000_000]
    for cols in (10, 20, 40, 80, 132, 200, 300, 500):
        for mib in (2, 8):
            screen = g.GhosttyScreen(cols, 24, scrollback=10 ** 7)
            screen.set_scrollback_bytes(mib << 20)
            rate(screen, sample)
            n = kept(screen)
            print(f"| {cols} | {mib} MiB | {n} | {(mib << 20) / n / cols:.1f} |")
            screen.close()


if __name__ == "__main__":
    main()
