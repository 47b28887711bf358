"""Shared pieces of the benchmark: ptys, terminals, markers, statistics, /proc readings.

Nothing here asserts on time: the harness measures and reports, it never judges.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time

# The clients' terminal: 80x24 unless $CLOWDER_BENCH_TERM says (e.g. 200x50), or a
# figure sets another for a while (`sized`: figure 1 also runs at issue 13's 200x50).
# Peers read it when they open a terminal (`size()`), not at import.
COLS, ROWS = (int(n) for n in os.environ.get("CLOWDER_BENCH_TERM", "80x24").split("x"))
TERM = "xterm-256color"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The markers a job prints.  A job writes them as two halves ('BENCH-' 'DONE') so the
# marker itself never appears in a command line that a peer might draw on the screen.
MARK = "BENCH-"
PONG = (MARK + "PONG").encode()
DONE = (MARK + "DONE").encode()


def log(*parts) -> None:
    """Progress goes to stderr; stdout carries results only."""
    print("[bench]", *parts, file=sys.stderr, flush=True)


def client_env(**extra) -> dict[str, str]:
    """The environment every attached client and peer server gets."""
    env = {"PATH": PATH, "HOME": "/root", "TERM": TERM, "LANG": "C.UTF-8",
           "SCREENDIR": "/tmp/clowder-bench/screen"}
    env.update(extra)
    return env


# --- ptys and terminals -------------------------------------------------------------------


def size() -> tuple[int, int]:
    """The clients' terminal size now: (cols, rows)."""
    return COLS, ROWS


@contextlib.contextmanager
def sized(cols: int, rows: int):
    """Terminals opened inside this block are cols x rows."""
    global COLS, ROWS
    old = COLS, ROWS
    COLS, ROWS = cols, rows
    try:
        yield
    finally:
        COLS, ROWS = old


def set_size(fd: int, cols: int | None = None, rows: int | None = None) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ,
                struct.pack("HHHH", rows or ROWS, cols or COLS, 0, 0))


def _become_tty_leader() -> None:
    """In the child, after setsid(): make stdin (the pty slave) the controlling tty."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def spawn_on_pty(argv: list[str], env: dict[str, str] | None = None
                 ) -> tuple[subprocess.Popen, int]:
    """Run argv with a new pty as its controlling terminal; return (process, master fd)."""
    master, slave = pty.openpty()
    set_size(slave)
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env or client_env(),
                            cwd="/", start_new_session=True, preexec_fn=_become_tty_leader,
                            close_fds=True)
    os.close(slave)
    os.set_blocking(master, False)
    return proc, master


class Terminal:
    """What a benchmark drives: type bytes in, read the bytes the user would see.

    ``server_pids``/``client_pids`` name the processes whose CPU and memory are the
    cost of the relay (the program in the session is not counted).
    """

    name = "?"

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read(self, timeout: float) -> bytes:
        """Bytes shown to the user; b"" if none came within timeout; EOFError at the end."""
        raise NotImplementedError

    def server_pids(self) -> list[int]:
        return []

    def client_pids(self) -> list[int]:
        return []

    def fileno(self) -> int:
        """The fd this side reads: a drain process can take it over (see fig_echo)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class PtyTerminal(Terminal):
    """A terminal that is the master side of a pty: a raw job, or a peer's client."""

    def __init__(self, proc: subprocess.Popen, master: int, name: str = "raw", servers=None,
                 on_close=None):
        self.proc = proc
        self.master = master
        self.name = name
        self._servers = servers  # a callable naming the relay's server processes
        self.on_close = on_close  # called after the client is stopped
        self._poll = select.poll()
        self._poll.register(master, select.POLLIN)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view):]
            except BlockingIOError:
                select.select([], [self.master], [], 1)

    def read(self, timeout: float) -> bytes:
        try:
            return os.read(self.master, 1 << 16)
        except BlockingIOError:
            pass
        except OSError:  # EIO: nothing holds the slave any more
            raise EOFError from None
        if not self._poll.poll(timeout * 1000):
            return b""
        try:
            data = os.read(self.master, 1 << 16)
        except BlockingIOError:
            return b""
        except OSError:
            raise EOFError from None
        if not data:
            raise EOFError
        return data

    def server_pids(self) -> list[int]:
        return self._servers() if self._servers else []

    def fileno(self) -> int:
        return self.master

    def client_pids(self) -> list[int]:
        return [self.proc.pid]

    def close(self) -> None:
        stop_process(self.proc)
        os.close(self.master)
        if self.on_close is not None:
            self.on_close()


def stop_process(proc: subprocess.Popen, timeout: float = 3.0) -> None:
    """End a process we started (and its process group), politely then firmly."""
    if proc.poll() is None:
        for sig in (signal.SIGHUP, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout)
                break
            except subprocess.TimeoutExpired:
                continue
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Watcher:
    """Finds a marker in a stream of bytes that may split it across reads."""

    def __init__(self, marker: bytes):
        self.marker = marker
        self.tail = b""
        self.count = 0

    def feed(self, data: bytes) -> bool:
        self.count += len(data)
        window = self.tail + data
        self.tail = window[-(len(self.marker) - 1):]
        return self.marker in window


def read_until(term: Terminal, marker: bytes, timeout: float) -> int:
    """Read until marker is seen; return the bytes read; TimeoutError past timeout."""
    watcher = Watcher(marker)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{term.name}: no {marker!r} within {timeout:g} s "
                               f"({watcher.count} bytes read)")
        if watcher.feed(term.read(min(left, 1.0))):
            return watcher.count


def drain(term: Terminal, quiet: float = 0.1, limit: float = 2.0) -> None:
    """Read and drop output until none has come for ``quiet`` seconds."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            if not term.read(quiet):
                return
        except EOFError:
            return


def ping(term: Terminal, timeout: float = 20.0) -> None:
    """Type 'p' lines until the job answers PONG: the whole path is attached and live."""
    deadline = time.monotonic() + timeout
    while True:
        term.write(b"p\n")
        try:
            read_until(term, PONG, 0.3)
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{term.name}: the job never answered a ping") from None


# The job of the throughput figure.  It waits for "go" (answering PONG to anything else),
# cats the file, prints DONE, and then waits for a line before it exits.
THROUGHPUT_JOB = (
    "stty -echo; "
    "while read x && [ \"$x\" != go ]; do printf '%s%s\\n' BENCH- PONG; done; "
    "cat \"$1\"; printf '%s%s\\n' BENCH- DONE; read x"
)


def throughput_argv(path: str) -> list[str]:
    return ["/bin/sh", "-c", THROUGHPUT_JOB, "sh", path]


# The job of the echo figure: a raw-mode program that writes back each byte it reads,
# as an editor or an agent's TUI does.
ECHO_ARGV = ["/bin/sh", "-c", "stty raw -echo; exec cat"]

# A session that prints without end, for the echo figure's "while another floods".
def flood_argv(path: str) -> list[str]:
    return ["/bin/sh", "-c", 'while :; do cat "$1"; done', "sh", path]


# An idle session for the memory and restart figures.
IDLE_ARGV = ["/bin/sleep", "infinity"]


def output_then_idle_argv(lines: int) -> list[str]:
    """A session that prints ``lines`` lines of ~70 characters, then sleeps."""
    return ["/bin/sh", "-c",
            f"seq -f 'line %06g: the quick brown fox jumps over the lazy dog, twice' {lines}; "
            "exec sleep infinity"]


# --- statistics -------------------------------------------------------------------------


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(values, q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    rank = max(1, min(len(values), round(q / 100 * len(values) + 0.5)))
    return values[rank - 1]


# --- /proc -----------------------------------------------------------------------------


def cpu_seconds(pids) -> float:
    """CPU time (user + system) the live processes ``pids`` have used so far, every
    thread of each: /proc/PID/schedstat alone is the main thread's, which left out the
    host's screen pool (its model's parsing, until a flood's moved to the loop) and
    made clowder's relay CPU look smaller than it was.  A thread that ended between two
    readings takes its time with it (the pool's threads live as long as the host)."""
    total = 0.0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
    return total


def pss_kb(pid: int) -> int:
    """Proportional set size of one process, in kB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except (FileNotFoundError, ProcessLookupError):
        return []


def find_pids(predicate) -> list[int]:
    """Pids whose command line (a list) satisfies predicate."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = cmdline(int(entry))
            if argv and predicate(argv):
                out.append(int(entry))
    return out


def wait_for(predicate, timeout: float, what: str, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def run(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("env", client_env())
    proc = subprocess.run(argv, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout or '').strip()}")
    return proc
