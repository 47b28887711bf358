"""Figure 5: repaint latency for an attaching client, idle and right after a flood.

The session draws a full screen (23 rows of text with colours and bold, then a marker
on the last row, written in two halves so it is never in a command line) and sleeps.
A sample is the time from the attach's start (connecting, for clowder's minimal
client; starting the client process, for clowderctl, tmux and screen) to the marker
reaching the client: the repaint has drawn the last row, so the whole screen is there.

"idle": a session that drew its screen and has been quiet since; after one warm-up
attach (clowder makes a session's model on its first attach), ATTACHES timed attaches,
one after the other, each closed before the next.  "after flood": a fresh session that
first cats the throughput file (100 MB in a full run) with no client attached, then
draws the same screen; the attach starts the moment the job has written its last byte
(it touches a file we poll every millisecond).  clowder feeds its model lazily, so
this attach pays the catch-up: at most SCREEN_CATCH_UP (256 KiB) parsed, then the
render.  Beside it, the same two steps timed in this process (``model``).  "first": a
fresh session that drew the same screen with no flood, attached to as the flooded one
is (its first attach, the moment the job is done): what the flood itself adds is the
after-flood time over this one; the idle attaches come after a warm-up.

dtach and abduco keep no screen: their attach shows nothing until the program draws
again (dtach -r ctrl_l/winch only asks the program to redraw), so they have no figure.
"""

from __future__ import annotations

import os
import time

import clowder
from clowder import AttachedClient, PYTHON
from common import (DONE, PtyTerminal, log, median, percentile, read_until, spawn_on_pty,
                    stop_process, wait_for)
from peers import TmuxPeer, ScreenPeer, unique

WORK = "/tmp/clowder-bench"
ATTACHES = 5  # timed idle attaches a round and peer
LOADS = ("idle", "first", "after flood")
NO_REPAINT = {"dtach": "keeps no screen: an attach shows nothing until the program "
                       "draws again", "abduco": "keeps no screen, as dtach"}

# 23 rows of text with colours and bold (each under 80 columns), then the marker on the
# last row, with no newline after it.
_DRAW = (
    "i=1; while [ $i -le 23 ]; do "
    "printf '\\033[3%dm%02d the quick brown fox \\033[1mjumps\\033[0m over the lazy dog %040d\\n' "
    "$((i % 8)) $i $i; i=$((i + 1)); done; printf '%s%s' BENCH- DONE"
)


def job_argv(done: str, flood: str | None) -> list[str]:
    """Optionally cat the flood file, draw the screen, touch ``done``, then sleep."""
    cat = 'cat "$2"; ' if flood else ""
    return ["/bin/sh", "-c", f'stty -echo; {cat}{_DRAW}; : > "$1"; exec sleep infinity',
            "sh", done, flood or ""]


# --- per peer: start a session, attach one client and wait for the marker ---------------


class _ClowderSide:
    name = "clowder"

    def start(self, argv):
        self.conn = clowder.Conn()
        self.sid = clowder.spawn(self.conn, argv)

    def attach(self) -> float:
        t0 = time.perf_counter()
        term = AttachedClient(self.sid)
        try:
            read_until(term, DONE, 30)
            return time.perf_counter() - t0
        finally:
            term.conn.close()  # not term.close(): the session stays

    def stop(self):
        clowder.end_session(self.conn, self.sid)
        self.conn.close()


class _ClowderCtlSide(_ClowderSide):
    name = "clowderctl"

    def attach(self) -> float:
        t0 = time.perf_counter()
        proc, master = spawn_on_pty([PYTHON, "-m", "ctl", "attach", "--history", "0",
                                     self.sid])
        return _pty_attach(proc, master, self.name, t0)


def _pty_attach(proc, master, name, t0) -> float:
    term = PtyTerminal(proc, master, name=name)
    try:
        read_until(term, DONE, 30)
        return time.perf_counter() - t0
    finally:
        stop_process(proc)  # a hang-up: the client detaches, the session stays
        os.close(master)


class _TmuxSide:
    name = "tmux"

    def start(self, argv):
        self.sock, self.session = unique("repaint"), unique("s")
        TmuxPeer()._tmux(self.sock, "new-session", "-d", "-s", self.session, "-x", "80",
                         "-y", "24", "--", *argv)

    def attach(self) -> float:
        t0 = time.perf_counter()
        proc, master = spawn_on_pty(["tmux", "-L", self.sock, "attach", "-t", self.session])
        return _pty_attach(proc, master, self.name, t0)

    def stop(self):
        TmuxPeer()._tmux(self.sock, "kill-server", check=False)


class _ScreenSide:
    """GNU screen; `screen -x` (attach, even if a previous client is still detaching)."""

    name = "screen"

    def start(self, argv):
        self.peer = ScreenPeer()
        self.session = unique("repaint")
        self.server = self.peer._start(self.session, argv)

    def attach(self) -> float:
        t0 = time.perf_counter()
        proc, master = spawn_on_pty(["screen", "-c", self.peer.rc, "-x", self.session])
        return _pty_attach(proc, master, self.name, t0)

    def stop(self):
        try:
            os.kill(self.server, 15)
        except ProcessLookupError:
            pass


SIDES = {"clowder": _ClowderSide, "clowderctl": _ClowderCtlSide, "tmux": _TmuxSide,
         "screen": _ScreenSide}


def _wait_done(done: str, timeout: float) -> None:
    wait_for(lambda: os.path.exists(done), timeout, "the job to finish drawing",
             interval=0.001)


def measure(kind: str, load: str, flood: str, timeout: float) -> list[float]:
    done = f"{WORK}/{unique('drawn')}"
    side = SIDES[kind]()
    side.start(job_argv(done, flood if load == "after flood" else None))
    try:
        _wait_done(done, timeout)
        if load == "idle":
            side.attach()  # warm-up: clowder makes the model on the first attach
            return [side.attach() for _ in range(ATTACHES)]
        return [side.attach()]  # "first", "after flood": the session's first attach
    finally:
        side.stop()
        if os.path.exists(done):
            os.unlink(done)


def model_costs(flood: str, runs: int = 3) -> dict:
    """In this process: feed SCREEN_CATCH_UP bytes of the flood file to a fresh model,
    then render a repaint; and the render alone of a full 80x24 and 200x50 screen."""
    from ptyhostd import session
    from ptyhostd.screen import Screen
    with open(flood, "rb") as f:
        f.seek(max(0, os.path.getsize(flood) - session.SCREEN_CATCH_UP))
        tail = f.read()
    out = {"catch_up_bytes": len(tail)}
    feed, render = [], []
    for _ in range(runs):
        screen = Screen(80, 24)
        t0 = time.perf_counter()
        screen.feed(tail)
        t1 = time.perf_counter()
        screen.repaint()
        feed.append(t1 - t0)
        render.append(time.perf_counter() - t1)
    out["feed_catch_up_ms"] = median(feed) * 1e3
    out["repaint_80x24_ms"] = median(render) * 1e3
    big = Screen(200, 50)
    big.feed(tail[-200_000:])
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        big.repaint()
        times.append(time.perf_counter() - t0)
    out["repaint_200x50_ms"] = median(times) * 1e3
    return out


def run(peer_names: list[str], flood: str, size: int, rounds: int) -> dict:
    kinds = [k for k in SIDES if k in peer_names]
    got: dict[tuple, list[float]] = {}
    errors: dict[str, list[str]] = {k: [] for k in kinds}
    # A flood reaches the screen peer at ~8-16 MB/s: allow for it.
    timeout = 60 + size / 2e6
    for r in range(rounds):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for load in LOADS:
            for kind in order:
                try:
                    lat = measure(kind, load, flood, timeout)
                    got.setdefault((kind, load), []).extend(lat)
                    log(f"repaint round {r + 1}/{rounds} {load} {kind}: "
                        + ", ".join(f"{v * 1e3:.1f}" for v in lat) + " ms")
                except Exception as exc:
                    errors[kind].append(f"round {r + 1} {load}: {exc!r}")
                    log(f"repaint round {r + 1} {load} {kind}: FAILED {exc!r}")
    summary = {}
    for kind in kinds:
        summary[kind] = {"errors": errors[kind]}
        for load in LOADS:
            lat = got.get((kind, load))
            if lat:
                summary[kind][load] = {"samples": len(lat), "median_ms": median(lat) * 1e3,
                                       "p90_ms": percentile(lat, 90) * 1e3,
                                       "max_ms": max(lat) * 1e3,
                                       "all_ms": [round(v * 1e3, 1) for v in lat]}
    for kind in kinds:
        for load in LOADS:
            mine = summary[kind].get(load, {}).get("median_ms")
            tmux = summary.get("tmux", {}).get(load, {}).get("median_ms")
            if mine and tmux:
                summary[kind][load]["x_tmux"] = mine / tmux
    return {"rounds": rounds, "attaches_idle": ATTACHES, "flood_bytes": size,
            "peers": summary, "no_repaint": {k: v for k, v in NO_REPAINT.items()},
            "model": model_costs(flood)}
