"""Figure 8: snapshots, idle and right after a flood; and what a snapshot of the largest
screen costs another session's keystroke echo (issue 13, acceptance 4).

(a) "snapshot after flood": a session draws the repaint figure's 80x24 screen and
sleeps.  "idle": SNAPSHOTS timed snapshots of the quiet session (after one warm-up).  "first":
one snapshot of a fresh session that drew the same screen with no flood, asked for the
moment its job wrote its last byte (before 66e3a71 a session's first snapshot paid the
screen pool's thread wake-ups, which the warm idle ones did not; docs/design.md "The
first snapshot on the loop").
"after flood": a fresh session first cats the throughput file (100 MB in a full run)
with no client attached, then draws the same screen; one snapshot is asked for the
moment the job has written its last byte (a fresh session per format), so it pays
whatever the model still has to catch up.  clowder: a GetSnapshot request of each
format on a connection made beforehand (text, ansi, html, json); tmux: `tmux
capture-pane -p` (text) and `-p -e` (ansi), a process start included (~2 ms).  The
repaint after a flood (attach to first paint, the minimal client and `clowderctl
attach`) is the repaint figure's, in the same run.

(b) "echo beside a big snapshot": a session of the largest allowed size (500x500, the
host's 250,000-cell cap; tmux gets the same size) is filled with coloured text (every
row words in random 256 colours, a fifth bold) and sleeps.  Then, in the same server,
another session's echo (fig_echo's ECHO_ARGV and sampling, the minimal client for
clowder, `tmux attach` for tmux) is sampled idle and while a thread of ours asks for
snapshots of the big screen in a loop (in a process of its own), one format per case; and, as the control, while
a process of ours keeps one core busy (`md5sum /dev/zero`): on a shared 2-core
machine, a server thread as busy as a snapshot loop costs the echo that much even
without holding the GIL.  A snapshot over what a
reply carries (1 MiB: ansi, html and json of this screen) is answered `too-large`
after it was made, so it costs the host the same; the answers are counted.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import time

import clowder
import fig_echo
import fig_repaint
from common import ECHO_ARGV, log, median, percentile, wait_for
from common import run as sh
from peers import TmuxPeer, unique

WORK = "/tmp/clowder-bench"
HERE = os.path.dirname(os.path.abspath(__file__))
SNAPSHOTS = 5  # timed idle snapshots a round, format and peer
BIG = (500, 500)
FORMATS = {"clowder": ("text", "ansi", "html", "json"), "tmux": ("text", "ansi")}
# The control: a process as busy as a snapshot loop keeps one of the server's threads,
# but outside it (no GIL): what the machine's cores alone cost the echo meanwhile.
CONTROL = "control: a busy core (md5sum)"
TMUX_ARGS = {"text": ("-p",), "ansi": ("-p", "-e")}

# The big screen: every row words in random 256 colours, then a marker file and sleep.
_FILL = """\
import random, sys
cols, rows = int(sys.argv[1]), int(sys.argv[2])
rng, out = random.Random(3), []
for y in range(rows):
    row, width = [], 0
    while width < cols - 12:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        row.append("\\x1b[%s38;5;%dm%s\\x1b[0m " % ("1;" if rng.random() < 0.2 else "",
                                                rng.randrange(256), word))
        width += len(word) + 1
    out.append("".join(row) + ("\\r\\n" if y < rows - 1 else ""))
sys.stdout.write("".join(out)); sys.stdout.flush()
open(sys.argv[3], "w").close()
"""


def fill_argv(done: str) -> list[str]:
    return ["/bin/sh", "-c", 'stty -echo; /usr/bin/python3 -c "$0" "$@"; exec sleep infinity',
            _FILL, str(BIG[0]), str(BIG[1]), done]


# --- (a) one snapshot ----------------------------------------------------------------------


class _Clowder:
    name = "clowder"

    def __init__(self):
        self.conn = clowder.Conn()
        self.sids = []

    def start(self, argv, size=(80, 24)) -> str:
        P = clowder.P
        info = self.conn.request(P.Spawn(argv=argv, name=None, cwd="/",
                                         env={"TERM": clowder.TERM}, cols=size[0],
                                         rows=size[1]), P.SessionInfo)
        sid = info.session["id"]
        self.sids.append(sid)
        return sid

    def snapshot(self, sid: str, fmt: str) -> tuple[float, str]:
        """Seconds for one snapshot, and "ok" or the error's kind."""
        P = clowder.P
        t0 = time.perf_counter()
        self.conn.send(P.GetSnapshot(session=sid, format=fmt))
        while True:
            reply = self.conn.recv()
            if isinstance(reply, P.SnapshotData):
                return time.perf_counter() - t0, "ok"
            if isinstance(reply, P.Error):
                return time.perf_counter() - t0, getattr(reply, "code", "") or "error"

    def echo_term(self):
        return clowder.ClowderPeer().open(ECHO_ARGV)

    def stop(self):
        for sid in self.sids:
            clowder.end_session(self.conn, sid)
        self.conn.close()


class _Tmux:
    name = "tmux"

    def __init__(self):
        self.sock = unique("snap")
        self.peer = TmuxPeer()
        self.started = False

    def start(self, argv, size=(80, 24)) -> str:
        name = unique("s")
        self.peer._tmux(self.sock, "new-session", "-d", "-s", name, "-x", str(size[0]),
                        "-y", str(size[1]), "--", *argv)
        self.started = True
        return name

    def snapshot(self, name: str, fmt: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        p = sh(["tmux", "-L", self.sock, "-f", "/dev/null", "capture-pane",
                 *TMUX_ARGS[fmt], "-t", name], check=False)
        return time.perf_counter() - t0, "ok" if p.returncode == 0 else "error"

    def echo_term(self):
        import types
        return self.peer.open(ECHO_ARGV, beside=types.SimpleNamespace(tmux_socket=self.sock))

    def stop(self):
        if self.started:
            self.peer._tmux(self.sock, "kill-server", check=False)


SIDES = {"clowder": _Clowder, "tmux": _Tmux}


def _wait_file(path: str, timeout: float) -> None:
    wait_for(lambda: os.path.exists(path), timeout, f"{path} to be written", interval=0.001)
    os.unlink(path)


def after_flood(kind: str, flood: str, timeout: float) -> dict:
    """{format: (idle seconds list, first seconds, after-flood seconds)} for one round.
    "first": the first snapshot of a fresh session that drew the screen with no flood,
    taken as the after-flood one is: what the flood itself adds is after / first."""
    side = SIDES[kind]()
    out = {}
    try:
        done = f"{WORK}/{unique('drawn')}"
        quiet = side.start(fig_repaint.job_argv(done, None))
        _wait_file(done, timeout)
        for fmt in FORMATS[kind]:
            side.snapshot(quiet, fmt)  # warm-up
            idle = [side.snapshot(quiet, fmt)[0] for _ in range(SNAPSHOTS)]
            firsts = []
            for load in (None, flood):
                done = f"{WORK}/{unique('drawn')}"
                fresh = side.start(fig_repaint.job_argv(done, load))
                _wait_file(done, timeout)
                took, answer = side.snapshot(fresh, fmt)
                if answer != "ok":
                    raise RuntimeError(f"{kind} {fmt} first snapshot "
                                       f"{'after the flood' if load else 'unflooded'}: {answer}")
                firsts.append(took)
            out[fmt] = (idle, firsts[0], firsts[1])
    finally:
        side.stop()
    return out


# --- (b) echo beside snapshots of the biggest screen ----------------------------------------


# The snapshot loop runs in a process of its own: a thread of this one would hold this
# process's GIL while it splits megabytes of replies, delaying the echo we time here.
_LOOP = """\
import json, signal, sys, time
import clowder_wire as P
sys.path.insert(0, sys.argv[1])
import clowder
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
conn = clowder.Conn()
times, answers = [], {}
while not stop:
    t0 = time.perf_counter()
    conn.send(P.GetSnapshot(session=sys.argv[2], format=sys.argv[3]))
    while True:
        reply = conn.recv()
        if isinstance(reply, (P.SnapshotData, P.Error)):
            break
    times.append(time.perf_counter() - t0)
    answer = "ok" if isinstance(reply, P.SnapshotData) else reply.code
    answers[answer] = answers.get(answer, 0) + 1
    if len(times) == 1:
        print("first", flush=True)
print(json.dumps({"times": times, "answers": answers}), flush=True)
"""
_TMUX_LOOP = """\
import json, signal, subprocess, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
times, answers = [], {}
while not stop:
    t0 = time.perf_counter()
    p = subprocess.run(["tmux", "-L", sys.argv[2], "-f", "/dev/null", "capture-pane",
                        *sys.argv[4:], "-t", sys.argv[3]], capture_output=True)
    times.append(time.perf_counter() - t0)
    answer = "ok" if p.returncode == 0 else "error"
    answers[answer] = answers.get(answer, 0) + 1
    if len(times) == 1:
        print("first", flush=True)
print(json.dumps({"times": times, "answers": answers}), flush=True)
"""


class _Loop:
    """Snapshots of ``target`` in ``fmt``, one after another, in a child process,
    until stopped."""

    def __init__(self, side_kind: str, target: str, fmt: str, sock: str | None):
        if side_kind == "tmux":
            argv = [sys.executable, "-c", _TMUX_LOOP, HERE, sock, target, *TMUX_ARGS[fmt]]
        else:
            argv = [sys.executable, "-c", _LOOP, HERE, target, fmt]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.times: list[float] = []
        self.answers: dict[str, int] = {}

    def wait_first(self, timeout: float) -> None:
        ready = select.select([self.proc.stdout], [], [], timeout)[0]
        if not ready or self.proc.stdout.readline().strip() != "first":
            raise TimeoutError(f"no first snapshot within {timeout:g} s")

    def stop(self):
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=120)
        got = json.loads(out.strip().splitlines()[-1])
        self.times, self.answers = got["times"], got["answers"]


def beside_big(kind: str, samples: int, rng: random.Random, timeout: float) -> dict:
    """{load: {"lat": [...], "snap": [...], "answers": {...}}} for one round."""
    side = SIDES[kind]()
    out = {}
    try:
        done = f"{WORK}/{unique('filled')}"
        big = side.start(fill_argv(done), BIG)
        _wait_file(done, timeout)
        side.snapshot(big, "text")  # the model has it all (and a warm-up)
        term = side.echo_term()
        try:
            fig_echo._ready(term)
            for load in ("idle", CONTROL) + FORMATS[kind]:
                loop = busy = None
                if load == CONTROL:
                    busy = subprocess.Popen(["md5sum", "/dev/zero"], stdout=subprocess.DEVNULL)
                elif load != "idle":
                    loop = _Loop(kind, big, load, getattr(side, "sock", None))
                    loop.wait_first(timeout)
                lat = []
                try:
                    for i in range(samples):
                        lat.append(fig_echo.echo_once(term, i, 10.0))
                        time.sleep(rng.uniform(*fig_echo.GAP))
                        fig_echo._drop_pending(term, 0)
                finally:
                    if loop is not None:
                        loop.stop()
                    if busy is not None:
                        busy.kill()
                        busy.wait()
                out[load] = {"lat": lat, "snap": loop.times if loop else [],
                             "answers": loop.answers if loop else {}}
        finally:
            term.close()
    finally:
        side.stop()
    return out


def run(peer_names: list[str], flood: str, size: int, rounds: int, samples: int) -> dict:
    kinds = [k for k in SIDES if k in peer_names]
    timeout = 60 + size / 2e6
    rng = random.Random(13)
    snaps: dict[tuple, list] = {}
    echo: dict[tuple, dict] = {}
    errors: dict[str, list[str]] = {k: [] for k in kinds}
    for r in range(rounds):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        for kind in order:
            try:
                for fmt, (idle, first, took) in after_flood(kind, flood, timeout).items():
                    got = snaps.setdefault((kind, fmt), {"idle": [], "first": [],
                                                         "after flood": []})
                    got["idle"] += idle
                    got["first"].append(first)
                    got["after flood"].append(took)
                    log(f"snapshot round {r + 1}/{rounds} {kind} {fmt}: idle "
                        f"{median(idle) * 1e3:.1f} ms, first {first * 1e3:.1f} ms, after "
                        f"flood {took * 1e3:.1f} ms")
            except Exception as exc:
                errors[kind].append(f"round {r + 1} after flood: {exc!r}")
                log(f"snapshot round {r + 1} {kind} after flood: FAILED {exc!r}")
            try:
                for load, got in beside_big(kind, samples, rng, timeout).items():
                    acc = echo.setdefault((kind, load), {"lat": [], "snap": [], "answers": {}})
                    acc["lat"] += got["lat"]
                    acc["snap"] += got["snap"]
                    for k, v in got["answers"].items():
                        acc["answers"][k] = acc["answers"].get(k, 0) + v
                    log(f"snapshot-echo round {r + 1}/{rounds} {kind} {load}: p50 "
                        f"{median(got['lat']) * 1e3:.2f} ms, p99 "
                        f"{percentile(got['lat'], 99) * 1e3:.2f} ms, "
                        f"{len(got['snap'])} snapshots")
            except Exception as exc:
                errors[kind].append(f"round {r + 1} beside big: {exc!r}")
                log(f"snapshot-echo round {r + 1} {kind}: FAILED {exc!r}")
    summary = {}
    for kind in kinds:
        s = summary[kind] = {"errors": errors[kind], "snapshot": {}, "echo": {}}
        for fmt in FORMATS[kind]:
            got = snaps.get((kind, fmt))
            if got and got["idle"] and got["after flood"]:
                idle, after = median(got["idle"]) * 1e3, median(got["after flood"]) * 1e3
                first = median(got["first"]) * 1e3
                s["snapshot"][fmt] = {"idle_ms": idle, "idle_max_ms": max(got["idle"]) * 1e3,
                                      "first_ms": first,
                                      "first_all_ms": [round(v * 1e3, 1)
                                                       for v in got["first"]],
                                      "after_flood_x_first": after / first,
                                      "after_flood_ms": after,
                                      "after_flood_max_ms": max(got["after flood"]) * 1e3,
                                      "ratio": after / idle,
                                      "after_flood_all_ms": [round(v * 1e3, 1)
                                                             for v in got["after flood"]]}
        for load in ("idle", CONTROL) + FORMATS[kind]:
            got = echo.get((kind, load))
            if got and got["lat"]:
                lat = got["lat"]
                s["echo"][load] = {"samples": len(lat), "p50_ms": median(lat) * 1e3,
                                   "p99_ms": percentile(lat, 99) * 1e3,
                                   "max_ms": max(lat) * 1e3,
                                   "snapshots": len(got["snap"]),
                                   "snapshot_ms": (median(got["snap"]) * 1e3
                                                   if got["snap"] else None),
                                   "answers": got["answers"]}
    return {"rounds": rounds, "flood_bytes": size, "snapshots_idle": SNAPSHOTS,
            "big": list(BIG), "samples_per_round": samples, "peers": summary}
