"""How clowderctl reaches a clowder that runs on another machine: ssh and the relay.

``Remote`` names a host. Opening it runs ``$CLOWDER_SSH -T -- HOST $CLOWDER_REMOTE_CTL
relay`` (by default ``ssh -T -- HOST clowderctl relay``; ``$CLOWDER_REMOTE_RELAY``
replaces the whole remote command) with one end of a socketpair as ssh's stdin and
stdout, and returns an ``SshTransport`` holding the other end. On the remote,
``clowderctl relay`` copies bytes between that stream and clowder-control's unix socket,
so the frames a Client sends arrive at the one supervised control daemon unchanged.

Why a socketpair rather than two pipes: the Client, and attach's select loop, keep
working with one connected stream socket (``settimeout``, ``recv``, ``sendall``,
``shutdown``), whether it leads to a local unix socket or to ssh. When ssh ends (the
network dropped, someone killed it) its end of the pair closes and the Client reads EOF,
exactly as when a local daemon restarts; attach then reconnects, which runs ssh again.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import socket

from . import deadline
from .portable import scratch_fd

# subprocess (~4 ms) is imported where ssh is run, not here: every clowderctl command
# imports this module, and only one given --host runs anything.

DEFAULT_SSH = "ssh"
DEFAULT_CTL = "clowderctl"
# Appended after $CLOWDER_SSH, so values given there win (ssh takes the first value of a
# repeated -o).  Keep-alives make a silently dead network (a laptop that slept) end the
# connection within a minute, so attach notices and reconnects instead of hanging.
SSH_DEFAULTS = ("-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3")
_STDERR_SHOWN = 2000  # the tail of ssh's stderr quoted in an error


class Remote:
    """A clowder reached through ``ssh HOST`` and the relay.

    ``target``: the daemon the relay connects to there, "control" (clowder-control) or
    "host" (the PTY host); ``socket``: its socket on that machine, if not the default.
    A plain class, not a dataclass: importing dataclasses was ~15 ms of every
    clowderctl command's start (docs/design.md, "the wire package").
    """

    __slots__ = ("host", "socket", "target")

    def __init__(self, host: str, socket: str | None = None, target: str = "control"):
        # A "host" starting with "-" would be read by ssh as an option (-oProxyCommand=...).
        if not host or host.startswith("-") or any(c.isspace() for c in host):
            raise ValueError(f"invalid host {host!r}: expected [USER@]HOST")
        if target not in ("control", "host"):
            raise ValueError(f"invalid relay target {target!r}")
        self.host = host  # [USER@]HOST, as ssh takes it
        self.socket = socket  # passed to the remote relay as --socket
        self.target = target

    def _key(self) -> tuple:
        return (self.host, self.socket, self.target)

    def __eq__(self, other):
        return self._key() == other._key() if type(other) is Remote else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Remote(host={self.host!r}, socket={self.socket!r}, target={self.target!r})"

    def __str__(self) -> str:
        return f"ssh {self.host}"

    @property
    def peer(self) -> str:
        """Who answers at the other end, for messages."""
        daemon = "the PTY host" if self.target == "host" else "clowder-control"
        return f"{daemon} on {self.host}"

    @property
    def daemon(self) -> str:
        """The unit that answers at the other end."""
        return "clowder-ptyhost" if self.target == "host" else "clowder-control"

    @staticmethod
    def remote_ctl() -> str:
        """How to run clowderctl there ($CLOWDER_REMOTE_CTL, default clowderctl)."""
        return os.environ.get("CLOWDER_REMOTE_CTL") or DEFAULT_CTL

    def ssh(self, remote_command: str) -> list[str]:
        """$CLOWDER_SSH, our defaults, HOST and a command for the remote shell."""
        ssh = shlex.split(os.environ.get("CLOWDER_SSH") or DEFAULT_SSH)
        # ssh gives up connecting at clowderctl's deadline, saying why in its own words
        # (the Client's deadline on the first answer covers the rest: the login, the
        # relay and the daemon).
        connect = f"ConnectTimeout={max(1, math.ceil(deadline.seconds()))}"
        # -T: no remote pty; the stream must stay 8-bit clean, no line discipline.
        return [*ssh, "-T", "-o", connect, *SSH_DEFAULTS, "--", self.host, remote_command]

    def command(self) -> list[str]:
        """The ssh command line: $CLOWDER_SSH, our defaults, HOST, the remote relay."""
        relay = os.environ.get("CLOWDER_REMOTE_RELAY") or f"{self.remote_ctl()} relay"
        if self.target == "host":
            relay += " --to host"
        if self.socket:
            relay += " --socket " + shlex.quote(self.socket)
        return self.ssh(relay)

    def run(self, ctl_args: list[str]) -> int:
        """Run ``clowderctl CTL_ARGS`` there, with our stdio; its exit status.

        For the commands that read that machine's own files or journal (logs, config
        check, install-units): they have no daemon to relay to."""
        import subprocess
        argv = self.ssh(" ".join([self.remote_ctl(), *map(shlex.quote, ctl_args)]))
        try:
            return subprocess.call(argv)
        except OSError as exc:
            raise ConnectionError(f"cannot run {argv[0]}: {exc.strerror} "
                                  f"(set $CLOWDER_SSH to the ssh command)") from None

    def open(self) -> "SshTransport":
        return SshTransport(self)


# Every SshTransport not closed yet: a fleet ends those still running at its deadline.
# (set.add, discard and list() of a set are each atomic under the GIL: no lock, and no
# threading import on every clowderctl's start.)
_live: set = set()


def end_all() -> None:
    """Kill every ssh still running (a fleet's hosts that did not answer in time): each
    Client waiting on one then reads EOF and fails by itself."""
    for t in list(_live):
        try:
            t.proc.kill()
        except OSError:
            pass


class SshTransport:
    """A running ``ssh HOST relay``: ``sock`` is our end of its stdin/stdout."""

    def __init__(self, remote: Remote):
        import subprocess
        self.remote = remote
        argv = remote.command()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # ssh's stderr goes to an anonymous file (a memfd on Linux) rather than to our
        # terminal: attach keeps the terminal raw, and what ssh says belongs in our
        # error message when it fails.
        self._stderr = scratch_fd("clowder-ssh-stderr")
        try:
            self.proc = subprocess.Popen(argv, stdin=theirs.fileno(), stdout=theirs.fileno(),
                                         stderr=self._stderr, close_fds=True)
        except OSError as exc:
            ours.close()
            os.close(self._stderr)
            raise ConnectionError(f"cannot run {argv[0]}: {exc.strerror} "
                                  f"(set $CLOWDER_SSH to the ssh command)") from None
        finally:
            theirs.close()  # only ssh holds it now: its exit is our EOF
        self.sock = ours
        _live.add(self)

    def stderr_text(self) -> str:
        """The tail of what ssh (and the remote relay, through it) wrote to stderr."""
        if self._stderr < 0:
            return ""
        size = os.fstat(self._stderr).st_size
        start = max(0, size - _STDERR_SHOWN)
        return os.pread(self._stderr, size - start, start).decode(errors="replace").strip()

    def why_closed(self, timeout: float = 2.0) -> str:
        """Why the stream ended, for an error: ssh's exit status and its last words."""
        import subprocess
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            status = "ssh is still running"
        elif code < 0:
            status = f"ssh was killed by signal {-code}"
        else:
            status = f"ssh exited with status {code}"
        said = self.stderr_text()
        return f"{status}: {said}" if said else status

    def close(self, timeout: float = 3.0) -> None:
        """Close our end and reap ssh; it is ended if it does not leave by itself."""
        import subprocess
        _live.discard(self)
        if self.sock.fileno() >= 0:
            # EOF to ssh -> EOF to the relay -> it half-closes the daemon's socket, the
            # daemon closes, the relay and then ssh exit: the remote end is cleaned up too.
            self.sock.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._stderr >= 0:
            os.close(self._stderr)
            self._stderr = -1
