"""clowderctl rm: forget an ended session and its backlog."""

import clowder_wire as protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("rm", help="forget ended sessions", epilog="""\
A running session is refused (`clowderctl kill` ends it first).

examples:
  clowderctl rm "$id"
""")
    p.add_argument("sessions", nargs="+", metavar="ID",
                   help="an ended session's id or name (one or more)")
    p.set_defaults(run=run)


def run(args) -> int:
    with Client(args.socket) as c:
        for sid in args.sessions:
            c.request(protocol.Remove(session=sid), protocol.Ok)
    return 0
