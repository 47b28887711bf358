"""clowderctl's entry point: parse the command line, run one subcommand."""

from __future__ import annotations

import argparse
import sys

from . import deadline
from .client import ClientError, NotAnswering, RequestFailed
from .commands import add_all
from .text import shown
from .transport import Remote

# What `--host` runs where: control commands through a relay to clowder-control, session
# commands through a relay to the PTY host (which then checks the ssh user's own uid).
# Commands that read that machine's files or journal have no daemon to relay to: they
# run there whole, `ssh HOST clowderctl ...`.
RUN_THERE = ("logs", "config", "install-units")

EPILOG = f"""\
deadline:
  Every request to a daemon (connecting, the handshake, each reply) gives up after
  --timeout seconds (default: ${deadline.ENV}, else {deadline.DEFAULT:g}), saying which
  daemon is not answering, and where.  `wait`, `attach` and `file watch` are bounded
  only until their first answer: the event they wait for may take any time.

exit status:
  0    success (`wait`: the session's own exit code; `attach`: the session's when it ends)
  1    the daemon refused the request (no such session, permission, a failed check)
  2    any other failure: nothing listens, bad arguments, the connection dropped
  {deadline.EXIT_CODE}  a daemon did not answer within the deadline (frozen, wedged, or
       its listen backlog full); a frozen PTY host is replaced by systemd's watchdog
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clowderctl",
                                description="Drive the clowder PTY host.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", dest="request_timeout", type=_seconds, metavar="SECONDS",
                   help=f"give up on a daemon that does not answer within SECONDS "
                   f"(default: ${deadline.ENV}, else {deadline.DEFAULT:g}; exit status "
                   f"{deadline.EXIT_CODE})")
    p.add_argument("--socket", help="the host's socket (default: $CLOWDER_SOCKET, "
                   "$XDG_RUNTIME_DIR/clowder/ptyhost.sock, /run/clowder/ptyhost.sock)")
    p.add_argument("--control-socket", help="clowder-control's socket (default: "
                   "$CLOWDER_CONTROL_SOCKET, $XDG_RUNTIME_DIR/clowder/control.sock, "
                   "/run/clowder/control.sock); with --host, the socket on that host")
    p.add_argument("--host", metavar="[USER@]HOST",
                   help="run the command on HOST, through `ssh HOST clowderctl relay` "
                   "($CLOWDER_SSH: the ssh command and its options, default ssh; "
                   "$CLOWDER_REMOTE_RELAY: the command run there, default `clowderctl "
                   "relay`; $CLOWDER_REMOTE_CTL: how to run clowderctl there); "
                   "logs, config and install-units run there whole")
    add_all(p)
    return p


def _seconds(text: str) -> float:
    try:
        return deadline.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def through_host(parser: argparse.ArgumentParser, args) -> None:
    """Point the command at ``args.host``'s daemons instead of local sockets.

    Every command connects with Client(args.socket) or Client(args.control_socket), and
    a Client given a Remote runs ssh: so do attach's reconnects, which build a new Client.
    """
    if args.command == "relay":
        parser.error("--host: relay is what --host runs on the other side")
    try:
        args.socket = Remote(args.host, args.socket, target="host")
        args.control_socket = Remote(args.host, args.control_socket, target="control")
    except ValueError as exc:
        parser.error(f"--host: {exc}")


def without_host(argv: list[str]) -> list[str]:
    """The command line minus ``--host X`` (or ``--host=X``), to run on that host."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--host":
            skip = True
        elif not arg.startswith("--host="):
            out.append(arg)
    return out


def main(argv=None) -> None:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    deadline.set_seconds(args.request_timeout)
    try:
        deadline.seconds()
    except ValueError as exc:
        parser.error(str(exc))
    if args.host:
        through_host(parser, args)
    try:
        if args.host and args.command in RUN_THERE:
            try:
                code = args.socket.run(without_host(argv))
            except ConnectionError as exc:
                raise ClientError(str(exc)) from None
        else:
            code = args.run(args)
    except RequestFailed as exc:
        print(f"clowderctl {args.command}: {shown(exc, lines=True)}", file=sys.stderr)
        code = 1
    except NotAnswering as exc:
        print(f"clowderctl {args.command}: {shown(exc, lines=True)}", file=sys.stderr)
        code = deadline.EXIT_CODE
    except ClientError as exc:
        print(f"clowderctl {args.command}: {shown(exc, lines=True)}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
