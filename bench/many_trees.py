"""Another session's echo beside figure 3's loads of many sessions, for source trees
alternated: a constant's or a path's A/B where many sessions print.

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/many_trees.py \\
        TREE_A,TREE_B [ROUNDS [SAMPLES]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use), then the minimal client's echo is sampled
beside figure 3's "100 x 100 KB/s" (scale) and "32 floods" (crowd) loads, with the
host's CPU share during the samples.  Prints each measurement, then the pooled p50, p99
and max per tree and load.  Used for a flood's model on the loop (docs/design.md).
"""

from __future__ import annotations

import os
import random

import clowder
import common
import fig_echo
import fig_throughput
from common import median, percentile
from handoff_dark import in_turn, tree_args


def main() -> None:
    srcs, rounds, samples = tree_args(2, 300)
    path = fig_throughput.make_file(100_000_000)
    rng = random.Random(5)
    loads = {"scale": (fig_echo.paced_argv(fig_echo.SCALE_RATE), fig_echo.SCALE_SESSIONS),
             "crowd": (common.flood_argv(path), fig_echo.CROWD_SESSIONS)}
    pooled: dict[tuple, list[float]] = {}
    for _round, src in in_turn(srcs, rounds):
        name = os.path.basename(src)
        for load, many in loads.items():
            share: dict = {}
            lat = fig_echo.measure(clowder.ClowderPeer(), samples, rng, None, share, many)
            pooled.setdefault((name, load), []).extend(lat)
            print(f"{name} {load}: p50 {median(lat) * 1e3:.2f} p99 "
                  f"{percentile(lat, 99) * 1e3:.2f} max {max(lat) * 1e3:.1f} ms, host cpu "
                  f"{share.get('server_cpu_share', 0):.2f}", flush=True)
    for (name, load), lat in sorted(pooled.items()):
        print(f"{name:12} {load:6} p50 {median(lat) * 1e3:.2f} p99 "
              f"{percentile(lat, 99) * 1e3:.2f} max {max(lat) * 1e3:.1f} ms (n={len(lat)})")


if __name__ == "__main__":
    main()
