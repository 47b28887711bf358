"""Hostile: the client's terminal the host writes itself (ptyhostd/terminal.py).

An attach may name its terminal for the host to write (Attach.terminal).  The host
opens it only if it is a pseudo-terminal the client's uid owns, and the one the client
has (its device and inode); anything else is frames, as for any client.  Here: another
user's terminal is never even opened (inotify sees no open), descriptions that are not
the client's terminal are refused one by one, a terminal nobody reads holds a bounded
part of the host's memory and is repainted once read again while a client in step gets
every byte meanwhile, and a terminal that hangs up ends its attach alone.
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import time

from conftest import wait_for
import clowder_wire as P
from ctl.outer import described as _spec
from hostile import MiB, Memory, connect_as
from test_attach import _holds
from test_access import system_host  # noqa: F401  (alice, bob, mallory and the host)

IN_OPEN = 0x20
_libc = ctypes.CDLL(None, use_errno=True)
# The most a terminal nobody reads may grow the host: terminal.HIGH (1 MiB) of its
# unwritten bytes, and the frames of the client in step beside it.
STALLED_GROWTH = 24 * MiB
FLOOD_MB = 64


class Opens:
    """Counts the opens of one file (inotify's IN_OPEN) from now on."""

    def __init__(self, path: str):
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        assert _libc.inotify_add_watch(self.fd, path.encode(), IN_OPEN) >= 0, \
            os.strerror(ctypes.get_errno())

    def count(self) -> int:
        n = 0
        while select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 4096)
            at = 0
            while at < len(data):
                _wd, mask, _cookie, size = struct.unpack_from("iIII", data, at)
                n += bool(mask & IN_OPEN)
                at += 16 + size
        return n

    def close(self) -> None:
        os.close(self.fd)


class _Client:
    """A protocol client of its own, reading what it is sent into ``messages``."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = P.FrameReader()
        self.messages: list[P.Message] = []
        self.output = bytearray()
        sock.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)))

    def read(self, timeout: float) -> bool:
        """One read within ``timeout``; False at the connection's end."""
        if not select.select([self.sock], [], [], timeout)[0]:
            return True
        data = self.sock.recv(1 << 20)
        if not data:
            return False
        for msg in self.reader.feed(data):
            if isinstance(msg, P.Output):
                self.output += msg.data
            self.messages.append(msg)
        return True

    def until(self, cls, what: str, timeout: float = 15) -> P.Message:
        end = time.monotonic() + timeout
        while True:
            got = [m for m in self.messages if isinstance(m, (cls, P.Error))]
            if got:
                return got[0]
            left = end - time.monotonic()
            assert left > 0, f"no {cls.__name__} within {timeout} s: {what}"
            assert self.read(left), f"the host closed the connection: {what}"

    def attach(self, sid: str, terminal, ready: bool = True) -> P.Message:
        self.sock.sendall(P.encode(P.Attach(session=sid, cols=80, rows=24,
                                            terminal=terminal)))
        got = self.until(P.Attached, f"the attach to {sid}")
        if ready and getattr(got, "terminal", False):
            self.sock.sendall(P.encode(P.TerminalReady()))
        return got


def _terminal(host) -> tuple[int, int]:
    """A pty (master, slave) whose slave is the host's user's, as a terminal of theirs
    (a root client's in the system scope)."""
    master, slave = os.openpty()
    os.fchown(slave, host.uid, -1)
    return master, slave


def test_another_users_terminal_is_never_opened(system_host):  # noqa: F811
    """bob names alice's terminal, root's, and his own with alice's inode: each attach
    goes on in frames, the host never opens any of them, and nothing reaches them."""
    h = system_host
    sid = h.spawn("sh", "-c", "echo bobs-$((6*7)); exec sleep 100000", user="bob",
                  cwd="/home/bob")
    wait_for(lambda: b"bobs-42" in h.backlog(sid, user="bob"), 10, "bob's session to print")
    terminals = {}
    for owner in ("alice", "root", "bob"):
        master, slave = os.openpty()
        os.fchown(slave, {"alice": 2001, "root": 0, "bob": 2002}[owner], -1)
        terminals[owner] = (master, slave)
    named = {"alice's": _spec(terminals["alice"][1]), "root's": _spec(terminals["root"][1]),
             "bob's path with alice's inode": dict(_spec(terminals["bob"][1]),
                                                   ino=_spec(terminals["alice"][1])["ino"])}
    watches = {owner: Opens(os.ttyname(slave)) for owner, (_m, slave) in terminals.items()}
    pid = h.main_pid()
    try:
        for what, spec in named.items():
            c = _Client(connect_as("bob", h.socket))
            try:
                attached = c.attach(sid, spec)
                assert isinstance(attached, P.Attached), attached
                assert attached.terminal is False, f"the host took {what} terminal"
                end = time.monotonic() + 15
                while b"bobs-42" not in c.output:
                    assert time.monotonic() < end, f"no repaint in frames naming {what}"
                    c.read(end - time.monotonic())
                assert not _holds(pid, spec["path"]), f"the host holds {what} terminal"
            finally:
                c.sock.close()
        for owner, watch in watches.items():
            assert watch.count() == 0, f"{owner}'s terminal was opened"
        for owner, (master, _slave) in terminals.items():
            assert not select.select([master], [], [], 0)[0], \
                f"something was written to {owner}'s terminal"
    finally:
        for watch in watches.values():
            watch.close()
        for master, slave in terminals.values():
            os.close(master)
            os.close(slave)


def _bad_specs(own: dict) -> dict:
    return {
        "the pty multiplexer": dict(own, path="/dev/ptmx"),
        "a file": dict(own, path="/etc/passwd"),
        "a path out of /dev/pts": dict(own, path="/dev/pts/../../etc/passwd"),
        "no such pts": dict(own, path="/dev/pts/999999999"),
        "another inode": dict(own, ino=own["ino"] + 1),
        "another device": dict(own, dev=own["dev"] + 1),
        "no inode": {"path": own["path"], "dev": own["dev"]},
        "a text inode": dict(own, ino=str(own["ino"])),
        "a huge path": dict(own, path="/dev/pts/" + "1" * 100_000),
        "an empty one": {},
    }


def test_descriptions_that_are_not_the_clients_terminal_are_refused(host):
    """Each is refused on its own: the attach goes on in frames and the host serves on.
    A terminal that is not even an object is a bad field, as any."""
    sid = host.spawn("sh", "-c", "echo here-$((6*7)); exec sleep 100000")
    wait_for(lambda: b"here-42" in host.backlog(sid), 10, "the session to print")
    master, slave = os.openpty()
    try:
        for what, spec in _bad_specs(_spec(slave)).items():
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(host.socket)
                c = _Client(s)
                attached = c.attach(sid, spec)
                assert isinstance(attached, P.Attached), (what, attached)
                assert attached.terminal is False, f"the host took {what}"
                end = time.monotonic() + 15
                while b"here-42" not in c.output:
                    assert time.monotonic() < end, f"no repaint in frames with {what}"
                    c.read(end - time.monotonic())
        assert not select.select([master], [], [], 0)[0], "something reached the terminal"
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(host.socket)
            c = _Client(s)
            s.sendall(P.encode(P.Attach(session=sid, terminal="/dev/pts/0")))
            err = c.until(P.Attached, "the answer to a terminal that is a string")
            assert isinstance(err, P.Error) and err.code == "bad-field", err
        assert sid in host.ps()
    finally:
        os.close(master)
        os.close(slave)


def test_a_terminal_nobody_reads_is_bounded_and_repainted(host):
    """A terminal whose reader stopped (a hung ssh, ^S) while the session prints FLOOD_MB:
    the host keeps at most its bound of it, a client in step beside it gets the flood,
    and once read again the terminal gets the current screen, not the backlog."""
    sid = host.spawn("sh", "-c", f"head -c {FLOOD_MB * 1000 * 1000} /dev/zero | tr '\\0' x "
                     "| fold -w 79; echo flood-$((1+1))-done; read go; echo end-$((6*7)); "
                     "exec sleep 100000")
    master, slave = _terminal(host)
    mem = Memory(host.main_pid())
    stalled = _Client(_connected(host.socket))
    stepping = _Client(_connected(host.socket))
    try:
        assert stalled.attach(sid, _spec(slave)).terminal is True
        stepping.attach(sid, None)
        got = 0
        end = time.monotonic() + 180
        while b"flood-2-done" not in stepping.output:
            assert time.monotonic() < end, f"the client in step got {got >> 20} MiB"
            got += len(stepping.output)
            del stepping.output[:-64]
            got -= len(stepping.output)
            assert stepping.read(1), "the host closed the client in step"
        # Not every byte: a client that falls 1 MiB behind on a loaded machine is
        # repainted (RESYNC_AFTER), as any.  Held back by the stalled terminal, it
        # would have had a few MiB of the flood at most.
        assert got > FLOOD_MB * 1000 * 1000 // 2, f"the client in step got {got} bytes"
        grew = mem.stop()
        assert grew <= STALLED_GROWTH, f"the host grew {grew >> 20} MiB for a stalled terminal"
        assert _holds(host.main_pid(), os.ttyname(slave))
        host.ctl("send", sid, "go\n")
        end = time.monotonic() + 30
        while b"end-42" not in stepping.output:
            assert time.monotonic() < end, "the client in step missed the end"
            stepping.read(end - time.monotonic())
        # Read again: what the terminal gets ends with the current screen.
        seen = bytearray()
        end = time.monotonic() + 30
        while b"end-42" not in seen:
            assert time.monotonic() < end, \
                f"the terminal read again never showed the end: {bytes(seen[-300:])!r}"
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 1 << 16)
        assert len(seen) < 8 * MiB, "the terminal was sent the backlog, not the screen"
    finally:
        mem.stop()
        stalled.sock.close()
        stepping.sock.close()
        os.close(master)
        os.close(slave)


def _connected(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def test_a_terminal_that_hangs_up_ends_its_attach_alone(host):
    """The terminal's other side closes (its window shut) while output flows: the host
    ends that attach (the client is gone with its terminal) and lets the terminal go;
    the session and another attach go on."""
    sid = host.spawn("sh", "-c", "while :; do echo hang-up-flood; done")
    master, slave = _terminal(host)
    c = _Client(_connected(host.socket))
    other = _Client(_connected(host.socket))
    try:
        assert c.attach(sid, _spec(slave)).terminal is True
        other.attach(sid, None)
        wait_for(lambda: select.select([master], [], [], 0)[0], 10,
                 "the host to write the terminal")
        path = os.ttyname(slave)
        os.close(slave)
        os.close(master)
        end = time.monotonic() + 15
        while c.read(end - time.monotonic()):
            assert time.monotonic() < end, "the host kept the attach of a hung-up terminal"
        wait_for(lambda: not _holds(host.main_pid(), path), 10,
                 "the host to let the hung-up terminal go")
        other.output.clear()
        end = time.monotonic() + 15
        while b"hang-up-flood" not in other.output:
            assert time.monotonic() < end, "the other attach stopped"
            assert other.read(1), "the host closed the other attach"
        assert host.ps()[sid]["state"] == "running"
    finally:
        c.sock.close()
        other.sock.close()


def test_a_client_that_never_says_ready_gets_the_end_in_frames(host):
    """A client that named its terminal and never sent TerminalReady: nothing is written
    to its terminal (it never drew what goes before the screen), its output waits, and
    when the session ends it comes in frames, in order, before the end."""
    sid = host.spawn("sh", "-c", "echo before-$((6*7)); read go; seq 1 5000; exit 4")
    wait_for(lambda: b"before-42" in host.backlog(sid), 10, "the session to print")
    master, slave = _terminal(host)
    c = _Client(_connected(host.socket))
    try:
        assert c.attach(sid, _spec(slave), ready=False).terminal is True
        host.ctl("send", sid, "go\n")
        ended = c.until(P.Exited, "the end of the session")
        assert isinstance(ended, P.Exited) and ended.exit_code == 4, ended
        out = bytes(c.output)
        assert b"before-42" in out and out.rfind(b"5000") > out.find(b"before-42"), \
            out[-300:]
        assert not select.select([master], [], [], 0)[0], "the terminal was written"
    finally:
        c.sock.close()
        os.close(master)
        os.close(slave)
