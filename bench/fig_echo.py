"""Figure 3: keystroke echo latency through an attached client, idle and under a flood.

The session runs ECHO_ARGV (`stty raw -echo; exec cat`): the program, not the tty,
writes each byte back, as an editor or an agent's TUI does.  A sample is the time from
writing one byte into the client's terminal (or sending one Input frame) to that byte
showing up in what the client draws.  Samples are spaced by a short random pause, and
anything the client drew meanwhile is read and dropped before the next one.

"flood": meanwhile another session of the same peer (in the same server, for tmux and
clowder) cats a file in a loop to its own attached client, which a `cat` process
drains as fast as it can (it takes over the client's pty master or socket).

"100 x 100 KB/s" (issue 7's scale figure): meanwhile SCALE_SESSIONS other sessions in
the same server, with no client attached, each print SCALE_RATE bytes a second of
log-like lines (a paced writer: a chunk every 20 ms, each session's phase random).  Only
for the peers that hold many sessions in one server (tmux, clowder); the server's CPU
share during the samples is recorded beside the latencies.

"32 floods" (a crowd): meanwhile CROWD_SESSIONS other sessions in the same server, with
no client attached, each cat the flood's file in a loop as fast as the server takes it
(another user's many agents printing at once); the same peers, the same CPU share.
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import types

from common import ECHO_ARGV, cpu_seconds, flood_argv, log, median, percentile, read_until
from peers import unique

LOADS = ("idle", "flood", "100 x 100 KB/s", "32 floods")
SCALE = LOADS[2]
SCALE_SESSIONS = 100
SCALE_RATE = 100_000  # bytes a second, each
SCALE_PEERS = ("tmux", "clowder", "clowderctl")
CROWD = LOADS[3]
CROWD_SESSIONS = 32
MANY = (SCALE, CROWD)  # the loads of many sessions in the peer's server

# The paced writer of the scale load: SCALE_RATE bytes a second in chunks every 20 ms,
# on schedule (a late chunk does not shift the ones after it).
PACED = """\
import os, random, sys, time
rate, tick = int(sys.argv[1]), 0.02
line = b"%08d INFO worker: request handled in 12 ms, status 200, bytes 5123, ok\\n"
chunk, n = bytearray(), 0
while len(chunk) < rate * tick:
    chunk += line % n
    n += 1
chunk = bytes(chunk[:int(rate * tick)])
t = time.monotonic() + random.random() * tick
while True:
    time.sleep(max(0.0, t - time.monotonic()))
    os.write(1, chunk)
    t += tick
"""


def paced_argv(rate: int) -> list[str]:
    return ["/usr/bin/python3", "-c", PACED, str(rate)]


def _start_many(peer, argv: list[str], count: int):
    """``count`` sessions of ``argv`` in the peer's server, no client attached.
    Returns (beside, server pids, stop)."""
    if peer.name == "tmux":
        sock = unique("scale")
        for i in range(count):
            peer._tmux(sock, "new-session", "-d", "-s", f"p{i}", "-x", "80", "-y", "24",
                       "--", *argv)
        server = peer._server_pid(sock)
        return (types.SimpleNamespace(tmux_socket=sock), [server],
                lambda: peer._tmux(sock, "kill-server", check=False))
    import clowder
    sids = [peer._spawn(argv) for _ in range(count)]

    def stop():
        conn = peer._conn()
        for sid in sids:
            try:
                conn.request(clowder.P.Kill(session=sid, signal=1), clowder.P.Ok)
            except RuntimeError:
                pass
        for sid in sids:
            conn.request(clowder.P.Wait(session=sid), clowder.P.Exited)
            conn.request(clowder.P.Remove(session=sid), clowder.P.Ok)
    return None, [clowder.main_pid()], stop

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


def echo_once(term, i: int, timeout: float = 5.0) -> float:
    """Seconds from typing the ``i``-th key (a-z in turn) to its echo on the client."""
    key = bytes([ord("a") + i % 26])
    t0 = time.perf_counter()
    term.write(key)
    read_until(term, key, timeout)
    return time.perf_counter() - t0


def measure(peer, samples: int, rng: random.Random, flood_path: str | None = None,
            scale: dict | None = None, many: tuple | None = None) -> list[float]:
    """Echo samples; with ``many`` (argv, count) the sessions of a load of many (MANY),
    and ``scale``, a dict the server's CPU share during the samples is put into."""
    flood = drainer = None
    stop_scale = None
    beside = None
    if flood_path:
        flood, drainer = _start_flood(peer, flood_path)
        beside = flood
    elif many is not None:
        beside, servers, stop_scale = _start_many(peer, *many)
    try:
        term = peer.open(ECHO_ARGV, beside=beside)
    except BaseException:
        if flood is not None:
            drainer.kill()
            drainer.wait()
            flood.close()
        if stop_scale is not None:
            stop_scale()
        raise
    try:
        _ready(term)
        if scale is not None:
            time.sleep(0.5)  # every paced writer is going
            c0, w0 = cpu_seconds(servers), time.monotonic()
        out = []
        for i in range(samples):
            out.append(echo_once(term, i))
            time.sleep(rng.uniform(*GAP))
            _drop_pending(term, 0)
        if scale is not None:
            scale["server_cpu_share"] = (cpu_seconds(servers) - c0) / (time.monotonic() - w0)
        return out
    finally:
        term.close()
        if flood is not None:
            drainer.kill()
            drainer.wait()
            flood.close()
        if stop_scale is not None:
            stop_scale()


def run(peers: list, samples: int, rounds: int, flood_path: str) -> dict:
    rng = random.Random(11)
    got: dict[tuple, list[float]] = {}
    errors: dict[str, list[str]] = {p.name: [] for p in peers}
    shares: dict[str, list[float]] = {}
    for r in range(rounds):
        order = peers[r % len(peers):] + peers[:r % len(peers)]
        for load in LOADS:
            for peer in order:
                if load in MANY and peer.name not in SCALE_PEERS:
                    continue
                try:
                    scale = {} if load in MANY else None
                    many = {SCALE: (paced_argv(SCALE_RATE), SCALE_SESSIONS),
                            CROWD: (flood_argv(flood_path), CROWD_SESSIONS)}.get(load)
                    lat = measure(peer, samples, rng, flood_path if load == "flood" else None,
                                  scale, many)
                    got.setdefault((peer.name, load), []).extend(lat)
                    if scale:
                        shares.setdefault((peer.name, load), []).append(
                            scale["server_cpu_share"])
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
        for load in MANY:
            if (peer.name, load) in shares and load in summary[peer.name]:
                summary[peer.name][load]["server_cpu_share"] = median(shares[peer.name, load])
    return {"samples_per_round": samples, "rounds": rounds, "loads": list(LOADS),
            "scale": {"sessions": SCALE_SESSIONS, "bytes_per_s": SCALE_RATE,
                      "peers": list(SCALE_PEERS), "load": SCALE},
            "crowd": {"sessions": CROWD_SESSIONS, "peers": list(SCALE_PEERS), "load": CROWD},
            "peers": summary}
