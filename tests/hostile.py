"""What every hostile test needs: a daemon's memory, and a client that floods and never reads.

Each request kind of both daemons gets a test that sends many and never reads (the
daemon's memory must stay within the bound docs/design.md writes for that kind and come
back when the client leaves) and a test where a second, unprivileged user tries it on
someone else's session or agent.  The tests live in ``tests/test_hostile_*.py``
(``make test-hostile`` runs them alone); this module is what they share.
"""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
import threading
import time

import clowder_wire as P

MiB = 1 << 20


@contextlib.contextmanager
def environment(host, **env):
    """``host`` restarted with ``env`` in a drop-in of its unit (a smaller limit, budget
    or cap for one test); the drop-in is removed after."""
    host.drop_in("[Service]\n" + "".join(f"Environment={k}={v}\n" for k, v in env.items()))
    host.restart()
    try:
        yield host
    finally:
        host.remove_drop_ins()


def rss_kib(pid: int) -> int:
    """The current resident set of ``pid``, in KiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


class Memory:
    """Samples a daemon's VmRSS/VmHWM (kB) from /proc while something runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self.start_hwm = self.read()["VmHWM"]
        self.start_rss = self.read()["VmRSS"]
        self.max_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def read(self) -> dict:
        with open(f"/proc/{self.pid}/status") as f:
            return {k: int(v.split()[0]) for k, v in
                    (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM")}

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.max_rss = max(self.max_rss, self.read()["VmRSS"])

    def stop(self) -> int:
        """The growth of the peak (bytes) since the start."""
        self._stop.set()
        self._thread.join()
        return (self.read()["VmHWM"] - self.start_hwm) * 1024


class Flooder:
    """One connection that greets, then writes ``frames`` over and over and never reads.

    ``run`` stops when the daemon stops reading (no progress for ``stall`` seconds),
    when ``limit`` bytes are sent, or when the daemon closes the connection; it returns
    the bytes the daemon took.  A daemon that bounds what a connection may make it hold
    stops reading (or closes) long before ``limit``.  ``path`` is the daemon's socket, or
    a connection to it made already (``connect_as``: a member's).
    """

    def __init__(self, path: str | socket.socket, frames: bytes,
                 hello: P.Message | None = None):
        if isinstance(path, socket.socket):
            self.sock = path
        else:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(path)
        self.sock.sendall(P.encode(hello or P.Hello(version=P.PROTOCOL_VERSION,
                                                    client="flood")))
        self.sock.setblocking(False)
        self.frames = frames
        self.sent = 0
        self.closed_by_peer = False

    def run(self, limit: int, stall: float = 3.0, seconds: float = 60.0) -> int:
        pending = memoryview(self.frames)
        deadline = time.monotonic() + seconds
        while self.sent < limit and time.monotonic() < deadline:
            _, ready, _ = select.select([], [self.sock], [], stall)
            if not ready:
                break  # the daemon stopped reading us: the point of the test
            try:
                n = self.sock.send(pending)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                self.closed_by_peer = True
                break
            self.sent += n
            pending = pending[n:] or memoryview(self.frames)
        return self.sent

    def answers(self) -> list[P.Message]:
        """The first frames the daemon wrote back that have arrived (up to 64 KiB of them):
        read once the flood is over, they say what the flooded requests were answered."""
        self.sock.setblocking(True)
        self.sock.settimeout(5)
        reader, frames = P.FrameReader(), []
        with contextlib.suppress(socket.timeout):
            while len(frames) < 2:  # Welcome, and at least one answer
                data = self.sock.recv(65536)
                if not data:
                    break
                frames += reader.feed(data)
        return frames

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_CONNECT = """
import socket, sys
target, to, count = sys.argv[1], socket.socket(fileno=int(sys.argv[2])), int(sys.argv[3])
socks = []
for _ in range(count):
    if target.startswith("/"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(target)
    else:
        host, port = target.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
    socks.append(s)
for i in range(0, count, 200):
    socket.send_fds(to, [b"c"], [s.fileno() for s in socks[i:i + 200]])
"""


def connect_as(user: str, path: str) -> socket.socket:
    """A connection to ``path`` that a process of ``user`` made (the daemon reads its uid
    from the kernel at connect, SO_PEERCRED) and handed to us, unused."""
    return connections_as(user, path, 1)[0]


def connections_as(user: str, address, count: int) -> list[socket.socket]:
    """``count`` connections to ``address`` (a unix socket's path, or a TCP (host,
    port)) that a process of ``user`` made and handed to us, unused: the daemon sees
    ``user``'s uid (SO_PEERCRED; on loopback TCP, the socket's owner: webd/peer.py)."""
    ours, theirs = socket.socketpair()
    target = address if isinstance(address, str) else f"{address[0]}:{address[1]}"
    try:
        subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", _CONNECT, target,
                        str(theirs.fileno()), str(count)], pass_fds=[theirs.fileno()],
                       check=True, timeout=30)
        ours.settimeout(5)
        fds = []
        while len(fds) < count:
            _, got, _, _ = socket.recv_fds(ours, 1, 200)
            assert got, f"{user}'s process handed {len(fds)} of {count} connections " \
                        f"to {target}"
            fds += got
        return [socket.socket(fileno=fd) for fd in fds]
    finally:
        ours.close()
        theirs.close()


@contextlib.contextmanager
def held_connections(path: str, count: int):
    """``count`` connections to ``path`` that say nothing and are held for the block
    (fewer if the daemon stops accepting: the ones that got through)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            held.append(s)
        yield held
    finally:
        for s in held:
            s.close()
