"""What a ghostty model's scrollback costs, and what its byte limit does (issue 13's
follow-up: the host-wide screen memory budget, docs/design.md "Screen memory").

In this process, no host, no systemd: each figure is the model alone (the host adds the
session's ring and its bookkeeping, measured by tests/test_hostile_screen_memory.py).
- per model: RSS growth per model of ``MODELS`` models each fed 10,000 lines of
  (a) plain ASCII, (b) incompressible text, a random SGR colour on every cell and random
  characters, a fifth of them wide, at 80x24 and 200x50; before and after ``compact()``
  (ghostty_terminal_compress), with the scrollback rows each keeps.
- what the limit counts: one model with GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES at
  LIMIT, fed plain text with and without compression after each chunk: if the limit
  counted compressed bytes, compression would let it keep more rows.
- a limit lowered on a live model: RSS and rows right after the set, after a
  ``compact()``, and after one more line of output.

Nothing is asserted: it measures and reports.  ``python3 bench/screen_memory.py``; each
case runs in a child process of its own so that freed C memory does not blur the next.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]

MiB = 1 << 20
MODELS = 20
LINES = 10_000
LIMIT = 1 * MiB
SIZES = ((80, 24), (200, 50))
WIDE = "一二三四五六七八九十中文字漢"


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def plain(cols: int, lines: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz      "
    return b"".join(("".join(rng.choice(letters) for _ in range(cols - 1)) + "\r\n")
                    .encode() for _ in range(lines))


def coloured(cols: int, lines: int, seed: int = 0) -> bytes:
    """Every cell its own random 256-colour pen and a random character (a fifth wide):
    nothing in it repeats for a compressor to find."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        width, row = 0, []
        while width < cols - 2:
            wide = rng.random() < 0.2
            ch = rng.choice(WIDE) if wide else chr(rng.randrange(0x21, 0x7f))
            row.append("\x1b[38;5;%d;48;5;%dm%s" % (rng.randrange(256), rng.randrange(256), ch))
            width += 2 if wide else 1
        out.append(("".join(row) + "\x1b[0m\r\n").encode())
    return b"".join(out)


def _rows(screen) -> int:
    return screen.get("scrollback_rows", "size_t")


def _feed(screen, data: bytes, compact: bool) -> None:
    for i in range(0, len(data), 64 * 1024):
        screen.feed(data[i:i + 64 * 1024])
        if compact:
            screen.compact()


def per_model(kind: str, cols: int, rows: int) -> dict:
    from ptyhostd.screen_ghostty import GhosttyScreen
    data = (plain if kind == "plain" else coloured)(cols, LINES)
    base = rss()
    models = [GhosttyScreen(cols, rows) for _ in range(MODELS)]
    idle = rss()
    for m in models:
        _feed(m, data, compact=False)
    fed = rss()
    from ptyhostd import screen_ghostty
    for m in models:
        screen_ghostty.lib.ghostty_terminal_compress(
            m._t, screen_ghostty.lib.GHOSTTY_TERMINAL_COMPRESSION_MODE_FULL, m._compression)
    compacted = rss()
    return {"kind": kind, "size": f"{cols}x{rows}", "output_MB": len(data) / 1e6,
            "idle_kB": (idle - base) / MODELS / 1e3,
            "fed_MB": (fed - base) / MODELS / 1e6,
            "compacted_MB": (compacted - base) / MODELS / 1e6,
            "rows_kept": _rows(models[0])}


def limit_counts() -> dict:
    """Rows kept under LIMIT bytes, fed plain 80-column text with and without compression."""
    from ptyhostd.screen_ghostty import GhosttyScreen, _set_size_t, lib
    out = {}
    for compact in (False, True):
        m = GhosttyScreen(80, 24)
        _set_size_t(m._t, lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES, LIMIT, "limit")
        _feed(m, plain(80, LINES), compact)
        out["compressed" if compact else "cells"] = _rows(m)
    return out


def lowered(kind: str) -> dict:
    """A model full at 16 MiB, its limit lowered to LIMIT: when is the memory given back?"""
    from ptyhostd.screen_ghostty import GhosttyScreen, _set_size_t, lib
    data = (plain if kind == "plain" else coloured)(200, LINES)
    base = rss()
    models = [GhosttyScreen(200, 50) for _ in range(MODELS)]
    for m in models:
        _feed(m, data, compact=False)
    steps = {"full": (rss() - base, _rows(models[0]))}
    for m in models:
        _set_size_t(m._t, lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES, LIMIT, "limit")
    steps["after the set"] = (rss() - base, _rows(models[0]))
    for m in models:
        m.feed(b"one more line\r\n")
    steps["after one line"] = (rss() - base, _rows(models[0]))
    for m in models:
        m.feed(data[:len(data) // 10])
    steps["after a tenth more output"] = (rss() - base, _rows(models[0]))
    return {k: {"MB_per_model": v[0] / MODELS / 1e6, "rows": v[1]} for k, v in steps.items()}


CASES = {f"{kind} {c}x{r}": (per_model, (kind, c, r))
         for kind in ("plain", "coloured") for c, r in SIZES}
CASES["limit counts"] = (limit_counts, ())
CASES["lowered plain"] = (lowered, ("plain",))
CASES["lowered coloured"] = (lowered, ("coloured",))


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        fn, args = CASES[sys.argv[2]]
        print(json.dumps(fn(*args)))
        return
    for name in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", name], check=True,
                             capture_output=True, text=True).stdout
        print(f"{name}: {out.strip()}", flush=True)


if __name__ == "__main__":
    main()
