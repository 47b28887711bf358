"""Figure 8's snapshot right after a flood, for source trees alternated (clowder only).

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/snap_trees.py \\
        TREE_A,TREE_B [ROUNDS [MB]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use) and fig_snapshot.after_flood runs for the
text and ANSI formats: idle snapshots of a quiet session, a fresh session's first with
no flood, and one right after MB megabytes.  Prints each, then the medians per tree.
"""

from __future__ import annotations

import os

import fig_snapshot
import fig_throughput
from common import median
from handoff_dark import in_turn, tree_args


def main() -> None:
    srcs, rounds, mb = tree_args(5, 20)
    size = mb * 1_000_000
    path = fig_throughput.make_file(size)
    fig_snapshot.FORMATS["clowder"] = ("text", "ansi")
    res: dict[tuple, list[tuple]] = {}
    for _round, src in in_turn(srcs, rounds):
        name = os.path.basename(src)
        for fmt, (idle, first, after) in fig_snapshot.after_flood("clowder", path,
                                                                  120).items():
            res.setdefault((name, fmt), []).append((median(idle), first, after))
            print(f"{name} {fmt}: idle {median(idle) * 1e3:.2f} first {first * 1e3:.2f} "
                  f"after {after * 1e3:.2f} ms", flush=True)
    for (name, fmt), rows in sorted(res.items()):
        print(f"{name:12} {fmt:5} idle {median(x[0] for x in rows) * 1e3:.2f} first "
              f"{median(x[1] for x in rows) * 1e3:.2f} after "
              f"{median(x[2] for x in rows) * 1e3:.2f} ms; each after "
              f"{[round(x[2] * 1e3, 2) for x in rows]}")


if __name__ == "__main__":
    main()
