"""clowderctl wait: block until a session ends; print and exit with its code.

Its exit status is the session's (ctl/exits.py), so its own failures take timeout(1)'s
convention: 124 timed out, 125 anything else (main() maps them, _usage_error its usage
errors).  With --json it prints the end as JSON and exits as every other command does.
"""

import json
import sys
import time

import clowder_wire as protocol

from .. import exits
from ..client import Client, ClientError, NotAnswering, NotConnected, RequestFailed, TimedOut

EPILOG = f"""\
exit status:
  the session's exit code, or 128+N if signal N ended it (255 if unknown); clowderctl's
  own failures: {exits.TIMEOUT} timed out (--timeout, or a daemon not answering), \
{exits.WAIT_FAILED} anything else.
  With --json: {exits.OK} once the session has ended (its status is in the output), else
  as every other command ({exits.REFUSED} refused, {exits.USAGE} usage, \
{exits.UNREACHABLE} unreachable, {exits.TIMEOUT} timeout).

--json prints one object: {{"session": ID, "status": "exited"|"killed"|"dumped"|"lost",
  "exit_code": N or null, "signal": N or null}}

examples:
  clowderctl wait "$id" && echo "it succeeded"
  clowderctl wait --timeout 60 --json "$id"
"""


def _usage_error(parser, message):
    """wait's usage errors are clowderctl's own failures: told apart from the session's
    status as the others are (argparse's own would be 2, a status a program may have)."""
    parser.print_usage(sys.stderr)
    parser.exit(exits.WAIT_FAILED, f"{parser.prog}: error: {message}\n")


def add_parser(sub):
    p = sub.add_parser("wait", help="wait for a session to end and exit with its code",
                       epilog=EPILOG)
    p.error = lambda message: _usage_error(p, message)
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"give up after SECONDS (exit status {exits.TIMEOUT}); after `wait` "
                        f"this is wait's own, not the per-request deadline")
    p.add_argument("--json", action="store_true",
                   help="print the end as JSON and exit 0 (see below)")
    p.set_defaults(run=run)


def ended(msg: protocol.Exited) -> dict:
    """The end of a session as --json prints it: these keys, always."""
    return {"session": msg.session, "status": msg.status, "exit_code": msg.exit_code,
            "signal": msg.signal}


def run(args) -> int:
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    connected = False
    while True:
        try:
            with Client(args.socket) as c:
                connected = True
                if deadline is not None:
                    c.sock.settimeout(max(0.01, deadline - time.monotonic()))
                msg = c.request(protocol.Wait(session=args.session), protocol.Exited)
            break
        except (RequestFailed, NotAnswering):
            raise  # NotAnswering: connecting or the handshake outlived the deadline
        except NotConnected:
            if not connected:
                raise  # nothing listens at all: not a host restarting (its socket stays)
            _retry(args, deadline)
        except ClientError:
            connected = True  # something listened: a host restarting drops connections
            _retry(args, deadline)
    if args.json:
        print(json.dumps(ended(msg)))
        return exits.OK
    if msg.signal is not None:
        print(f"signal {msg.signal}")
        return 128 + msg.signal
    if msg.exit_code is None:
        print(f"unknown ({msg.status})")
        return 255
    print(msg.exit_code)
    return msg.exit_code


def _retry(args, deadline) -> None:
    """The host restarting drops the connection; the session lives on: ask again."""
    if deadline is not None and time.monotonic() > deadline:
        raise TimedOut(f"session {args.session} did not end within {args.timeout:g} s")
    time.sleep(0.05)
