#!/usr/bin/env python3
"""What the saves to the state directory cost (issue 17, "Reboot"): the PTY host's CPU
and the bytes it writes there, with the saves on and off, beside tmux for the same work.

    make venv stage VENV=V STAGE=S && cd S && \\
      python3 tools/sysinstance.py run --name statedir-bench -- V/bin/python bench/statedir.py \\
        [--sessions 1,10,100] [--flood 1] [--window 15] [--repeat 3] [--no-tmux]

Runs inside a systemd instance as root (as the tests do): installs the system units,
and for each case starts the host afresh (with `CLOWDER_STATE_SAVES=0` in a drop-in for
"saves off", ptyhostd/statedir.py), spawns N sessions over one client connection, lets
one save round pass, then measures over WINDOW seconds: the host's CPU (utime + stime
of /proc/PID/stat, every thread: the screen pool makes the files) and the bytes written
to its state directory (every version of every file: a rename makes a new inode, and
a file is rewritten at most every INTERVAL, so a poll every 0.2 s sees each one).
"steady": each session prints a 70-character line every second, so every session's
file changes every round (the worst case for quiet printers); "flood": each prints a
1 MB file of 63-character lines over and over (its file is the largest: a full
scrollback tail); "steady, full scrollback" (--full): steady printers that first print
2,000 lines, as steady ones are after half an hour.  Saves off and on alternate, REPEAT times each: medians.  tmux (one server, N windows of the same programs) is
measured over the same window (80x24 everywhere, the Spawn default).  Prints a
markdown table; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import clowder_wire as P  # noqa: E402
from common import flood_argv, log, wait_for  # noqa: E402
from ctl.client import Client  # noqa: E402
from ptyhostd import statedir  # noqa: E402

PYTHON = sys.executable
SOCKET = "/run/clowder/ptyhost.sock"
STATE = "/var/lib/clowder-ptyhost"
DROP_IN = "/run/systemd/system/clowder-ptyhost.service.d/bench.conf"
TICK = os.sysconf("SC_CLK_TCK")
STEADY = ["/bin/sh", "-c", "i=0; while :; do i=$((i+1)); "
          "echo \"steady line $i: the quick brown fox jumps over the lazy dog again\"; "
          "sleep 1; done"]
# The same after 2,000 lines at once: its file has a full scrollback tail from the start
# (~140 KB, as a steady printer's after half an hour).
FULL = ["/bin/sh", "-c", "seq -f 'line %06g: the quick brown fox jumps over the lazy dog, "
        "twice' 2000; " + STEADY[2]]
TMUX = ["tmux", "-L", "statedir-bench", "-f", "/dev/null"]


def sh(*argv, **kw) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def cpu_ticks(pid: int) -> int:
    """utime + stime of every thread of ``pid`` so far, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15, after "state" (3)


def host_pid() -> int:
    return int(sh("systemctl", "show", "-p", "MainPID", "--value",
                  "clowder-ptyhost.service").strip() or 0)


def start_host(saves: bool) -> int:
    """A fresh host (no sessions, no files), with the saves on or off."""
    sh("systemctl", "stop", "clowder-ptyhost.service")  # ends and forgets every session
    shutil.rmtree(os.path.join(STATE, statedir.SUBDIR), ignore_errors=True)
    os.makedirs(os.path.dirname(DROP_IN), exist_ok=True)
    with open(DROP_IN, "w") as f:
        f.write("[Service]\nEnvironment=CLOWDER_STATE_SAVES=%d\n" % saves)
    sh("systemctl", "daemon-reload")
    sh(PYTHON, "-m", "ctl", "ps")  # a connection starts it (socket activation)
    return wait_for(host_pid, 20, "the host to run")


def spawn(argvs: list[list[str]]) -> None:
    with Client(SOCKET) as c:
        for argv in argvs:
            c.request(P.Spawn(argv=argv, cwd="/"), P.SessionInfo)


class Written:
    """Bytes the host wrote to its state directory: the largest size seen of every
    version (inode) of every session's file."""

    def __init__(self):
        self.where = os.path.join(STATE, statedir.SUBDIR)
        self.seen: dict[int, int] = {}
        self.before: set[int] = set()

    def poll(self) -> None:
        try:
            names = os.listdir(self.where)
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(statedir.SUFFIX):
                continue
            try:
                st = os.stat(os.path.join(self.where, name))
            except FileNotFoundError:
                continue
            self.seen[st.st_ino] = max(st.st_size, self.seen.get(st.st_ino, 0))

    def mark(self) -> None:
        """What is there now was written before the window."""
        self.poll()
        self.before = set(self.seen)

    def total(self) -> tuple[int, int]:
        new = {ino: size for ino, size in self.seen.items() if ino not in self.before}
        return len(new), sum(new.values())


def window(pids_of, seconds: float, written: Written | None) -> dict:
    pids = pids_of()
    start = {p: cpu_ticks(p) for p in pids}
    if written:
        written.mark()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:  # a measuring window, not a wait for an event
        if written:
            written.poll()
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    used = sum(cpu_ticks(p) - start[p] for p in pids if os.path.exists(f"/proc/{p}"))
    row = {"cpu": 100 * used / TICK / elapsed, "seconds": elapsed}
    if written:
        row["files"], row["bytes"] = written.total()
    return row


def clowder_case(argvs: list[list[str]], saves: bool, seconds: float) -> dict:
    start_host(saves)
    spawn(argvs)
    time.sleep(statedir.INTERVAL + 1)  # the first round (every file made) is behind us
    return window(lambda: [host_pid()], seconds, Written())


def tmux_case(argvs: list[list[str]], seconds: float) -> dict:
    subprocess.run(TMUX + ["kill-server"], capture_output=True)
    env = {"PATH": os.environ["PATH"], "TERM": "xterm-256color", "HOME": "/root",
           "LANG": "C.UTF-8"}
    sh(*TMUX, "new-session", "-d", "-x", "80", "-y", "24", shlex.join(argvs[0]), env=env)
    for argv in argvs[1:]:
        sh(*TMUX, "new-window", "-d", shlex.join(argv), env=env)
    pid = int(sh(*TMUX, "display-message", "-p", "#{pid}", env=env).strip())
    time.sleep(statedir.INTERVAL + 1)  # as for clowder
    try:
        return window(lambda: [pid], seconds, None)
    finally:
        subprocess.run(TMUX + ["kill-server"], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,10,100", help="N for the steady printers")
    ap.add_argument("--flood", default="1", help="N for the flooding sessions ('' for none)")
    ap.add_argument("--window", type=float, default=15.0, help="seconds measured per case")
    ap.add_argument("--repeat", type=int, default=3, help="windows per case, saves off and on "
                    "alternating (medians)")
    ap.add_argument("--full", default="", help="N for the steady printers with a full "
                    "scrollback tail ('' for none)")
    ap.add_argument("--no-tmux", action="store_true")
    args = ap.parse_args()
    sh(PYTHON, "-m", "ctl", "install-units", "--system", "--exec-start", f"{PYTHON} -m ptyhostd")
    with tempfile.NamedTemporaryFile(delete=False, dir="/var/tmp") as f:
        f.write(b"".join(b"flood line %06d: the quick brown fox jumps over the lazy dog\n"
                         % i for i in range(16000)))
        text = f.name
    os.chmod(text, 0o644)
    cases = [("steady", int(n), STEADY) for n in args.sessions.split(",") if n]
    cases += [("steady, full scrollback", int(n), FULL) for n in args.full.split(",") if n]
    cases += [("flood", int(n), flood_argv(text)) for n in args.flood.split(",") if n]
    rows = []
    try:
        for kind, n, argv in cases:
            argvs = [argv] * n
            row = {"case": f"{n} {kind}"}
            runs: dict[str, list[dict]] = {"off": [], "on": []}
            for i in range(args.repeat):
                for saves in (False, True):
                    log(f"{n} {kind}, saves {'on' if saves else 'off'} ({i + 1}/{args.repeat})")
                    runs["on" if saves else "off"].append(clowder_case(argvs, saves,
                                                                       args.window))
            row["n"] = n
            for k, rs in runs.items():
                row[k] = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                row[k + "_cpus"] = [r["cpu"] for r in rs]
            if not args.no_tmux:
                log(f"{n} {kind}, tmux")
                row["tmux"] = tmux_case(argvs, args.window)
            rows.append(row)
    finally:
        sh("systemctl", "stop", "clowder-ptyhost.service")
        os.unlink(DROP_IN)
        os.unlink(text)
    bound_cpu = 100 * statedir.ROUND_SECONDS / statedir.INTERVAL
    bound_bytes = statedir.ROUND_BUDGET / statedir.INTERVAL
    print(f"\nThe saves' cost, {args.window:g} s windows, medians of {args.repeat} (CPU: % "
          f"of one core; bounds: {bound_cpu:g} % CPU, {bound_bytes / 1024:.0f} KiB/s)\n")
    print("| sessions | host CPU, saves off | host CPU, saves on | the saves' share | "
          "files written a window | a session's file rewritten every | bytes/s to the "
          "state directory | tmux CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        off, on = r["off"], r["on"]
        rate = on["bytes"] / on["seconds"]
        every = r["n"] * on["seconds"] / on["files"] if on["files"] else float("inf")
        tmux = f"{r['tmux']['cpu']:.1f} %" if "tmux" in r else "-"
        spread = lambda cpus: "/".join(f"{c:.1f}" for c in cpus)  # noqa: E731
        print(f"| {r['case']} | {off['cpu']:.1f} % ({spread(r['off_cpus'])}) | "
              f"{on['cpu']:.1f} % ({spread(r['on_cpus'])}) | {on['cpu'] - off['cpu']:+.1f} % | "
              f"{on['files']:.0f} | {every:.1f} s | {rate / 1024:.1f} KiB/s | {tmux} |")

if __name__ == "__main__":
    main()
