"""The backlog ring: wrap-around, adoption, and the crash window around a read."""

import os
import select
import struct

import pytest

from ptyhostd import pty
from ptyhostd.ring import DATA, READ_SIZE, UP_TO, Ring, RingError


@pytest.fixture
def pair():
    master, slave, _ = pty.open_pair("t")
    yield master, slave
    master.close()
    slave.close()


def test_fill_and_wrap(pair):
    master, slave = pair
    ring = Ring.create("t", 4096)
    sent = b""
    for i in range(50):
        chunk = f"line {i:04d} ".encode() * 20
        os.write(slave.fd, chunk)
        sent += chunk
        while True:
            try:
                ring.fill_from(master.fd)
            except BlockingIOError:
                break
    assert ring.head == len(sent)
    assert ring.read(0) == sent[-(4096 - ring.guard):]
    assert ring.read(ring.head - 10) == sent[-10:]
    ring.close()


def _adopt_copy(ring):
    dup = os.dup(ring.fd.fd)
    return Ring.adopt(dup, "t")


def _printed(pair, ring, data: bytes) -> None:
    """``data`` written to the pty's slave and read into ``ring``."""
    master, slave = pair
    os.write(slave.fd, data)
    want = ring.head + len(data)
    select.select([master.fd], [], [], 5)
    while ring.head < want:
        ring.fill_from(master.fd)


def test_adopt_keeps_contents(pair):
    ring = Ring.create("t", 8192)
    _printed(pair, ring, b"hello world")
    again = _adopt_copy(ring)
    assert again.read(0) == b"hello world"
    again.close()
    ring.close()


def _set_pending(ring, data, pending):
    """Simulate a crash: the region is zeroed and marked pending; optionally the kernel
    already copied ``data`` in, but the head was never advanced."""
    pos = ring.head % ring.capacity
    length = pending & ~UP_TO
    ring._mm[DATA + pos:DATA + pos + length] = bytes(length)
    struct.pack_into("<QQ", ring._mm, 24, pending, ring.head)
    if data:
        ring._mm[DATA + pos:DATA + pos + len(data)] = data


def test_crash_after_read_is_recovered(pair):
    ring = Ring.create("t", 8192)
    _set_pending(ring, b"abc", 3)
    again = _adopt_copy(ring)
    assert again.head == 3 and again.read(0) == b"abc"
    again.close()
    ring.close()


def test_crash_before_read_is_not_counted(pair):
    ring = Ring.create("t", 8192)
    _set_pending(ring, b"", 3)
    again = _adopt_copy(ring)
    assert again.head == 0
    again.close()
    ring.close()


@pytest.mark.parametrize("read, kept", [
    (b"abc\x1b[0m", b"abc\x1b[0m"),  # what the read put there is taken
    (b"", b""),  # killed before the read: nothing is counted
    # The documented ambiguity: NULs ending the chunk read at the instant of the crash
    # are taken as unread; every byte before them is kept.
    (b"a\0b\0\0", b"a\0b"),
], ids=["read", "not-read", "trailing-nuls"])
def test_crash_window_of_a_read_up_to_the_region(read, kept):
    """A read asks for READ_SIZE and gets what the pty has: its region is pending "up
    to" that length, and adoption takes the region up to its last non-zero byte."""
    ring = Ring.create("t", 1 << 16)  # its guard holds a whole READ_SIZE
    _set_pending(ring, read, READ_SIZE | UP_TO)
    again = _adopt_copy(ring)
    assert again.head == len(kept) and again.read(0) == kept
    again.close()
    ring.close()


def test_crash_during_a_read_across_the_wrap_is_recovered(pair):
    master, slave = pair
    ring = Ring.create("t", 4096)
    os.write(slave.fd, b"x" * 4000)
    while ring.head < 4000:
        select.select([master.fd], [], [], 5)
        ring.fill_from(master.fd)
    # The next read's region runs past the end of the ring and on from its start.
    pos = ring.head % ring.capacity
    chunk = b"y" * (ring.capacity - pos) + b"zz"
    struct.pack_into("<QQ", ring._mm, 24, ring._read_size | UP_TO, ring.head)
    ring._mm[DATA + pos:DATA + ring.capacity] = chunk[:ring.capacity - pos]
    ring._mm[DATA:DATA + ring._read_size - (ring.capacity - pos)] = \
        b"zz" + bytes(ring._read_size - (ring.capacity - pos) - 2)
    again = _adopt_copy(ring)
    assert again.head == 4000 + len(chunk)
    assert again.read(4000) == chunk
    again.close()
    ring.close()


def test_a_read_takes_all_the_pty_holds_in_one_call(pair):
    """No FIONREAD first: one read takes what the line discipline holds (up to
    READ_SIZE), and a pty with nothing in it raises BlockingIOError."""
    master, slave = pair
    ring = Ring.create("t", 1 << 20)
    os.write(slave.fd, b"q" * 3000)
    while ring.head < 3000:
        assert select.select([master.fd], [], [], 5)[0], "the pty was not readable in 5 s"
        held = pty.held(master.fd)
        assert ring.fill_from(master.fd) >= held > 0, "a read took less than the pty held"
    with pytest.raises(BlockingIOError):
        ring.fill_from(master.fd)
    assert ring.head == 3000 and ring.read(0) == b"q" * 3000
    # The refused read left its zeroed region pending: adopted, it is "not read".
    again = _adopt_copy(ring)
    assert again.head == 3000 and again.read(0) == b"q" * 3000
    again.close()
    ring.close()


def test_stale_pending_is_ignored():
    ring = Ring.create("t", 8192)
    struct.pack_into("<QQ", ring._mm, 16, 5, 0)  # head 5
    struct.pack_into("<QQ", ring._mm, 24, 3, 2)  # pending from an older head
    ring._mm[DATA:DATA + 8] = b"xxxxxxxx"
    again = _adopt_copy(ring)
    assert again.head == 5
    again.close()
    ring.close()


def test_garbage_memfd_refused():
    fd = os.memfd_create("junk")
    os.ftruncate(fd, DATA + 8192)
    with pytest.raises(RingError, match="bad header"):
        Ring.adopt(fd, "junk")


def _mapped(name: str) -> bool:
    """Whether this process maps the memfd of ring ``name`` (by its name in /proc)."""
    with open("/proc/self/maps") as f:
        return f"/memfd:clowder-ring-{name} " in f.read()


def test_an_adopted_ring_is_mapped_only_when_it_is_used(pair):
    """A restart adopts every ring before serving: the mapping waits for the first read
    or write, and what it then shows (bytes, head, stamps) is what was parked."""
    ring = Ring.create("lazy", 8192)
    _printed(pair, ring, b"parked bytes")
    parked = list(ring.stamps.entries)
    assert parked, "the read made no stamp"
    dup = os.dup(ring.fd.fd)
    ring.close()  # its mapping gone: only the adopted ring's could show
    again = Ring.adopt(dup, "lazy")
    assert not _mapped("lazy") and again.head == 12
    assert again.read(0) == b"parked bytes" and _mapped("lazy")
    assert again.stamps.entries == parked
    _printed(pair, again, b" and more")
    assert again.read(0) == b"parked bytes and more"
    again.close()
    assert not _mapped("lazy")


def test_a_ring_adopted_unsettled_has_no_stamps_until_settled(pair):
    """Under a hand-off's bridge (settle=False) the old code may still write: reading
    the ring maps it, but the stamps (whose load rewrites their index) wait for settle,
    which takes the head the bridge left."""
    ring = Ring.create("unsettled", 8192)
    _printed(pair, ring, b"first")
    again = Ring.adopt(os.dup(ring.fd.fd), "unsettled", settle=False)
    assert again.read(0) == b"first" and again.stamps is None
    _printed(pair, ring, b" second")  # the bridge's last read
    ring.close()
    again.settle()
    assert again.head == 12 and again.read(0) == b"first second"
    assert again.stamps is not None and again.stamps.entries
    again.close()


def test_a_truncated_ring_is_refused_before_it_is_mapped():
    """The size is checked at adoption though nothing is mapped then: a mapping past
    the memfd's end would fault (SIGBUS) at the first read instead of an error."""
    ring = Ring.create("short", 8192)
    fd = os.dup(ring.fd.fd)
    ring.close()
    os.ftruncate(fd, DATA + 4096)
    with pytest.raises(RingError, match="bad header"):
        Ring.adopt(fd, "short")
