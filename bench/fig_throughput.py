"""Figure 1: throughput of `cat` of a large file to an attached client.

Each measurement starts a fresh session running THROUGHPUT_JOB and attaches the peer's
client (in a pty of ours, or the minimal protocol client for clowder).  A ping/PONG
exchange proves the whole path is live; then we type "go" and start the clock; the job
cats the file and prints DONE; the clock stops when DONE reaches the attached client.
So a peer that drops or skips output (tmux and screen redraw the screen rather than
forwarding every byte) is timed to the same event: the end of the job on the client's
screen.  CPU time of the relay's server and client processes is read from
/proc/PID/schedstat around the timed part; ``reader_cpu`` is this process's own.

"clowder, 2nd client stalled" is clowder's row again with a second, read-only client
attached to the session that never reads; ``x_alone`` is its speed over clowder's alone.

Every peer is measured twice: in the default terminal (80x24) and at BIG (200x50, the
size issue 13 sets its throughput goal at: a model's cost a byte depends on the size, as
a screen of 80 columns scrolls 2.5x as many lines for the same text).
"""

from __future__ import annotations

import os
import random
import time

import common
from common import (DONE, cpu_seconds, drain, log, median, ping, read_until, sized,
                    throughput_argv)

WORK = "/tmp/clowder-bench"
STALLED = "clowder, 2nd client stalled"  # clowder.ClowderStalledPeer
BIG = (200, 50)


def make_file(size: int) -> str:
    """A file of `size` bytes of log-like printable lines (tmpfs: no disk in the way)."""
    os.makedirs(WORK, exist_ok=True)
    path = f"{WORK}/cat-{size}.txt"
    if os.path.exists(path) and os.path.getsize(path) == size:
        return path
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,:;/=()[]{}"
    lines = []
    for i in range(4096):
        width = rng.randint(10, 140)
        lines.append(f"{i:05d} " + "".join(rng.choice(alphabet) for _ in range(width)) + "\n")
    block = "".join(lines).encode()
    assert b"BENCH-" not in block
    with open(path + ".tmp", "wb") as f:
        left = size
        while left > 0:
            chunk = block[:left]
            f.write(chunk)
            left -= len(chunk)
    os.rename(path + ".tmp", path)
    return path


def measure(peer, path: str, size: int, timeout: float) -> dict:
    term = peer.open(throughput_argv(path))
    try:
        ping(term)
        drain(term, 0.05)
        servers, clients = term.server_pids(), term.client_pids()
        s0, c0, r0 = cpu_seconds(servers), cpu_seconds(clients), time.process_time()
        t0 = time.perf_counter()
        term.write(b"go\n")
        seen = read_until(term, DONE, timeout)
        seconds = time.perf_counter() - t0
        result = {
            "seconds": seconds,
            "mb_s": size / 1e6 / seconds,
            "bytes_seen": seen,
            "server_cpu": cpu_seconds(servers) - s0,
            "client_cpu": cpu_seconds(clients) - c0,
            "reader_cpu": time.process_time() - r0,
        }
        term.write(b"q\n")
        return result
    finally:
        term.close()


def run(peers: list, size: int, rounds: int, timeout: float) -> dict:
    """Each peer at the default size, then (but the stalled peer) at BIG."""
    path = make_file(size)
    res = _run_at(peers, path, size, rounds, timeout)
    res["term"] = "%dx%d" % common.size()
    with sized(*BIG):
        big = _run_at([p for p in peers if p.name != STALLED], path, size, rounds, timeout)
    res["at"] = {"%dx%d" % BIG: big["peers"]}
    return res


def _run_at(peers: list, path: str, size: int, rounds: int, timeout: float) -> dict:
    cols, rows = common.size()  # ``size`` here is the file's
    samples: dict[str, list[dict]] = {p.name: [] for p in peers}
    errors: dict[str, list[str]] = {p.name: [] for p in peers}
    for r in range(rounds):
        # Interleaved: every peer once per round, the starting peer rotating.
        order = peers[r % len(peers):] + peers[:r % len(peers)]
        for peer in order:
            try:
                res = measure(peer, path, size, timeout)
                res["round"] = r
                samples[peer.name].append(res)
                log(f"throughput {cols}x{rows} round {r + 1}/{rounds} {peer.name}: "
                    f"{res['mb_s']:.1f} MB/s "
                    f"({res['seconds']:.2f} s, server cpu {res['server_cpu']:.2f} s)")
            except Exception as exc:  # one broken peer must not stop the others
                errors[peer.name].append(f"round {r + 1}: {exc!r}")
                log(f"throughput round {r + 1} {peer.name}: FAILED {exc!r}")
    summary = {}
    for peer in peers:
        rows = samples[peer.name]
        if not rows:
            summary[peer.name] = {"errors": errors[peer.name], "note": peer.note}
            continue
        mbs = median(r["mb_s"] for r in rows)
        cpu = median(r["server_cpu"] + r["client_cpu"] for r in rows)
        summary[peer.name] = {
            "note": peer.note,
            "rounds": len(rows),
            "seconds": median(r["seconds"] for r in rows),
            "mb_s": mbs,
            "mb_s_all": [round(r["mb_s"], 2) for r in rows],
            "server_cpu": median(r["server_cpu"] for r in rows),
            "client_cpu": median(r["client_cpu"] for r in rows),
            "reader_cpu": median(r["reader_cpu"] for r in rows),
            "relay_cpu_s_per_100mb": cpu / (size / 1e8),
            "bytes_seen": median(r["bytes_seen"] for r in rows),
            "errors": errors[peer.name],
        }
    # Ratios of medians, and the median of per-round ratios (less sensitive to drift in
    # the machine's load, since both numbers of a round were taken within seconds).
    for ref in ("raw pty", "tmux"):
        if ref not in samples or not samples[ref]:
            continue
        key = "x_raw" if ref == "raw pty" else "x_tmux"
        for peer in peers:
            s = summary[peer.name]
            if "mb_s" not in s:
                continue
            s[key] = s["mb_s"] / summary[ref]["mb_s"]
            by_round = {x["round"]: x["mb_s"] for x in samples[ref]}
            paired = [x["mb_s"] / by_round[x["round"]] for x in samples[peer.name]
                      if x["round"] in by_round]
            s[key + "_paired"] = median(paired)
    # The session and a reading client with a second client stalled, against the same
    # with no second client: the speed half of issue 4's acceptance 4.
    stalled = summary.get(STALLED, {})
    if "mb_s" in stalled and samples.get("clowder"):
        by_round = {x["round"]: x["mb_s"] for x in samples["clowder"]}
        stalled["x_alone"] = stalled["mb_s"] / summary["clowder"]["mb_s"]
        stalled["x_alone_paired"] = median(x["mb_s"] / by_round[x["round"]]
                                           for x in samples[STALLED] if x["round"] in by_round)
    return {"file_bytes": size, "rounds": rounds, "peers": summary}
