"""clowderctl logs AGENT: the agent's lifecycle events, from the journal."""

import os
import subprocess

from ..client import ClientError


def add_parser(sub):
    p = sub.add_parser("logs", help="an agent's lifecycle events (journal)")
    p.add_argument("agent", metavar="AGENT")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--lines", "-n", default="200")
    p.set_defaults(run=run)


def run(args) -> int:
    user = os.getuid() != 0 and os.path.exists(
        f"{os.environ.get('XDG_RUNTIME_DIR', '')}/clowder/control.sock")
    cmd = ["journalctl", "--no-pager", "-o", "short-iso", "-n", str(args.lines),
           "--user-unit" if user else "-u", "clowder-control.service",
           f"CLOWDER_AGENT={args.agent}"]
    if args.follow:
        cmd.append("--follow")
    try:
        return subprocess.call(cmd)
    except FileNotFoundError:
        raise ClientError("journalctl is not installed") from None
