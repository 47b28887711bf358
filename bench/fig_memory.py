"""Figure 4: the host's memory per session (PSS), marginal over 1, 10 and 100 sessions.

For each peer, sessions are added without a client attached (1, then up to 10, then up
to 100) and the PSS (/proc/PID/smaps_rollup) of the peer's server processes is summed:
tmux's one server; screen's, dtach's and abduco's one server per session; clowder's
ptyhostd.  The programs in the sessions are not counted.  Marginal per session =
(PSS at 100 - PSS at 1) / 99, and the same over 1..10.  Two loads: idle sessions, and
sessions that first printed 2,000 lines (~70 characters each) and then sleep.

For clowder, systemd's own growth (PID 1 PSS) is reported beside it, since each session
is a transient unit that systemd keeps.
"""

from __future__ import annotations

import os
import time

from common import IDLE_ARGV, find_pids, log, output_then_idle_argv, pss_kb, wait_for

COUNTS = (1, 10, 100)
LOADS = {"idle": IDLE_ARGV, "2000 lines": output_then_idle_argv(2000)}


def sleepers() -> int:
    """Session programs that have reached `sleep infinity` (after any output)."""
    return len(find_pids(lambda a: os.path.basename(a[0]) == "sleep" and a[1:] == ["infinity"]))


def measure(peer, argv: list[str], load: str) -> dict:
    points = {}
    pid1 = {}
    have = 0
    try:
        for n in COUNTS:
            peer.add_detached(argv, n - have)
            have = n
            wait_for(lambda: sleepers() >= n, 60, f"{n} {peer.name} sessions to be idle")
            time.sleep(0.5)  # let the server finish reading what was printed
            points[n] = sum(pss_kb(pid) for pid in peer.server_pids())
            pid1[n] = pss_kb(1)
    finally:
        peer.clear()
        try:
            wait_for(lambda: sleepers() == 0, 20, f"the {peer.name} sessions to end")
        except TimeoutError as exc:
            log(f"memory: {exc}")
    lo, mid, hi = COUNTS
    return {
        "pss_kb": points,
        "per_session_kb_1_100": (points[hi] - points[lo]) / (hi - lo),
        "per_session_kb_1_10": (points[mid] - points[lo]) / (mid - lo),
        "pid1_per_session_kb_1_100": (pid1[hi] - pid1[lo]) / (hi - lo),
    }


def run(peers: list) -> dict:
    summary = {}
    for load, argv in LOADS.items():
        for peer in peers:
            key = f"{peer.name} / {load}"
            try:
                res = measure(peer, argv, load)
                summary.setdefault(peer.name, {"note": peer.note})[load] = res
                log(f"memory {key}: {res['per_session_kb_1_100']:.1f} kB a session "
                    f"(1..100), PSS at 1/10/100: {res['pss_kb']}")
            except Exception as exc:
                summary.setdefault(peer.name, {"note": peer.note})[load] = {"error": repr(exc)}
                log(f"memory {key}: FAILED {exc!r}")
    return {"counts": list(COUNTS), "peers": summary}
