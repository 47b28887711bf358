"""clowderctl's entry point: parse the command line, run one subcommand."""

from __future__ import annotations

import argparse
import sys

from .client import ClientError, RequestFailed
from .commands import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clowderctl",
                                description="Drive the clowder PTY host.")
    p.add_argument("--socket", help="the host's socket (default: $CLOWDER_SOCKET, "
                   "$XDG_RUNTIME_DIR/clowder/ptyhost.sock, /run/clowder/ptyhost.sock)")
    p.add_argument("--control-socket", help="clowder-control's socket (default: "
                   "$CLOWDER_CONTROL_SOCKET, $XDG_RUNTIME_DIR/clowder/control.sock, "
                   "/run/clowder/control.sock)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(sub)
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
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
