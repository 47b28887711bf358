"""pty.write_some, the host's only write of input to a pty: libc's write(2) with the GIL
held (so no other thread's turn falls between the bytes reaching the pty and their
record, inputseq.Token.on_written), and what it returns in each case the callers
(inputqueue.py, bridge.py) rely on."""

from __future__ import annotations

import os

from ptyhostd import pty


def test_the_write_keeps_the_gil_where_ctypes_loads():
    write = pty.load_held_write()
    assert write is not os.write, "ctypes did not load libc's write: the GIL is let go"
    assert pty.load_held_write() is write  # made once


def test_what_write_some_returns():
    master, slave = os.openpty()
    os.set_blocking(master, False)
    try:
        assert pty.write_some(master, b"abc\n") == 4
        assert pty.write_some(master, memoryview(b"..def\n")[2:]) == 4  # a queue's view
        assert [os.read(slave, 100), os.read(slave, 100)] == [b"abc\n", b"def\n"]  # a line a read
        taken = 0
        # The line fills until the pty takes nothing: EAGAIN is 0, not an error.
        while (n := pty.write_some(master, b"x" * 100_000)) > 0:
            assert n <= pty.WRITE_CHUNK
            taken += n
        assert 0 < taken < 100_000
        os.close(slave)
        slave = -1
        assert pty.write_some(master, b"zz") == 2  # EIO (slave gone): taken, dropped
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
