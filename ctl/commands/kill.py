"""clowderctl kill: end a session (SIGHUP, SIGTERM, then SIGKILL), or send one signal."""

import signal
import sys

import clowder_wire as protocol

from ..client import Client, ClientError

# How long the host takes at most to end a session (ptyhostd.host.Host.ESCALATION), plus room.
ESCALATION_WAIT = 8 + 12
STILL_RUNNING_AFTER = 0.5  # seconds after --signal before saying the session runs on


def add_parser(sub):
    p = sub.add_parser("kill", help="end a session (SIGHUP, then SIGTERM, then SIGKILL), "
                                    "or send it one signal", epilog="""\
Without --signal it returns once the session has ended, saying how far it went.

examples:
  clowderctl kill "$id"
  clowderctl kill --signal INT build
""")
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.add_argument("--signal", "-s", default=None,
                   metavar="SIGNAL",
                   help="send exactly this signal (name or number) instead of ending it")
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


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe(msg: protocol.Exited) -> str:
    if msg.signal is not None:
        return f"killed by signal {msg.signal} ({signal_name(msg.signal)})"
    if msg.exit_code is not None:
        return f"exited with code {msg.exit_code}"
    return f"ended ({msg.status})"


# What the host's escalation had come to when the signal that ended the session was sent.
STEPS = {int(signal.SIGTERM): "hung up, then sent SIGTERM",
         int(signal.SIGKILL): "hung up, then sent SIGTERM, then SIGKILL"}


def run(args) -> int:
    if args.signal is None:
        return _end(args)
    try:
        sig = parse_signal(args.signal)
    except ValueError as exc:
        args.parser.error(str(exc))
    with Client(args.socket) as c:
        c.request(protocol.Kill(session=args.session, signal=sig), protocol.Ok)
        # Only the reply's absence within the moment says it still runs; the wait
        # itself is left on the host (this connection is closed right after).
        c.sock.settimeout(STILL_RUNNING_AFTER)
        try:
            c.request(protocol.Wait(session=args.session), protocol.Exited)
        except ClientError:
            print(f"clowderctl: session {args.session} is still running "
                  f"{STILL_RUNNING_AFTER:g} s after {signal_name(sig)} (it may ignore "
                  f"that signal: `clowderctl kill {args.session}` ends it)", file=sys.stderr)
    return 0


def _end(args) -> int:
    """SIGHUP as when its terminal closes, then SIGTERM, then SIGKILL (the host escalates,
    and answers once the session has ended)."""
    with Client(args.socket) as c:
        c.sock.settimeout(ESCALATION_WAIT)
        c.request(protocol.Kill(session=args.session, signal=int(signal.SIGHUP),
                                escalate=True), protocol.Ok)
        c.sock.settimeout(5)
        ended = c.request(protocol.Wait(session=args.session), protocol.Exited)
    print(f"session {ended.session}: {STEPS.get(ended.signal, 'hung up')}; {describe(ended)}")
    return 0
