"""The backlog ring: wrap-around, adoption, and the crash window around a read."""

import os
import select
import struct

import pytest

from ptyhostd import pty
from ptyhostd.ring import DATA, Ring, RingError


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


def test_adopt_keeps_contents(pair):
    master, slave = pair
    ring = Ring.create("t", 8192)
    os.write(slave.fd, b"hello world")
    select.select([master.fd], [], [], 5)
    while ring.head < 11:
        ring.fill_from(master.fd)
    again = _adopt_copy(ring)
    assert again.read(0) == b"hello world"
    again.close()
    ring.close()


def _set_pending(ring, data, pending):
    """Simulate a crash: the region is zeroed and marked pending; optionally the kernel
    already copied ``data`` in, but the head was never advanced."""
    pos = ring.head % ring.capacity
    ring._mm[DATA + pos:DATA + pos + pending] = bytes(pending)
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
