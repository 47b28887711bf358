"""clowder under the benchmark: its units, a minimal protocol client, and its terminals.

The minimal client speaks ``clowder_wire`` directly and does no more work per byte
than a reader must (split frames, keep the Output bytes), so the throughput it sees is
the host's, not clowderctl's.  clowderctl attach is measured beside it as the user's path.
"""

from __future__ import annotations

import os
import re
import select
import socket
import struct
import sys

import clowder_wire as P

from common import (TERM, PtyTerminal, Terminal, client_env, run, size, spawn_on_pty,
                    wait_for)

SOCKET = "/run/clowder/ptyhost.sock"
SERVICE = "clowder-ptyhost.service"
PYTHON = sys.executable  # the bench venv's interpreter, which has clowder installed
_JLEN = struct.Struct("!I")


def install_units() -> None:
    """Write and start the system units, with ptyhostd run by the bench venv."""
    run([PYTHON, "-m", "ctl", "install-units", "--system", "--exec-start",
         f"{PYTHON} -m ptyhostd"])


def main_pid() -> int:
    out = run(["systemctl", "show", "-p", "MainPID", "--value", SERVICE]).stdout.strip()
    return int(out or 0)


def is_active() -> bool:
    return run(["systemctl", "is-active", SERVICE], check=False).stdout.strip() == "active"


def start_host() -> int:
    """Start the host (as a client's connection would) and return its main PID."""
    Conn().close()
    return wait_for(lambda: is_active() and main_pid(), 30, "the PTY host to be active")


def stop_host() -> None:
    """Stop the host: every session ends and the FD store is flushed."""
    run(["systemctl", "stop", SERVICE], check=False, timeout=300)
    run(["systemctl", "reset-failed", SERVICE], check=False)


def wait_ready_after(old_pid: int, timeout: float = 60) -> int:
    """Wait until the host is active again under a main PID other than old_pid."""
    def ready():
        pid = main_pid()
        return pid if pid and pid != old_pid and is_active() else 0
    return wait_for(ready, timeout, "the PTY host to come back")


def host_pids() -> list[int]:
    """The host's processes: its main process and, when its unit has one
    (ExitType=cgroup), its standby once ready (ptyhostd/standby.py), an interpreter of
    its own whose memory and CPU are the host's too."""
    exit_type = run(["systemctl", "show", "-p", "ExitType", "--value", SERVICE]).stdout
    return [main_pid()] + ([ready_standby()] if exit_type.strip() == "cgroup" else [])


def ready_standby(timeout: float = 60) -> int:
    """The pid of the host's standby (ptyhostd/standby.py) once it holds the whole copy
    of the FD store, as the unit's status says: a kill -9 is then taken over by it."""
    def ready():
        out = run(["systemctl", "show", "-p", "StatusText", "--value", SERVICE]).stdout
        m = re.search(r"standby (\d+) ready", out)
        return int(m.group(1)) if m else 0
    return wait_for(ready, timeout, "the PTY host's standby to be ready")


def wait_handed_off(old_pid: int, timeout: float = 60) -> int:
    """Wait until a reload (hand-off) is over: the unit active, not reloading; its PID."""
    def state():
        out = run(["systemctl", "show", "-p", "ActiveState", "--value", SERVICE]).stdout
        return out.strip() == "active" and main_pid()
    return wait_for(state, timeout, "the hand-off to finish")


class Conn:
    """A blocking protocol connection: Hello/Welcome done, then one request at a time."""

    def __init__(self, path: str = SOCKET, timeout: float = 60.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = bytearray()
        self.send(P.Hello(version=P.PROTOCOL_VERSION, client="clowder-bench"))
        self.welcome = self.recv()
        if not isinstance(self.welcome, P.Welcome):
            raise RuntimeError(f"Hello answered by {self.welcome!r}")

    def send(self, msg: P.Message) -> None:
        self.sock.sendall(P.encode(msg))

    def _frame(self):
        """(kind, payload) of the next whole frame in the buffer, or None."""
        if len(self.buf) < P.HEADER.size:
            return None
        length, kind = P.HEADER.unpack_from(self.buf)
        end = P.HEADER.size + length
        if len(self.buf) < end:
            return None
        payload = bytes(self.buf[P.HEADER.size:end])
        del self.buf[:end]
        return kind, payload

    def recv(self) -> P.Message:
        """The next message; EOFError when the host closed the connection."""
        while True:
            frame = self._frame()
            if frame is not None:
                return P.decode(*frame)
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the PTY host closed the connection")
            self.buf += data

    def request(self, msg: P.Message, expect: type) -> P.Message:
        self.send(msg)
        while True:
            reply = self.recv()
            if isinstance(reply, P.Error):
                raise RuntimeError(f"{type(msg).__name__}: {reply.message}")
            if isinstance(reply, expect):
                return reply

    def close(self) -> None:
        self.sock.close()


def spawn(conn: Conn, argv: list[str], name: str | None = None) -> str:
    info = conn.request(P.Spawn(argv=argv, name=name, cwd="/", env={"TERM": TERM},
                                cols=size()[0], rows=size()[1]), P.SessionInfo)
    return info.session["id"]


def end_session(conn: Conn, sid: str) -> None:
    """Hang a session up, wait for its end and forget it."""
    try:
        conn.request(P.Kill(session=sid, signal=1), P.Ok)
    except RuntimeError:
        pass  # it had already ended
    conn.request(P.Wait(session=sid), P.Exited)
    conn.request(P.Remove(session=sid), P.Ok)


def list_sessions(conn: Conn) -> list[dict]:
    out: list[dict] = []
    after: str | None = ""
    while after is not None:  # a long list comes in pages
        reply = conn.request(P.ListSessions(after=after), P.SessionList)
        out += reply.sessions
        after = P.next_page(reply, after)
    return out


class AttachedClient(Terminal):
    """The minimal attached client: Input frames out, Output bytes in, counted."""

    name = "clowder"

    def __init__(self, sid: str, replay: int = -1, path: str = SOCKET, timeout: float = 60,
                 on_close=None):
        self.sid = sid
        self.on_close = on_close  # called after the connection is closed
        self.conn = Conn(path, timeout)
        self.conn.send(P.Attach(session=sid, cols=size()[0], rows=size()[1], replay=replay))
        self.exited: P.Exited | None = None
        while True:
            frame = self.conn._frame()
            if frame is None:
                data = self.conn.sock.recv(1 << 20)
                if not data:
                    raise EOFError("closed before Attached")
                self.conn.buf += data
                continue
            kind, payload = frame
            if kind == P.Attached.KIND:
                break
            if kind == P.Error.KIND:
                raise RuntimeError(f"attach {sid}: {P.decode(kind, payload).message}")
        self.conn.sock.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self.conn.sock, select.POLLIN)

    def write(self, data: bytes) -> None:
        self.conn.sock.setblocking(True)
        try:
            self.conn.sock.sendall(P.encode(P.Input(data=data)))
        finally:
            self.conn.sock.setblocking(False)

    def _split(self) -> bytes:
        """Take every whole frame out of the buffer; return the Output bytes."""
        buf = self.conn.buf
        out = []
        pos = 0
        hsize = P.HEADER.size
        while len(buf) - pos >= hsize:
            length, kind = P.HEADER.unpack_from(buf, pos)
            end = pos + hsize + length
            if end > len(buf):
                break
            if kind == P.Output.KIND:
                (jlen,) = _JLEN.unpack_from(buf, pos + hsize)
                out.append(bytes(buf[pos + hsize + 4 + jlen:end]))
            else:
                msg = P.decode(kind, bytes(buf[pos + hsize:end]))
                if isinstance(msg, P.Exited):
                    self.exited = msg
                elif isinstance(msg, P.Error):
                    raise RuntimeError(f"host error while attached: {msg.message}")
            pos = end
        del buf[:pos]
        return b"".join(out)

    def read(self, timeout: float) -> bytes:
        # Frames that came with Attached are still in the buffer: split them first.
        while True:
            data = self._split()
            if data:
                return data
            if self.exited is not None:
                raise EOFError(f"session ended ({self.exited.status})")
            try:
                chunk = self.conn.sock.recv(1 << 20)
            except BlockingIOError:
                if not self._poll.poll(timeout * 1000):
                    return b""
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError("the PTY host closed the connection")
            self.conn.buf += chunk

    def server_pids(self) -> list[int]:
        return host_pids()

    def fileno(self) -> int:
        return self.conn.sock.fileno()

    def close(self) -> None:
        self.conn.close()
        if self.on_close is not None:
            self.on_close()


class ClowderPeer:
    """clowder with the minimal protocol client attached."""

    name = "clowder"
    note = "ptyhostd; minimal protocol client (clowder_wire) attached"

    def __init__(self):
        self.control: Conn | None = None

    def available(self) -> str | None:
        return None  # set up by inner.py before any figure runs

    def _conn(self) -> Conn:
        if self.control is None:
            self.control = Conn()
        return self.control

    def _spawn(self, argv: list[str]) -> str:
        """Spawn on the control connection, making a new one if a restart closed it."""
        try:
            return spawn(self._conn(), argv)
        except (OSError, EOFError):
            self.reset()
            return spawn(self._conn(), argv)

    def open(self, argv: list[str], beside=None) -> Terminal:
        sid = self._spawn(argv)  # every session is on the one host anyway
        return AttachedClient(sid, on_close=lambda: end_session(self._conn(), sid))

    # --- many detached sessions (memory) ------------------------------------------------

    def add_detached(self, argv: list[str], count: int) -> None:
        for _ in range(count):
            self._spawn(argv)

    def server_pids(self) -> list[int]:
        return host_pids()

    def clear(self) -> None:
        """End every session by stopping the host; the next connection starts it afresh."""
        if self.control is not None:
            self.control.close()
            self.control = None
        stop_host()
        start_host()

    def reset(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None


class ClowderCtlPeer(ClowderPeer):
    """clowder with `clowderctl attach` in a pty: what a user runs (from ``tree``'s
    source when given, as bench/trees.py does; else the venv's)."""

    name = "clowderctl"
    note = "ptyhostd; `clowderctl attach` in a pty"

    def __init__(self, tree: str | None = None):
        super().__init__()
        self.tree = tree

    def open(self, argv: list[str], beside=None) -> Terminal:
        sid = self._spawn(argv)
        env = client_env(PYTHONPATH=self.tree) if self.tree else client_env()
        proc, master = spawn_on_pty([PYTHON, "-m", "ctl", "attach", sid], env)
        return PtyTerminal(proc, master, name=self.name, servers=lambda: [main_pid()],
                           on_close=lambda: end_session(self._conn(), sid))


class StalledClient:
    """A second client attached to a session, read-only, that never reads: its receive
    buffer is shrunk so that the host's own high-water mark is what holds it back."""

    def __init__(self, sid: str):
        self.conn = Conn()
        self.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.conn.send(P.Attach(session=sid, cols=size()[0], rows=size()[1], read_only=True))

    def close(self) -> None:
        self.conn.close()


class ClowderStalledPeer(ClowderPeer):
    """clowder's minimal client, with a second client attached to the same session that
    stops reading before the job starts (issue 4, acceptance 4, as a speed figure)."""

    name = "clowder, 2nd client stalled"
    note = "ptyhostd; minimal client attached, and a second, read-only client that never reads"

    def open(self, argv: list[str], beside=None) -> Terminal:
        sid = self._spawn(argv)
        stalled = StalledClient(sid)

        def done():
            stalled.close()
            end_session(self._conn(), sid)
        return AttachedClient(sid, on_close=done)


def ptyhost_fds() -> dict[str, int]:
    """The host's open fds, counted by kind (what /proc/PID/fd/N links to)."""
    pid = main_pid()
    kinds: dict[str, int] = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return kinds
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            continue
        kind = re.sub(r"[0-9a-f]{8}|\d+", "N", target)  # ids and numbers out
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def session_units() -> int:
    out = run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
               "clowder-session-*"], check=False).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def journal_tail(lines: int = 30) -> str:
    return run(["journalctl", "-u", SERVICE, "-n", str(lines), "--no-pager", "-o", "cat"],
               check=False).stdout

