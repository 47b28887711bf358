"""The standby: a second host process, started by the serving one, that holds a copy of
every fd the FD store holds and takes over the moment the serving one dies.

Why: after a crash (``kill -9``, a fatal error, the OOM killer) systemd execs a new host,
which starts its interpreter, imports and adopts: ~120 ms at 1,000 sessions here, 60 of
them before it runs a line of its own (docs/bench.md section 2).  A standby has started,
imported and loaded the screen engine already (__main__._warm_engine), and holds the
fds, so only the adoption is left.  The unit has
``ExitType=cgroup``: it outlives its main process while the standby runs, so the standby
sends ``MAINPID=`` of itself (``NotifyAccess=all``) and serves, and the unit is never
restarted (bench/spare_floor.py: 7.6 ms at 1,000 parked fds for a stand-in, against 61
for an exec; docs/design.md "The standby").

Its copy of the store: when it starts, the host sends it every fd a hand-off would pass
on (Host.parked(), the listening sockets, the input table), then each park and unpark
(fdstore.py) before systemd hears of it.  So a crash can leave the standby holding one
change more than the store, never one less; at the takeover it does the last change
again (a park of an fd already stored is one systemd keeps once; an unpark of a name
gone is nothing).

When it does not take over, it exits, and systemd restarts the unit from the FD store
as before this existed: the host said it leaves (a stop, a restart, a hand-off's exec);
its copy was not whole yet; the host closed its end while alive; the host had not
beaten for half the watchdog's period (frozen or wedged: systemd's watchdog killed it,
and stops the whole unit, standby included, before it restarts it).  A host that cannot
tell it a change (it does not read) kills it first and starts another later: a copy
that missed a change must never serve.

The messages, one SOCK_SEQPACKET datagram each: ``H`` (the standby is listening),
``P`` + poll flag + names (fds parked, one name per fd, in order), ``U`` + name
(unparked), ``A`` (the copy is whole), ``W`` (the host's loop runs: at each watchdog
ping), ``L`` (the host leaves: exit).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Optional

from clowder_common import events, sdnotify
from clowder_common.interpreter import module_argv

from . import fdstore

log = logging.getLogger("ptyhostd")

ENV = "CLOWDER_STANDBY"  # "SOCKET_FD:PIDFD" in the standby's environment
BATCH = 250  # fds a message (the kernel takes at most 253)
SNAPSHOT_SECONDS = 5.0  # the whole copy, sent while the standby reads it
FIRST_RETRY, LAST_RETRY = 1.0, 60.0  # seconds before another standby, after one died
LEAVE_SECONDS = 1.0  # for a standby told to exit to do so


# --- the serving host's side ----------------------------------------------------------


class Standby:
    """The serving host's standby: started, told every change, replaced when it dies."""

    def __init__(self, loop, held: Callable[[], dict[str, list[int]]],
                 status: Callable[[str], None]):
        self.loop = loop
        self._held = held  # what the copy starts from (Host.parked() and the rest)
        self._status = status  # tells systemd (STATUS=) whether a standby is ready
        self.proc: Optional[subprocess.Popen] = None
        self.sock: Optional[socket.socket] = None
        self._pidfd = -1
        self.armed = False
        self.enabled = False  # the unit lets a standby take over (enable)
        self._leaving = False
        self._retry = FIRST_RETRY
        self._timer = None

    def enable(self) -> None:
        """The unit lets a standby take over (Manager.standby_allowed): start one."""
        self.enabled = True
        self.start()

    def start(self) -> None:
        """Start a standby (it says hello once it has imported; see _hello)."""
        if self._leaving or not self.enabled or self.proc is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        me = os.pidfd_open(os.getpid())
        try:
            env = dict(os.environ, **{ENV: f"{theirs.fileno()}:{me}"})
            self.proc = subprocess.Popen(
                module_argv("ptyhostd", *sys.argv[1:]), env=env, stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), me), close_fds=True)
        except OSError as exc:
            ours.close()
            log.error("cannot start a standby: %s", exc, extra={"CLOWDER_CAUSE": "standby"})
            self._later()
            return
        finally:
            theirs.close()
            os.close(me)
        ours.setblocking(False)
        self.sock = ours
        self._pidfd = os.pidfd_open(self.proc.pid)
        self.loop.add_reader(self._pidfd, self._died)
        self.loop.add_reader(ours.fileno(), self._hello)

    def _hello(self) -> None:
        """The standby listens: send it the whole copy, then follow every change."""
        try:
            said = self.sock.recv(16)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        self.loop.remove_reader(self.sock.fileno())
        if said != b"H":
            self._broken(f"it said {said!r} instead of hello")
            return
        held = self._held()
        names = [(name, fd) for name, fds in held.items() for fd in fds]
        self.sock.settimeout(SNAPSHOT_SECONDS)  # it reads as fast as it can
        try:
            for i in range(0, len(names), BATCH):
                part = names[i:i + BATCH]
                socket.send_fds(self.sock, [b"P1" + "\n".join(n for n, _ in part).encode()],
                                [fd for _, fd in part])
            self.sock.send(b"A")
        except OSError as exc:
            self._broken(f"sending it the copy of the store: {exc}")
            return
        self.sock.setblocking(False)
        fdstore.follower = self
        self.armed = True
        self._retry = FIRST_RETRY
        log.info("standby %d holds a copy of the %d parked fds and takes over if this host "
                 "dies", self.proc.pid, len(names),
                 extra={"CLOWDER_CAUSE": "standby", **events.fields("standby-ready")})
        self._status(f"standby {self.proc.pid} ready")

    def announce(self) -> None:
        """Say again that a standby is ready (another STATUS= replaced it: a hand-off's)."""
        if self.armed and self.proc is not None:
            self._status(f"standby {self.proc.pid} ready")

    def beat(self) -> None:
        """At each watchdog ping: the loop runs.  A host that dies after it stopped
        beating (frozen, wedged) was most likely ended by systemd's watchdog, which
        then stops and restarts the whole unit: the standby leaves that to it."""
        if self.armed:
            self._tell(b"W")

    # fdstore.follower's two calls: before systemd hears of the change.
    def parked(self, name: str, fd: int, poll: bool) -> None:
        self._tell(b"P" + (b"1" if poll else b"0") + name.encode(), [fd])

    def unparked(self, name: str) -> None:
        self._tell(b"U" + name.encode())

    def _tell(self, data: bytes, fds: list[int] | None = None) -> None:
        try:
            if fds:
                socket.send_fds(self.sock, [data], fds)
            else:
                self.sock.send(data)
        except OSError as exc:  # full (it does not read) or gone: it must not serve
            self._broken(f"telling it of a change to the FD store: {exc}")

    def leave(self, wait: bool = True) -> None:
        """This host stops or execs: the standby must not take over; none is started.
        It exits at once on L.  ``wait``: for that (a few ms, its copies closed), so the
        new code of a hand-off does not inherit it as a child; a stopping host does not
        wait (the unit's stop ends whatever is left)."""
        self._leaving = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        proc = self.proc
        if self.sock is not None and not self.armed and proc is not None:
            proc.kill()  # still starting: it holds nothing yet, and reads nothing
        elif self.sock is not None:
            try:
                self.sock.send(b"L")
            except OSError:
                proc = None
                self._broken("it could not be told the host leaves")
        self._forget()
        if proc is not None and wait:
            try:
                proc.wait(LEAVE_SECONDS)
            except subprocess.TimeoutExpired:
                log.error("standby %d did not exit when told: killed", proc.pid,
                          extra={"CLOWDER_CAUSE": "standby-broken"})
                proc.kill()
                proc.wait()

    def resume(self) -> None:
        """A hand-off that did not happen: this host serves on, with a new standby."""
        if self._leaving:
            self._leaving = False
            self.start()

    def _broken(self, why: str) -> None:
        """Kill the standby and wait for its end: a copy that missed a change must never
        serve.  Another is started later."""
        if self.proc is not None:
            log.error("standby %d killed: %s", self.proc.pid, why,
                      extra={"CLOWDER_CAUSE": "standby-broken"})
            self.proc.kill()
            self.proc.wait()
        self._forget()
        self._later()

    def _died(self) -> None:
        """The standby ended by itself (or was killed): reap it, start another later."""
        code = self.proc.wait() if self.proc is not None else None
        if self.proc is not None:
            log.warning("standby %d ended (%s)", self.proc.pid, _how(code),
                        extra={"CLOWDER_CAUSE": "standby-ended"})
        self._forget()
        self._later()

    def _forget(self) -> None:
        if fdstore.follower is self:
            fdstore.follower = None
        if self._pidfd >= 0:
            self.loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        self.proc = None
        if self.armed:
            self.armed = False
            if not self._leaving:
                self._status("no standby")

    def _later(self) -> None:
        if self._leaving or self._timer is not None:
            return
        delay, self._retry = self._retry, min(self._retry * 2, LAST_RETRY)

        def again() -> None:
            self._timer = None
            self.start()
        self._timer = self.loop.call_later(delay, again)


def _how(code: Optional[int]) -> str:
    if code is None:
        return "unknown"
    return f"signal {-code}" if code < 0 else f"exit status {code}"


# --- the standby's side ------------------------------------------------------------------


def wanted() -> bool:
    """Whether this process was started as a standby."""
    return ENV in os.environ


def follow() -> dict[str, list[int]]:
    """Hold the copy until the host dies, then become the unit's main process and return
    what to serve, as systemd would have passed it (name -> fds); exit when it leaves."""
    sock_fd, host = (int(x) for x in os.environ.pop(ENV).split(":"))
    sock = socket.socket(fileno=sock_fd)
    held: dict[str, list[int]] = {}
    last: Optional[tuple] = None  # the last change: done again at the takeover
    whole = False
    # A SIGTERM before the takeover (systemctl kill, a stop under another KillMode) ends
    # us: the stop is the host's to make, not ours to serve through.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        sock.send(b"H")
    except OSError:
        _leave("the host let it go before it was ready")
    stale = _stale_after()
    heard = time.monotonic()  # the host's last message: its loop ran then

    def take(kind: str, names: list[str], fds: list[int]) -> None:
        """One message from the host, while it lives or after its death."""
        nonlocal whole, last
        if kind == "L":
            _leave("the host leaves (a stop, a restart or a hand-off)")
        elif kind == "A":
            whole, last = True, None  # what the copy began with was all stored
        elif kind in ("P", "U"):
            last = _apply(held, kind, names, fds)

    # poll, not select: the copy's fds are numbered past select's 1,024 at ~400 sessions.
    both, dead = select.poll(), select.poll()
    both.register(sock, select.POLLIN)
    both.register(host, select.POLLIN)
    dead.register(host, select.POLLIN)
    while True:
        ready = {fd for fd, _ in both.poll()}
        if sock.fileno() not in ready:
            break  # the host is dead
        kind, names, fds = _receive(sock)
        if kind is None:  # the host's end closed: it died, or it let us go
            if not dead.poll(2000):
                _leave("the host closed its end of the standby's socket")
            break
        heard = time.monotonic()
        take(kind, names, fds)
    # What the host sent before it died is still queued.
    sock.setblocking(False)
    while True:
        try:
            kind, names, fds = _receive(sock)
        except BlockingIOError:
            break
        if kind is None:
            break
        take(kind, names, fds)
    if not whole:
        _leave("the host died before the standby held the whole copy: systemd restarts it")
    if stale is not None and time.monotonic() - heard > stale:
        _leave(f"the host died after {time.monotonic() - heard:.1f} s without a sign of its "
               f"loop: systemd's watchdog ends it and restarts the unit")
    sock.close()
    os.close(host)
    sdnotify.notify(f"MAINPID={os.getpid()}")
    if os.environ.get("WATCHDOG_USEC"):
        os.environ["WATCHDOG_PID"] = str(os.getpid())  # ours to feed now (watchdog.py)
    if last is not None:  # systemd may not have had it (see the top)
        kind, names, poll = last
        for name in names:
            if kind == "P":
                for fd in held.get(name, []):
                    fdstore.notify_park(name, fd, poll)
            else:
                fdstore.notify_unpark(name)
    log.warning("the host died: standby %d takes over with %d parked fds", os.getpid(),
                sum(len(fds) for fds in held.values()),
                extra={"CLOWDER_CAUSE": "standby-takeover", **events.fields("standby-takeover")})
    return held


def _stale_after() -> Optional[float]:
    """Seconds without a beat after which the host's death is the watchdog's: half its
    period (two pings missed); None without a watchdog (no beats come)."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    return int(usec) / 2e6 if usec.isdigit() and int(usec) else None


def _receive(sock: socket.socket) -> tuple:
    """(kind, names, fds) of one message; (None, [], []) at the end."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, BATCH,
                                                    socket.MSG_CMSG_CLOEXEC)
    except ConnectionResetError:  # closed with our hello unread: an end all the same
        return None, [], []
    if not data:
        for fd in fds:
            os.close(fd)
        return None, [], []
    kind = chr(data[0])
    if kind == "P":
        return kind, [data[1:2].decode()] + data[2:].decode().split("\n"), fds
    return kind, [data[1:].decode()] if len(data) > 1 else [], fds


def _apply(held: dict[str, list[int]], kind: str, names: list[str], fds: list[int]) -> tuple:
    """Apply a change to the copy; returns it as (kind, names, poll)."""
    if kind == "U":
        for fd in held.pop(names[0], []):
            os.close(fd)
        return "U", names, True
    poll, names = names[0] == "1", names[1:]
    for name, fd in zip(names, fds):
        held.setdefault(name, []).append(fd)
    return "P", names, poll


def _leave(why: str) -> None:
    log.info("standby %d exits: %s", os.getpid(), why, extra={"CLOWDER_CAUSE": "standby"})
    logging.shutdown()
    os._exit(0)

