"""What one user's manifest records cost every start of the host, in one process.

The start reads and parses the manifest whole before it serves anyone
(ptyhostd/manifest.py ``_parse``: the CRC, then json.loads).  This times that for a
table of one user's longest plain records (a command line just within MAX_ARGV_BYTES,
a name of 190 emoji: ~35 KB each) at 1,024 of them (the session limit: ~36 MB) and at
as many as the record budget takes (recordbudget.DEFAULT), and the spawn's check of the
budget (Host._over_record_budget's sum) over 1,024 sessions.  Median of 7.

    env -u PYTHONDONTWRITEBYTECODE python3 bench/manifest_parse.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import clowder_wire as P  # noqa: E402
from ptyhostd import recordbudget  # noqa: E402
from ptyhostd.session import Session  # noqa: E402

BASE = ["/bin/sh", "-c", "exec sleep 100000", "--"]
ARG = "y" * 8000
LONG = BASE + [ARG] * ((P.MAX_ARGV_BYTES - P.argv_bytes(BASE)) // (len(ARG) + 1))
EMOJI = "\U0001f600"
RUNS = 7


def sessions(count: int) -> list[Session]:
    return [Session(f"{i:08x}", name=f"{i:03d}" + EMOJI * 190, argv=LONG, cwd="/home/alice",
                    uid=2001, cols=80, rows=24, created=time.time(), ring=None,
                    state="running") for i in range(count)]


def body(table: list[Session]) -> bytes:
    """The manifest's body as Manifest.write_sessions joins it."""
    return (b'{"version":1,"sessions":[' + b",".join(s.record_json() for s in table)
            + b"]}")


def ms(fn) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def parse(data: bytes) -> None:
    zlib.crc32(data)
    json.loads(data)


def main() -> None:
    one = len(sessions(1)[0].record_json())
    at_budget = recordbudget.DEFAULT // one
    for count, what in ((1024, "1,024 (the session limit)"),
                        (at_budget, f"{at_budget} (the budget, {recordbudget.DEFAULT} B)")):
        data = body(sessions(count))
        print(f"{what}: {len(data) / 1e6:.1f} MB, parse {ms(lambda: parse(data)):.1f} ms")
    table = sessions(1024)
    for s in table:
        s.record_json()  # encoded once, as the manifest's rewrites leave them
    tally = ms(lambda: sum(len(s.record_json()) for s in table if s.uid == 2001))
    print(f"a spawn's sum of 1,024 records of {one} B: {tally:.3f} ms")


if __name__ == "__main__":
    main()
