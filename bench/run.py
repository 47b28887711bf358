#!/usr/bin/env python3
"""clowder's benchmarks, side by side with tmux, GNU screen, dtach and abduco.

    python3 bench/run.py [--quick] [--figures throughput,blackout,echo,repaint,snapshot,memory]
                         [--rounds N] [--sessions 10,100,1000] [--size BYTES]

Run as root from anywhere.  Not part of the test suite, and it asserts nothing about
time: it measures and writes docs/bench.md (a table) and docs/bench.png (a plot, if
matplotlib can be installed into the plot venv).  Steps:

1. installs the peers from Debian if missing (abduco is not packaged for Debian 12: it
   is measured only when an `abduco` is on PATH) and what systemd-python's build needs;
2. copies this tree (without .git and build output) to /opt/clowder-bench/src and
   installs it into the venv /opt/clowder-bench/venv (built there, never in the tree);
3. boots a private systemd instance (tools/sysinstance.py) over an overlay of / and
   runs bench/inner.py in it with that venv: clowder's units are installed there, and
   the peers run in the same instance so everything is measured in one environment;
4. writes the raw results to /opt/clowder-bench/results/, then the table and the plot.

--quick: a 20 MB file instead of 100 MB, 3 rounds instead of 5, and 100 echo samples a
round instead of 300 (the restart figure keeps N = 10, 100, 1000 either way).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Another base (e.g. a helper's own, beside another run): $CLOWDER_BENCH_BASE.
BASE = os.environ.get("CLOWDER_BENCH_BASE", "/opt/clowder-bench")
SRC = f"{BASE}/src"
VENV = f"{BASE}/venv"
PLOT_VENV = f"{BASE}/plot-venv"
RESULTS = f"{BASE}/results"
INSTANCE = "clowder-bench"
PEER_PACKAGES = ("tmux", "screen", "dtach", "abduco")
BUILD_PACKAGES = ("libsystemd-dev", "pkg-config", "gcc", "python3-dev", "python3-venv")

sys.path.insert(0, HERE)
import report  # noqa: E402


def say(*parts) -> None:
    print("[bench]", *parts, file=sys.stderr, flush=True)


def sh(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, **kw)


# --- 1. packages --------------------------------------------------------------------------


def apt_install() -> dict[str, str]:
    """Install what is missing, one package at a time; return {package: why skipped}."""
    missing_tools = [p for p in PEER_PACKAGES if not shutil.which(p)]
    missing_build = [p for p in BUILD_PACKAGES
                     if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    skipped = {}
    if not missing_tools and not missing_build:
        return skipped
    say("apt-get install", *missing_tools, *missing_build)
    lists = "/var/lib/apt/lists"
    if not os.path.isdir(lists) or time.time() - os.path.getmtime(lists) > 6 * 3600:
        sh(["apt-get", "update", "-qq"])
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for pkg in missing_build + missing_tools:
        p = subprocess.run(["apt-get", "install", "-y", "-qq", pkg], env=env,
                           capture_output=True, text=True)
        if p.returncode:
            why = (p.stderr.strip().splitlines() or ["apt-get failed"])[-1]
            if pkg in BUILD_PACKAGES:
                raise SystemExit(f"bench: cannot install {pkg}: {why}")
            skipped[pkg] = why
            say(f"{pkg}: not installed ({why}); it will be skipped")
    return skipped


# --- 2. the tree and the venvs ------------------------------------------------------------


def copy_tree() -> None:
    """A copy of the working tree (as it is now, uncommitted changes included)."""
    if os.path.isdir(SRC):
        shutil.rmtree(SRC)
    os.makedirs(SRC)
    excludes = [".git", "build", "dist", "*.egg-info", ".pytest_cache", ".hypothesis",
                "__pycache__"]
    tar = ["tar", "-C", ROOT, "-cf", "-"] + [f"--exclude={e}" for e in excludes] + ["."]
    with subprocess.Popen(tar, stdout=subprocess.PIPE) as out:
        sh(["tar", "-C", SRC, "-xf", "-"], stdin=out.stdout)
    if out.returncode:
        raise SystemExit("bench: copying the tree failed")


def install_venv() -> None:
    if not os.path.exists(f"{VENV}/bin/python"):
        sh(["/usr/bin/python3", "-m", "venv", VENV])
    pip = [f"{VENV}/bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # With the ghostty engine, as the packages install it (clowder-ghostty): without
    # it the host runs pyte, whose lazy model made every after-flood figure a pyte parse
    # (docs/bench.md section 8 before 2026-12-03 measured that by mistake).
    sh(pip + [f"{SRC}[ghostty]"], cwd=SRC)
    # Same version number, new code: reinstall the project itself every time.
    sh(pip + ["--no-deps", "--force-reinstall", SRC], cwd=SRC)


def plot_python() -> str | None:
    """The plot venv's interpreter with matplotlib, or None (the PNG is then skipped)."""
    py = f"{PLOT_VENV}/bin/python"
    try:
        if not os.path.exists(py):
            sh(["/usr/bin/python3", "-m", "venv", PLOT_VENV])
        if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode:
            sh([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "matplotlib"])
        return py
    except subprocess.CalledProcessError as exc:
        say(f"matplotlib is not available ({exc}); the PNG plot is skipped")
        return None


def source_revision() -> str:
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True,
                              text=True).stdout.strip()
    rev = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return rev + (" + uncommitted changes" if dirty else "")


# --- 3. the instance ----------------------------------------------------------------------


def run_inside(argv: list[str], out_path: str, name: str = INSTANCE) -> int:
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from sysinstance import STATE_ROOT, Instance
    if (STATE_ROOT / name).exists():
        say(f"removing a stale instance {name}")
        Instance(name).stop()
    with open(out_path, "w") as out, Instance(name, boot_timeout=60) as inst:
        say(f"instance {name} booted; running {' '.join(argv[1:])}")
        return inst.exec(argv, cwd="/", stdout=out).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller and fewer: a check run")
    p.add_argument("--figures", default="throughput,blackout,echo,repaint,snapshot,memory")
    p.add_argument("--rounds", type=int)
    p.add_argument("--size", type=int, help="bytes of the cat figure's file")
    p.add_argument("--sessions", help="N for the restart figure, comma-separated")
    p.add_argument("--echo-samples", type=int)
    p.add_argument("--instance", default=INSTANCE,
                   help=f"name of the private systemd instance (default {INSTANCE})")
    p.add_argument("--no-setup", action="store_true",
                   help="reuse /opt/clowder-bench as it is (no apt, copy or pip)")
    p.add_argument("--no-docs", action="store_true",
                   help="keep the results file only; leave docs/bench.md and the plot alone")
    p.add_argument("--report-only", metavar="RESULTS",
                   help="only write docs/bench.md and the plot from a results file")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (it boots a private systemd instance)")
    quick = args.quick
    size = args.size or (20 if quick else 100) * 1_000_000
    rounds = args.rounds or (3 if quick else 5)
    samples = args.echo_samples or (100 if quick else 300)
    sessions = args.sessions or "10,100,1000"

    if args.report_only:
        return write_report(args.report_only, None)
    skipped_apt = {} if args.no_setup else apt_install()
    if not args.no_setup:
        say(f"copying the tree to {SRC} and installing it into {VENV}")
        copy_tree()
        install_venv()
    plot_py = plot_python()
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_path = f"{RESULTS}/{stamp}{'-quick' if quick else ''}.jsonl"
    header = {"revision": source_revision(), "quick": quick, "size": size, "rounds": rounds,
              "echo_samples": samples, "sessions": sessions, "apt_skipped": skipped_apt,
              "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "loadavg_host": os.getloadavg()}
    argv = [f"{VENV}/bin/python", f"{SRC}/bench/inner.py", "--size", str(size),
            "--rounds", str(rounds), "--echo-samples", str(samples), "--sessions", sessions,
            "--figures", args.figures]
    t0 = time.monotonic()
    code = run_inside(argv, out_path, args.instance)
    header["elapsed_s"] = time.monotonic() - t0
    with open(out_path, "a") as f:
        f.write(report.line("run", header) + "\n")
    say(f"results in {out_path} (inner exit {code})")
    if not args.no_docs:
        write_report(out_path, plot_py)
    return code


# Sections of docs/bench.md that come from another run than this one stand between
# these marks, and a new report keeps them: the chaos run's counts (make test-soak),
# clowderctl's start-up (bench/startup.py), the fleet (bench/fleet.py), the state
# directory's saves (bench/statedir.py) and a crash's repaint (bench/restart_repaint.py).
KEPT = (("<!-- chaos run (make test-soak): kept by bench/run.py -->",
         "<!-- end of the chaos run -->"),
        ("<!-- start-up (bench/startup.py): kept by bench/run.py -->",
         "<!-- end of the start-up -->"),
        ("<!-- fleet (bench/fleet.py): kept by bench/run.py -->",
         "<!-- end of the fleet -->"),
        ("<!-- saves (bench/statedir.py): kept by bench/run.py -->",
         "<!-- end of the saves -->"),
        ("<!-- crash repaint (bench/restart_repaint.py): kept by bench/run.py -->",
         "<!-- end of the crash repaint -->"))


def _with_kept_sections(text: str, md: str) -> str:
    """``text`` with each KEPT section of the current ``md`` put back, before
    "How to run"."""
    try:
        with open(md) as f:
            old = f.read()
    except FileNotFoundError:
        return text
    for begin, end_mark in KEPT:
        start, end = old.find(begin), old.find(end_mark)
        if start < 0 or end < start:
            continue
        block = old[start:end + len(end_mark)] + "\n\n"
        at = text.find("## How to run")
        text = text[:at] + block + text[at:] if at >= 0 else text + "\n" + block
    return text


def write_report(results_path: str, plot_py: str | None) -> int:
    docs = os.path.join(ROOT, "docs")
    md = os.path.join(docs, "bench.md")
    png = os.path.join(docs, "bench.png")
    results = report.load(results_path)
    have_png = False
    if plot_py is None and os.path.exists(f"{PLOT_VENV}/bin/python"):
        plot_py = f"{PLOT_VENV}/bin/python"
    if plot_py:
        p = subprocess.run([plot_py, os.path.join(HERE, "report.py"), "--plot", results_path,
                            png])
        have_png = p.returncode == 0
        if not have_png:
            say("the plot failed; docs/bench.md is written without it")
    else:
        say("no matplotlib: docs/bench.png is not written")
    text = report.markdown(results, "bench.png" if have_png else None,
                           os.path.abspath(results_path))
    text = _with_kept_sections(text, md)  # read before the file is truncated below
    with open(md, "w") as f:
        f.write(text)
    say(f"wrote {md}" + (f" and {png}" if have_png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
