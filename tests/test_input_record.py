"""A client's numbered input and its record never part (ptyhostd/inputseq.py): a process
writing through inputseq.Token.write, beside threads that want the GIL and a collector
kept busy, is killed with SIGKILL at random moments; each time, the offset its table
records is exactly what the pty delivered.  (A record made after the write, in Python,
can lag it: measured 3 of 60 kills, and a restart then types those bytes twice.)

Real ptys, real kill -9, the real table and write; the child is this interpreter."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import random
import select
import struct
import subprocess
import sys
import threading
import time
import tty
import types

import pytest

from ptyhostd import inputseq, pty

KILLS = 50

# The child: the host's record path, a GIL-hungry thread, garbage for the collector.
CHILD = r"""
import os, select, sys, threading
from ptyhostd import inputseq
master, table_fd = int(sys.argv[1]), int(sys.argv[2])
table = inputseq.InputSeqTable(table_fd, fresh=False)
assert table.ready_to_send(), "sendfile did not load"
tok = table.token("s1", "tok1")

def hog():
    x = 0
    while True:
        x += sum(range(200))
for _ in range(2):
    threading.Thread(target=hog, daemon=True).start()
os.write(1, b"go\n")
i = 0
while True:
    data = b"line %09d\n" % i
    junk = [[j] for j in range(20)]  # cycles' neighbours: the collector runs often
    junk.append(junk)
    i += 1
    view = memoryview(data)
    while view:
        view = view[tok.write(master, view):]
        if view:
            select.select([], [master], [], 1.0)
"""

END = b"#end#"  # written by the test after the kill: everything before it has arrived


def _table() -> int:
    """An empty table, as a fresh host parks it."""
    fd = os.memfd_create("test-inputseq")
    os.ftruncate(fd, inputseq._SIZE)
    os.pwrite(fd, inputseq._HEADER.pack(inputseq.MAGIC, inputseq.SLOTS), 0)
    return fd


def _recorded(table_fd: int) -> int:
    """The offset the table records for the one token in it."""
    body = os.pread(table_fd, inputseq._SIZE, 0)
    found = [inputseq._SLOT.unpack_from(body, inputseq._HEADER.size + i * inputseq._SLOT.size)
             for i in range(inputseq.SLOTS)]
    used = [(sid, token, written) for sid, token, written, used in found if used]
    assert [u[:2] for u in used] == [(b"s1".ljust(16, b"\0"), b"tok1".ljust(16, b"\0"))], \
        f"the table holds other than the child's token: {used}"
    return used[0][2]


class _Slave:
    """Reads the pty's slave end as it comes."""

    def __init__(self, fd: int):
        self.fd, self.got = fd, bytearray()
        self.grew = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            if select.select([self.fd], [], [], 0.05)[0]:
                data = os.read(self.fd, 1 << 16)
                with self.grew:
                    self.got += data
                    self.grew.notify_all()

    def wait(self, predicate, timeout: float, what: str) -> None:
        with self.grew:
            if not self.grew.wait_for(lambda: predicate(self.got), timeout):
                pytest.fail(f"timed out after {timeout} s waiting for {what} "
                            f"({len(self.got)} bytes came)")

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)


def _one_kill(rng: random.Random) -> tuple[int, int]:
    """(recorded, delivered) after one child was killed at a random moment."""
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    table_fd = _table()
    reader = _Slave(slave)
    child = None
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(master), str(table_fd)],
                                 pass_fds=(master, table_fd), stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"go\n", "the child did not start"
        target = rng.randrange(1, 300_000)  # the random moment: this many bytes in
        reader.wait(lambda got: len(got) >= target, 30, f"{target} bytes from the child")
        child.kill()
        child.wait(30)
        os.write(master, END)
        reader.wait(lambda got: got.endswith(END), 30, "the end mark after the kill")
        return _recorded(table_fd), len(reader.got) - len(END)
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(30)
        reader.close()
        for fd in (master, slave, table_fd):
            os.close(fd)


def test_the_record_is_what_the_pty_took_at_every_kill():
    rng = random.Random(os.environ.get("CLOWDER_TEST_SEED", time.time_ns()))
    wrong = []
    for trial in range(KILLS):
        recorded, delivered = _one_kill(rng)
        if recorded != delivered:
            wrong.append((trial, recorded, delivered))
    assert not wrong, ("killed at these moments, the record and the pty disagreed (trial, "
                       f"recorded, delivered): {wrong}; a reattach would resend "
                       "delivered - recorded bytes")


@contextlib.contextmanager
def _typing(devpts: bool = False):
    """A token of a fresh table and a raw pty (its master non-blocking): a namespace of
    tok, master, slave, table_fd and table; a descriptor set to -1 is closed already."""
    if devpts:  # through devpts' own ptmx, as where /dev/ptmx links to pts/ptmx
        master = os.open("/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        fcntl.ioctl(master, pty.TIOCSPTLCK, struct.pack("i", 0))
        slave = fcntl.ioctl(master, pty.TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
    else:
        master, slave = os.openpty()
        os.set_blocking(master, False)
    tty.setraw(slave)
    t = types.SimpleNamespace(master=master, slave=slave, table_fd=_table())
    t.table = inputseq.InputSeqTable(t.table_fd, fresh=False)
    try:
        assert t.table.ready_to_send(), "ctypes did not load the staged write"
        t.tok = t.table.token("s1", "tok1")
        yield t
    finally:
        t.table.stage.close()
        for fd in (t.master, t.slave, t.table_fd):
            if fd >= 0:
                os.close(fd)


def test_a_full_pty_takes_nothing_and_records_nothing():
    with _typing() as t:
        taken = 0
        while (n := t.tok.write(t.master, b"x" * 100_000)) > 0:
            assert n <= 64 * 1024
            taken += n
        assert 0 < taken < 10_000_000
        assert t.tok.write(t.master, b"y") == 0  # EAGAIN: nothing taken
        assert _recorded(t.table_fd) == t.tok.written == taken
        # What was staged is dead once sent: the stage keeps at most the one page that a
        # run of keystrokes fills (inputseq.InputSeqTable.send).
        assert os.fstat(t.table.stage.fd).st_blocks * 512 <= 4096, "the stage keeps pages"
        os.close(t.slave)
        t.slave = -1
        # The slave gone: a master's write does not fail (measured: EAGAIN until the line
        # is flushed, then taken and dropped); whatever it takes is recorded.
        n = t.tok.write(t.master, b"zz")
        assert n in (0, 2) and _recorded(t.table_fd) == t.tok.written == taken + n


def test_the_largest_offset_a_client_may_number_is_written_and_recorded():
    """A client numbers its stream as it likes, up to 2**62 (connection.py refuses more);
    the stage is a sparse file written at that offset.  A master opened through devpts'
    ptmx (in the test instance: /dev/ptmx links to pts/ptmx) takes no sendfile past
    2 GiB - 1 (EOVERFLOW): there the write and its record are separate, and still made."""
    with _typing() as t:
        last = (1 << 62) - 1
        data = t.tok.take(last, b"x" * 50)  # a gap: the host follows the client's numbering
        assert t.tok.write(t.master, data) == 50
        assert _recorded(t.table_fd) == t.tok.written == last
        assert os.read(t.slave, 100) == b"x" * 50
        assert os.fstat(t.table.stage.fd).st_blocks * 512 <= 4096


def test_past_what_sendfile_records_on_a_devpts_master(caplog):
    """sendfile moves nothing past the smaller file system's largest offset, and devpts'
    is 2 GiB - 1: a master opened through /dev/pts/ptmx (as /dev/ptmx is in containers)
    gets EOVERFLOW there.  The write is made and recorded all the same (then separately),
    and the host says so once."""
    with _typing(devpts=True) as t:
        before = (1 << 31) - 10
        data = t.tok.take(before + 20, b"y" * 20)
        with caplog.at_level(logging.WARNING, logger="ptyhostd"):
            taken = 0
            while taken < 20:  # up to the limit by sendfile, the rest past it
                n = t.tok.write(t.master, data[taken:])
                assert n > 0, "a write past sendfile's limit took nothing"
                taken += n
            assert t.tok.write(t.master, b"z") == 1
        assert _recorded(t.table_fd) == t.tok.written == before + 21
        assert os.read(t.slave, 100) == b"y" * 20 + b"z"
        warned = [r for r in caplog.records if getattr(r, "CLOWDER_CAUSE", "") ==
                  "inputseq-overflow"]
        assert len(warned) == 1, f"the overflow was logged {len(warned)} times"
