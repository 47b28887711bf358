"""clowderctl kill: signal a session's processes."""

import signal

from ptyhostd import protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("kill", help="send a signal to a session (default TERM)")
    p.add_argument("session", metavar="ID")
    p.add_argument("--signal", "-s", default="TERM", help="name or number (default TERM)")
    p.set_defaults(run=run, parser=p)


def parse_signal(text: str) -> int:
    if text.isdigit():
        return int(text)
    name = text.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {text!r}") from None


def run(args) -> int:
    try:
        sig = parse_signal(args.signal)
    except ValueError as exc:
        args.parser.error(str(exc))
    with Client(args.socket) as c:
        c.request(protocol.Kill(session=args.session, signal=sig), protocol.Ok)
    return 0
