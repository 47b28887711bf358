"""clowderctl snapshot / history: a session's screen, or its recent output as text."""

import sys

import clowder_wire as protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("snapshot", help="print the session's current screen")
    p.add_argument("session", metavar="ID")
    p.add_argument("--format", choices=("text", "ansi", "html", "json"), default="text")
    p.set_defaults(run=run_snapshot)
    h = sub.add_parser("history", help="print the session's recent output as text")
    h.add_argument("session", metavar="ID")
    h.add_argument("--lines", "-n", type=int, default=100)
    h.add_argument("--format", choices=("text", "ansi"), default="text",
                   help="ansi: with colours and attributes (default text)")
    h.set_defaults(run=run_history)


def _print(args, msg) -> int:
    with Client(args.socket) as c:
        data = c.request(msg, protocol.SnapshotData).data
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def run_snapshot(args) -> int:
    return _print(args, protocol.GetSnapshot(session=args.session, format=args.format))


def run_history(args) -> int:
    return _print(args, protocol.GetHistory(session=args.session, lines=args.lines,
                                            format=args.format))
