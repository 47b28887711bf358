#!/usr/bin/env python3
"""How fast clowderctl starts, side by side with tmux in one run (issue 13).

    python3 bench/startup.py --venv VENV --src DIR --instance NAME [--runs N] [--tree DIR]

Run as root.  Copies TREE (default: this checkout) to DIR, installs it into VENV (which
must already hold clowder's dependencies: `make venv VENV=...` makes one), boots a
private systemd instance NAME (tools/sysinstance.py), and inside it, with clowder's
system units installed and one session drawing a full 80x24 screen, times N runs of
each, alternating clowder and tmux so that the load of a shared machine falls on both:

- `clowderctl --help`, beside the floors of any Python client: the venv's `python -c
  pass`, and the same importing only the standard modules clowderctl needs (argparse,
  json, re, select, socket);
- `clowderctl ps`, beside `tmux ls` against a tmux server with one session;
- `clowderctl attach ID` to its first full paint, beside `tmux attach`: each client is
  started on a new 80x24 pty and timed until the screen's bottom row (a marker) has been
  drawn, then hung up; and `clowderctl attach` with no ID (the newest running session,
  here the only one), beside `tmux attach` with no target;
- `ps`, `attach ID` and `attach` again through clowderctl as the .deb/.rpm install it
  (packaging/install-tree.sh's wrapper: Debian's python3 started with -S, the private
  directory byte-compiled), the form users run.

Prints a table of medians (ms) and the ratios to tmux; asserts nothing about time.
--tree lets the same harness measure an older tree (a `git archive` of it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "BENCH-" + "PAINTED"  # in two halves, so no command line shows the marker
# The session's program: a full screen of text, the marker on its bottom row, then idle.
SCREEN_PROGRAM = (
    "import sys, time\n"
    "rows = [f'row {i:02d} ' + 'abcdefghij' * 7 for i in range(1, 24)]\n"
    "sys.stdout.write('\\x1b[H\\x1b[2J' + '\\r\\n'.join(rows) + '\\r\\n' + 'BENCH-' + 'PAINTED')\n"
    "sys.stdout.flush()\n"
    "time.sleep(1e6)\n"
)


def say(*parts) -> None:
    print("[startup]", *parts, file=sys.stderr, flush=True)


# --- outside: copy, install, boot ----------------------------------------------------------


def outer(args) -> int:
    tree = os.path.abspath(args.tree)
    say(f"copying {tree} to {args.src}")
    subprocess.run(["rm", "-rf", args.src], check=True)
    os.makedirs(args.src)
    subprocess.run(f"tar --exclude=.git --exclude=build --exclude='*.egg-info' -C {tree} "
                   f"-cf - . | tar -C {args.src} -xf -", shell=True, check=True)
    python = os.path.join(args.venv, "bin", "python")
    say(f"installing it into {args.venv}")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--force-reinstall", "."], cwd=args.src, check=True)
    subprocess.run(["rm", "-rf", "build"], cwd=args.src)
    packaged(args.src)
    # The harness is this checkout's, whatever tree is measured: it drives clowder only
    # through clowderctl, so it works with any version's code.
    harness = os.path.join(args.src, ".startup-harness")
    os.makedirs(harness, exist_ok=True)
    for name in ("startup.py", "common.py"):
        subprocess.run(["cp", os.path.join(HERE, name), harness], check=True)
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from sysinstance import STATE_ROOT, Instance
    if (STATE_ROOT / args.instance).exists():
        say(f"removing a stale instance {args.instance}")
        Instance(args.instance).stop()
    argv = [python, os.path.join(harness, "startup.py"), "--inner", "--runs", str(args.runs)]
    with Instance(args.instance, boot_timeout=60) as inst:
        say(f"instance {args.instance} booted")
        proc = inst.exec(argv, cwd="/", stdout=subprocess.PIPE)
    out = proc.stdout.decode() if isinstance(proc.stdout, bytes) else (proc.stdout or "")
    lines = [ln for ln in out.splitlines() if ln.startswith("STARTUP ")]
    if proc.returncode != 0 or not lines:
        say(f"the inner run failed (exit {proc.returncode})")
        return 1
    results = json.loads(lines[-1][len("STARTUP "):])
    results["tree"] = tree
    print(table(results))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def packaged(src: str) -> None:
    """clowderctl as the .deb/.rpm install it, beside the venv's: install-tree.sh's
    wrapper (Debian's python3, -S) and private directory, byte-compiled as py3compile
    does on installation, under SRC/.packaged (the wrapper pointed there)."""
    dest = os.path.join(src, ".packaged")
    if not os.path.exists(os.path.join(src, "packaging", "install-tree.sh")):
        return  # an older tree: its rows are left out
    vendor = os.path.join(src, "webd", "static", "vendor")
    if not os.path.exists(os.path.join(vendor, "xterm.js")):  # a `git archive`: not built
        subprocess.run(["cp", "-rT", os.path.join(ROOT, "webd", "static", "vendor"), vendor],
                       check=True)
    subprocess.run(["sh", "packaging/install-tree.sh", dest, "/usr/bin/python3"], cwd=src,
                   check=True)
    private = dest + "/usr/share/clowder"
    wrapper = os.path.join(dest, "usr", "bin", "clowderctl")
    with open(wrapper) as f:
        text = f.read().replace('"/usr/share/clowder"', repr(private))
    with open(wrapper, "w") as f:
        f.write(text)
    subprocess.run(["/usr/bin/python3", "-m", "compileall", "-q", private], check=True,
                   stdout=subprocess.DEVNULL)


def table(r: dict) -> str:
    rows = [("`clowderctl --help`", "help", "`python -c pass`", "python"),
            ("`clowderctl --help`", "help", "`python -c 'import argparse, json, ...'`",
             "stdlib"),
            ("`clowderctl --help`", "help", "`tmux ls`", "tmux_ls"),
            ("`clowderctl ps`", "ps", "`tmux ls`", "tmux_ls"),
            ("`clowderctl attach ID` to first full paint", "attach", "`tmux attach -t`",
             "tmux_attach"),
            ("`clowderctl attach` (no ID) to first full paint", "attach_newest",
             "`tmux attach`", "tmux_attach_newest"),
            ("`clowderctl ps`, packaged", "ps_pkg", "`tmux ls`", "tmux_ls"),
            ("`clowderctl attach ID`, packaged", "attach_pkg", "`tmux attach -t`",
             "tmux_attach"),
            ("`clowderctl attach` (no ID), packaged", "attach_newest_pkg", "`tmux attach`",
             "tmux_attach_newest")]
    out = [f"runs: {r['runs']} each, medians (ms)", "",
           "| clowder | ms | beside | ms | ratio |", "|---|---|---|---|---|"]
    for name, key, other, okey in rows:
        if key not in r["median_ms"]:
            continue  # a row this results file (an older harness's) does not have
        a, b = r["median_ms"][key], r["median_ms"][okey]
        out.append(f"| {name} | {a:.1f} | {other} | {b:.1f} | {a / b:.1f}x |")
    return "\n".join(out)


# --- inside the instance ---------------------------------------------------------------------


def inner(args) -> int:
    sys.path.insert(0, HERE)
    from common import read_until, run, spawn_on_pty, stop_process

    venv_bin = os.path.dirname(sys.executable)
    ctl = os.path.join(venv_bin, "clowderctl")
    program = ["/usr/bin/python3", "-c", SCREEN_PROGRAM]
    # The system units, with ptyhostd run by this venv (as bench/clowder.py does).
    run([sys.executable, "-m", "ctl", "install-units", "--system", "--exec-start",
         f"{sys.executable} -m ptyhostd"])
    sid = run([ctl, "spawn", "--name", "startup", "--size", "80x24", "--", *program]
              ).stdout.strip()
    tmux = ["tmux", "-L", "startup", "-f", "/dev/null"]
    run([*tmux, "new-session", "-d", "-s", "startup", "-x", "80", "-y", "24", "--",
         *program])
    env = {"PATH": f"{venv_bin}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "TERM": "xterm-256color", "LANG": "C.UTF-8"}

    def wall(argv: list[str]) -> float:
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr!r}")
        return took

    def paint(argv: list[str]) -> float:
        t0 = time.perf_counter()
        proc, master = spawn_on_pty(argv, env)
        try:
            read_until(_Pty(master, argv[0]), MARK.encode(), 20)
            return time.perf_counter() - t0
        finally:
            stop_process(proc)
            os.close(master)

    # The .deb/.rpm's wrapper (packaged() above), if the tree has one.
    pkg = os.path.join(os.path.dirname(HERE), ".packaged", "usr", "bin", "clowderctl")
    pkg = pkg if os.path.exists(pkg) else None
    samples: dict[str, list[float]] = {k: [] for k in (
        "python", "stdlib", "help", "ps", "tmux_ls", "attach", "tmux_attach",
        "attach_newest", "tmux_attach_newest") + (
        ("ps_pkg", "attach_pkg", "attach_newest_pkg") if pkg else ())}
    stdlib = [sys.executable, "-c", "import argparse, json, re, select, socket"]
    # One warm-up of each (page cache, .pyc files), not counted.
    wall([ctl, "--help"]), wall([ctl, "ps"]), wall([*tmux, "ls"])
    paint([ctl, "attach", sid]), paint([*tmux, "attach", "-t", "startup"])
    paint([ctl, "attach"]), paint([*tmux, "attach"])
    if pkg:
        wall([pkg, "ps"]), paint([pkg, "attach", sid]), paint([pkg, "attach"])
    for i in range(args.runs):
        samples["python"].append(wall([sys.executable, "-c", "pass"]))
        samples["stdlib"].append(wall(stdlib))
        samples["help"].append(wall([ctl, "--help"]))
        samples["tmux_ls"].append(wall([*tmux, "ls"]))
        samples["ps"].append(wall([ctl, "ps"]))
        samples["tmux_attach"].append(paint([*tmux, "attach", "-t", "startup"]))
        samples["attach"].append(paint([ctl, "attach", sid]))
        samples["tmux_attach_newest"].append(paint([*tmux, "attach"]))
        samples["attach_newest"].append(paint([ctl, "attach"]))
        if pkg:
            samples["ps_pkg"].append(wall([pkg, "ps"]))
            samples["attach_pkg"].append(paint([pkg, "attach", sid]))
            samples["attach_newest_pkg"].append(paint([pkg, "attach"]))
        say(f"run {i + 1}/{args.runs}")
    run([*tmux, "kill-server"], check=False)
    result = {"runs": args.runs,
              "median_ms": {k: statistics.median(v) * 1000 for k, v in samples.items()},
              "samples_ms": {k: [round(x * 1000, 2) for x in v] for k, v in samples.items()}}
    print("STARTUP " + json.dumps(result), flush=True)
    return 0


class _Pty:
    """The master of a client's pty, read as common.read_until reads a Terminal."""

    def __init__(self, master: int, name: str):
        import select
        self.master, self.name = master, name
        self._poll = select.poll()
        self._poll.register(master, select.POLLIN)

    def read(self, timeout: float) -> bytes:
        if not self._poll.poll(timeout * 1000):
            return b""
        try:
            return os.read(self.master, 1 << 16)
        except BlockingIOError:
            return b""
        except OSError:  # EIO: the client is gone
            raise EOFError(f"{self.name} ended before its first paint") from None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", default="/opt/clowder-bench/venv")
    p.add_argument("--src", default="/opt/clowder-bench/src-startup")
    p.add_argument("--instance", default="clowder-startup")
    p.add_argument("--tree", default=ROOT, help="the tree to measure (default: this one)")
    p.add_argument("--runs", type=int, default=21)
    p.add_argument("--out", help="also write the results as JSON here")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    return inner(args) if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())
