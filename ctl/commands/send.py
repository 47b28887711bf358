"""clowderctl send: type text (or stdin) into a session.

Each chunk is answered once the host has written it to the session's pty, so a success
means every byte was delivered.  A program that reads none of its input for the host's
deadline (10 s by default) makes the send fail, saying how many bytes did not arrive;
the host drops those (nothing is left to arrive later).
"""

import sys

import clowder_wire as protocol

from ..client import Client, RequestFailed


def add_parser(sub):
    p = sub.add_parser("send", help="send input to a session", epilog="""\
The bytes go as they are: a newline is typed as Enter only where the program takes it
so; most interactive programs want a carriage return ($'\\r').

examples:
  clowderctl send "$id" 'make test'$'\\r'
  clowderctl send build < keys.txt
""")
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.add_argument("text", nargs="?", help="the input (default: read stdin)")
    p.set_defaults(run=run)


def run(args) -> int:
    data = args.text.encode() if args.text is not None else sys.stdin.buffer.read()
    with Client(args.socket) as c:
        for i in range(0, max(len(data), 1), protocol.MAX_DATA):
            try:
                c.request(protocol.Send(session=args.session,
                                        data=data[i:i + protocol.MAX_DATA]), protocol.Ok)
            except RequestFailed as exc:
                rest = len(data) - i - protocol.MAX_DATA
                if exc.code != "not-reading" or rest <= 0:
                    raise
                # The host counts its chunk; the chunks after it were never sent.
                raise RequestFailed(protocol.Error(
                    message=f"{exc}; the {rest} bytes after it were not sent",
                    code=exc.code)) from None
    return 0
