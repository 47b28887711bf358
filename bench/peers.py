"""The peers, each behind the same small interface.

``open(argv)`` starts a session running argv and attaches a client to it in a pty of
ours, returning a Terminal (the raw peer has no relay: the job runs on our pty).
``open(argv, beside=term)`` puts the new session in the same server as ``term``'s where
the peer has one server for many sessions (tmux; clowder always does); the others
run one process per session anyway.
``add_detached(argv, n)``, ``server_pids()`` and ``clear()`` serve the memory figure.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal

from common import (PtyTerminal, Terminal, client_env, find_pids, run, size, spawn_on_pty,
                    wait_for)

WORK = "/tmp/clowder-bench"
_serial = itertools.count(1)


def unique(prefix: str) -> str:
    """A name no earlier run has used (servers of a killed run may leave sockets)."""
    return f"{prefix}{os.getpid()}-{next(_serial)}"


def _kill(pids, sig=signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class RawPeer:
    """The limit: the job on a pty whose master we read ourselves, no relay at all."""

    name = "raw pty"
    note = "the job on a pty; this process reads the master (no relay)"

    def available(self) -> str | None:
        return None

    def open(self, argv: list[str], beside=None) -> Terminal:
        proc, master = spawn_on_pty(argv)
        term = PtyTerminal(proc, master, name=self.name)
        term.client_pids = lambda: []  # the process on the pty is the job itself
        return term


class TmuxPeer:
    name = "tmux"
    note = "tmux server (no config file), one `tmux attach` client in a pty"

    def __init__(self):
        self.memory_socket = None

    def available(self) -> str | None:
        return None if shutil.which("tmux") else "tmux is not installed"

    def _tmux(self, sock: str, *args: str, check: bool = True):
        return run(["tmux", "-L", sock, "-f", "/dev/null", *args], check=check)

    def _server_pid(self, sock: str) -> int:
        return int(self._tmux(sock, "display-message", "-p", "#{pid}").stdout.strip())

    def open(self, argv: list[str], beside=None) -> Terminal:
        sock = beside.tmux_socket if beside is not None else unique("bench")
        name = unique("s")
        cols, rows = size()
        self._tmux(sock, "new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
                   "--", *argv)
        server = self._server_pid(sock)
        proc, master = spawn_on_pty(["tmux", "-L", sock, "attach", "-t", name])
        end = ("kill-session", "-t", name) if beside is not None else ("kill-server",)
        term = PtyTerminal(proc, master, name=self.name, servers=lambda: [server],
                           on_close=lambda: self._tmux(sock, *end, check=False))
        term.tmux_socket = sock
        return term

    def add_detached(self, argv: list[str], count: int) -> None:
        for _ in range(count):
            if self.memory_socket is None:
                self.memory_socket = unique("mem")
                cols, rows = size()
                self._tmux(self.memory_socket, "new-session", "-d", "-s", "m", "-x",
                           str(cols), "-y", str(rows), "--", *argv)
            else:
                self._tmux(self.memory_socket, "new-window", "-d", "-t", "m", "--", *argv)

    def server_pids(self) -> list[int]:
        return [self._server_pid(self.memory_socket)] if self.memory_socket else []

    def clear(self) -> None:
        if self.memory_socket:
            self._tmux(self.memory_socket, "kill-server", check=False)
        self.memory_socket = None


class ScreenPeer:
    """GNU screen: one SCREEN process per session; `screen -r` attaches."""

    name = "screen"
    note = "GNU screen, `startup_message off`, `deflogin off`, one `screen -r` client in a pty"

    def __init__(self):
        self.rc = f"{WORK}/screenrc"
        self.memory_names: list[str] = []

    def available(self) -> str | None:
        return None if shutil.which("screen") else "screen is not installed"

    def _prepare(self) -> None:
        screendir = client_env()["SCREENDIR"]
        os.makedirs(screendir, mode=0o700, exist_ok=True)
        os.chmod(screendir, 0o700)
        with open(self.rc, "w") as f:
            # deflogin off: no utmp records.  A SCREEN process once deadlocked in a futex
            # while holding /run/utmp's lock (screen 4.09, 2026-12-04), and tmux's
            # utempter, waiting for that lock, stopped the tmux server and the run.
            f.write("startup_message off\ndeflogin off\n")

    def _start(self, name: str, argv: list[str]) -> int:
        self._prepare()
        run(["screen", "-c", self.rc, "-dmS", name, *argv])
        screendir = client_env()["SCREENDIR"]

        def pid():
            for entry in os.listdir(screendir):
                spid, _, sname = entry.partition(".")
                if sname == name:
                    return int(spid)
            return 0
        return wait_for(pid, 10, f"screen session {name}")

    def open(self, argv: list[str], beside=None) -> Terminal:
        name = unique("bench")
        server = self._start(name, argv)
        proc, master = spawn_on_pty(["screen", "-c", self.rc, "-r", name])
        return PtyTerminal(proc, master, name=self.name, servers=lambda: [server],
                           on_close=lambda: _kill([server]))

    def add_detached(self, argv: list[str], count: int) -> None:
        for _ in range(count):
            name = unique("mem")
            self.memory_names.append((name, self._start(name, argv)))

    def server_pids(self) -> list[int]:
        return [pid for _, pid in self.memory_names]

    def clear(self) -> None:
        _kill(self.server_pids())
        self.memory_names = []


class _SocketPerSession:
    """dtach and abduco: one server process per session, found by its socket path."""

    name = note = program = "?"
    memory: list[int]

    def available(self) -> str | None:
        return None if shutil.which(self.program) else f"no {self.program} on PATH"

    def _create(self, ident: str, argv: list[str]) -> int:
        raise NotImplementedError

    def _attach_argv(self, ident: str) -> list[str]:
        raise NotImplementedError

    def _find_server(self, ident: str) -> int:
        def find():
            pids = find_pids(lambda a: os.path.basename(a[0]) == self.program and ident in a)
            return min(pids) if pids else 0
        return wait_for(find, 10, f"the {self.program} server of {ident}")

    def open(self, argv: list[str], beside=None) -> Terminal:
        ident = self._ident()
        server = self._create(ident, argv)
        proc, master = spawn_on_pty(self._attach_argv(ident))
        return PtyTerminal(proc, master, name=self.name, servers=lambda: [server],
                           on_close=lambda: _kill([server]))

    def add_detached(self, argv: list[str], count: int) -> None:
        for _ in range(count):
            self.memory.append(self._create(self._ident(), argv))

    def server_pids(self) -> list[int]:
        return list(self.memory)

    def clear(self) -> None:
        _kill(self.memory)
        self.memory = []

    def _ident(self) -> str:
        raise NotImplementedError


class DtachPeer(_SocketPerSession):
    name = program = "dtach"
    note = "dtach -n (no redraw), one `dtach -a` client in a pty"

    def __init__(self):
        self.memory = []

    def _ident(self) -> str:
        os.makedirs(WORK, exist_ok=True)
        return f"{WORK}/{unique('dtach')}.sock"

    def _create(self, ident: str, argv: list[str]) -> int:
        run(["dtach", "-n", ident, "-E", "-z", "-r", "none", *argv])
        return self._find_server(ident)

    def _attach_argv(self, ident: str) -> list[str]:
        return ["dtach", "-a", ident, "-E", "-z", "-r", "none"]


class AbducoPeer(_SocketPerSession):
    name = program = "abduco"
    note = "abduco -n, one `abduco -a` client in a pty"

    def __init__(self):
        self.memory = []

    def _ident(self) -> str:
        return unique("bench")

    def _create(self, ident: str, argv: list[str]) -> int:
        run(["abduco", "-n", ident, *argv])
        return self._find_server(ident)

    def _attach_argv(self, ident: str) -> list[str]:
        return ["abduco", "-a", ident]
