"""ptyhostd/terminal.py on real pseudo-terminals: whose terminal the host opens, and how
it writes one without blocking (the host's side of "The client's terminal, written by
the host", docs/design.md)."""

from __future__ import annotations

import asyncio
import os
import select
import time

import pytest

from ctl.outer import described as _spec
from ptyhostd import terminal

DEADLINE = 10.0



@pytest.fixture
def pty():
    master, slave = os.openpty()
    yield master, slave
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def test_opens_the_clients_own_pts_only(pty):
    _master, slave = pty
    me = os.getuid()
    fd, why = terminal.open_for(_spec(slave), me)
    assert fd is not None, why
    flags = os.get_blocking(fd), os.get_inheritable(fd)
    os.close(fd)
    assert flags == (False, False), "the host's open file blocks or crosses an exec"
    for spec, why in [
        ("/dev/pts/0", "not a terminal's description"),
        (dict(_spec(slave), path="/dev/ptmx"), "not a pseudo-terminal's path"),
        (dict(_spec(slave), path="/dev/pts/x"), "not a pseudo-terminal's path"),
        (dict(_spec(slave), path="/dev/pts/999999999"), "No such file"),
        (dict(_spec(slave), ino=_spec(slave)["ino"] + 1), "another devpts?"),
        (dict(_spec(slave), dev=True), "no device and inode"),
        ({"path": os.ttyname(slave)}, "no device and inode"),
    ]:
        fd, said = terminal.open_for(spec, me)
        assert fd is None and why in said, (spec, said)


def test_only_its_owner_may_name_a_terminal(pty):
    _master, slave = pty
    os.fchown(slave, 4242, -1)
    fd, why = terminal.open_for(_spec(slave), 4243)
    assert fd is None and "not the client's own" in why
    fd, why = terminal.open_for(_spec(slave), 4242)
    assert fd is not None, why
    os.close(fd)


def test_a_non_root_client_may_not_name_roots_terminal(pty):
    _master, slave = pty
    os.fchown(slave, 0, -1)
    fd, why = terminal.open_for(_spec(slave), 4242)
    assert fd is None and "not the client's own" in why


def _read(master: int, want: bytes) -> bytes:
    got = b""
    end = time.monotonic() + DEADLINE
    while want not in got:
        left = end - time.monotonic()
        assert left > 0, f"{want!r} did not reach the terminal: {got[-200:]!r}"
        if select.select([master], [], [], left)[0]:
            got += os.read(master, 1 << 16)
    return got


def test_held_until_released_then_written_in_order(pty):
    master, slave = pty
    fd, _ = terminal.open_for(_spec(slave), os.getuid())

    async def run():
        t = terminal.Terminal(fd, asyncio.get_running_loop(), lambda: None,
                              lambda why: pytest.fail(why))
        t.write(b"first ")
        assert not select.select([master], [], [], 0)[0], "written before the release"
        t.release()
        t.write(b"second")
        t.close()
    asyncio.run(run())
    assert _read(master, b"second").endswith(b"first second")


def test_a_full_terminal_holds_at_most_its_bound_and_says_when_there_is_room(pty):
    master, slave = pty
    fd, _ = terminal.open_for(_spec(slave), os.getuid())
    events = []

    async def run():
        loop = asyncio.get_running_loop()
        t = terminal.Terminal(fd, loop, lambda: events.append("room"),
                              lambda why: pytest.fail(why))
        t.release()
        chunk = b"x" * 65536
        while not t.full:
            t.write(chunk)
        assert terminal.HIGH < t.pending() <= terminal.HIGH + len(chunk)
        drained = loop.create_future()
        t.when_drained(lambda: drained.set_result(True))
        # Someone reads the terminal again (a thread: the loop must keep running).
        done = await loop.run_in_executor(None, _drain_until_quiet, master)
        await asyncio.wait_for(drained, DEADLINE)
        assert events == ["room"] and t.pending() == 0 and not t.full
        assert done > terminal.HIGH
        t.close()
    asyncio.run(run())


def _drain_until_quiet(master: int) -> int:
    n = 0
    while select.select([master], [], [], 0.5)[0]:
        n += len(os.read(master, 1 << 16))
    return n


def test_a_hung_up_terminal_is_closed_and_said(pty):
    master, slave = pty
    fd, _ = terminal.open_for(_spec(slave), os.getuid())
    broken = []

    async def run():
        t = terminal.Terminal(fd, asyncio.get_running_loop(), lambda: None, broken.append)
        t.release()
        os.close(master)
        t.write(b"after the hang-up")
        assert t.fd is None
        t.write(b"and more")  # nothing: it is closed
        called = []
        t.when_drained(lambda: called.append(1))
        assert called == [1]
    asyncio.run(run())
    assert broken == ["hung up"]
