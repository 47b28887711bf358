"""attach's first paint, made before the rest of clowderctl is imported.

`clowderctl attach ID` took ~42 ms to show the screen where `tmux attach` takes ~6
(docs/bench.md, 7): the interpreter's own start is ~12 ms here, and most of the rest was
importing (argparse, re, json, socket and its enums, the command table) before the first
byte was asked for, then two connections (the history, then the attach).  For the plain
command line, `attach [--history N] [ID]` (also after `--socket PATH`), this module asks
first and imports afterwards: one connection, with Hello and Attach (which asks for the
history too) sent in one write (with no ID, Hello and a ListSessions first, then the
Attach for the session the full path would choose: ``newest_running``); once Attached,
the history and the repaint's first frame have come, the terminal is put in raw mode
and the banner, the history and the repaint are drawn, exactly as the full path draws
them (the shared helpers below).  When the host writes the terminal itself
(Attached.terminal, ptyhostd/terminal.py), the repaint does not come in frames: the
banner and the history are drawn, then TerminalReady tells the host to write it.  Only then does the command line run as always
(ctl/cli.py), and attach (ctl/commands/attach.py) takes the connection over from
``take``: from the frames already read on, it is the same client.

It imports what the interpreter has built in or loads cheaply: _socket (socket's enums
cost ~6 ms), _signal, termios, the wire package (which does not import json:
clowder_wire/jsonpart.py), ctl/outer.py.  Anything else -- another command line, another
option, a HOST:ID, running inside a session, no terminal, an answer other than Welcome
and Attached (no such session, a version it does not speak), a connection refused --
and nothing is drawn: the full path runs from the start, so every message and exit
status is its own.  A daemon that does not answer in time is reported by the full path
as such (``take`` raises it) without being waited for twice.
"""

from __future__ import annotations

import _signal
import _socket
import os
import sys

import clowder_wire as P

from . import deadline
from .outer import OuterTerminal, described, write_all
from .paths import after_socket, default_socket
from .quickask import ask_sessions, hello

# attach's defaults (ctl/commands/attach.py's options): the plain command line has these.
HISTORY_LINES = 500
DETACH_KEY = "^\\"
# After Attached, how long to wait for the repaint's first frame before drawing what
# came and handing over (the full path shows the rest): a repaint is never empty and
# comes within milliseconds; this only bounds a host that is slow to render one.
REPAINT_WAIT = 1.0
# Signals that end an attach (attach.ENDING_SIGNALS): from raw mode on, noted, and acted
# on by the full path, which hands the terminal back.
_ENDING = (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT)


class Opened:
    """An attach made and drawn here, for attach's ``run`` to continue."""

    def __init__(self, sock, path: str, session: str, size: tuple[int, int], token: str):
        self.sock = sock  # a _socket.socket, blocking
        self.path = path
        self.session = session  # the ID as given, or the one chosen (_choose)
        self.chose = False  # True: no ID was given, ``session`` is the newest running
        self.size = size  # what the Attach asked for
        self.token = token  # the input stream's token the Attach carried
        self.reader = P.FrameReader()  # holds any partial frame read
        # Welcome, Attached, the history (an older host sends none), the repaint ...
        self.frames: list[tuple[int, bytes]] = []
        self.drawn = 0  # ... of which this many frames were drawn (or were the greeting)
        self.outer: OuterTerminal | None = None  # in raw mode once drawn
        self.ending: int | None = None  # an ending signal that came meanwhile
        self.suspend = False  # a SIGTSTP came meanwhile (attach.py suspends once loaded)
        self.taken = False
        self.written = False  # the host writes the terminal (Attached.terminal)
        self.attached = None  # the Attached, decoded once (attach.py's _adopt takes it)


_opened: Opened | None = None
_unanswered: tuple[str, float] | None = None  # (path, seconds): the deadline passed


def banner(session: str, read_only: bool, detach_key: str) -> str:
    """What attach says on stderr once attached (already in raw mode)."""
    ro = " read-only: keys you type are not sent;" if read_only else ""
    return f"[clowder: attached to {session};{ro} detach with {detach_key}]\r\n"


def history_block(history: bytes, rows: int) -> bytes:
    """The history as put into the terminal's scrollback before the first repaint: its
    lines, then a screenful of newlines that scrolls them up past the screen."""
    return history.replace(b"\n", b"\r\n") + b"\r\n" * rows


def plain_attach(argv: list[str]) -> tuple[str | None, str | None, int] | None:
    """(the --socket given or None, ID or None, history lines) for `[--socket PATH]
    attach [--history N] [ID]`, else None."""
    form = after_socket(argv)
    if form is None:
        return None
    path, argv = form
    if argv[:1] != ["attach"]:
        return None
    rest, history = argv[1:], HISTORY_LINES
    if rest[:1] == ["--history"] and len(rest) > 1 and rest[1].isascii() \
            and rest[1].isdigit():
        rest, history = rest[2:], int(rest[1])
    elif rest[:1] and rest[0].startswith("--history=") and rest[0][10:].isascii() \
            and rest[0][10:].isdigit():
        rest, history = rest[1:], int(rest[0][10:])
    if not rest:
        return path, None, history  # the newest running session (newest_running)
    if len(rest) != 1:
        return None
    session = rest[0]
    if not session or session.startswith("-") or ":" in session:
        return None  # an option, or HOST:ID / agent:NAME (the full path sorts them)
    return path, session, history


def newest_running(sessions: list[dict], uid: int, inside: str | None) -> str | None:
    """What `attach` with no ID attaches to, as tmux attaches the most recent: the id of
    the newest running session of ``uid`` that is not ``inside`` (the one the caller
    runs in); None if there is none."""
    mine = [s for s in sessions if s.get("state") == "running" and s.get("uid") == uid
            and s.get("id") != inside]
    return max(mine, key=lambda s: s.get("created") or 0)["id"] if mine else None


def attempt(argv: list[str]) -> None:
    """Attach and draw now if ``argv`` is the plain form and all goes as expected;
    otherwise leave everything to the full path (see the module's docstring)."""
    global _opened, _unanswered
    form = plain_attach(argv)
    if form is None or os.environ.get("CLOWDER_SESSION") \
            or not (os.isatty(0) and os.isatty(1)):
        return
    try:
        seconds = deadline.seconds()
        cols, rows = P.fit_size(*os.get_terminal_size(0))
    except (ValueError, OSError):
        return
    path = form[0] or default_socket()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    opened = Opened(sock, path, form[1], (cols, rows), os.urandom(8).hex())
    history = form[2]
    try:
        sock.settimeout(seconds)
        sock.connect(path)
        first = b""  # with no ID, Hello went with the question asked first
        if opened.session is None:  # `attach`: ask which first, on the same connection
            if not _choose(opened, seconds):
                sock.close()
                return
        else:
            first = hello()
        sock.sendall(first + P.encode(P.Attach(session=opened.session, cols=cols, rows=rows,
                                               token=opened.token, history=history,
                                               terminal=described(1))))
        if not _read_until_repaint(opened, history > 0):
            sock.close()
            return
        screen = _screen(opened)
    except TimeoutError:
        sock.close()
        _unanswered = (path, seconds)
        return
    except (OSError, P.ProtocolError):
        sock.close()  # refused, reset, not a clowder socket: the full path says
        return
    _opened = opened
    _draw(opened, screen)
    if opened.written:
        try:  # what goes before the screen is drawn: the host writes it now
            sock.sendall(P.encode(P.TerminalReady()))
        except OSError:
            pass  # gone: the full path finds the connection closed


def _choose(opened: Opened, seconds: float) -> bool:
    """For `attach` with no ID: ask for the sessions (quickask.py) and set
    ``opened.session`` to the session the full path would choose; False (the full path
    says why) at anything else, or when there is none."""
    answer = ask_sessions(opened.sock, opened.reader, opened.frames, seconds, peek=True)
    if answer is None:
        return False
    try:
        chosen = newest_running(answer[1], answer[0].uid, os.environ.get("CLOWDER_SESSION"))
    except (AttributeError, KeyError, TypeError):
        return False  # not what a host sends: the full path reports it
    if chosen is None or not isinstance(chosen, str):
        return False
    opened.session, opened.chose = chosen, True
    return True


def _read_until_repaint(opened: Opened, want_history: bool) -> bool:
    """Read Welcome, Attached, the history and the repaint's first frame; False at
    anything else (an Error: no such session ...), or if the connection closed.  The
    deadline bounds each wait but the last: a repaint comes within milliseconds of the
    history, and after REPAINT_WAIT what came is drawn and the full path shows the rest."""
    frames, sock = opened.frames, opened.sock
    while True:
        kinds = [kind for kind, _ in frames]
        if kinds[:2] not in ([], [P.Welcome.KIND], [P.Welcome.KIND, P.Attached.KIND]):
            return False
        history = kinds[2:3] == [P.SnapshotData.KIND]  # an older host sends none
        if len(kinds) > 2 + history:
            return True
        if len(kinds) >= 2 and opened.attached is None:
            opened.attached = P.decode(*frames[1])
            opened.written = bool(opened.attached.terminal)
        if opened.written and (history or not want_history):
            return True  # the host writes the repaint, once told (TerminalReady)
        if history:
            sock.settimeout(REPAINT_WAIT)
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            if history:
                return True  # the history came, the repaint not yet: draw, hand over
            raise
        if not data:
            return False
        frames += opened.reader.frames(data)


def _screen(opened: Opened) -> bytes:
    """The history and the repaint's frames that came, as they are to be drawn."""
    opened.sock.settimeout(None)
    frames = opened.frames
    out = []
    opened.drawn = 2  # Welcome, Attached
    if len(frames) > 2 and frames[2][0] == P.SnapshotData.KIND:
        history = P.data_of(frames[2][1])
        if history:
            out.append(history_block(history, opened.size[1]))
        opened.drawn = 3
    for kind, payload in frames[opened.drawn:]:
        if kind != P.Output.KIND:
            break  # Exited, an acknowledgement ...: the full path's to read
        out.append(P.data_of(payload))
        opened.drawn += 1
    return b"".join(out)


def _draw(opened: Opened, screen: bytes) -> None:
    """Raw mode, then the banner, and the history and the repaint after ENTER."""
    outer = opened.outer = OuterTerminal(0, 1)
    outer.raw()
    for sig in _ENDING:
        _signal.signal(sig, _noted)
    _signal.signal(_signal.SIGTSTP, _suspend_noted)  # not stopped raw over the host's writes
    write_all(2, banner(opened.session, False, DETACH_KEY).encode())
    write_all(1, outer.enter() + screen)


def _noted(signum, _frame) -> None:
    if _opened is not None and _opened.ending is None:
        _opened.ending = signum


def _suspend_noted(_signum, _frame) -> None:
    if _opened is not None:
        _opened.suspend = True


def take(session: str | None, path: str) -> Opened | None:
    """The attach drawn here, if it is the one the full path is about to make (``session``
    as given, None for the newest running one, at ``path``); raises what a daemon that
    did not answer raises."""
    global _unanswered
    if _unanswered is not None:
        where, seconds = _unanswered
        _unanswered = None
        from .client import NotAnswering, daemon_of, not_answering
        raise NotAnswering(not_answering(daemon_of("clowder-ptyhost.socket"),
                                         f"at {where}", seconds))
    opened = _opened
    if opened is None or opened.taken or opened.path != path \
            or (opened.session != session and not (session is None and opened.chose)):
        return None
    opened.taken = True
    return opened


def release() -> None:
    """On the way out, whatever happened after the drawing (the full path failed before
    attach took over, or after): the connection closed and the terminal handed back.
    Both are no-ops when attach did them already (restoring twice writes nothing)."""
    opened = _opened
    if opened is not None:
        opened.taken = True
        opened.sock.close()
        if opened.outer is not None:
            opened.outer.restore()


def main(argv: list[str] | None = None):
    """clowderctl's entry point (ctl/__main__.py)."""
    argv = sys.argv[1:] if argv is None else argv
    attempt(argv)
    try:
        from .cli import main as run_command_line
        return run_command_line(argv)
    finally:
        release()
