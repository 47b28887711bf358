"""clowderctl ps: list sessions: the running ones, and the ended ones until their end is
seen (this listing, `wait` or an attach shows it); --all: every ended one kept too."""

import json
import time

import clowder_wire as protocol

from ..client import Client
from ..text import shown

COLUMNS = ("id", "name", "pid", "unit", "state", "exit", "size", "created")


EPILOG = """\
--json prints one array of sessions, oldest first, each an object with id, name, pid,
  uid, unit, state ("running", "exited", "killed", ...), exit_code, signal, cols, rows,
  created (seconds since the epoch), cwd, argv, agent and ended_by ("reboot": a session
  of a previous boot, its last screen kept; else null), as the PTY host reports them.

examples:
  clowderctl ps
  clowderctl ps --all --json | jq -r '.[] | select(.state == "running") | .id'
"""


def add_parser(sub):
    p = sub.add_parser("ps", help="list sessions", epilog=EPILOG)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", "-a", action="store_true",
                   help="also the ended sessions whose end was already seen")
    p.set_defaults(run=run)


def exit_text(s: dict) -> str:
    if s.get("ended_by"):  # "reboot": a session of a previous boot, its last screen kept
        return s["ended_by"]
    if s.get("signal") is not None:
        return f"sig{s['signal']}"
    return "" if s.get("exit_code") is None else str(s["exit_code"])


def run(args) -> int:
    with Client(args.socket) as c:
        sessions = c.request(protocol.ListSessions(all=args.all), protocol.SessionList).sessions
    sessions.sort(key=lambda s: s.get("created", 0))
    if args.json:
        print(json.dumps(sessions, indent=None))
        return 0
    rows = [COLUMNS]
    for s in sessions:
        # Escaped: a name from an old manifest or another host may hold controls.
        rows.append(tuple(shown(v) for v in (
            s["id"], s["name"], str(s["pid"] or "-"), s["unit"], s["state"], exit_text(s),
            f"{s['cols']}x{s['rows']}",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["created"])))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0
