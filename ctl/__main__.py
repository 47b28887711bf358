"""clowderctl's entry point: parse the command line, run one subcommand."""

from __future__ import annotations

import argparse
import sys

from .client import ClientError, RequestFailed
from .commands import COMMANDS
from .transport import Remote

# What `--host` can do today: the relay reaches clowder-control, which answers these
# (attach only for agents: it proxies those to the PTY host).  Others are refused rather
# than run against the local machine by mistake.
REMOTE_COMMANDS = ("status", "up", "down", "restart", "attach")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clowderctl",
                                description="Drive the clowder PTY host.")
    p.add_argument("--socket", help="the host's socket (default: $CLOWDER_SOCKET, "
                   "$XDG_RUNTIME_DIR/clowder/ptyhost.sock, /run/clowder/ptyhost.sock)")
    p.add_argument("--control-socket", help="clowder-control's socket (default: "
                   "$CLOWDER_CONTROL_SOCKET, $XDG_RUNTIME_DIR/clowder/control.sock, "
                   "/run/clowder/control.sock); with --host, the socket on that host")
    p.add_argument("--host", metavar="[USER@]HOST",
                   help="run the command on HOST, through `ssh HOST clowderctl relay` "
                   "($CLOWDER_SSH: the ssh command and its options, default ssh; "
                   "$CLOWDER_REMOTE_RELAY: the command run there, default `clowderctl "
                   "relay`); works for " + ", ".join(REMOTE_COMMANDS[:-1]) +
                   " and attach --agent")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return p


def through_host(parser: argparse.ArgumentParser, args) -> None:
    """Point the command at ``args.host``'s clowder-control instead of a local socket."""
    if args.command not in REMOTE_COMMANDS or \
            (args.command == "attach" and not args.agent):
        what = "attach without --agent" if args.command == "attach" else args.command
        parser.error(f"--host: {what} is not available through the relay yet, which "
                     f"reaches clowder-control only (" + ", ".join(REMOTE_COMMANDS[:-1]) +
                     " and attach --agent are)")
    try:
        remote = Remote(args.host, args.control_socket)
    except ValueError as exc:
        parser.error(f"--host: {exc}")
    # Every command above connects with Client(args.control_socket or ...), and a Client
    # given a Remote runs ssh: so do attach's reconnects, which build a new Client.
    args.control_socket = remote


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.host:
        through_host(parser, args)
    try:
        code = args.run(args)
    except RequestFailed as exc:
        print(f"clowderctl {args.command}: {exc}", file=sys.stderr)
        code = 1
    except ClientError as exc:
        print(f"clowderctl {args.command}: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 0
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
