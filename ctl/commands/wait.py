"""clowderctl wait: block until a session ends; print and exit with its code."""

import time

import clowder_wire as protocol

from ..client import Client, ClientError, NotAnswering, RequestFailed


def add_parser(sub):
    p = sub.add_parser("wait", help="wait for a session to end and exit with its code")
    p.add_argument("session", metavar="ID")
    p.add_argument("--timeout", type=float, default=None, help="give up after SECONDS")
    p.set_defaults(run=run)


def run(args) -> int:
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:
        try:
            with Client(args.socket) as c:
                if deadline is not None:
                    c.sock.settimeout(max(0.01, deadline - time.monotonic()))
                msg = c.request(protocol.Wait(session=args.session), protocol.Exited)
            break
        except (RequestFailed, NotAnswering):
            raise  # NotAnswering: connecting or the handshake outlived the deadline
        except ClientError as exc:
            # The host restarting drops the connection; the session lives on: ask again.
            if deadline is not None and time.monotonic() > deadline:
                raise ClientError(f"session {args.session} did not end within "
                                  f"{args.timeout} s") from exc
            time.sleep(0.05)
    if msg.signal is not None:
        print(f"signal {msg.signal}")
        return 128 + msg.signal
    if msg.exit_code is None:
        print(f"unknown ({msg.status})")
        return 255
    print(msg.exit_code)
    return msg.exit_code
