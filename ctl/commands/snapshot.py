"""clowderctl snapshot / history: a session's screen, or its recent output as text."""

import json
import sys

import clowder_wire as protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("snapshot", help="print the session's current screen", epilog="""\
--json is --format json: the screen's cells, cursor and modes (docs/snapshot-json.md).

examples:
  clowderctl snapshot "$id"
  clowderctl snapshot build --format html > screen.html
""")
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.add_argument("--format", choices=("text", "ansi", "html", "json"), default="text",
                   help="text (default), ansi (with colours and attributes), html, or json")
    p.add_argument("--json", dest="format", action="store_const", const="json",
                   help="the same as --format json")
    p.set_defaults(run=run_snapshot)
    h = sub.add_parser("history", help="print the session's recent output as text",
                       epilog="""\
--json prints one object: {"session": the id or name asked for, "format": "text" or
  "ansi", "lines": [each line, without its newline]}.

examples:
  clowderctl history "$id" -n 20
  clowderctl history build --json | jq -r '.lines[-1]'
""")
    h.add_argument("session", metavar="ID", help="a session id or name")
    h.add_argument("--lines", "-n", type=int, default=100, metavar="N",
                   help="the last N lines (default 100)")
    h.add_argument("--format", choices=("text", "ansi"), default="text",
                   help="ansi: with colours and attributes (default text)")
    h.add_argument("--json", action="store_true", help="print the lines as JSON")
    h.set_defaults(run=run_history)


def _get(args, msg) -> bytes:
    with Client(args.socket) as c:
        return c.request(msg, protocol.SnapshotData).data


def _print(data: bytes) -> int:
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def run_snapshot(args) -> int:
    return _print(_get(args, protocol.GetSnapshot(session=args.session, format=args.format)))


def run_history(args) -> int:
    data = _get(args, protocol.GetHistory(session=args.session, lines=args.lines,
                                          format=args.format))
    if not args.json:
        return _print(data)
    lines = data.decode("utf-8", "replace").split("\n")  # only \n ends a line here
    if lines[-1] == "":
        lines.pop()  # the newline after the last line
    print(json.dumps({"session": args.session, "format": args.format, "lines": lines}))
    return 0
