"""clowderctl send: type text (or stdin) into a session."""

import sys

from ptyhostd import protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("send", help="send input to a session")
    p.add_argument("session", metavar="ID")
    p.add_argument("text", nargs="?", help="the input (default: read stdin)")
    p.set_defaults(run=run)


def run(args) -> int:
    data = args.text.encode() if args.text is not None else sys.stdin.buffer.read()
    with Client(args.socket) as c:
        for i in range(0, max(len(data), 1), protocol.MAX_DATA):
            c.request(protocol.Send(session=args.session, data=data[i:i + protocol.MAX_DATA]),
                      protocol.Ok)
    return 0
