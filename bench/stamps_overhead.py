"""What output timestamps (ptyhostd/stamps.py) cost the byte path: `cat` of 100 MB
through a pty into a backlog ring, read as the host's pump reads (Ring.fill_from after
a poll), with the stamps and without (the old code: no ``note`` call), in interleaved
rounds.  Reports the reader's CPU seconds and wall seconds per 100 MB, medians.

    python3 bench/stamps_overhead.py [--mb 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ptyhostd import pty  # noqa: E402
from ptyhostd.ring import Ring  # noqa: E402

PATH = "/tmp/clowder-bench-stamps.txt"


def make_file(size: int) -> None:
    if os.path.exists(PATH) and os.path.getsize(PATH) == size:
        return
    line = b"".join(b"%05d the quick brown fox jumps over the lazy dog\n" % i
                    for i in range(1000))
    with open(PATH, "wb") as f:
        for _ in range(size // len(line)):
            f.write(line)
        f.write(line[:size % len(line)])


def one(stamps: bool) -> tuple[float, float, int, int]:
    """(reader CPU s, wall s, bytes, stamps held) of one cat."""
    master, slave, _ = pty.open_pair("bench")
    ring = Ring.create("bench", 4 << 20)
    if not stamps:
        ring.stamps.note = lambda *a, **k: None
    proc = subprocess.Popen(["cat", PATH], stdin=subprocess.DEVNULL, stdout=slave.fd,
                            stderr=subprocess.DEVNULL, close_fds=True)
    slave.close()
    os.set_blocking(master.fd, False)
    cpu0, t0 = time.process_time(), time.monotonic()
    poll = select.poll()
    poll.register(master.fd, select.POLLIN)
    while True:
        poll.poll()
        try:
            while ring.fill_from(master.fd):
                pass
        except BlockingIOError:
            continue
        except OSError:  # EIO: cat has ended and closed the slave
            break
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    proc.wait()
    held = len(ring.stamps.entries)
    got = ring.head
    ring.close()
    master.close()
    return cpu, wall, got, held


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    size = args.mb * 1000 * 1000
    make_file(size)
    runs: dict[bool, list] = {False: [], True: []}
    for _ in range(args.rounds):
        for with_stamps in (False, True):
            runs[with_stamps].append(one(with_stamps))
    for with_stamps, rs in runs.items():
        # The pty's ONLCR makes each LF a CR LF: more bytes arrive than the file holds.
        assert len({r[2] for r in rs}) == 1 and rs[0][2] >= size, [r[2] for r in rs]
        print(f"{'with stamps' if with_stamps else 'without (old)':14} "
              f"reader CPU {statistics.median(r[0] for r in rs):.3f} s, "
              f"wall {statistics.median(r[1] for r in rs):.3f} s per {args.mb} MB "
              f"(rounds: {', '.join(f'{r[0]:.2f}/{r[1]:.2f}' for r in rs)}); "
              f"stamps held {rs[-1][3]}")


if __name__ == "__main__":
    main()
