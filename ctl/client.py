"""A blocking client of the PTY host: connect, greet, one request at a time.

The same Client speaks to clowder-control (same framing, 4xx kinds), and, given a
``transport.Remote`` instead of a socket path, to either daemon of another machine
through ``ssh HOST clowderctl relay [--to host]``.
"""

from __future__ import annotations

import os
import socket
import time

from ptyhostd import __version__, protocol

from .transport import Remote, SshTransport

CONNECT_TIMEOUT = 60.0  # a host that is restarting answers within a second or two


class ClientError(Exception):
    """Something the user should read; clowderctl prints it and exits non-zero."""


class RequestFailed(ClientError):
    """The host answered a request with an Error."""

    def __init__(self, err: protocol.Error):
        super().__init__(err.message)
        self.code = err.code


def _socket(name: str, env_var: str) -> str:
    """$env_var, else the user's socket (when not root and it exists), else the system's."""
    env = os.environ.get(env_var)
    if env:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if os.getuid() != 0 and runtime and os.path.exists(f"{runtime}/clowder/{name}"):
        return f"{runtime}/clowder/{name}"
    return f"/run/clowder/{name}"


def default_socket() -> str:
    """The PTY host's socket."""
    return _socket("ptyhost.sock", "CLOWDER_SOCKET")


def default_control_socket() -> str:
    """clowder-control's socket."""
    return _socket("control.sock", "CLOWDER_CONTROL_SOCKET")


def connect_unix(path: str, timeout: float, unit: str) -> socket.socket:
    """A connection to the socket at ``path`` (systemd's ``unit`` listens there), or a
    ClientError saying why not: clowderctl and the relay word it the same way."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise ClientError(_refused(path, exc, unit, timeout)) from None
    return sock


def _refused(path: str, exc: OSError, unit: str, timeout: float) -> str:
    """What to tell the user when connecting to ``path`` failed with ``exc``."""
    if isinstance(exc, FileNotFoundError):
        return f"nothing listens at {path}: no such socket (is {unit} started?)"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens at {path}: connection refused (is {unit} started?)"
    if isinstance(exc, PermissionError):
        return f"permission denied on {path} (not in the clowder group?)"
    if isinstance(exc, TimeoutError):
        return f"{path} accepted no connection within {timeout:g} s"
    return f"cannot connect to {path}: {exc.strerror}"


class Client:
    """One connection, greeted; ``path`` is a unix socket's path or a ``Remote``."""

    def __init__(self, path: str | Remote | None = None, timeout: float = CONNECT_TIMEOUT,
                 peer: str = "the PTY host"):
        # peer: who answers, in messages; where: the same with its address.
        if isinstance(path, Remote):
            try:
                transport = path.open()
            except ConnectionError as exc:
                raise ClientError(str(exc)) from None
            self._take(transport.sock, path, path.peer, path.peer, transport)
        else:
            path = path or default_socket()
            unit = "clowder-control.socket" if peer == "clowder-control" else \
                "clowder-ptyhost.socket"
            self._take(connect_unix(path, timeout, unit), path, peer, f"{peer} at {path}")
        self.sock.settimeout(timeout)
        try:
            self.send(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                     client=f"clowderctl {__version__}"))
            # The host may be restarting: the connection waits in the socket's backlog and
            # is served when it is back, so the first answer is allowed to take a while.
            welcome = self.recv()
        except OSError as exc:  # e.g. ssh already gone when Hello was written
            message = self._closed(f"cannot talk to {self.peer}: {exc.strerror or exc}")
            self.close()
            raise ClientError(message) from None
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

    @classmethod
    def on_stream(cls, sock: socket.socket, peer: str) -> "Client":
        """A Client over one stream of a ``ctl.mux.Mux``: already greeted, so no Hello."""
        self = cls.__new__(cls)
        self._take(sock, None, peer, peer)
        return self

    def _closed(self, message: str) -> str:
        """``message``, with why ssh ended when the connection went through ssh."""
        if self.transport is None:
            return message
        return f"{message} ({self.transport.why_closed()})"

    def send(self, msg: protocol.Message) -> None:
        self.sock.sendall(protocol.encode(msg))

    def recv(self) -> protocol.Message:
        """The next message; Error frames are raised, EOF is a ClientError."""
        while not self.pending:
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                raise ClientError(f"{self.where} did not answer in time") \
                    from None
            except ConnectionResetError:
                data = b""
            if not data:
                if self.transport is not None and self.welcome is None:
                    # ssh, or the relay it runs, ended before the daemon answered.
                    raise ClientError(self._closed(f"cannot reach {self.peer} through ssh"))
                raise ClientError(self._closed(f"{self.peer} closed the connection"))
            try:
                self.pending.extend(self.reader.feed(data))
            except protocol.ProtocolError as exc:
                raise ClientError(f"invalid data from {self.peer}: {exc}") from None
        msg = self.pending.pop(0)
        if isinstance(msg, protocol.Error):
            raise RequestFailed(msg)
        return msg

    def request(self, msg: protocol.Message, expect: type) -> protocol.Message:
        self.send(msg)
        reply = self.recv()
        if not isinstance(reply, expect):
            raise ClientError(f"unexpected answer {type(reply).__name__} to "
                              f"{type(msg).__name__}")
        return reply

    def close(self) -> None:
        self.sock.close()
        if self.transport is not None:
            self.transport.close()  # reaps ssh (closing our end is its EOF)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def retrying(path: str | None, deadline: float):
    """A connected Client, retrying while the socket is missing (units starting)."""
    end = time.monotonic() + deadline
    while True:
        try:
            return Client(path)
        except ClientError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)
