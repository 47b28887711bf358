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
import threading
import time

import clowder_wire as P

MiB = 1 << 20


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
    stops reading (or closes) long before ``limit``.
    """

    def __init__(self, path: str, frames: bytes, hello: P.Message | None = None):
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

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
