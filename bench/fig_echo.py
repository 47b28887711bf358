"""Figure 3: keystroke echo latency through an attached client, idle and under a flood.

The session runs ECHO_ARGV (`stty raw -echo; exec cat`): the program, not the tty,
writes each byte back, as an editor or an agent's TUI does.  A sample is the time from
writing one byte into the client's terminal (or sending one Input frame) to that byte
showing up in what the client draws.  Samples are spaced by a short random pause, and
anything the client drew meanwhile is read and dropped before the next one.

"flood": meanwhile another session of the same peer (in the same server, for tmux and
clowder) cats a file in a loop to its own attached client, which a `cat` process
drains as fast as it can (it takes over the client's pty master or socket).
"""

from __future__ import annotations

import os
import random
import subprocess
import time

from common import ECHO_ARGV, flood_argv, log, median, percentile, read_until

LOADS = ("idle", "flood")

GAP = (0.005, 0.015)  # seconds between keystrokes


def _ready(term, timeout: float = 20.0) -> None:
    """Type 'z' until it comes back: the program is in raw mode and echoing."""
    deadline = time.monotonic() + timeout
    while True:
        term.write(b"z")
        try:
            read_until(term, b"z", 0.3)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{term.name}: no echo within {timeout:g} s") from None
    _drop_pending(term, 0.1)


def _drop_pending(term, quiet: float) -> None:
    while True:
        try:
            if not term.read(quiet):
                return
        except EOFError:
            return


def _start_flood(peer, path: str):
    """A flooding session with a client attached, drained by a `cat` of its own."""
    flood = peer.open(flood_argv(path))
    fd = flood.fileno()
    os.set_blocking(fd, True)
    drainer = subprocess.Popen(["cat"], stdin=fd, stdout=subprocess.DEVNULL)
    time.sleep(0.3)  # let it get going
    return flood, drainer


def measure(peer, samples: int, rng: random.Random, flood_path: str | None = None
            ) -> list[float]:
    flood = drainer = None
    if flood_path:
        flood, drainer = _start_flood(peer, flood_path)
    try:
        term = peer.open(ECHO_ARGV, beside=flood)
    except BaseException:
        if flood is not None:
            drainer.kill()
            drainer.wait()
            flood.close()
        raise
    try:
        _ready(term)
        out = []
        for i in range(samples):
            key = bytes([ord("a") + i % 26])
            t0 = time.perf_counter()
            term.write(key)
            read_until(term, key, 5.0)
            out.append(time.perf_counter() - t0)
            time.sleep(rng.uniform(*GAP))
            _drop_pending(term, 0)
        return out
    finally:
        term.close()
        if flood is not None:
            drainer.kill()
            drainer.wait()
            flood.close()


def run(peers: list, samples: int, rounds: int, flood_path: str) -> dict:
    rng = random.Random(11)
    got: dict[tuple, list[float]] = {}
    errors: dict[str, list[str]] = {p.name: [] for p in peers}
    for r in range(rounds):
        order = peers[r % len(peers):] + peers[:r % len(peers)]
        for load in LOADS:
            for peer in order:
                try:
                    lat = measure(peer, samples, rng, flood_path if load == "flood" else None)
                    got.setdefault((peer.name, load), []).extend(lat)
                    log(f"echo round {r + 1}/{rounds} {load} {peer.name}: p50 "
                        f"{median(lat) * 1e3:.2f} ms, p99 {percentile(lat, 99) * 1e3:.2f} ms")
                except Exception as exc:
                    errors[peer.name].append(f"round {r + 1} {load}: {exc!r}")
                    log(f"echo round {r + 1} {load} {peer.name}: FAILED {exc!r}")
    summary = {}
    for peer in peers:
        summary[peer.name] = {"note": peer.note, "errors": errors[peer.name]}
        for load in LOADS:
            lat = got.get((peer.name, load))
            if lat:
                summary[peer.name][load] = {
                    "samples": len(lat),
                    "p50_ms": median(lat) * 1e3,
                    "p99_ms": percentile(lat, 99) * 1e3,
                    "max_ms": max(lat) * 1e3,
                }
    return {"samples_per_round": samples, "rounds": rounds, "loads": list(LOADS),
            "peers": summary}
