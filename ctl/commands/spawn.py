"""clowderctl spawn: start a program in a new session and print its id."""

import os
import re

import clowder_wire as protocol
from clowder_wire.host import fit_size

from ..client import Client
from ..transport import Remote

# What a session inherits from the spawning terminal unless --env says otherwise.
PASSED_ENV = ("TERM", "LANG", "LC_ALL", "LC_CTYPE", "COLORTERM")


def add_parser(sub):
    p = sub.add_parser("spawn", help="start a program in a new session")
    p.add_argument("--name", help="a name for the session")
    p.add_argument("--cwd", help="working directory (default: the current one; with "
                   "--host: an absolute path there, default systemd's for the unit)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="set an environment variable (repeatable)")
    p.add_argument("--size", default=None, metavar="COLSxROWS",
                   help="terminal size (default: this terminal's, else 80x24)")
    p.add_argument("--user", help="run as this user (root only)")
    p.add_argument("--json", action="store_true", help="print the whole session as JSON")
    p.add_argument("argv", nargs="+", metavar="CMD", help="the program and its arguments")
    p.set_defaults(run=run, parser=p)


def parse_size(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d{1,5})x(\d{1,5})", text or "")
    if not m or not (int(m[1]) and int(m[2])):
        raise ValueError(f"invalid size {text!r}: expected COLSxROWS, e.g. 120x40")
    return int(m[1]), int(m[2])


def run(args) -> int:
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.setdefault("TERM", "xterm-256color")
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            args.parser.error(f"--env takes K=V, got {item!r}")
        env[key] = value
    if args.size:
        try:
            cols, rows = parse_size(args.size)
        except ValueError as exc:
            args.parser.error(str(exc))
    else:
        try:
            cols, rows = fit_size(*os.get_terminal_size(0))
        except OSError:
            cols, rows = 80, 24
    if isinstance(args.socket, Remote):
        # This machine's directories mean nothing there: the remote default applies.
        if args.cwd and not os.path.isabs(args.cwd):
            args.parser.error(f"--cwd must be absolute with --host, got {args.cwd!r}")
        cwd = args.cwd
    else:
        cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
    with Client(args.socket) as c:
        info = c.request(protocol.Spawn(argv=args.argv, name=args.name, cwd=cwd, env=env,
                                        cols=cols, rows=rows, user=args.user),
                         protocol.SessionInfo).session
    if args.json:
        import json
        print(json.dumps(info))
    else:
        print(info["id"])
    return 0
