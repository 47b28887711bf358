"""The standby's copy of the FD store (ptyhostd/standby.follow), message by message: it
takes over only with the whole copy and only when the host died, and then does the last
change again, since systemd may not have had it.

A real standby process and real fds; in place of systemd's notify socket, a datagram
socket of the test's, which records what the standby tells it (the acceptance test of
the takeover under systemd is tests/test_standby.py)."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import select
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDBY = """
import json, sys
from ptyhostd import standby
held = standby.follow()
print(json.dumps({name: len(fds) for name, fds in held.items()}), flush=True)
"""


class Rig:
    """A standby process, a stand-in host (a sleep whose death is the host's), and the
    notify socket the standby writes to."""

    def __init__(self, tmp_path, watchdog_usec: str = "", above: int = 0):
        """``above``: the standby's socket and pidfd numbered past it, as a host with
        thousands of fds passes them (pass_fds keeps the numbers)."""
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(tmp_path / "notify"))
        self.host = subprocess.Popen(["sleep", "60"])
        pidfd = os.pidfd_open(self.host.pid)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if above:
            high = fcntl.fcntl(pidfd, fcntl.F_DUPFD_CLOEXEC, above)
            os.close(pidfd)
            pidfd = high
            theirs = socket.socket(fileno=fcntl.fcntl(theirs.detach(), fcntl.F_DUPFD_CLOEXEC,
                                                      above))
        env = dict(os.environ, PYTHONPATH=ROOT, NOTIFY_SOCKET=str(tmp_path / "notify"),
                   CLOWDER_STANDBY=f"{theirs.fileno()}:{pidfd}")
        env.pop("WATCHDOG_USEC", None)
        if watchdog_usec:
            env["WATCHDOG_USEC"] = watchdog_usec
        self.proc = subprocess.Popen([sys.executable, "-c", STANDBY], env=env,
                                     pass_fds=(theirs.fileno(), pidfd),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        theirs.close()
        os.close(pidfd)
        self.sock.settimeout(30)
        assert self.sock.recv(16) == b"H"
        self.files = []

    def memfd(self, name: str) -> int:
        fd = os.memfd_create(name)
        self.files.append(fd)
        return fd

    def send(self, data: bytes, fds=()) -> None:
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.send(data)

    def kill_host(self) -> None:
        """The host dies: its end of the socket closes first (a dying process's files
        are closed before it is a zombie, whose pidfd then fires)."""
        self.sock.close()
        self.host.kill()
        self.host.wait()

    def result(self) -> tuple[dict | None, list[tuple[str, int]]]:
        """What follow() returned (None if it exited instead), and every notify message
        with the number of fds it carried."""
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err.decode()
        said = []
        while select.select([self.notify], [], [], 0)[0]:
            data, fds, _flags, _addr = socket.recv_fds(self.notify, 4096, 16)
            said.append((data.decode(), len(fds)))
            for fd in fds:
                os.close(fd)
        return (json.loads(out) if out.strip() else None), said

    def close(self) -> None:
        for fd in self.files:
            os.close(fd)
        if self.host.poll() is None:
            self.host.kill()
            self.host.wait()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        self.notify.close()


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.close()


def test_it_takes_over_with_the_whole_copy_and_parks_the_last_change_again(rig):
    listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rig.send(b"P1" + b"\n".join([b"clowder-ptyhost.socket", b"manifest.a", b"r.s1"]),
             [listen.fileno(), rig.memfd("a"), rig.memfd("r1")])
    rig.send(b"A")
    rig.send(b"P0m.s2", [rig.memfd("m2")])
    rig.send(b"P1r.s2", [rig.memfd("r2")])
    rig.send(b"U" + b"r.s1")
    rig.send(b"P0m.s3", [rig.memfd("m3")])  # the last: systemd may not have it
    rig.kill_host()
    held, said = rig.result()
    listen.close()
    assert held == {"clowder-ptyhost.socket": 1, "manifest.a": 1, "m.s2": 1, "r.s2": 1,
                    "m.s3": 1}
    assert said[0] == (f"MAINPID={rig.proc.pid}", 0)
    assert said[1:] == [("FDSTORE=1\nFDNAME=m.s3\nFDPOLL=0", 1)]


def test_an_unpark_last_is_done_again(rig):
    rig.send(b"P1r.s1", [rig.memfd("r1")])
    rig.send(b"A")
    rig.send(b"Ur.s1")
    rig.kill_host()
    held, said = rig.result()
    assert held == {}
    assert said == [(f"MAINPID={rig.proc.pid}", 0), ("FDSTOREREMOVE=1\nFDNAME=r.s1", 0)]


def test_a_host_that_leaves_is_not_taken_over(rig):
    rig.send(b"P1r.s1", [rig.memfd("r1")])
    rig.send(b"A")
    rig.send(b"L")
    rig.kill_host()
    assert rig.result() == (None, [])


def test_a_copy_not_yet_whole_is_never_served(rig):
    rig.send(b"P1r.s1", [rig.memfd("r1")])
    rig.kill_host()
    assert rig.result() == (None, [])


def test_its_socket_closed_by_a_living_host_ends_it(rig):
    rig.send(b"P1r.s1", [rig.memfd("r1")])
    rig.send(b"A")
    rig.sock.close()
    held, said = rig.result()
    assert (held, said) == (None, [])
    assert rig.host.poll() is None  # the host lives on: the standby left by itself


def test_a_host_silent_for_half_the_watchdog_period_is_left_to_systemd(tmp_path):
    """Frozen or wedged, a host stops beating (W at each watchdog ping) and systemd's
    watchdog kills it, then stops the whole unit: a standby that took over would be
    killed by that stop after TimeoutAbortSec (seen: replaced after 14.9 s, not 10).
    Silence counts from the host's last message, not from its socket's end at its death
    (which once counted as a message: taken over after 10 s of silence)."""
    rig = Rig(tmp_path, watchdog_usec="400000")  # silent for 0.2 s: left to systemd
    try:
        rig.send(b"P1r.s1", [rig.memfd("r1")])
        rig.send(b"A")
        # The silence itself, 0.3 s, is what is tested: the standby says nothing in it.
        assert not select.select([rig.proc.stdout], [], [], 0.3)[0]
        rig.kill_host()
        assert rig.result() == (None, [])
    finally:
        rig.close()


def test_a_host_that_beat_lately_is_taken_over(tmp_path):
    rig = Rig(tmp_path, watchdog_usec="60000000")
    try:
        rig.send(b"P1r.s1", [rig.memfd("r1")])
        rig.send(b"A")
        rig.send(b"W")
        rig.kill_host()
        held, said = rig.result()
        assert held == {"r.s1": 1}
        # What the copy began with was all in the store: nothing to park again.
        assert said == [(f"MAINPID={rig.proc.pid}", 0)]
    finally:
        rig.close()


def test_fds_numbered_past_select_s_limit(tmp_path):
    """A host with ~400 sessions or more passes the standby its socket and pidfd
    numbered past 1,024, where select() refuses them (standbys died so at 1,000
    sessions), and the copy is past it too: 1,100 fds, in the host's batches."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 4096, f"the test needs fds: hard limit {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    rig = Rig(tmp_path, above=2000)
    try:
        one = rig.memfd("many")
        names = [f"r.s{i}" for i in range(1100)]
        for i in range(0, len(names), 250):
            part = names[i:i + 250]
            rig.send(b"P1" + "\n".join(part).encode(), [one] * len(part))
        rig.send(b"A")
        rig.kill_host()
        held, said = rig.result()
        assert held == dict.fromkeys(names, 1)
        assert said == [(f"MAINPID={rig.proc.pid}", 0)]
    finally:
        rig.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
