"""Echo and throughput of source trees side by side, beside tmux: a constant's A/B.

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/trees.py \\
        TREE_A,TREE_B [ROUNDS [SAMPLES [MB]]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use: a restart with the tree on PYTHONPATH), then
figure 3's echo samples are taken idle and beside a flood, and figure 1's `cat` of MB
megabytes, each through the minimal client (in an 80x24 terminal, or
$CLOWDER_BENCH_TERM's size, e.g. 200x50), and through `clowderctl attach` run from the
same tree (PYTHONPATH: the client differs too); tmux is measured in the same round,
so a loaded machine weighs on all alike.  Prints each measurement and, at the end, the
medians over all rounds.  Used for issue 13's pty wake size (docs/bench.md, section 3).
With $CLOWDER_TREES_SNAPSHOTS=1, also figure 8's echo beside snapshots of the largest
screen in a loop (fig_snapshot.beside_big), for each tree and tmux in the same round
(used for the switch interval, docs/design.md "Snapshots beside other sessions' echo").
With $CLOWDER_TREES_STALLED=1, also figure 1's `cat` with a second client stalled
(clowder.ClowderStalledPeer) for each tree, and its ratio to the minimal client alone in
the same round (docs/bench.md, section 1).
"""

from __future__ import annotations

import os
import random
import sys

import clowder
import fig_echo
import fig_snapshot
import fig_throughput
from common import log, median, percentile
from common import size as size_now
from handoff_dark import use
from peers import TmuxPeer


def main() -> None:
    srcs = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    samples = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    size = int(sys.argv[4]) * 1_000_000 if len(sys.argv) > 4 else 100_000_000
    os.makedirs("/tmp/clowder-bench", exist_ok=True)
    path = fig_throughput.make_file(size)
    log("terminal %dx%d ($CLOWDER_BENCH_TERM)" % size_now())
    rng = random.Random(13)
    echo: dict[tuple, list[float]] = {}
    tput: dict[tuple, list[float]] = {}
    beside: dict[tuple, list[float]] = {}  # (tree or tmux, load) -> echo beside snapshots
    snapshots = os.environ.get("CLOWDER_TREES_SNAPSHOTS") == "1"
    stalled = os.environ.get("CLOWDER_TREES_STALLED") == "1"
    ratio: dict[str, list[float]] = {}  # tree -> stalled / alone, round by round
    tmux = TmuxPeer()
    if tmux.available():
        raise SystemExit(f"tmux: {tmux.available()}")

    def one(label: str, peer) -> None:
        for load, flood in (("idle", None), ("flood", path)):
            lat = fig_echo.measure(peer, samples, rng, flood)
            echo.setdefault((label, load), []).extend(lat)
            log(f"{label} echo {load}: p50 {median(lat) * 1e3:.2f} ms, "
                f"p99 {percentile(lat, 99) * 1e3:.2f} ms")
        res = fig_throughput.measure(peer, path, size, 300)
        tput.setdefault(label, []).append(res["mb_s"])
        log(f"{label} cat: {res['mb_s']:.1f} MB/s (server cpu {res['server_cpu']:.2f} s, "
            f"client cpu {res['client_cpu']:.2f} s)")

    def big(label: str, kind: str) -> None:
        for load, got in fig_snapshot.beside_big(kind, samples, rng, 120).items():
            beside.setdefault((label, load), []).extend(got["lat"])
            log(f"{label} echo beside {load} snapshots: p50 {median(got['lat']) * 1e3:.2f} "
                f"ms, p99 {percentile(got['lat'], 99) * 1e3:.2f} ms, "
                f"{len(got['snap'])} snapshots {got['answers']}")

    for r in range(rounds):
        order = srcs[r % len(srcs):] + srcs[:r % len(srcs)]
        for src in order:
            use(src)
            tree = os.path.basename(src.rstrip("/"))
            for peer in (clowder.ClowderPeer(), clowder.ClowderCtlPeer(src)):
                one(f"{tree}/{peer.name}", peer)
                peer.reset()
            if stalled:
                peer = clowder.ClowderStalledPeer()
                res = fig_throughput.measure(peer, path, size, 300)
                peer.reset()
                tput.setdefault(f"{tree}/stalled", []).append(res["mb_s"])
                ratio.setdefault(tree, []).append(res["mb_s"] / tput[f"{tree}/clowder"][-1])
                log(f"{tree} cat with a 2nd client stalled: {res['mb_s']:.1f} MB/s, "
                    f"{ratio[tree][-1]:.2f}x the minimal client alone")
            if snapshots:
                big(tree, "clowder")
        one("tmux", tmux)
        tmux.clear()
        if snapshots:
            big("tmux", "tmux")
    print("\nmedians over all rounds (echo in ms; cat in MB/s):", flush=True)
    for label in sorted(tput):
        row = [f"{label:28}"]
        if label.endswith("/stalled"):
            print(f"{label:28}  cat {median(tput[label]):6.1f}  "
                  f"x alone {median(ratio[label.split('/')[0]]):.2f}", flush=True)
            continue
        for load in ("idle", "flood"):
            lat = echo[(label, load)]
            row.append(f"echo {load} p50 {median(lat) * 1e3:5.2f} p99 "
                       f"{percentile(lat, 99) * 1e3:6.2f}")
        row.append(f"cat {median(tput[label]):6.1f}")
        print("  ".join(row), flush=True)
    for (label, load), lat in sorted(beside.items()):
        print(f"{label:28}  echo beside {load}: p50 {median(lat) * 1e3:5.2f} p99 "
              f"{percentile(lat, 99) * 1e3:6.2f} max {max(lat) * 1e3:6.2f}", flush=True)


if __name__ == "__main__":
    main()
