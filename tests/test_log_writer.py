"""clowder_common.log.BackgroundHandler: a daemon's log lines leave from a thread of
their own, so no caller waits for journald; what a stalled journal makes wait is
bounded, and what is dropped past the bound is counted in one line.  (The same with a
real journald, stopped under a real host: tests/test_hostile_journal.py.)"""

from __future__ import annotations

import logging
import os
import threading

from clowder_common.log import BackgroundHandler
from conftest import wait_for


class Stalled(logging.Handler):
    """A target that takes nothing until ``go`` is set (a journal that does not read)."""

    def __init__(self):
        super().__init__()
        self.go = threading.Event()
        self.got: list[logging.LogRecord] = []
        self.threads: set[str] = set()

    def emit(self, record):
        self.threads.add(threading.current_thread().name)
        self.go.wait(30)
        self.got.append(record)


def _logger(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_a_stalled_target_never_blocks_the_caller_and_loses_nothing_within_the_bound():
    target = Stalled()
    log = _logger(BackgroundHandler(target, limit=50), "test-log-writer-1")
    done = threading.Event()

    def log_many():
        for i in range(50):
            log.info("line %d of %s", i, "fifty", extra={"CLOWDER_N": i})
        done.set()
    threading.Thread(target=log_many).start()
    assert done.wait(10), "logging waited for a target that does not take lines"
    target.go.set()
    wait_for(lambda: len(target.got) == 50, 10, "every line to reach the target")
    assert [r.getMessage() for r in target.got] == [f"line {i} of fifty" for i in range(50)]
    assert [r.CLOWDER_N for r in target.got] == list(range(50))
    assert target.threads == {"log-writer"}, target.threads


def test_past_the_bound_lines_are_dropped_and_counted_in_one_line():
    target = Stalled()
    handler = BackgroundHandler(target, limit=10)
    log = _logger(handler, "test-log-writer-2")
    log.info("the first")  # taken by the writer, which then waits in the target
    wait_for(lambda: target.threads, 10, "the writer to take the first line")
    for i in range(30):
        log.info("more %d", i)
    assert not handler.flush(0.1), "flush said the queue was empty while the target waited"
    target.go.set()
    assert handler.flush(10)
    messages = [r.getMessage() for r in target.got]
    assert messages[:11] == ["the first"] + [f"more {i}" for i in range(10)], messages
    assert messages[11:] == ["20 log lines were dropped: the journal did not take them "
                             "while 10 waited"], messages
    assert target.got[-1].CLOWDER_CAUSE == "log-dropped"
    assert target.got[-1].levelno == logging.WARNING


def test_a_traceback_is_kept_as_text():
    target = Stalled()
    target.go.set()
    handler = BackgroundHandler(target)
    log = _logger(handler, "test-log-writer-3")
    try:
        raise ValueError("inside")
    except ValueError:
        log.exception("it failed")
    assert handler.flush(10)
    record = target.got[0]
    assert record.exc_info is None and "ValueError: inside" in record.exc_text
    assert logging.Formatter().format(record).startswith("it failed\nTraceback")


def test_a_forked_child_sends_its_lines_itself():
    """The hand-off's bridge is a fork: no writer thread there, so no line may wait."""
    r, w = os.pipe()
    with os.fdopen(w, "w", buffering=1) as out, os.fdopen(r) as into:
        log = _logger(BackgroundHandler(logging.StreamHandler(out)), "test-log-writer-4")
        pid = os.fork()
        if pid == 0:
            try:
                log.warning("from the child")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        out.close()
        assert into.read() == "from the child\n"


def test_the_native_protocol_and_an_entry_too_big_for_a_datagram(tmp_path):
    """journalsend.py's datagrams, read from a socket of ours (the real journald reads
    them in tests/test_events.py and tests/test_hostile_journal.py)."""
    import socket
    import struct
    from clowder_common.journalsend import JournalSender, encode
    assert encode(["MESSAGE=one line", b"CLOWDER_X=\xff"]) == b"MESSAGE=one line\nCLOWDER_X=\xff\n"
    assert encode(["MESSAGE=two\nlines"]) == \
        b"MESSAGE\n" + struct.pack("<Q", 9) + b"two\nlines\n"
    path = str(tmp_path / "journal")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        sender = JournalSender(path)
        sender.send(["MESSAGE=small"])
        assert server.recv(1 << 16) == b"MESSAGE=small\n"
        big = "x" * (16 << 20)  # past any datagram: a sealed memfd instead
        sender.send(["MESSAGE=" + big])
        data, anc, _, _ = server.recvmsg(1 << 16, socket.CMSG_SPACE(4))
        assert data == b"" and anc and anc[0][:2] == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
        fd = struct.unpack("i", anc[0][2][:4])[0]
        with os.fdopen(fd, "rb") as f:
            f.seek(0)  # the offset is shared with the writer, which left it at the end
            assert f.read() == b"MESSAGE=" + big.encode() + b"\n"
        sender.close()
    JournalSender(str(tmp_path / "nobody")).send(["MESSAGE=dropped"])  # no journald: quiet
