"""clowderctl spawn: start a program in a new session and print its id."""

import os
import re
import shutil
import sys

import clowder_wire as protocol
from clowder_wire.host import fit_size

from .. import exits
from ..client import Client
from ..transport import Remote

# What a session takes from the caller's environment, as tmux's update-environment
# (README, "A session's environment"); --env wins over each.  The host adds HOME, USER,
# LOGNAME and SHELL of the session's user and CLOWDER_SESSION itself, never from here.
# The terminal and the locale go to every session: they describe the caller's terminal,
# which is where the session is first seen.
TERMINAL_ENV = ("TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ")
TERMINAL_PREFIXES = ("LC_",)
# The caller's login: how to reach their ssh agent, display and runtime directory, and
# the PATH their shell would look the program up on.  These name this machine and this
# user, so they go only to a session of the caller's own on this machine (not with
# --user, where they would be root's, nor with --host).
LOGIN_ENV = ("PATH", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_ASKPASS", "SSH_CONNECTION",
             "KRB5CCNAME", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "WINDOWID",
             "XDG_RUNTIME_DIR")
PASSED_ENV = TERMINAL_ENV + LOGIN_ENV


def add_parser(sub):
    p = sub.add_parser("spawn", help="start a program in a new session", epilog="""\
It prints the new session's id (--json: the whole session, as `ps --json` lists one).
Put -- before a program that takes options of its own.

examples:
  id=$(clowderctl spawn --name build -- make -j8)
  clowderctl spawn --cwd ~/src/proj --env EDITOR=vi -- claude
""")
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


def passed_env(environ, own: bool) -> dict[str, str]:
    """The caller's variables a session takes; ``own``: a session of the caller's own
    on this machine, which also gets LOGIN_ENV."""
    names = TERMINAL_ENV + (LOGIN_ENV if own else ())
    env = {k: v for k, v in environ.items()
           if k in names or k.startswith(TERMINAL_PREFIXES)}
    env.setdefault("TERM", "xterm-256color")
    return env


def resolve(argv0: str, path: str | None, cwd: str) -> str:
    """``argv0`` as the caller's shell would find it on ``path``; raises LookupError.

    A name found in a directory the host searches too (protocol.search_dirs) is sent as
    it is: the host has systemd look it up on the same PATH, as the session's user
    (ptyhostd/sessionenv.py), so ``ps`` shows the command as typed.  One found through
    another entry (``.``, ``bin``, ``/opt/../bin``) is sent as an absolute path, and so
    is a relative path (``./run.sh``: from ``cwd``, the session's directory, as after a
    ``cd`` there; systemd takes only an absolute path or a bare name)."""
    if "/" in argv0:  # "." parts dropped; ".." kept, for the kernel to resolve
        return "/".join(p for p in os.path.join(cwd, argv0).split("/") if p != ".")
    if path is None:
        return argv0
    for d in path.split(":"):
        found = shutil.which(argv0, path=os.path.join(cwd, d or "."))
        if found:
            return argv0 if protocol.search_dirs(d) else os.path.abspath(found)
    raise LookupError(f"{argv0}: command not found on PATH ({path})")


def run(args) -> int:
    remote = isinstance(args.socket, Remote)
    env = passed_env(os.environ, own=not remote and args.user is None)
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
    argv = list(args.argv)
    if remote:
        # This machine's directories mean nothing there: the remote default applies.
        if args.cwd and not os.path.isabs(args.cwd):
            args.parser.error(f"--cwd must be absolute with --host, got {args.cwd!r}")
        cwd = args.cwd
    else:
        cwd = os.path.abspath(args.cwd) if args.cwd else os.getcwd()
        if args.user is None:
            try:
                argv[0] = resolve(argv[0], env.get("PATH"), cwd)
            except LookupError as exc:
                print(f"clowderctl spawn: {exc}", file=sys.stderr)
                return exits.USAGE
    with Client(args.socket) as c:
        info = c.request(protocol.Spawn(argv=argv, name=args.name, cwd=cwd, env=env,
                                        cols=cols, rows=rows, user=args.user),
                         protocol.SessionInfo).session
    if args.json:
        import json
        print(json.dumps(info))
    else:
        print(info["id"])
    return 0
