"""clowderctl rename: give a session a new name."""

import clowder_wire as protocol

from ..client import Client
from ..text import shown


def add_parser(sub):
    p = sub.add_parser("rename", help="give a session a new name", epilog="""\
examples:
  clowderctl rename "$id" build-old
""")
    p.add_argument("session", metavar="ID", help="a session id or its current name")
    p.add_argument("name", metavar="NEW",
                   help="printable, and not the name of another running session of yours")
    p.set_defaults(run=run)


def run(args) -> int:
    with Client(args.socket) as c:
        info = c.request(protocol.Rename(session=args.session, name=args.name),
                         protocol.SessionInfo).session
    print(f"session {info['id']} is now named {shown(info['name'])}")
    return 0
