"""pty.write_some, the host's write of input that is not numbered (Send; a client's
numbered input goes through inputseq.Token.write: tests/test_input_record.py), and what
it returns in each case the callers (inputqueue.py, bridge.py) rely on."""

from __future__ import annotations

import os

from ptyhostd import pty


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
        # The slave gone: a master's write does not fail (measured: EAGAIN until the line
        # is flushed, then taken and dropped; EIO is a read's).
        assert pty.write_some(master, b"zz") in (0, 2)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
