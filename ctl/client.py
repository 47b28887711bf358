"""A blocking client of the PTY host: connect, greet, one request at a time.

The same Client speaks to clowder-control (same framing, 4xx kinds), and, given a
``transport.Remote`` instead of a socket path, to either daemon of another machine
through ``ssh HOST clowderctl relay [--to host]``.

Every step has a deadline (``ctl/deadline.py``): connecting, the handshake, and each
reply; past it, ``NotAnswering`` names the daemon and where it was asked.  Replies that
come when something happens (a Wait's Exited, a watch's events, an attach's output)
have none: only the connection and the first answer are bounded there.
"""

from __future__ import annotations

import select
import socket
import time

import clowder_wire as protocol
from clowder_common import __version__

from . import deadline, exits
# Re-exported: ctl's modules ask the client where the daemons are.
from .paths import default_control_socket, default_socket  # noqa: F401
from .transport import Remote, SshTransport

# Requests whose answer comes when an event happens, not when the daemon gets to it.
_UNBOUNDED = (protocol.Wait,)
# Requests answered at once, after which the connection carries events as they come.
_THEN_EVENTS = (protocol.Attach, protocol.FileWatch, protocol.WatchEvents,
                protocol.WatchAgentEvents)
# Requests the daemon itself may work on for longer than a deadline, and how much longer:
# the hand-off's pre-check (ptyhostd/handoff.py CHECK_TIMEOUT), a VCS view (up to two
# git commands of controld/vcs.py TIMEOUT each), and a Send to a program not reading,
# which the host refuses after its input deadline (ptyhostd/inputqueue.py DEADLINE, 10 s
# by default) -- without the margin the two 10 s deadlines raced and the user was told the
# host was not answering instead of which bytes did not arrive.
_SLOW = {protocol.UpgradeCheck: 10.0, protocol.VcsStatus: 20.0, protocol.VcsDiff: 20.0,
         protocol.VcsLog: 20.0, protocol.Send: 10.0}


class ClientError(Exception):
    """Something the user should read; clowderctl prints it and exits with
    ``exit_code`` (ctl/exits.py): each kind of failure below has its own."""

    exit_code = exits.REFUSED  # what was asked could not be done


class UsageError(ClientError):
    """The command was called in a way it cannot work (e.g. attach without a terminal)."""

    exit_code = exits.USAGE


class Unreachable(ClientError):
    """No connection to the daemon: nothing listens, no permission, ssh failed, or the
    connection dropped before the answer."""

    exit_code = exits.UNREACHABLE


class NotConnected(Unreachable):
    """Connecting itself failed: no socket, refused, no permission, ssh would not run."""


class TimedOut(ClientError):
    """What was waited for did not come in time."""

    exit_code = exits.TIMEOUT


class NotAnswering(TimedOut):
    """A daemon took no connection, or sent no reply, within the deadline."""


def not_answering(daemon: str, where: str, seconds: float, what: str = "no reply") -> str:
    return f"{daemon} is not answering {where}: {what} within {seconds:g} s"


class RequestFailed(ClientError):
    """The host answered a request with an Error."""

    def __init__(self, err: protocol.Error):
        super().__init__(err.message)
        self.code = err.code


def daemon_of(unit: str) -> str:
    """``clowder-ptyhost`` for ``clowder-ptyhost.socket``: the name people know."""
    return unit.rsplit(".", 1)[0]


def connect_unix(path: str, timeout: float, unit: str) -> socket.socket:
    """A connection to the socket at ``path`` (systemd's ``unit`` listens there), or a
    ClientError saying why not: clowderctl and the relay word it the same way."""
    end = time.monotonic() + timeout
    while True:
        # Python makes every socket non-inheritable (close-on-exec) itself: SOCK_CLOEXEC
        # would say it again, and macOS has no such flag (the client runs there).
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            return sock
        except (BlockingIOError, TimeoutError):
            # The listen backlog is full (a connect with a timeout is non-blocking, and
            # a unix one then fails at once): its daemon has not accepted for a while.
            sock.close()
            if time.monotonic() >= end:
                raise NotAnswering(not_answering(daemon_of(unit), f"at {path}", timeout,
                                                 "no connection accepted")) from None
            time.sleep(0.05)
        except OSError as exc:
            sock.close()
            raise NotConnected(_refused(path, exc, unit)) from None


def _refused(path: str, exc: OSError, unit: str) -> str:
    """What to tell the user when connecting to ``path`` failed with ``exc``."""
    if isinstance(exc, FileNotFoundError):
        return f"nothing listens at {path}: no such socket (is {unit} started?)"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens at {path}: connection refused (is {unit} started?)"
    if isinstance(exc, PermissionError):
        return f"permission denied on {path} (not in the clowder group?)"
    return f"cannot connect to {path}: {exc.strerror}"


class Client:
    """One connection, greeted; ``path`` is a unix socket's path or a ``Remote``.

    ``timeout``: the deadline of every step, by default ``deadline.seconds()``."""

    def __init__(self, path: str | Remote | None = None, timeout: float | None = None,
                 peer: str = "the PTY host"):
        timeout = deadline.seconds() if timeout is None else timeout
        end = time.monotonic() + timeout
        # peer: who answers, in messages; where: the same with its address.
        if isinstance(path, Remote):
            try:
                transport = path.open()
            except ConnectionError as exc:
                raise NotConnected(str(exc)) from None
            self._take(transport.sock, path, path.peer, path.peer, transport)
            self.daemon, self.location = path.daemon, f"on {path.host} (through {path})"
        else:
            path = path or default_socket()
            unit = "clowder-control.socket" if peer == "clowder-control" else \
                "clowder-ptyhost.socket"
            self._take(connect_unix(path, timeout, unit), path, peer, f"{peer} at {path}")
            self.daemon, self.location = daemon_of(unit), f"at {path}"
        self.timeout = timeout
        self.sock.settimeout(max(0.001, end - time.monotonic()))  # for the Hello
        try:
            self.send(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                     client=f"clowderctl {__version__}"))
            # The host may be restarting: the connection waits in the socket's backlog and
            # is served when it is back, which the deadline allows for; a host that is
            # frozen never serves it, and is replaced by systemd's watchdog meanwhile.
            welcome = self._recv_by(end)
        except socket.timeout:
            message = self._closed(not_answering(self.daemon, self.location, timeout,
                                                 "the greeting was not taken"), quick=True)
            self._gave_up = True
            self.close()
            raise NotAnswering(message) from None
        except OSError as exc:  # e.g. ssh already gone when Hello was written
            message = self._closed(f"cannot talk to {self.peer}: {exc.strerror or exc}")
            self.close()
            raise Unreachable(message) from None
        except ClientError:
            self.close()
            raise
        if not isinstance(welcome, protocol.Welcome):
            self.close()
            raise ClientError(f"unexpected answer to Hello: {type(welcome).__name__}")
        self.welcome = welcome
        self.sock.settimeout(None)

    def _take(self, sock: socket.socket, path, peer: str, where: str,
              transport: SshTransport | None = None) -> None:
        self.reader = protocol.FrameReader()
        self.pending: list[protocol.Message] = []
        self.transport = transport
        self.welcome: protocol.Welcome | None = None
        self.path = path
        self.peer = peer
        self.where = where
        self.sock = sock
        self.daemon, self.location = peer, ""
        self.timeout = deadline.seconds()
        self._allowance = 0.0  # extra seconds the last request may take (_SLOW)
        self._unbounded = False  # replies now come when events happen: no deadline
        self._events_next = False  # ... from the next reply on
        self._gave_up = False  # no answer in time: ssh is not waited for at close

    @classmethod
    def adopt(cls, sock: socket.socket, path: str, reader: protocol.FrameReader,
              welcome: protocol.Welcome) -> "Client":
        """A Client over a connection greeted elsewhere (attach's first paint, ctl/
        firstpaint.py), whose next bytes ``reader`` already holds the start of."""
        self = cls.__new__(cls)
        self._take(sock, path, "the PTY host", f"the PTY host at {path}")
        self.daemon, self.location = daemon_of("clowder-ptyhost.socket"), f"at {path}"
        self.reader, self.welcome = reader, welcome
        return self

    @classmethod
    def on_stream(cls, sock: socket.socket, peer: str, daemon: str | None = None,
                  location: str = "") -> "Client":
        """A Client over one stream of a ``ctl.mux.Mux``: already greeted, so no Hello."""
        self = cls.__new__(cls)
        self._take(sock, None, peer, peer)
        self.daemon, self.location = daemon or peer, location
        return self

    def _closed(self, message: str, quick: bool = False) -> str:
        """``message``, with why ssh ended when the connection went through ssh."""
        if self.transport is None:
            return message
        return f"{message} ({self.transport.why_closed(0 if quick else 2.0)})"

    def send(self, msg: protocol.Message) -> None:
        self._allowance = _SLOW.get(type(msg), 0.0)
        self._unbounded = isinstance(msg, _UNBOUNDED)
        self._events_next = isinstance(msg, _THEN_EVENTS)
        self.sock.sendall(protocol.encode(msg))

    def recv(self) -> protocol.Message:
        """The next message; Error frames are raised, EOF is a ClientError, and no reply
        within the deadline (unless events are awaited) is NotAnswering."""
        if self._unbounded:
            return self._recv_by(None)
        return self._recv_by(time.monotonic() + self.timeout + self._allowance)

    def _recv_by(self, end: float | None) -> protocol.Message:
        while not self.pending:
            if end is not None:
                self._wait_readable(end)
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:  # a timeout the caller set on the socket (wait)
                raise TimedOut(f"{self.where} did not answer in time") from None
            except ConnectionResetError:
                data = b""
            if not data:
                if self.transport is not None and self.welcome is None:
                    # ssh, or the relay it runs, ended before the daemon answered.
                    message = self._closed(f"cannot reach {self.peer} through ssh")
                    if self.transport.proc.returncode == deadline.EXIT_CODE:
                        raise NotAnswering(message)  # the relay timed out there
                    raise Unreachable(message)
                raise Unreachable(self._closed(f"{self.peer} closed the connection"))
            try:
                self.pending.extend(self.reader.feed(data))
            except protocol.ProtocolError as exc:
                raise ClientError(f"invalid data from {self.peer}: {exc}") from None
        msg = self.pending.pop(0)
        if self._events_next:
            self._unbounded, self._events_next = True, False
        if isinstance(msg, protocol.Error):
            raise RequestFailed(msg)
        return msg

    def _wait_readable(self, end: float) -> None:
        """Return once the socket has something to read; NotAnswering at ``end``."""
        poll = select.poll()
        poll.register(self.sock.fileno(), select.POLLIN)
        while True:
            left = end - time.monotonic()
            if left <= 0 or not poll.poll(max(1, int(left * 1000))):
                if time.monotonic() < end:
                    continue
                seconds = self.timeout + self._allowance
                self._gave_up = True
                raise NotAnswering(self._closed(
                    not_answering(self.daemon, self.location, seconds), quick=True))
            return

    def request(self, msg: protocol.Message, expect: type) -> protocol.Message:
        self.send(msg)
        reply = self.recv()
        if not isinstance(reply, expect):
            raise ClientError(f"unexpected answer {type(reply).__name__} to "
                              f"{type(msg).__name__}")
        return reply

    def sessions(self, **listing) -> list[dict]:
        """What ListSessions(**listing) lists, whole: a host sends a long list in pages
        (SessionList.more), each asked for in turn."""
        out: list[dict] = []
        after: str | None = ""
        while after is not None:
            reply = self.request(protocol.ListSessions(after=after, **listing),
                                 protocol.SessionList)
            out += reply.sessions
            after = protocol.next_page(reply, after)
        return out

    def close(self) -> None:
        self.sock.close()
        if self.transport is not None:
            # Reaps ssh (closing our end is its EOF).  After a daemon that did not answer,
            # the relay there waits on it and ssh with it: end ssh without waiting.
            self.transport.close(0.2 if self._gave_up else 3.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def retrying(path: str | None, within: float):
    """A connected Client, retrying while the socket is missing (units starting)."""
    end = time.monotonic() + within
    while True:
        try:
            return Client(path)
        except ClientError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)
