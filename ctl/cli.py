"""clowderctl's command line: parse it, run one subcommand (ctl/__main__.py runs it)."""

from __future__ import annotations

from . import sitepath

sitepath.complete()  # before anything a subcommand imports (sitepath.py)

import argparse  # noqa: E402
import sys  # noqa: E402

from clowder_common import __version__  # noqa: E402
from clowder_wire.host import AGENT_PREFIX  # noqa: E402

from . import deadline, exits, options  # noqa: E402
from .client import ClientError, Unreachable  # noqa: E402
from .commands import COMMANDS, add_all  # noqa: E402
from .text import shown  # noqa: E402
from .transport import Remote  # noqa: E402

# What `--host` runs where: control commands through a relay to clowder-control, session
# commands through a relay to the PTY host (which then checks the ssh user's own uid).
# Commands that read that machine's files or journal have no daemon to relay to: they
# run there whole, `ssh HOST clowderctl ...`; so does `web`, whose token must be minted
# by that machine's clowder-web for the ssh user's uid there.
RUN_THERE = ("logs", "config", "install-units", "web")
# The commands that take several hosts at once (ctl/fleet.py), and those whose ID may
# name its host (HOST:ID; `agent:NAME` is a session name, not a host).
FLEET = ("ps", "status", "events", "wait")
HOST_PREFIXED = ("attach", "snapshot", "history", "wait")

EPILOG = f"""\
global options come before the command or anywhere after it: `clowderctl ps
  --socket PATH` is `clowderctl --socket PATH ps`.  After `wait`, --timeout is wait's
  own (how long to wait for the session's end).

deadline:
  Every request to a daemon (connecting, the handshake, each reply) gives up after
  --timeout seconds (default: ${deadline.ENV}, else {deadline.DEFAULT:g}), saying which
  daemon is not answering, and where.  `wait`, `attach` and `file watch` are bounded
  only until their first answer: the event they wait for may take any time.

{exits.TABLE}
examples:
  id=$(clowderctl spawn --name build -- make -j8)
  clowderctl wait --json "$id"
  clowderctl --host box status --json
  clowderctl --host local --host box1 --host box2 ps
"""


def build_parser(load_all: bool = False) -> argparse.ArgumentParser:
    """clowderctl's parser; ``load_all``: with every subcommand's own parser built (for
    man pages and completions), not only the one a command line names."""
    p = argparse.ArgumentParser(prog="clowderctl",
                                description="Drive the clowder PTY host.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"clowderctl {__version__}",
                   help="print clowderctl's version and exit")
    options.add(p)
    sub = add_all(p)
    if load_all:
        for name, _module, _help in COMMANDS:
            sub.load(name)
    return p


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


def choose_hosts(parser: argparse.ArgumentParser, args) -> None:
    """Set ``args.host`` (one host, or None: this machine) and ``args.fleet`` (a list of
    hosts for a fleet command, or None) from --host, HOST:ID and the client config."""
    from . import fleet
    hosts = list(args.host or [])
    args.fleet = None
    session = getattr(args, "session", None)
    if not hosts and args.command in HOST_PREFIXED and isinstance(session, str) \
            and ":" in session:
        prefix, rest = session.split(":", 1)
        if prefix + ":" != AGENT_PREFIX and rest:
            hosts, args.session = [prefix], rest
    if len(hosts) > 1:
        if args.command not in FLEET:
            parser.error(f"--host given {len(hosts)} times: only {', '.join(FLEET)} take "
                         f"several hosts")
        args.fleet = hosts
    elif not hosts and args.command in FLEET:
        args.fleet = fleet.configured_hosts()  # None: no client configuration
    for h in args.fleet or hosts:
        try:
            fleet.check(h)
        except ClientError as exc:
            parser.error(str(exc))
    if args.fleet:
        fleet.set_default_deadline()
    args.host = None if args.fleet or not hosts or fleet.is_local(hosts[0]) else hosts[0]


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
    args = parser.parse_args(argv)  # a usage error exits exits.USAGE (argparse's 2)
    deadline.set_seconds(args.request_timeout)
    try:
        deadline.seconds()
    except ValueError as exc:
        if args.command == "wait":  # its own failures are 125 (ctl/exits.py)
            parser.print_usage(sys.stderr)
            parser.exit(exits.WAIT_FAILED, f"clowderctl wait: {exc}\n")
        parser.error(str(exc))
    try:
        choose_hosts(parser, args)
    except ClientError as exc:  # the client configuration (fleet.ConfigError)
        print(f"clowderctl {args.command}: {shown(exc, lines=True)}", file=sys.stderr)
        sys.exit(exits.WAIT_FAILED if args.command == "wait" else exc.exit_code)
    args.global_argv = options.as_argv(args)  # as given, before --host turns them Remote
    if args.host:
        through_host(parser, args)
    try:
        if args.host and args.command in RUN_THERE:
            try:
                code = args.socket.run(without_host(argv))
            except ConnectionError as exc:
                raise Unreachable(str(exc)) from None
            if code == exits.SSH_FAILED:  # ssh said why on stderr
                code = exits.UNREACHABLE
        else:
            code = args.run(args)
    except ClientError as exc:
        print(f"clowderctl {args.command}: {shown(exc, lines=True)}", file=sys.stderr)
        code = exc.exit_code
        if args.command == "wait" and not getattr(args, "json", False):
            # wait passes the session's status through: its own failures are told apart
            # from any program's as timeout(1) tells them (ctl/exits.py).
            code = exits.TIMEOUT if code == exits.TIMEOUT else exits.WAIT_FAILED
    except KeyboardInterrupt:
        code = exits.INTERRUPTED
    except BrokenPipeError:
        code = exits.OK
    sys.exit(code or 0)

