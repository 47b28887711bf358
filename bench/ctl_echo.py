"""Echo and CPU a keystroke through `clowderctl attach` and the minimal client, source
trees alternated.

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/ctl_echo.py \\
        TREE_A,TREE_B [ROUNDS [KEYS]]

In one systemd instance, each round: for each tree in turn (the first one rotating), the
host is switched to it (handoff_dark.use), then KEYS keystrokes (default 300, 5-15 ms
apart, after 20 unmeasured) are echoed through `clowderctl attach` run from the same tree
and through the minimal client.  Prints each pass's echo p50 and p99, and the CPU time
the host and the client (`/proc/PID/schedstat`) spent a keystroke; then, per tree and
client, the passes' p50s and their median.  Used for the client's terminal written by
the host (docs/bench.md, section 3).
"""

from __future__ import annotations

import os
import random
import time

import clowder
import fig_echo
from common import cpu_seconds, median, percentile
from handoff_dark import in_turn, tree_args


def one(peer, keys: int, rng: random.Random) -> tuple[list[float], float, float]:
    """Echo latencies, and the host's and the client's CPU seconds a key."""
    term = peer.open(fig_echo.ECHO_ARGV)
    try:
        fig_echo._ready(term)
        for i in range(20):
            fig_echo.echo_once(term, i)
        proc = getattr(term, "proc", None)
        client = [proc.pid] if proc is not None else []
        servers = term.server_pids()
        host0, client0 = cpu_seconds(servers), cpu_seconds(client) if client else 0.0
        lat = []
        for i in range(keys):
            lat.append(fig_echo.echo_once(term, i))
            time.sleep(rng.uniform(0.005, 0.015))
        return (lat, (cpu_seconds(servers) - host0) / keys,
                ((cpu_seconds(client) - client0) / keys) if client else 0.0)
    finally:
        term.close()


def main() -> None:
    srcs, rounds, keys = tree_args(4, 300)
    rng = random.Random(1)
    passes: dict[tuple[str, str], list[float]] = {}
    for _round, src in in_turn(srcs, rounds):
        tree = os.path.basename(src.rstrip("/"))
        for peer in (clowder.ClowderCtlPeer(src), clowder.ClowderPeer()):
            lat, host, client = one(peer, keys, rng)
            peer.reset()
            passes.setdefault((tree, peer.name), []).append(median(lat))
            print(f"{tree} {peer.name}: echo p50 {median(lat) * 1e3:.3f} p99 "
                  f"{percentile(lat, 99) * 1e3:.3f} ms; host {host * 1e6:.0f} us, "
                  f"client {client * 1e6:.0f} us a key", flush=True)
    print("\np50 of each pass, ms:", flush=True)
    for (tree, name), p50s in sorted(passes.items()):
        print(f"{tree:20} {name:12} {' '.join(f'{x * 1e3:.3f}' for x in p50s)}  "
              f"median {median(p50s) * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
