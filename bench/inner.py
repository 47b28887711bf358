"""The part of the benchmark that runs inside the private systemd instance, as root.

Started by run.py with the bench venv's interpreter.  Progress goes to stderr; each
figure's results go to stdout as one line `BENCHRESULT <name> <json>`, as soon as the
figure is done, so a later failure loses nothing already measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clowder  # noqa: E402
import fig_blackout  # noqa: E402
import fig_echo  # noqa: E402
import fig_memory  # noqa: E402
import fig_repaint  # noqa: E402
import fig_snapshot  # noqa: E402
import fig_throughput  # noqa: E402
from common import log, run  # noqa: E402
from peers import AbducoPeer, DtachPeer, RawPeer, ScreenPeer, TmuxPeer  # noqa: E402

FIGURES = ("throughput", "blackout", "echo", "repaint", "snapshot", "memory")


def emit(name: str, value) -> None:
    print(f"BENCHRESULT {name} {json.dumps(value)}", flush=True)


def versions() -> dict:
    def first_line(argv):
        try:
            p = run(argv, check=False)
            return (p.stdout or p.stderr).strip().splitlines()[0]
        except (OSError, IndexError):
            return None
    return {
        "tmux": first_line(["tmux", "-V"]),
        "screen": first_line(["screen", "-v"]),
        "dtach": first_line(["dtach", "--help"]),
        "abduco": first_line(["abduco", "-v"]),
        "systemd": first_line(["systemctl", "--version"]),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "clowder's screen engine": _engine(),
    }


def _engine() -> str:
    """The engine the host picks in this venv (ptyhostd/engine.py: ghostty if installed)."""
    try:
        from importlib.metadata import version
        return f"ghostty (pyghostty {version('pyghostty')})"
    except Exception:  # not installed: the host falls back to pyte
        return "pyte"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, required=True, help="bytes of the cat figure's file")
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--echo-samples", type=int, required=True)
    p.add_argument("--sessions", required=True, help="comma-separated N for the restart figure")
    p.add_argument("--figures", default=",".join(FIGURES))
    p.add_argument("--timeout", type=float, default=300, help="per throughput measurement")
    args = p.parse_args()
    figures = [f for f in args.figures.split(",") if f]

    os.makedirs("/tmp/clowder-bench", exist_ok=True)
    clowder.install_units()
    clowder.start_host()

    candidates = [RawPeer(), TmuxPeer(), ScreenPeer(), DtachPeer(), AbducoPeer(),
                  clowder.ClowderPeer(), clowder.ClowderCtlPeer()]
    peers, skipped = [], {}
    for peer in candidates:
        why = peer.available()
        if why:
            skipped[peer.name] = why
            log(f"skipping {peer.name}: {why}")
        else:
            peers.append(peer)
    emit("meta", {"versions": versions(), "nproc": os.cpu_count(),
                  "loadavg_start": os.getloadavg(), "skipped": skipped,
                  "peers": {p.name: p.note for p in peers}, "started": time.time()})

    failed = False
    for fig in figures:
        log(f"=== {fig}")
        t0 = time.monotonic()
        try:
            if fig == "throughput":
                # clowder once more with a second client stalled (issue 4, acceptance 4).
                stalled = clowder.ClowderStalledPeer()
                res = fig_throughput.run(peers + [stalled], args.size, args.rounds,
                                         args.timeout)
                stalled.reset()
            elif fig == "blackout":
                counts = [int(n) for n in args.sessions.split(",") if n]
                res = fig_blackout.run(counts, args.rounds)
            elif fig == "echo":
                res = fig_echo.run(peers, args.echo_samples, args.rounds,
                                   fig_throughput.make_file(args.size))
            elif fig == "repaint":
                res = fig_repaint.run([p.name for p in peers],
                                      fig_throughput.make_file(args.size), args.size,
                                      args.rounds)
            elif fig == "snapshot":
                res = fig_snapshot.run([p.name for p in peers],
                                       fig_throughput.make_file(args.size), args.size,
                                       args.rounds, args.echo_samples)
            elif fig == "memory":
                clowder.stop_host()  # a fresh host, nothing left from the other figures
                clowder.start_host()
                res = fig_memory.run([p for p in peers if hasattr(p, "add_detached")
                                      and p.name != "clowderctl"])
            else:
                raise SystemExit(f"unknown figure {fig!r}")
        except Exception:
            failed = True
            log(f"figure {fig} failed:\n{traceback.format_exc()}")
            log("host journal tail:\n" + clowder.journal_tail())
            emit(fig, {"error": traceback.format_exc()})
            # Whatever state it left, the next figure starts from a host that is up.
            clowder.stop_host()
            clowder.start_host()
            continue
        res["elapsed_s"] = time.monotonic() - t0
        res["loadavg_end"] = os.getloadavg()
        emit(fig, res)
        if fig == "blackout":
            clowder.start_host()
    clowder.stop_host()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
