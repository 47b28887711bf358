"""clowderctl attach: an interactive terminal on a session, with a detach key."""

import collections
import os
import select
import selectors
import signal
import socket
import sys
import time

import clowder_wire as protocol
from clowder_common import pipes
from clowder_wire.host import fit_size

from .. import exits, firstpaint
from ..client import (Client, ClientError, NotAnswering, RequestFailed, Unreachable,
                      UsageError, default_control_socket, default_socket)
from ..detachkey import DetachKey, parse_key
from ..outer import OuterTerminal
from ..portable import nonblocking_pipe, terminal_selector


def add_parser(sub):
    p = sub.add_parser("attach", help="attach this terminal to a session", epilog="""\
Detach with the detach key (Ctrl-\\ by default); the session keeps running.  When the
session ends while attached, attach exits with its status (128+N for signal N).

examples:
  clowderctl attach
  clowderctl attach --read-only build
  clowderctl --host box attach --agent claude/sh
""")
    p.add_argument("session", metavar="ID", nargs="?",
                   help="a session id or name (default: your newest running session); "
                        "with --agent, AGENT or AGENT/SHELL")
    p.add_argument("--agent", action="store_true",
                   help="attach to an agent (or AGENT/SHELL) through clowder-control")
    p.add_argument("--read-only", action="store_true", help="watch; send no input")
    p.add_argument("--history", type=int, default=firstpaint.HISTORY_LINES, metavar="LINES",
                   help="recent lines put into this terminal's scrollback first "
                        "(default 500; 0: none), with their colours")
    p.add_argument("--plain-history", action="store_true",
                   help="put the history in without colours or attributes")
    p.add_argument("--detach-key", default=firstpaint.DETACH_KEY,
                   help="the key that detaches, as ^X (default ^\\, i.e. Ctrl-backslash); "
                        "pressed twice, it is sent once to the session instead")
    p.set_defaults(run=run, parser=p)


# Frames queued for the host past which stdin is not read (the host is not reading us).
OUT_HIGH = 1 << 20
# Input the host has not acknowledged past which stdin is not read either (it is kept
# to be resent; the host acknowledges every 64 KiB it writes).
UNACKED_HIGH = 2 << 20


def _size() -> tuple[int, int]:
    """The outer terminal's size, cut to what a session may have (ptyhostd.pty)."""
    try:
        return fit_size(*os.get_terminal_size(sys.stdin.fileno()))
    except OSError:
        return 0, 0


class _Session:
    """One attach connection; returns why it ended."""

    def __init__(self, args, key: int, wakeup: int, outer: OuterTerminal):
        self.args = args
        self.key = DetachKey(key)
        self.outer = outer
        self.told_read_only = False  # the bell for a dropped key has rung
        self.wakeup = wakeup  # readable when a signal arrived (signal.set_wakeup_fd)
        self.out = sys.stdout.buffer
        self.resized = False
        self.suspend = False  # SIGTSTP came: detach, stop as a job, reattach once continued
        # Input is one numbered stream per run (the token): the host says how much of
        # it reached the pty, on each attach (Attached.input_seq) and now and then
        # (InputAck); what it has not acknowledged is kept, and resent on a reattach,
        # so keys typed while the host died arrive exactly once.  (os.urandom is what
        # secrets.token_hex reads; importing secrets cost ~6 ms of each attach.)
        self.token = os.urandom(8).hex()
        self.seq = 0  # the stream offset after the last key read
        self.acked = 0  # the host has written up to here
        self.unacked = bytearray()  # the stream from acked to seq
        self.handed = 0  # the offset whose frames the socket took whole
        self.numbered = False  # whether this host acknowledges our input
        self.outbuf = bytearray()  # frames not yet taken by the socket
        self.out_total = 0  # bytes of frames the socket took on this connection
        self.inflight: collections.deque = collections.deque()  # (frame end, seq after)
        self.history_lines = 0  # lines of scrollback the first Attach asks for
        self.history = b""  # text put into the scrollback before the first repaint
        self.session_id = None  # the session the host attached us to (Attached)
        # Our terminal, for the host to write the output to itself (Attach.terminal):
        # local attaches only (clowder-control passes attaches on without it).
        self.terminal = None if args.agent or not isinstance(args.target, (str, type(None))) \
            else outer.described()
        self.written = False  # the host writes our terminal on this connection

    def run(self, first: bool, opened: firstpaint.Opened | None = None) -> tuple[str, object]:
        """``opened``: the attach firstpaint.py made and drew (the first one only)."""
        self.resized = False  # the Attach below carries the current size
        cols, rows = _size()
        c = None
        told = False  # TerminalReady sent
        try:
            if opened is None:
                c = Client(self.args.target)
                history = self.history_lines if first else 0
                c.send(protocol.Attach(session=self.args.session, cols=cols, rows=rows,
                                       read_only=self.args.read_only,
                                       token=None if self.args.read_only else self.token,
                                       history=history, history_format="text"
                                       if self.args.plain_history else "ansi",
                                       terminal=self.terminal))
                attached = c.recv()  # Attached (errors raise)
                if history:
                    self.history = _history(c)
            else:
                c, attached = _adopt(opened)
                self.resized = (cols, rows) != opened.size  # resized while it drew
                told = True  # firstpaint.py sent TerminalReady once it drew
            self.session_id = (attached.session or {}).get("id")
            self.written = bool(getattr(attached, "terminal", False))
            if self.session_id and self.session_id == os.environ.get("CLOWDER_SESSION"):
                # Named, or an agent's (the id check in run() cannot see those).
                c.close()
                raise _Itself(_itself(self.session_id))
            if first and opened is None:
                _banner(self.args)  # only now: the host may refuse (no such session)
        except _Itself:
            raise
        except (ClientError, OSError) as exc:
            if c is not None:
                c.close()
            if isinstance(exc, RequestFailed) or (first and isinstance(exc, ClientError)):
                raise  # e.g. no such session, or no host to attach to at all
            if first:
                raise Unreachable(f"the PTY host closed the connection ({exc})") from None
            # Reattaching, the host went away again before it answered: wait for it
            # once more, as after any restart.
            return "dropped", None
        with c:
            # Resent from what the host wrote; a host that does not say (an older one,
            # or its record was lost) is taken to have what the socket took whole.
            # -1: it numbers our input but has no record of it (new, or lost).
            seq = getattr(attached, "input_seq", None)
            self.numbered = seq is not None
            self._ack(seq if self.numbered and self.acked <= seq <= self.seq
                      else max(self.handed, self.acked))
            self.out.write(self.outer.enter())  # nothing if firstpaint.py entered
            if not first:
                self.out.write(b"\x1bc")  # the backlog replays onto a clean screen
            elif self.history:
                # The repaint only covers the visible screen: recent output goes first, as
                # plain lines, and scrolls up into the terminal's own scrollback.
                self.out.write(firstpaint.history_block(self.history, rows))
            if self.written and not told:
                # What goes before the screen is drawn: the host writes from here on.
                self.out.flush()
                c.send(protocol.TerminalReady())
            # recv() reads whole chunks, so the first Output frames of the backlog (and,
            # for an ended session, its Exited) may have come with Attached and wait in
            # c.pending: show them before reading the socket again, or they are lost.
            pending, c.pending = c.pending, []
            ended = self._show(pending)
            if ended:
                return ended
            return self._stream(c)

    def _show(self, messages) -> tuple[str, object] | None:
        """Show what the host sent; ("exited", Exited) once the session has ended."""
        for msg in messages:
            if isinstance(msg, protocol.Output):
                self.out.write(msg.data)
            elif isinstance(msg, protocol.InputAck):
                self._ack(msg.seq)
            elif isinstance(msg, protocol.Exited):
                self.out.flush()
                return "exited", msg
            elif isinstance(msg, protocol.Error) and not msg.fatal:
                continue  # e.g. input refused on a read-only attach
            elif isinstance(msg, protocol.Error):
                raise ClientError(msg.message)
        self.out.flush()
        return None

    def _stream(self, c: Client) -> tuple[str, object]:
        # Both directions without blocking: when the host stops reading us (its input
        # queue for the session is full) we must keep reading its output, or each waits
        # for the other.  Frames wait in self.outbuf; stdin is not read while it is long.
        c.sock.setblocking(False)
        self.outbuf = bytearray()
        sel = terminal_selector()
        sel.register(c.sock, selectors.EVENT_READ, "sock")
        stdin = sys.stdin.fileno()
        # Only a terminal is read (a read-only attach may have none; epoll refuses
        # /dev/null and regular files anyway).
        stdin_open = self.outer.saved is not None
        # Without this, a SIGWINCH would only be noticed when select() next returned:
        # Python restarts an interrupted select() after running the handler.
        sel.register(self.wakeup, selectors.EVENT_READ, "signal")
        reading_stdin = False
        sock_events = selectors.EVENT_READ
        try:
            self._frame(bytes(self.unacked), self.acked)  # what the host may not have
            while True:
                want_stdin = stdin_open and len(self.outbuf) < OUT_HIGH \
                    and len(self.unacked) < UNACKED_HIGH
                if want_stdin != reading_stdin:
                    if want_stdin:
                        sel.register(stdin, selectors.EVENT_READ, "stdin")
                    else:
                        sel.unregister(stdin)
                    reading_stdin = want_stdin
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outbuf else 0)
                if events != sock_events:
                    sel.modify(c.sock, events, "sock")
                    sock_events = events
                deadline = self.key.deadline()
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self.resized or self.suspend:
                    timeout = 0.0  # e.g. resized while firstpaint.py's attach was drawn
                for sk, ev in sel.select(timeout):
                    if sk.data == "sock" and ev & selectors.EVENT_WRITE:
                        self._flush(c)
                    if sk.data == "sock" and ev & selectors.EVENT_READ:
                        try:
                            data = c.sock.recv(1 << 16)
                        except BlockingIOError:
                            continue
                        except ConnectionResetError:
                            data = b""
                        if not data:
                            return self._dropped()
                        try:
                            messages = c.reader.feed(data)
                        except protocol.ProtocolError as exc:
                            raise ClientError(f"invalid data from the PTY host: {exc}") \
                                from None
                        ended = self._show(messages)
                        if ended:
                            return ended
                    elif sk.data == "signal":
                        pipes.drain(self.wakeup)  # the handler has set self.resized
                    elif sk.data == "stdin":
                        data = os.read(stdin, 1 << 16)
                        if not data:
                            sel.unregister(stdin)
                            stdin_open = reading_stdin = False
                            continue
                        if self._keys(*self.key.feed(data, time.monotonic()), c):
                            return "detached", None
                        if self.outbuf:
                            # Sent now, not after one more turn of the loop waiting for
                            # the socket to be writable (it nearly always is): a
                            # keystroke's echo is a round trip, and each turn costs one.
                            self._flush(c)
                if deadline is not None and time.monotonic() >= deadline and \
                        self._keys(*self.key.expire(time.monotonic()), c):
                    return "detached", None
                if self.resized:
                    self.resized = False
                    cols, rows = _size()
                    if cols and rows:  # read-only too: its frames follow its size
                        self.outbuf += protocol.encode(protocol.Resize(cols=cols, rows=rows))
                if self.suspend:
                    # The host stops writing our terminal before the shell takes it back
                    # (a stopped client's terminal is the shell's: the session's output
                    # must not land on its prompt); the reattach repaints.
                    self.suspend = False
                    self.outbuf += protocol.encode(protocol.Detach())
                    self._flush_all(c)
                    if self.written:
                        self._detached(c)  # frames end with the connection, closed below
                    self._dropped()  # this connection's bookkeeping: the next one resends
                    return "suspended", None
        except (BrokenPipeError, ConnectionResetError):
            # The host went away (a restart) before we read its EOF: dropped, as at EOF.
            return self._dropped()
        finally:
            sel.close()

    def _keys(self, data: bytes, detach: bool, c: Client) -> bool:
        """Send what was typed (the detach key taken out); True once detached."""
        if data and not self.args.read_only:
            self._input(data)
        elif data and not self.told_read_only:
            # The banner said keys are not sent; one bell says this one was not (a
            # message here would be drawn over the session's screen).
            self.told_read_only = True
            self.out.write(b"\a")
            self.out.flush()
        if detach:
            self.outbuf += protocol.encode(protocol.Detach())
            self._flush_all(c)
            if self.written:
                self._detached(c)
        return detach

    def _input(self, data: bytes) -> None:
        """New keystrokes: kept until acknowledged, and queued for the host."""
        self.unacked += data
        self._frame(data, self.seq)
        self.seq += len(data)

    def _frame(self, data: bytes, start: int) -> None:
        """Queue ``data`` (the stream from offset ``start``) in frames of at most MAX_DATA."""
        for i in range(0, len(data), protocol.MAX_DATA):
            chunk = data[i:i + protocol.MAX_DATA]
            end = start + i + len(chunk)
            self.outbuf += protocol.encode_input(chunk, end)
            self.inflight.append((self.out_total + len(self.outbuf), end))

    def _ack(self, seq: int) -> None:
        """The host has the stream up to ``seq``: forget it here."""
        if seq > self.acked:
            del self.unacked[:seq - self.acked]
            self.acked = seq

    def _flush(self, c: Client) -> None:
        """Send what the socket takes now (BrokenPipeError: the host is gone)."""
        try:
            n = c.sock.send(self.outbuf)
        except BlockingIOError:
            return
        del self.outbuf[:n]
        self.out_total += n
        # Keys whose frame is wholly in the socket are the host's now (an AF_UNIX write
        # to a closed peer fails whole, so nothing written is lost on that side).
        while self.inflight and self.inflight[0][0] <= self.out_total:
            self.handed = max(self.handed, self.inflight.popleft()[1])
        if not self.numbered:
            self._ack(self.handed)  # a host that never acknowledges: as before

    def _flush_all(self, c: Client) -> None:
        """Send what is queued, waiting at most a few seconds (detaching)."""
        deadline = time.monotonic() + 5
        try:
            while self.outbuf and time.monotonic() < deadline:
                select.select([], [c.sock], [], max(0.0, deadline - time.monotonic()))
                self._flush(c)
        except OSError:
            pass  # the host is gone: detached all the same

    def _detached(self, c: Client) -> None:
        """Wait for the host's Ok (or the connection's end): the host writes our
        terminal until then, and what we write next (the modes handed back) must come
        after its last bytes.  A host that does not answer in a few seconds is not
        waited for (it is gone or stuck: it writes nothing more either way)."""
        deadline = time.monotonic() + 5
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([c.sock], [], [], left)[0]:
                    return
                data = c.sock.recv(1 << 16)
                if not data or any(isinstance(m, (protocol.Ok, protocol.Error))
                                   for m in c.reader.feed(data)):
                    return
        except (OSError, protocol.ProtocolError):
            return  # gone: it writes nothing more

    def _dropped(self) -> tuple[str, object]:
        """The connection is gone: what it did not acknowledge is resent on reattach."""
        self.inflight.clear()
        self.outbuf = bytearray()
        self.out_total = 0
        return "dropped", None



def _wait_for_host(path) -> None:
    """Return once the host answers again (it comes back with the session)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            Client(path).close()
            return
        except RequestFailed:
            raise
        except ClientError:
            if time.monotonic() > deadline:
                raise Unreachable("the PTY host did not come back within 60 s")
            time.sleep(0.1)


class _Itself(UsageError):
    """The session to attach to is the one this clowderctl runs in: a usage error, as
    when it is named by id (run() refuses that before connecting)."""


def _itself(sid: str) -> str:
    return (f"this terminal is session {sid} itself: attaching to it from inside would "
            f"feed its output back into it; attach from another terminal")


def _history(c: Client) -> bytes:
    """After Attached: the scrollback the Attach asked for (a SnapshotData from the same
    look at the model as the repaint that follows), or none from an older host, whose
    next frame is already the repaint (kept for ``_show``)."""
    msg = c.recv()
    if isinstance(msg, protocol.SnapshotData):
        return msg.data
    c.pending.insert(0, msg)
    return b""


class _Killed(BaseException):
    """A signal that ends the attach (SIGTERM, SIGHUP, SIGINT): unwinds to run()."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _killed(signum, _frame):
    raise _Killed(signum)


# Signals that end an attach with the terminal handed back, instead of leaving it raw
# and in the program's modes (their default action would end Python on the spot).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _banner(args) -> None:
    """Say what we are attached to and how to leave (on stderr, already in raw mode)."""
    sys.stderr.write(firstpaint.banner(args.session, args.read_only, args.detach_key))
    sys.stderr.flush()


def _adopt(opened: firstpaint.Opened) -> tuple[Client, protocol.Attached]:
    """The connection firstpaint.py made, as a Client, and its Attached; what it drew is
    not shown again, and what came after that is pending."""
    try:
        # The Attached was decoded when it came (firstpaint's _read_until_repaint).
        messages = [opened.attached if i == 1 and opened.attached is not None
                    else protocol.decode(kind, payload)
                    for i, (kind, payload) in enumerate(opened.frames)]
    except protocol.ProtocolError as exc:
        raise ClientError(f"invalid data from the PTY host: {exc}") from None
    welcome, attached = messages[:2]
    c = Client.adopt(socket.socket(fileno=opened.sock.detach()), opened.path, opened.reader,
                     welcome)
    c.pending = messages[opened.drawn:]
    c._unbounded = True  # an attach's connection carries events from here on
    return c, attached


def _most_recent(args) -> str:
    """The id of the caller's newest running session (not the one it runs in), as tmux
    attaches the most recent; ClientError if it has none."""
    inside = os.environ.get("CLOWDER_SESSION")
    with Client(args.socket) as c:
        uid = c.welcome.uid if c.welcome is not None else os.getuid()
        # peek: a lookup, not a listing anyone reads (ended ones stay unseen).
        sessions = c.sessions(peek=True)
    chosen = firstpaint.newest_running(sessions, uid, inside)
    if chosen is None:
        raise ClientError("you have no running session to attach to: give an ID, or "
                          "start one with `clowderctl spawn`")
    return chosen


def run(args) -> int:
    opened = None if args.agent else firstpaint.take(args.session,
                                                      args.socket or default_socket())
    if opened is not None:
        args.session = opened.session  # the same, or the one chosen for no ID
    if args.session is None:
        if args.agent:
            args.parser.error("--agent needs the agent's name: attach --agent AGENT")
        args.session = _most_recent(args)
    # Inside a session, attaching to itself would feed its output back in as input.
    if not args.agent and args.session == os.environ.get("CLOWDER_SESSION"):
        print(f"clowderctl attach: {_itself(args.session)}", file=sys.stderr)
        return exits.USAGE
    try:
        key = parse_key(args.detach_key)
    except ValueError as exc:
        args.parser.error(str(exc))
    # Through clowder-control, a restart of that daemon is one more dropped connection.
    args.target = (args.control_socket or default_control_socket()) if args.agent \
        else args.socket
    stdin = sys.stdin.fileno()
    if not os.isatty(stdin) and not args.read_only:
        # Without a terminal there is no raw mode and no detach key; keys for a script
        # are what `send` is for.
        raise UsageError("stdin is not a terminal, and attach types into the session "
                          "from one (--read-only watches without one; `clowderctl send` "
                          "types from a script)")
    outer = opened.outer if opened else OuterTerminal(stdin, sys.stdout.fileno())
    wakeup, wakeup_w = nonblocking_pipe()
    session = _Session(args, key, wakeup, outer)
    if opened:
        session.token = opened.token  # the Attach firstpaint.py sent carried it
    elif outer.screen:  # through clowder-control too: it passes the Attach's fields on
        session.history_lines = max(0, args.history)
    signal.signal(signal.SIGWINCH, lambda *_: setattr(session, "resized", True))
    # Raw mode sends no SIGTSTP from the keyboard; one sent (`kill -TSTP`) suspends the
    # attach as a job: detached, terminal handed back, stopped; reattached when continued.
    old_tstp = signal.signal(signal.SIGTSTP, lambda *_: setattr(session, "suspend", True))
    session.suspend = bool(opened and opened.suspend)  # it came while firstpaint.py drew
    old_wakeup = signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
    old_handlers = {sig: signal.signal(sig, _killed) for sig in ENDING_SIGNALS}
    killed = None
    try:
        outer.raw()
        if opened and opened.ending:
            raise _Killed(opened.ending)  # it came while firstpaint.py had the terminal
        first = True
        while True:
            why, msg = session.run(first, opened)
            first, opened = False, None
            if why == "dropped":
                # The host restarted: it comes back with the session; reattach.
                _wait_for_host(args.target)
                continue
            if why == "suspended":
                _stop_as_a_job(outer)
                continue
            if why == "exited" and args.agent:
                # The agent's session ended: follow the agent to its next one, if
                # clowder-control brings it back (a restart, or its policy after a crash).
                _say(f"\r\n[clowder: {args.session}: session {session.session_id} ended "
                     f"({_how(msg)}); waiting for the agent's next session]")
                if _next_session(args, session.session_id):
                    # Keys typed to the old session are not the new one's to receive.
                    session = _Session(args, key, wakeup, outer)
                    continue
            break
    except _Killed as exc:
        killed = exc.signum
    finally:
        for sig in ENDING_SIGNALS:  # a second signal must not cut the restore short
            signal.signal(sig, signal.SIG_IGN)
        try:
            sys.stdout.flush()  # the session's last output before the reset, not after
        except OSError:
            pass
        outer.restore()
        signal.signal(signal.SIGTSTP, old_tstp)
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(wakeup)
        os.close(wakeup_w)
    if killed is not None:
        _say(f"\r\n[clowder: {signal.Signals(killed).name}: detached from {args.session}]")
        return 128 + killed
    if why == "detached":
        _say(f"\r\n[clowder: detached from {args.session}]")
        return 0
    code = msg.exit_code if msg.exit_code is not None else 128 + (msg.signal or 127)
    _say(f"\r\n[clowder: session {args.session} ended: {_how(msg)}]")
    return code


def _stop_as_a_job(outer: OuterTerminal) -> None:
    """Hand the terminal back and stop as SIGTSTP stops a job; on return (SIGCONT: `fg`
    or `bg`), raw again.  A process group with no shell to continue it (orphaned) is
    not stopped: the kernel drops the signal, and the attach goes on at once."""
    try:
        sys.stdout.flush()
    except OSError:
        pass
    outer.restore()
    handler = signal.signal(signal.SIGTSTP, signal.SIG_DFL)
    try:
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped on the way out of this call
    finally:
        signal.signal(signal.SIGTSTP, handler)
    outer.raw()  # in the background (`bg`), SIGTTOU stops us here until `fg`


def _how(msg) -> str:
    """How a session ended, from its Exited."""
    return f"signal {msg.signal}" if msg.signal is not None else f"{msg.exit_code}"


# How long `attach --agent` waits for an agent's next session: past its longest back-off
# (30 s, controld/supervisor.py) and a slow spawn.
FOLLOW_WAIT = 45.0


def _next_session(args, old: str | None) -> bool:
    """Whether ``args.session`` (AGENT or AGENT/SHELL) runs again in a session other than
    ``old``; False at once when clowder-control will not bring it back (down, or ended
    under its restart policy), or after FOLLOW_WAIT."""
    name, _, shell = args.session.partition("/")
    end = time.monotonic() + FOLLOW_WAIT
    while time.monotonic() < end:
        try:
            with Client(args.target) as c:
                report = c.request(protocol.GetStatus(), protocol.StatusReport)
        except NotAnswering:
            return False
        except ClientError:
            report = None  # clowder-control restarting: ask again
        agent = next((a for a in (report.agents if report else [])
                      if a.get("name") == name), None)
        if report is not None and agent is None:
            return False  # no longer configured
        if agent is not None:
            if agent.get("state") == "down":
                return False
            if shell:
                entry = next((sh for sh in agent.get("shells", [])
                              if sh.get("name") == shell), {})
                running, sid, ended = entry.get("running"), entry.get("session"), \
                    entry.get("exited")
            else:
                running, sid, ended = agent.get("state") == "running", \
                    agent.get("session"), agent.get("state") == "exited"
            if running and sid and sid != old:
                return True
            if ended and sid == old:
                return False  # ended, and its policy keeps it so until `up`
        time.sleep(0.2)  # clowder-control has no event for this yet: ask again
    return False


def _say(line: str) -> None:
    """A last line on stderr; a terminal that hung up (SIGHUP) is not an error."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass
