"""`clowderctl ps`, answered before the rest of clowderctl is imported.

`tmux ls` takes ~2 ms here; `clowderctl ps` took the interpreter's start (~9 ms) and as
much again importing the command line (argparse, re, json, socket and its enums, the
client) before it asked (docs/bench.md, 7).  For the plain command line, `ps`, `ps -a`
or `ps --all` (also after `--socket PATH`) with no client configuration (whose hosts:
would make it a fleet), and with `--json`, this module asks and prints the same table
(ctl/pstable.py) or JSON as the full path, importing only what the interpreter has built
in or loads cheaply: _socket, the wire package (which reads and writes JSON without
importing json: clowder_wire/jsonpart.py), the table.

Anything else -- another command line, a client configuration, a refused connection or
a full listen backlog, an Error, an answer it does not expect -- and it prints nothing:
the full path runs from the start, so every message and exit status is its own.  A host
that does not answer within the deadline is reported here, in the full path's words
(ctl/client.py), rather than waited for a second time.
"""

import _socket
import os
import sys

import clowder_wire as P
from clowder_wire.jsonpart import dumps

from . import deadline, exits
from .paths import after_socket, config_path, default_socket
from .pstable import COLUMNS, oldest_first, print_table, row
from .quickask import ask_sessions

DAEMON = "clowder-ptyhost"  # as the full path names it (client.daemon_of)


def plain_ps(argv: list[str]) -> tuple[str | None, bool, bool] | None:
    """(the --socket given or None, --all, --json) for `[--socket PATH] ps [-a|--all]
    [--json]` (in any order), else None."""
    form = after_socket(argv)
    if form is None:
        return None
    path, rest = form
    if rest[:1] != ["ps"] or not set(rest[1:]) <= {"-a", "--all", "--json"}:
        return None
    return path, "-a" in rest or "--all" in rest, "--json" in rest


def attempt(argv: list[str]) -> int | None:
    """ps's exit status once it has printed the table (or said the host did not answer),
    or None: nothing printed, the full path is to run (see the module's docstring)."""
    form = plain_ps(argv)
    if form is None or os.environ.get("CLOWDER_CLIENT_CONFIG") \
            or os.path.exists(config_path()):
        return None
    try:
        seconds = deadline.seconds()
    except ValueError:
        return None  # a bad $CLOWDER_TIMEOUT: the full path's usage error
    path = form[0] or default_socket()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(seconds)
        sock.connect(path)
        answer = ask_sessions(sock, P.FrameReader(), [], seconds, all=form[1])
    except TimeoutError:
        return _not_answering(path, seconds)
    except (OSError, P.ProtocolError):
        return None  # refused, a full backlog, reset, not a clowder socket: the full path
    finally:
        sock.close()
    if answer is None:
        return None  # an Error (a version it does not speak ...): the full path says
    try:
        sessions = oldest_first(answer[1])
        text = dumps(sessions, (", ", ": ")) if form[2] else None  # json.dumps's own
        rows = None if form[2] else [COLUMNS] + [row(s) for s in sessions]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # not what a host sends: the full path reports it
    try:
        if rows is None:
            print(text)
        else:
            print_table(rows)
        sys.stdout.flush()
    except BrokenPipeError:  # `clowderctl ps | head -1`: as the full path, not an error
        return exits.OK
    return exits.OK


def _not_answering(path: str, seconds: float) -> int:
    from .client import NotAnswering, not_answering
    from .text import shown
    exc = NotAnswering(not_answering(DAEMON, f"at {path}", seconds))
    print(f"clowderctl ps: {shown(exc, lines=True)}", file=sys.stderr)
    return exc.exit_code
