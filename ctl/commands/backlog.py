"""clowderctl backlog: the session's retained raw output, on stdout."""

import sys

import clowder_wire as protocol

from ..client import Client, ClientError


def add_parser(sub):
    p = sub.add_parser("backlog", help="print the retained raw output", epilog="""\
The bytes exactly as the program wrote them, escapes and all (the host keeps the last
ones, a bounded ring).

examples:
  clowderctl backlog "$id" > session.raw
  clowderctl backlog build | tail -c 2000
""")
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.set_defaults(run=run)


def run(args) -> int:
    out = sys.stdout.buffer
    with Client(args.socket) as c:
        c.send(protocol.GetBacklog(session=args.session))
        while True:
            msg = c.recv()
            if isinstance(msg, protocol.Output):
                out.write(msg.data)
            elif isinstance(msg, protocol.Ok):
                break
            else:
                raise ClientError(f"unexpected {type(msg).__name__} in a backlog")
    out.flush()
    return 0
