"""The two screen engines side by side, in one run: pyte (screen.py) and libghostty-vt
(screen_ghostty.py).  docs/design.md "Choosing the engine" is written from its output.

In this process, no host, no systemd: each figure is the engine alone.
- feed: MB/s at 200x50, fed in 64 KiB chunks: the recordings of tests/recordings (each at
  its own size, repeated to RECORDING_MB) and mixed output (text, SGR, cursor moves, wide
  characters, scrolling; ghostty MIXED_MB, pyte PYTE_MB: pyte at ~1 MB/s would take
  minutes for 100 MB, and the host never feeds it more than 256 KiB at once).
- repaint and text snapshot: ms, at 200x50, of an idle screen (one screen of the shell
  recording) and right after the mixed output.
- memory: RSS growth per session of 100 models at 80x24 each fed 10,000 lines of 80
  columns, in a child process of its own per engine (pyte keeps no scrollback: the
  project's ring keeps raw bytes instead; ghostty keeps the lines as cells, and
  ``compacted`` is after ``compact()``, ghostty_terminal_compress, which the host runs
  once output is quiet).
- correctness: recording split points whose attach gives the watcher's final state
  (tests/test_screen.py's property, counted rather than asserted).
- loop stall: p99 and max lateness (ms) of an asyncio loop ticking every ms, idle and
  while a thread feeds the engine the mixed output.

Nothing is asserted: it measures and reports.  ``python3 bench/engines.py [--mb N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests")]

from ptyhostd.screen import Screen  # noqa: E402
from ptyhostd.screen_ghostty import GhosttyScreen  # noqa: E402

ENGINES = {"pyte": Screen, "ghostty": GhosttyScreen}
CHUNK = 64 * 1024
COLS, ROWS = 200, 50
RECORDING_MB = {"ghostty": 8, "pyte": 1}


def log(*parts) -> None:
    print("[engines]", *parts, file=sys.stderr, flush=True)


def mixed(size: int, seed: int = 0) -> bytes:
    """Output as programs make it: text lines, colours, cursor moves, CJK, scrolling."""
    rng = random.Random(seed)
    words = [b"build", b"error:", b"warning", b"\xe4\xb8\xad\xe6\x96\x87", b"ok", b"src/x.py",
             b"\xf0\x9f\x98\x80", b"e\xcc\x81", b"--", b"0x7f3a"]
    pieces = [
        lambda: b" ".join(rng.choice(words) for _ in range(rng.randint(3, 20))) + b"\r\n",
        lambda: b"\x1b[%d;%dm" % (rng.choice((1, 2, 4, 7)), rng.randint(30, 37)),
        lambda: b"\x1b[38;5;%dm" % rng.randint(0, 255), lambda: b"\x1b[0m",
        lambda: b"\x1b[%d;%dH" % (rng.randint(1, ROWS), rng.randint(1, COLS)),
        lambda: b"\x1b[K", lambda: b"\x1b[2A\r", lambda: b"\x1b[1S",
        lambda: b"x" * rng.randint(10, 300) + b"\r\n",
    ]
    unit = b"".join(rng.choice(pieces)() for _ in range(20000))
    return (unit * (size // len(unit) + 1))[:size]


def feed(screen, data: bytes) -> float:
    """Seconds to feed ``data`` in CHUNK pieces."""
    t0 = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        screen.feed(data[i:i + CHUNK])
    return time.perf_counter() - t0


def timed_ms(fn, times: int = 5) -> float:
    """The median of ``times`` calls, in ms."""
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return sorted(samples)[len(samples) // 2]


def speed(engine: str, data_mb: float) -> dict:
    import test_screen as T
    cls = ENGINES[engine]
    out = {}
    total, seconds = 0, 0.0
    for name in T.RECORDINGS:
        data, cols, rows = T.recording(name)
        data = data * int(RECORDING_MB[engine] * 2**20 / len(T.RECORDINGS) / len(data) + 1)
        seconds += feed(cls(cols, rows), data)
        total += len(data)
    out["recordings MB/s"] = total / 2**20 / seconds
    idle = cls(COLS, ROWS)
    idle.feed(T.recording("shell")[0])
    out["repaint idle ms"] = timed_ms(idle.repaint)
    out["snapshot idle ms"] = timed_ms(lambda: idle.snapshot("text"))
    data = mixed(int(data_mb * 2**20))
    flooded = cls(COLS, ROWS)
    seconds = feed(flooded, data)
    out["mixed MB"] = data_mb
    out["mixed MB/s"] = data_mb / seconds
    out["repaint after mixed ms"] = timed_ms(flooded.repaint)
    out["snapshot after mixed ms"] = timed_ms(lambda: flooded.snapshot("text"))
    return out


def correctness(engine: str) -> dict:
    import test_screen as T
    cls = ENGINES[engine]
    passed = total = 0
    for name in T.RECORDINGS:
        data, cols, rows = T.recording(name)
        whole = cls(cols, rows)
        T.feed_in_chunks(whole, data)
        want = whole.state()
        for split in range(T.SPLITS):
            k = T.split_point(data, split)
            watcher = cls(cols, rows)
            T.feed_in_chunks(watcher, data[:k], seed=split)
            attached = cls(cols, rows)
            attached.feed(watcher.repaint() + watcher.pending + data[k:])
            passed += attached.state() == want
            total += 1
    return {"split points passing": f"{passed}/{total}"}


def stall(engine: str, data_mb: float) -> dict:
    """Lateness of a 1 ms asyncio tick, idle and while a thread feeds the engine."""
    data = mixed(int(data_mb * 2**20), seed=1)

    async def ticks(until) -> list:
        late = []
        while not until():
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter() - t0 - 0.001) * 1e3)
        return late

    def p99(xs):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(len(xs) * 0.99))]

    deadline = time.perf_counter() + 1.0
    idle = asyncio.run(ticks(lambda: time.perf_counter() > deadline))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (feed(ENGINES[engine](COLS, ROWS), data),
                                              done.set()))
    worker.start()
    busy = asyncio.run(ticks(done.is_set))
    worker.join()
    return {"tick p99 idle ms": p99(idle), "tick p99 feeding ms": p99(busy),
            "tick max feeding ms": max(busy), "stall MB": data_mb}


def memory(engine: str, sessions: int = 100, lines: int = 10_000) -> dict:
    """Run in a child: RSS growth per model after ``lines`` of 80 columns each."""
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    text = b"".join(b"%05d " % i + b"abcdefghij" * 7 + b"xxxx\r\n" for i in range(lines))
    cls = ENGINES[engine]
    cls(80, 24).feed(b"warm")
    before = rss()
    models = [cls(80, 24) for _ in range(sessions)]
    for m in models:
        for i in range(0, len(text), CHUNK):
            m.feed(text[i:i + CHUNK])
    out = {"kB per session": (rss() - before) / sessions / 1024}
    if engine == "ghostty":
        t0 = time.perf_counter()
        for m in models:
            m.compact()  # what the host does once output is quiet
        out["compact ms per session"] = (time.perf_counter() - t0) * 1e3 / sessions
        out["kB per session compacted"] = (rss() - before) / sessions / 1024
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=100, help="mixed output for ghostty (MB)")
    p.add_argument("--pyte-mb", type=float, default=4, help="mixed output for pyte (MB)")
    p.add_argument("--memory", choices=ENGINES, help=argparse.SUPPRESS)  # the child
    args = p.parse_args()
    if args.memory:
        print(json.dumps(memory(args.memory)))
        return
    results = {}
    for engine in ENGINES:
        mb = args.mb if engine == "ghostty" else args.pyte_mb
        log(engine, "speed")
        r = speed(engine, mb)
        log(engine, "correctness")
        r.update(correctness(engine))
        log(engine, "loop stall")
        r.update(stall(engine, mb))
        log(engine, "memory")
        child = subprocess.run([sys.executable, __file__, "--memory", engine],
                               capture_output=True, text=True, check=True)
        r.update(json.loads(child.stdout))
        results[engine] = r
    keys = list(dict.fromkeys(k for r in results.values() for k in r))
    print("| figure | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for k in keys:
        cells = []
        for r in results.values():
            v = r.get(k, "-")
            cells.append(f"{v:.2f}" if isinstance(v, float) else str(v))
        print(f"| {k} | " + " | ".join(cells) + " |")
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
