#!/usr/bin/env python3
"""What the web view costs (issue 16, acceptance 5): clowder-web's memory, and what an
open page adds to the PTY host's CPU while a session floods.

    make venv stage VENV=V STAGE=S && cd S && \\
      python3 tools/sysinstance.py run --name web-bench -- V/bin/python bench/web.py

Runs inside a systemd instance as root (as the tests do): installs the units with the
web pair, starts a session that prints a 1 MB file over and over, and measures over
WINDOW seconds the CPU (schedstat) of the host, clowder-web and chromium, and their
memory: with no client, with a headless chromium on the page (tests/browser.py), and
with that page showing the flooding session.  Prints a
markdown table; it asserts nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]

from common import cpu_seconds, flood_argv, pss_kb, wait_for  # noqa: E402

PYTHON = sys.executable
WINDOW = float(os.environ.get("CLOWDER_BENCH_WINDOW", "10"))


def sh(*argv, **kw) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def ctl(*args) -> str:
    return sh(PYTHON, "-m", "ctl", *args)


def main_pid(unit: str) -> int:
    return int(sh("systemctl", "show", "-p", "MainPID", "--value", unit).strip() or 0)


def children(pid: int) -> list[int]:
    """``pid`` and every process below it (chromium is several)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def measure(what: str, extra: list[int]) -> dict:
    host, web = main_pid("clowder-ptyhost.service"), main_pid("clowder-web.service")
    control = main_pid("clowder-control.service")  # asked for the agents at each list
    groups = {"host": [host], "web": [web], "control": [control] if control else [],
              "client": extra}
    start = {k: cpu_seconds(v) for k, v in groups.items()}
    t0 = time.monotonic()
    time.sleep(WINDOW)  # a measuring window, not a wait for an event
    elapsed = time.monotonic() - t0
    row = {"case": what}
    for k, pids in groups.items():
        row[f"{k}_cpu"] = 100 * (cpu_seconds(pids) - start[k]) / elapsed
    row["web_pss_kb"] = pss_kb(web)
    row["client_pss_kb"] = sum(pss_kb(p) for p in extra)
    return row


def main() -> None:
    sh(PYTHON, "-m", "ctl", "install-units", "--system", "--web",
       "--exec-start", f"{PYTHON} -m ptyhostd")
    url = json.loads(ctl("web", "--json"))["url"]
    web = main_pid("clowder-web.service")
    rows = [{"case": "clowder-web started, no page", "web_pss_kb": pss_kb(web)}]
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(os.urandom(512 * 1024).hex().encode()[:1 << 20])
        path = f.name
    os.chmod(path, 0o644)
    sid = ctl("spawn", "--", *flood_argv(path)).strip()
    rows.append(measure("a session flooding, nobody watching", []))
    from browser import Browser
    b = Browser()
    try:
        b.navigate(url)
        wait_for(lambda: (b.eval("window.clowder ? clowder.polls : 0") or 0) > 0, 20,
                 "the page to list sessions")
        rows.append(measure("the page open, no terminal (list polled every 1 s)",
                            children(b.proc.pid)))
        b.eval(f"location.hash = {json.dumps(sid)}")
        wait_for(lambda: (b.eval("clowder.attaches") or 0) > 0, 20, "the page to attach")
        rows.append(measure("the page showing the flooding session", children(b.proc.pid)))
    finally:
        b.close()
    ctl("kill", sid)
    print(f"\nclowder-web's cost, {WINDOW:g} s windows (CPU: % of one core)\n")
    print("| case | host CPU | clowder-web CPU | clowder-control CPU | client CPU | "
          "clowder-web PSS | client PSS |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r[k]:.0f} %" if k in r else "-" for k in ("host_cpu", "web_cpu",
                                                             "control_cpu", "client_cpu")]
        mem = [f"{r[k] / 1024:.1f} MiB" if r.get(k) else "-" for k in ("web_pss_kb",
                                                                       "client_pss_kb")]
        print(f"| {r['case']} | " + " | ".join(cells + mem) + " |")


if __name__ == "__main__":
    main()
