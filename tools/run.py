#!/usr/bin/env python3
"""`make run` and `make stop`: a shell session inside clowder that outlives the make.

    run.py running --name N        exit 0 if instance N is up (only where systemd is not PID 1)
    run.py attach --name N --python PY --stage DIR
        where systemd is PID 1: install the system units, then attach to the session
        named SESSION (spawned first if none of that name runs);
        elsewhere: boot the private systemd instance N (tools/sysinstance.py) unless it
        is up, install the units in it on its first boot, then the same, inside it.
        Detaching (Ctrl-\\) leaves the instance, the units and the session running.
    run.py stop --name N --python PY
        where systemd is PID 1: end the session run.py started (the units stay installed);
        elsewhere: power instance N off, which ends everything in it, and clean up.

The instance is left running between calls: its state is /run/clowder-sysinstance/N/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sysinstance  # noqa: E402  (the sibling tool)

SESSION = "make-run"  # the name of the shell session `make run` keeps


def pid1_is_systemd() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def instance_up(name: str) -> bool:
    """Whether the instance's PID 1 is alive and really ours (not a reused pid)."""
    inst = sysinstance.Instance(name)
    try:
        return inst._owns(inst.pid)
    except sysinstance.InstanceError:
        return False


class Here:
    """Commands run on this machine (systemd is PID 1)."""

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd="/", **kw)

    def foreground(self, argv: list[str]) -> int:
        return subprocess.run(argv, cwd="/").returncode


class Inside:
    """Commands run in the private instance, as root."""

    def __init__(self, inst: sysinstance.Instance):
        self.inst = inst

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return self.inst.exec(argv, cwd="/", **kw)

    def foreground(self, argv: list[str]) -> int:
        return sysinstance.run_foreground(self.inst, argv, "/", {})


def install_units(where, python: str) -> None:
    r = where.run([python, "-m", "ctl", "install-units", "--system",
                   "--exec-start", f"{python} -m ptyhostd"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"run: install-units failed:\n{r.stdout}{r.stderr}")


def running_session(where, python: str) -> str | None:
    """The id of the running session named SESSION, if any."""
    r = where.run([python, "-m", "ctl", "ps", "--json"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"run: clowderctl ps failed: {r.stderr.strip()}")
    for s in json.loads(r.stdout):
        if s.get("name") == SESSION and s.get("state") == "running":
            return s["id"]
    return None


def ensure_session(where, python: str, stage: str) -> str:
    """The shell session to attach to: the running one, else a new interactive bash
    with the venv's clowderctl on its PATH, in the staged tree."""
    sid = running_session(where, python)
    if sid:
        return sid
    path = f"{os.path.dirname(python)}:{sysinstance.SANE_PATH}"
    r = where.run([python, "-m", "ctl", "spawn", "--name", SESSION, "--cwd", stage,
                   "--env", f"PATH={path}", "--", "bash", "-i"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"run: clowderctl spawn failed: {r.stderr.strip()}")
    return r.stdout.strip()


def attach(args) -> int:
    if pid1_is_systemd():
        where = Here()
        install_units(where, args.python)
    else:
        inst = sysinstance.Instance(args.name, boot_timeout=args.timeout)
        if not instance_up(args.name):
            if inst.state.exists() or inst.cgroup.exists():  # a stale one: clear it first
                inst.stop()
            print(f"run: booting the private systemd instance {args.name} "
                  f"(`make stop` ends it)", file=sys.stderr)
            inst.start()  # left running: no context manager
            install_units(Inside(inst), args.python)
        where = Inside(inst)
    sid = ensure_session(where, args.python, args.stage)
    print(f"run: attaching to session {sid} ({SESSION}); detach with Ctrl-\\, "
          f"`make run` comes back to it", file=sys.stderr)
    return where.foreground([args.python, "-m", "ctl", "attach", sid])


def stop(args) -> int:
    if pid1_is_systemd():
        where = Here()
        sid = running_session(where, args.python)
        if sid:
            where.run([args.python, "-m", "ctl", "kill", sid], check=False)
        print("run: the units stay installed (systemctl disable --now "
              "clowder-ptyhost.socket clowder-control.socket to remove them)", file=sys.stderr)
        return 0
    inst = sysinstance.Instance(args.name)
    if not inst.state.exists() and not inst.cgroup.exists():
        print(f"run: no instance {args.name} is running", file=sys.stderr)
        return 0
    inst.stop()
    print(f"run: instance {args.name} powered off and cleaned up", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="make run / make stop")
    sub = parser.add_subparsers(dest="command", required=True)
    p_running = sub.add_parser("running")
    p_attach = sub.add_parser("attach")
    p_stop = sub.add_parser("stop")
    for p in (p_running, p_attach, p_stop):
        p.add_argument("--name", default="clowder-run")
    for p in (p_attach, p_stop):
        p.add_argument("--python", required=True)
    p_attach.add_argument("--stage", required=True)
    p_attach.add_argument("--timeout", type=float, default=60.0, help="boot deadline (s)")
    args = parser.parse_args(argv)
    if not sysinstance.NAME_RE.fullmatch(args.name):
        raise SystemExit(f"run: bad instance name {args.name!r}")
    if args.command == "running":
        return 0 if not pid1_is_systemd() and instance_up(args.name) else 1
    if os.geteuid() != 0:
        raise SystemExit("run: must be run as root (as the README's set-up commands)")
    try:
        return attach(args) if args.command == "attach" else stop(args)
    except sysinstance.InstanceError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main())
