"""clowderctl file ls|cat|put|watch: an agent's working directory, through clowder-control.

Paths are relative to the agent's working directory and cannot leave it; the daemon
refuses ``..``, absolute paths and symlinks that point out. Works locally and with
``--host`` (one multiplexed stream through ssh).
"""

from __future__ import annotations

import datetime
import sys

import clowder_wire as protocol

from ..client import default_control_socket
from ..mux import Mux
from ..text import shown

P = protocol


def add_parser(sub):
    p = sub.add_parser("file", help="list, read, write or watch an agent's files")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = actions.add_parser("ls", help="list a directory")
    ls.add_argument("agent")
    ls.add_argument("path", nargs="?", default=".")
    cat = actions.add_parser("cat", help="print a file")
    cat.add_argument("agent")
    cat.add_argument("path")
    put = actions.add_parser("put", help="replace a file with stdin (atomically)")
    put.add_argument("agent")
    put.add_argument("path")
    put.add_argument("--no-create", action="store_true", help="fail if it does not exist")
    watch = actions.add_parser("watch", help="print changes under a directory until ^C")
    watch.add_argument("agent")
    watch.add_argument("path", nargs="?", default=".")
    p.set_defaults(run=run)


def run(args) -> int:
    with Mux(args.control_socket or default_control_socket()) as mux:
        c = mux.request_client("file")
        if args.action == "ls":
            rep = c.request(P.FileList(agent=args.agent, path=args.path), P.FileListing)
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
                return 2
            c.request(P.FileWrite(agent=args.agent, path=args.path, data=data,
                                  create=not args.no_create), P.Ok)
        else:
            c.request(P.FileWatch(agent=args.agent, path=args.path), P.Ok)
            print(f"watching {args.agent}:{args.path} (^C to stop)", file=sys.stderr,
                  flush=True)
            while True:
                ev = c.recv()
                if not isinstance(ev, P.FileEvents):
                    continue
                if ev.overflow:
                    print("! events were lost: list again", flush=True)
                for e in ev.events:
                    print(f"{e.get('kind', '?'):8} {shown(e.get('path', ''))}",
                          flush=True)
    return 0
