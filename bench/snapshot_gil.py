"""What a snapshot of the largest screen costs the other sessions' echo, by the GIL
(issue 13, acceptance 4), and what each way of giving the loop the GIL back buys.

In this process, no host, no systemd: an asyncio loop in the main thread relays one
byte at a time between a client (a child process that types and times the echo) and a
``cat`` child, as the host's loop relays a keystroke to a session's program and back;
meanwhile a worker thread takes snapshots of a model of the largest allowed screen
(500x500, every row coloured text) in a loop, as the screen pool does.  Each case
reports the client's echo p50/p99/max and how long a snapshot took (the cost of the
case to the snapshot itself):

- ``idle``: no snapshot running;
- ``json``/``html``/``text``/``ansi``/``repaint``: that snapshot in a loop, at the
  switch interval ``--interval`` (CPython's default, 5 ms, and lower ones);
- ``cpu``: the control, a worker as busy but in C without the GIL (sha256 of 1 MiB
  blocks): what the machine's two cores, shared with the worker, cost the echo anyway;
- ``json-whole``: the JSON snapshot as it was made before (one ``json.dumps`` of the
  whole document); ``json-yield``: today's, with ``time.sleep(0)`` every 10 rows;
- for the pyte engine too with ``--engine pyte`` (pure Python: the whole snapshot
  holds the GIL but for the switch interval).

Also the byte path's throughput at each interval: the loop relays ``FLOOD`` bytes of a
``cat`` of a file to a socket the client drains, with a JSON snapshot running beside.

Nothing is asserted.  ``python3 bench/snapshot_gil.py [--engine ghostty|pyte]
[--intervals 0.005,0.001,0.0005] [--formats json,html,text,ansi,repaint]``; prints one
JSON line per case.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]

COLS, ROWS = 500, 500  # the largest allowed screen: 250,000 cells (pty.valid_size)
SAMPLES = 400
GAP = (0.003, 0.008)
FLOOD = 50_000_000

# The client: types one byte, waits for it back, SAMPLES times; prints the latencies.
CLIENT = """\
import json, random, socket, sys, time
s = socket.socket(fileno=int(sys.argv[1]))
n, lo, hi = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rng, out = random.Random(7), []
for i in range(n):
    key = bytes([97 + i % 26])
    t0 = time.perf_counter()
    s.sendall(key)
    got = b""
    while key not in got:
        got += s.recv(4096)
    out.append(time.perf_counter() - t0)
    time.sleep(rng.uniform(lo, hi))
print(json.dumps(out))
"""


def coloured_screen(engine: str):
    """A model of COLSxROWS, every row words of random 256 colours, some bold."""
    if engine == "ghostty":
        from ptyhostd.screen_ghostty import GhosttyScreen as Model
    else:
        from ptyhostd.screen import Screen as Model
    screen = Model(COLS, ROWS)
    rng = random.Random(3)
    out = []
    for y in range(ROWS):
        row, width = [], 0
        while width < COLS - 12:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
            row.append("\x1b[%s38;5;%dm%s\x1b[0m " % ("1;" if rng.random() < 0.2 else "",
                                                    rng.randrange(256), word))
            width += len(word) + 1
        out.append("".join(row) + ("\r\n" if y < ROWS - 1 else ""))
    data = "".join(out).encode()
    for i in range(0, len(data), 65536):
        screen.feed(data[i:i + 65536])
    return screen


_BLOCK = os.urandom(1 << 20)


def _json_whole(screen) -> str:
    """The JSON snapshot as it was made before: one json.dumps of the whole document."""
    from ptyhostd import screen_json
    return json.dumps(screen_json.document(screen), ensure_ascii=False,
                      separators=(",", ":")) + "\n"


def _json_yield(screen) -> str:
    """The JSON snapshot, with time.sleep(0) after every YIELD_ROWS rows read."""
    from ptyhostd import screen_json
    rows = screen.read_rows

    def yielding():
        for i, row in enumerate(rows()):
            if i % YIELD_ROWS == 0:
                time.sleep(0)
            yield row
    screen.read_rows = yielding
    try:
        return screen_json.snapshot(screen)
    finally:
        del screen.read_rows


YIELD_ROWS = 10


def take(screen, fmt: str):
    if fmt == "json-whole":
        return _json_whole(screen)
    if fmt == "json-yield":
        return _json_yield(screen)
    if fmt == "cpu":  # the control: a core busy in C without the GIL (hashlib drops it)
        for _ in range(8):
            hashlib.sha256(_BLOCK).digest()
        return b""
    if fmt == "repaint":
        return screen.repaint()
    return screen.snapshot(fmt)


class Worker(threading.Thread):
    """Snapshots in a loop until stopped; their durations."""

    def __init__(self, screen, fmt: str):
        super().__init__(daemon=True)
        self.screen, self.fmt = screen, fmt
        self.stop = threading.Event()
        self.times: list[float] = []

    def run(self):
        while not self.stop.is_set():
            t0 = time.perf_counter()
            take(self.screen, self.fmt)
            self.times.append(time.perf_counter() - t0)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))] if v else None


async def relay_echo(samples: int) -> list[float]:
    """The loop relays the client's bytes to ``cat`` and back; the client's latencies."""
    ours, theirs = socket.socketpair()
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(theirs.fileno()), str(samples),
                               str(GAP[0]), str(GAP[1])], pass_fds=[theirs.fileno()],
                              stdout=subprocess.PIPE)
    theirs.close()
    loop = asyncio.get_running_loop()
    ours.setblocking(False)
    os.set_blocking(cat.stdout.fileno(), False)

    def from_client():
        try:
            data = ours.recv(4096)
        except BlockingIOError:
            return
        if data:
            os.write(cat.stdin.fileno(), data)
        else:
            loop.remove_reader(ours.fileno())

    def from_cat():
        try:
            data = os.read(cat.stdout.fileno(), 4096)
        except BlockingIOError:
            return
        ours.sendall(data)

    loop.add_reader(ours.fileno(), from_client)
    loop.add_reader(cat.stdout.fileno(), from_cat)
    out, _ = await loop.run_in_executor(None, client.communicate)
    loop.remove_reader(ours.fileno())
    loop.remove_reader(cat.stdout.fileno())
    cat.stdin.close()
    cat.wait()
    ours.close()
    return json.loads(out)


async def relay_flood(path: str) -> float:
    """Seconds for the loop to relay a ``cat`` of ``path`` to a draining socket."""
    ours, theirs = socket.socketpair()
    drain = subprocess.Popen(["cat"], stdin=theirs.fileno(), stdout=subprocess.DEVNULL)
    theirs.close()
    cat = subprocess.Popen(["cat", path], stdout=subprocess.PIPE, bufsize=0)
    fd = cat.stdout.fileno()
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    ours.setblocking(True)
    t0 = time.perf_counter()

    def readable():
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            loop.remove_reader(fd)
            done.set_result(time.perf_counter() - t0)
            return
        ours.sendall(data)

    loop.add_reader(fd, readable)
    took = await done
    cat.wait()
    ours.close()
    drain.wait()
    return took


def case(screen, fmt, interval, samples, flood_path=None) -> dict:
    sys.setswitchinterval(interval)
    worker = Worker(screen, fmt) if fmt != "idle" else None
    if worker:
        worker.start()
        time.sleep(0.2)
    try:
        if flood_path:
            took = asyncio.run(relay_flood(flood_path))
            res = {"flood_MBps": os.path.getsize(flood_path) / took / 1e6}
        else:
            lat = asyncio.run(relay_echo(samples))
            res = {"p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
                   "max_ms": max(lat) * 1e3, "samples": len(lat)}
    finally:
        if worker:
            worker.stop.set()
            worker.join()
    if worker:
        res["snapshot_ms"] = pct(worker.times, 50) * 1e3
        res["snapshots"] = len(worker.times)
    res.update(format=fmt, interval_ms=interval * 1e3)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="ghostty")
    p.add_argument("--intervals", default="0.005,0.001,0.0005")
    p.add_argument("--formats", default="idle,cpu,json,html,text,ansi,repaint")
    p.add_argument("--samples", type=int, default=SAMPLES)
    p.add_argument("--flood", action="store_true", help="the throughput cases too")
    args = p.parse_args()
    screen = coloured_screen(args.engine)
    meta = {"engine": args.engine, "size": [COLS, ROWS], "loadavg": os.getloadavg()}
    sizes = {}
    for fmt in args.formats.split(","):
        if fmt not in ("idle", "cpu", "json-yield"):
            t0 = time.perf_counter()
            sizes[fmt] = [len(take(screen, fmt)), round((time.perf_counter() - t0) * 1e3, 1)]
    meta["bytes_and_ms_alone"] = sizes
    print(json.dumps(meta), flush=True)
    for interval in [float(v) for v in args.intervals.split(",")]:
        for fmt in args.formats.split(","):
            print(json.dumps(case(screen, fmt, interval, args.samples)), flush=True)
        if args.flood:
            path = "/tmp/snapshot_gil.flood"
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    line = b"%08d the quick brown fox jumps over the lazy dog, 0123456789\n"
                    f.write(b"".join(line % i for i in range(FLOOD // 70)))
            for fmt in ("idle", "json"):
                print(json.dumps(case(screen, fmt, interval, 0, path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
