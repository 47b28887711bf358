"""clowderctl logs AGENT: the agent's lifecycle events, from the journal.

Who reads the journal: root, and a user of their own user units, run journalctl
themselves (all its --since forms work).  A member of group clowder using the system
units cannot read the system journal: clowder-control reads it for them (GetLogs),
only the entries of an agent they may drive (controld/journal.py), bounded per answer;
--follow then asks again every second for what came after the last entry.
"""

import datetime
import json
import os
import re
import socket
import subprocess
import sys
import time

import clowder_wire as protocol

from ..client import Client, ClientError, default_control_socket
from ..text import shown

OUTPUTS = ("short-iso", "json", "cat")
FOLLOW_EVERY = 1.0  # seconds between a member's follow requests


def add_parser(sub):
    p = sub.add_parser(
        "logs", help="an agent's lifecycle events (journal)",
        epilog="examples:\n  clowderctl logs api --since '1h ago'\n"
               "  clowderctl logs api -o json | jq .MESSAGE\n  clowderctl logs api -f\n")
    p.add_argument("agent", metavar="AGENT", help="the agent whose lifecycle events to show")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    p.add_argument("--lines", "-n", type=int, default=200, metavar="N",
                   help=f"the newest N events (default 200; at most "
                        f"{protocol.MAX_LOG_LINES} for a group member)")
    p.add_argument("--since", metavar="WHEN",
                   help="only events from WHEN on: 'YYYY-MM-DD [HH:MM[:SS]]', today, "
                        "yesterday, 'N{s,min,h,d} ago' or @EPOCH")
    p.add_argument("--output", "-o", choices=OUTPUTS, default="short-iso",
                   help="short-iso (default), json (one object a line, journalctl's "
                        "field names) or cat (the messages only)")
    p.add_argument("--json", dest="output", action="store_const", const="json",
                   help="the same as -o json")
    p.set_defaults(run=run)


_AGO = re.compile(r"-?\s*(\d+)\s*(s|sec|m|min|h|hour|hours|d|day|days)(\s+ago)?")
_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "hours": 3600,
         "d": 86400, "day": 86400, "days": 86400}


def parse_since(text: str, now: float | None = None) -> int:
    """Seconds since the epoch for a --since value (local time); ValueError if unknown."""
    now = time.time() if now is None else now
    t = text.strip().lower()
    midnight = datetime.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0,
                                                            microsecond=0)
    if t == "now":
        return int(now)
    if t == "today":
        return int(midnight.timestamp())
    if t == "yesterday":
        return int((midnight - datetime.timedelta(days=1)).timestamp())
    if t.startswith("@") and t[1:].isdigit():
        return int(t[1:])
    m = _AGO.fullmatch(t)
    if m and (m[3] or t.startswith("-")):
        return int(now) - int(m[1]) * _UNIT[m[2]]
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
                "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return int(datetime.datetime.strptime(text.strip(), fmt).timestamp())
        except ValueError:
            pass
    raise ValueError(f"--since {text!r}: use 'YYYY-MM-DD [HH:MM[:SS]]', today, yesterday, "
                     "'N{s,min,h,d} ago' or @EPOCH")


def _user_units() -> bool:
    return os.getuid() != 0 and os.path.exists(
        f"{os.environ.get('XDG_RUNTIME_DIR', '')}/clowder/control.sock")


def run(args) -> int:
    if args.lines < 0:
        raise ClientError(f"--lines {args.lines}: must be 0 or more")
    if os.getuid() == 0 or _user_units():
        return _journalctl(args, user=os.getuid() != 0)
    return _through_control(args)


def _journalctl(args, user: bool) -> int:
    cmd = ["journalctl", "--no-pager", "-o", args.output, "-n", str(args.lines),
           "--user-unit" if user else "-u", "clowder-control.service",
           f"CLOWDER_AGENT={args.agent}"]
    if args.since:
        cmd += ["--since", args.since]
    if args.follow:
        cmd.append("--follow")
    try:
        return subprocess.call(cmd)
    except FileNotFoundError:
        raise ClientError("journalctl is not installed") from None


def _print(entry: dict, output: str, host: str) -> None:
    if output == "json":
        print(json.dumps(entry))
        return
    message = shown(entry.get("MESSAGE", ""))
    if output == "cat":
        print(message)
        return
    usec = int(entry.get("__REALTIME_TIMESTAMP", "0"))
    when = datetime.datetime.fromtimestamp(usec / 1e6).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")
    print(f"{when} {host} {shown(entry.get('SYSLOG_IDENTIFIER', 'clowder-control'))}"
          f"[{shown(entry.get('_PID', '?'))}]: {message}")


def _through_control(args) -> int:
    """A member's logs: clowder-control reads the journal for them (GetLogs)."""
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise ClientError(str(exc)) from None
    host = socket.gethostname()
    path = args.control_socket or default_control_socket()
    lines = min(args.lines, protocol.MAX_LOG_LINES)
    with Client(path, peer="clowder-control") as c:
        reply = c.request(protocol.GetLogs(agent=args.agent, lines=lines, since=since),
                          protocol.LogEntries)
    for entry in reply.entries:
        _print(entry, args.output, host)
    sys.stdout.flush()
    cursor = reply.cursor
    try:
        while args.follow:
            time.sleep(FOLLOW_EVERY)
            with Client(path, peer="clowder-control") as c:
                reply = c.request(protocol.GetLogs(
                    agent=args.agent, lines=protocol.MAX_LOG_LINES, since=since,
                    after=cursor), protocol.LogEntries)
            if cursor and not reply.entries:
                continue
            for entry in reply.entries:
                _print(entry, args.output, host)
            sys.stdout.flush()
            cursor = reply.cursor
    except KeyboardInterrupt:
        return 0
    return 0
