"""Figure 5's repaint (the minimal client) idle, first and right after a flood, for
source trees alternated (clowder only).

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/repaint_trees.py \\
        TREE_A,TREE_B [ROUNDS [MB]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use) and fig_repaint.measure runs for the three
loads: idle (after a warm-up attach, figure 5's attaches), a fresh session's first
attach, and its first attach right after MB megabytes.  Prints each, then the medians
per tree and load with every round's.
"""

from __future__ import annotations

import os

import fig_repaint
import fig_throughput
from common import median
from handoff_dark import in_turn, tree_args


def main() -> None:
    srcs, rounds, mb = tree_args(6, 50)
    size = mb * 1_000_000
    path = fig_throughput.make_file(size)
    res: dict[tuple, list[float]] = {}
    for _round, src in in_turn(srcs, rounds):
        name = os.path.basename(src)
        for load in fig_repaint.LOADS:
            took = median(fig_repaint.measure("clowder", load, path, 120))
            res.setdefault((name, load), []).append(took)
            print(f"{name} {load}: {took * 1e3:.2f} ms", flush=True)
    for (name, load), values in sorted(res.items()):
        print(f"== {name:12} {load:12} median {median(values) * 1e3:.2f} ms, each "
              f"{[round(v * 1e3, 2) for v in values]}", flush=True)


if __name__ == "__main__":
    main()
