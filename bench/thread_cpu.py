"""Figure 1's `cat` through the minimal client for source trees alternated, with the
CPU and context switches of each of the host's threads.

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/thread_cpu.py \\
        TREE_A,TREE_B [ROUNDS [MB]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use) and one `cat` of MB megabytes is timed
(fig_throughput.measure, $CLOWDER_BENCH_TERM's size); /proc/PID/task/*/schedstat and
status are read before and after (a measurement's span: the session's spawn and
ping, then the `cat`).  Prints MB/s, the host's CPU over all threads and the loop's,
voluntary and involuntary switches, and each busy thread; then the medians per tree.
Used for a flood's model in the screen pool (docs/design.md "A flood's model on the loop").
"""

from __future__ import annotations

import os

import clowder
import fig_throughput
from common import median
from handoff_dark import in_turn, tree_args


def threads(pid: int) -> dict[str, tuple]:
    """tid -> (name, CPU seconds, voluntary, involuntary switches)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                cpu = int(f.read().split()[0]) / 1e9
            switches = {}
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.endswith("ctxt_switches"):
                        switches[key] = int(value)
        except OSError:
            continue  # a thread that ended meanwhile
        out[tid] = (name, cpu, switches.get("voluntary_ctxt_switches", 0),
                    switches.get("nonvoluntary_ctxt_switches", 0))
    return out


def main() -> None:
    srcs, rounds, mb = tree_args(4, 50)
    size = mb * 1_000_000
    path = fig_throughput.make_file(size)
    res: dict[str, list[tuple]] = {}
    for _round, src in in_turn(srcs, rounds):
        pid = clowder.main_pid()
        before = threads(pid)
        m = fig_throughput.measure(clowder.ClowderPeer(), path, size, 120)
        after = threads(pid)
        zero = ("", 0.0, 0, 0)
        diff = {tid: tuple(a - b for a, b in zip(after[tid][1:], before.get(tid, zero)[1:]))
                for tid in after}
        cpu = sum(d[0] for d in diff.values())
        loop = diff[str(pid)][0]
        vol = sum(d[1] for d in diff.values())
        invol = sum(d[2] for d in diff.values())
        busy = {f"{after[t][0]}:{t}": round(d[0], 3) for t, d in diff.items() if d[0] > 0.005}
        name = os.path.basename(src)
        print(f"{name}: {m['mb_s']:.1f} MB/s, host cpu {cpu:.2f} s (loop {loop:.2f}), "
              f"switches {vol} voluntary {invol} involuntary; {busy}", flush=True)
        res.setdefault(name, []).append((m["mb_s"], cpu, loop, vol, invol))
    for name, rows in res.items():
        med = [median(row[i] for row in rows) for i in range(5)]
        print(f"{name:12} MB/s {med[0]:.1f} host cpu {med[1]:.2f} s (loop {med[2]:.2f}) "
              f"switches {med[3]:.0f} / {med[4]:.0f}")


if __name__ == "__main__":
    main()
