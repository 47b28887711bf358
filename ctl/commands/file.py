"""clowderctl file ls|cat|put|watch: an agent's working directory, through clowder-control.

Paths are relative to the agent's working directory and cannot leave it; the daemon
refuses ``..``, absolute paths and symlinks that point out. Works locally and with
``--host`` (one multiplexed stream through ssh).
"""

from __future__ import annotations

import datetime
import json
import sys

import clowder_wire as protocol

from .. import exits
from ..client import default_control_socket
from ..mux import Mux
from ..text import shown

P = protocol


EPILOG = """\
Paths are relative to the agent's working directory and cannot leave it.

--json (ls) prints one object: {"agent", "path", "entries": [{"name", "type" ("file",
  "dir", "link", "other"), "size", "mtime" (seconds since the epoch)}], "truncated"}.
--json (watch) prints one object per line, each with "kind" and "path": first
  {"kind": "watching"} once the watch is set, then "created", "modified" or "deleted"
  with the changed path, and {"kind": "overflow"} (path: the watched one) when events
  were lost: list again.

examples:
  clowderctl file ls claude src
  clowderctl file cat claude README.md
  echo hello | clowderctl file put claude notes.txt
  clowderctl file watch claude --json | jq -r .path
"""


def add_parser(sub):
    p = sub.add_parser("file", help="list, read, write or watch an agent's files",
                       epilog=EPILOG)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    agent = "the agent's name in clowder.yaml"
    ls = actions.add_parser("ls", help="list a directory", epilog=EPILOG)
    ls.add_argument("agent", metavar="AGENT", help=agent)
    ls.add_argument("path", nargs="?", default=".", metavar="PATH",
                    help="the directory (default: the working directory itself)")
    ls.add_argument("--json", action="store_true", help="print the listing as JSON")
    cat = actions.add_parser("cat", help="print a file", epilog=EPILOG)
    cat.add_argument("agent", metavar="AGENT", help=agent)
    cat.add_argument("path", metavar="PATH", help="the file")
    put = actions.add_parser("put", help="replace a file with stdin (atomically)",
                             epilog=EPILOG)
    put.add_argument("agent", metavar="AGENT", help=agent)
    put.add_argument("path", metavar="PATH", help="the file")
    put.add_argument("--no-create", action="store_true", help="fail if it does not exist")
    watch = actions.add_parser("watch", help="print changes under a directory until ^C",
                               epilog=EPILOG)
    watch.add_argument("agent", metavar="AGENT", help=agent)
    watch.add_argument("path", nargs="?", default=".", metavar="PATH",
                       help="the directory (default: the working directory itself)")
    watch.add_argument("--json", action="store_true",
                       help="print one JSON object per line")
    p.set_defaults(run=run)


def _line(obj: dict) -> None:
    """One JSON object on its own line, at once: a watch's reader acts on each."""
    print(json.dumps(obj), flush=True)


def run(args) -> int:
    with Mux(args.control_socket or default_control_socket()) as mux:
        c = mux.request_client("file")
        if args.action == "ls":
            rep = c.request(P.FileList(agent=args.agent, path=args.path), P.FileListing)
            if args.json:
                print(json.dumps({
                    "agent": args.agent, "path": rep.path,
                    "entries": [{k: e.get(k) for k in ("name", "type", "size", "mtime")}
                                for e in rep.entries],
                    "truncated": bool(getattr(rep, "truncated", False))}))
                return exits.OK
            for e in rep.entries:
                when = datetime.datetime.fromtimestamp(e.get("mtime", 0)).strftime(
                    "%Y-%m-%d %H:%M")
                suffix = "/" if e.get("type") == "dir" else ""
                print(f"{e.get('type', '?'):5} {e.get('size', 0):>10} {when}  "
                      f"{shown(e['name'])}{suffix}")  # a file name may hold controls
            if getattr(rep, "truncated", False):
                print("(listing truncated)", file=sys.stderr)
        elif args.action == "cat":
            offset = 0
            while True:
                rep = c.request(P.FileRead(agent=args.agent, path=args.path, offset=offset),
                                P.FileData)
                sys.stdout.buffer.write(rep.data)
                offset = rep.offset + len(rep.data)
                if not rep.data or offset >= rep.size:
                    break
            sys.stdout.buffer.flush()
        elif args.action == "put":
            data = sys.stdin.buffer.read()
            if len(data) > P.MAX_DATA:
                print(f"clowderctl file put: {len(data)} bytes is more than one write "
                      f"carries ({P.MAX_DATA})", file=sys.stderr)
                return exits.REFUSED
            c.request(P.FileWrite(agent=args.agent, path=args.path, data=data,
                                  create=not args.no_create), P.Ok)
        else:
            c.request(P.FileWatch(agent=args.agent, path=args.path), P.Ok)
            print(f"watching {args.agent}:{args.path} (^C to stop)", file=sys.stderr,
                  flush=True)
            if args.json:
                _line({"kind": "watching", "path": args.path})
            while True:
                ev = c.recv()
                if not isinstance(ev, P.FileEvents):
                    continue
                if args.json:
                    if ev.overflow:
                        _line({"kind": "overflow", "path": args.path})
                    for e in ev.events:
                        _line({"kind": e.get("kind"), "path": e.get("path")})
                    continue
                if ev.overflow:
                    print("! events were lost: list again", flush=True)
                for e in ev.events:
                    print(f"{e.get('kind', '?'):8} {shown(e.get('path', ''))}",
                          flush=True)
    return exits.OK
