"""What a read of a pty master costs when it finds nothing, and how often a flood's reads
are small: the figures behind session.SMALL_READ (docs/design.md "The echo's second read").

    python3 bench/pty_reads.py [MB]

(1) A raw pty flooded by `cat` (MB megabytes, default 50), read as the host's pump reads
it (up to 16 reads of 4 KiB a wake, after epoll): how many reads are shorter than
SMALL_READ, and after one, how often the next read of the same wake got bytes.
(2) One byte written into the slave (an echo), then the master read as a wake reads it:
the byte's read and then either a second read, which fails (EAGAIN), or FIONREAD, which
says there is nothing; median of 400 each, back to back (warm) and 10 ms apart (the
caches as a keystroke finds them).  No systemd needed: a pty of this process's own.
"""

from __future__ import annotations

import mmap
import os
import select
import statistics
import subprocess
import sys
import threading
import time
import tty

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ptyhostd import pty  # noqa: E402
from ptyhostd.ring import READ_SIZE  # noqa: E402
from ptyhostd.session import READS_PER_WAKE, SMALL_READ  # noqa: E402


def _raw_pty() -> tuple[int, int]:
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    return master, slave


def flood_reads(megabytes: int) -> dict:
    master, slave = _raw_pty()
    data = bytes(range(1, 256)) * (megabytes * 1_000_000 // 255)
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=slave)
    os.close(slave)
    feeder = threading.Thread(target=lambda: (cat.stdin.write(data), cat.stdin.close()))
    feeder.start()
    counts = {"reads": 0, "small": 0, "small, then bytes": 0, "small, then nothing": 0}
    total, began = 0, time.monotonic()
    ep = select.epoll()
    ep.register(master, select.EPOLLIN)
    try:
        while total < len(data):
            if not ep.poll(10):
                raise RuntimeError(f"the flood stopped after {total} of {len(data)} bytes")
            small = False
            for _ in range(READS_PER_WAKE):
                try:
                    got = len(os.read(master, READ_SIZE))
                except BlockingIOError:
                    got = 0
                except OSError:  # EIO: `cat` is gone and the pty is empty
                    raise RuntimeError(f"the pty ended after {total} of {len(data)} bytes")
                if small:
                    counts["small, then bytes" if got else "small, then nothing"] += 1
                if not got:
                    break
                total += got
                counts["reads"] += 1
                small = got < SMALL_READ
                counts["small"] += small
                if total >= len(data):
                    break  # all there: a read now would find the pty's end (EIO)
    finally:
        feeder.join()
        cat.wait()
        ep.close()
        os.close(master)
    counts["MB/s"] = round(total / 1e6 / (time.monotonic() - began), 1)
    return counts


def second_read(gap: float, samples: int = 400) -> dict:
    master, slave = _raw_pty()
    ring = mmap.mmap(-1, 1 << 20)
    view, zeros = memoryview(ring), memoryview(bytes(READ_SIZE))

    def read() -> int:  # as ring.fill_from: the region zeroed, then readv
        region = view[:READ_SIZE]
        region[:] = zeros
        return os.readv(master, [region])

    out = {}
    try:
        for how in ("a second read", "FIONREAD"):
            took = []
            for _ in range(samples):
                os.write(slave, b"x")
                deadline = time.monotonic() + 10
                while pty.held(master) < 1:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the echo never reached the master")
                began = time.perf_counter_ns()
                read()
                if how == "FIONREAD":
                    if pty.held(master):
                        read()
                else:
                    try:
                        read()
                    except BlockingIOError:
                        pass
                took.append(time.perf_counter_ns() - began)
                if gap:
                    time.sleep(gap)  # a bench's pause between keystrokes, not a wait
            out[how] = round(statistics.median(took) / 1e3, 1)
    finally:
        view.release()
        ring.close()
        os.close(master)
        os.close(slave)
    return out


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print(f"flood of {megabytes} MB, reads shorter than {SMALL_READ}:", flood_reads(megabytes))
    for gap in (0.0, 0.01):
        print(f"an echo's byte and then (us, median, {gap * 1e3:g} ms apart):",
              second_read(gap))


if __name__ == "__main__":
    main()
