"""Requests beside a flood, for source trees alternated (clowder only).

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/flood_requests.py \\
        TREE_A,TREE_B [ROUNDS [SAMPLES]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use), a quiet 80x24 session draws figure 5's
screen, and another session `cat`s a 20 MB file in a loop with no client attached;
then SAMPLES times, 5-15 ms apart, a text snapshot of the quiet session and a
ListSessions, each timed from the request to its answer on a connection made
beforehand.  Prints each round's p50 / p90 / p99, then the pooled ones per tree.  Used
for the doorbell (docs/design.md "A client at the door"): how long a request waits
behind a flood's wakes.
"""

from __future__ import annotations

import os
import random
import time

import clowder
import fig_repaint
import fig_snapshot
import fig_throughput
from common import median, percentile
from handoff_dark import in_turn, tree_args


def one_tree(path: str, samples: int, rng: random.Random) -> dict[str, list[float]]:
    side = fig_snapshot._Clowder()
    got: dict[str, list[float]] = {"snapshot": [], "ps": []}
    P = clowder.P
    try:
        done = f"{fig_snapshot.WORK}/{os.getpid()}-{time.monotonic_ns()}"
        os.makedirs(fig_snapshot.WORK, exist_ok=True)
        quiet = side.start(fig_repaint.job_argv(done, None))
        fig_snapshot._wait_file(done, 60)
        side.snapshot(quiet, "text")  # its first (a pool thread's wake-up) not timed
        side.start(["/bin/sh", "-c", f'stty -echo; while :; do cat "{path}"; done'])
        time.sleep(0.5)  # the flood under way
        for _ in range(samples):
            time.sleep(rng.uniform(0.005, 0.015))
            got["snapshot"].append(side.snapshot(quiet, "text")[0])
            time.sleep(rng.uniform(0.005, 0.015))
            t0 = time.perf_counter()
            side.conn.request(P.ListSessions(), P.SessionList)
            got["ps"].append(time.perf_counter() - t0)
    finally:
        side.stop()
    return got


def _line(values: list[float]) -> str:
    return (f"p50 {median(values) * 1e3:.2f} p90 {percentile(values, 90) * 1e3:.2f} "
            f"p99 {percentile(values, 99) * 1e3:.2f} max {max(values) * 1e3:.2f} ms")


def main() -> None:
    srcs, rounds, samples = tree_args(4, 150)
    path = fig_throughput.make_file(20_000_000)
    rng = random.Random(1)
    res: dict[tuple, list[float]] = {}
    for _round, src in in_turn(srcs, rounds):
        name = os.path.basename(src)
        for kind, values in one_tree(path, samples, rng).items():
            res.setdefault((name, kind), []).extend(values)
            print(f"{name} {kind}: {_line(values)}", flush=True)
    for (name, kind), values in sorted(res.items()):
        print(f"== {name:12} {kind:8} {_line(values)} (n={len(values)})", flush=True)


if __name__ == "__main__":
    main()
