"""Logging to the journal with CLOWDER_* fields, or to stderr outside systemd."""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
import weakref

from .journalsend import JournalSender


LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
ENV = "CLOWDER_LOG_LEVEL"


def parse_level(text: str) -> int:
    """A level name of LEVELS (any case); ValueError naming the valid ones."""
    try:
        return LEVELS[text.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown log level {text!r}: use one of "
                         f"{', '.join(LEVELS)}") from None


def add_argument(parser) -> None:
    """A daemon's --log-level, defaulting to $CLOWDER_LOG_LEVEL, else info."""
    import argparse  # here: ptyhostd's start parses its unit's command line without it

    def level(text: str) -> int:
        try:
            return parse_level(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parser.add_argument("--log-level", type=level, default=os.environ.get(ENV) or "info",
                        metavar="LEVEL",
                        help=f"{', '.join(LEVELS)} (default: ${ENV}, else info); debug adds "
                             "lines on accept, spawn, adoption and hand-off")


# syslog's priorities (journald's PRIORITY=) of logging's levels, highest first.
_PRIORITIES = ((logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4),
               (logging.ERROR, 3), (logging.CRITICAL, 2))


class JournalHandler(logging.Handler):
    """Each record as one journal entry: MESSAGE, PRIORITY, the logger, the code's place
    and thread, SYSLOG_IDENTIFIER, and the record's UPPERCASE attributes (``extra=``) as
    fields of their own.  The fields python-systemd's JournalHandler sends, but for the
    lowercase attributes it passed too, which journald drops as invalid names.  Sent by
    journalsend.py, not python-systemd's sendv, which keeps the GIL while journald
    does not read."""

    def __init__(self, identifier: str, sender: JournalSender | None = None):
        super().__init__()
        self.identifier = "SYSLOG_IDENTIFIER=" + identifier
        self.sender = sender or JournalSender()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            priority = next((p for level, p in _PRIORITIES if record.levelno <= level), 1)
            fields = ["MESSAGE=" + self.format(record), f"PRIORITY={priority}",
                      self.identifier, "LOGGER=" + record.name,
                      f"THREAD_NAME={record.threadName}",
                      f"PROCESS_NAME={record.processName}",
                      f"CODE_FILE={record.pathname}", f"CODE_LINE={record.lineno:d}",
                      f"CODE_FUNC={record.funcName}"]
            if record.exc_text:
                fields.append("EXCEPTION_TEXT=" + record.exc_text)
            for key, value in record.__dict__.items():
                if key.isupper():
                    fields.append(key.encode() + b"=" + value if isinstance(value, bytes)
                                  else f"{key}={value}")
            self.sender.send(fields)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self.sender.close()
        super().close()


# Records waiting for the writer thread: past this many, new ones are dropped and
# counted (a record holds its formatted message: ~1-2 KiB, a traceback more).
QUEUE_LIMIT = 4096
# How long an exit (logging.shutdown) or a hand-off's exec waits for the queue to drain.
FLUSH_TIMEOUT = 1.0


_BACKGROUND: "weakref.WeakSet[BackgroundHandler]" = weakref.WeakSet()  # for flush()


class BackgroundHandler(logging.Handler):
    """Sends each record with ``target`` from a thread of its own, so that no caller, the
    event loop above all, ever waits for journald.

    journald reads its datagram socket in its own time: stopped, busy flushing to a slow
    disk, or restarting (a systemd package upgrade), it leaves the queue of its socket
    full (net.unix.max_dgram_qlen, 10 on these machines and the kernel's default), and
    the next `sendmsg` blocks.  Measured: with journald stopped, a host that had logged
    ten lines answered no one (no session's bytes, no request) until journald read again
    (tests/test_hostile_journal.py).  Here a record is formatted in the caller's thread
    (its arguments may change once we return) and queued; at most QUEUE_LIMIT wait, and
    what comes past that is dropped and counted in one line once the journal reads again.
    In a forked child (the hand-off's bridge) records are sent at once, as before: the
    writer thread is not copied by fork."""

    def __init__(self, target: logging.Handler, limit: int = QUEUE_LIMIT):
        super().__init__()
        self.target = target
        self.limit = limit
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._dropped = 0
        self._writing = False  # a record taken off the queue and not yet sent
        self._inline = False   # in a forked child: send from the caller
        threading.Thread(target=self._run, name="log-writer", daemon=True).start()
        os.register_at_fork(after_in_child=self._after_fork)
        _BACKGROUND.add(self)

    def _after_fork(self) -> None:
        self._cond = threading.Condition()
        self._queue.clear()  # the parent sends those
        self._dropped, self._writing, self._inline = 0, False, True

    def emit(self, record: logging.LogRecord) -> None:
        if self._inline:
            self.target.handle(record)
            return
        try:
            record.msg, record.args = record.getMessage(), None
            if record.exc_info:
                if not record.exc_text:
                    record.exc_text = logging.Formatter().formatException(record.exc_info)
                record.exc_info = None  # the traceback holds frames: text is enough
        except Exception:
            self.handleError(record)
            return
        with self._cond:
            if len(self._queue) >= self.limit:
                self._dropped += 1
                return
            self._queue.append(record)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._writing = False
                self._cond.notify_all()  # a flush may be waiting for the queue to drain
                while not self._queue:
                    self._cond.wait()
                record = self._queue.popleft()
                self._writing = True
                dropped = self._dropped if not self._queue else 0
                self._dropped -= dropped
            self.target.handle(record)
            if dropped:
                self.target.handle(self._dropped_record(record.name, dropped))

    def _dropped_record(self, name: str, count: int) -> logging.LogRecord:
        return logging.makeLogRecord({
            "name": name, "levelno": logging.WARNING, "levelname": "WARNING",
            "msg": "%d log lines were dropped: the journal did not take them while %d "
                   "waited", "args": (count, self.limit),
            "CLOWDER_CAUSE": "log-dropped"})

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Wait until every queued record is sent, at most ``timeout`` s; True if so."""
        end = time.monotonic() + timeout
        with self._cond:
            while (self._queue or self._writing) and not self._inline:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """logging.shutdown's last call, after its flush: the target closes (its socket)
        unless the writer still uses it (the flush's bound passed first)."""
        if self.flush(0):
            self.target.close()
        super().close()


def flush(timeout: float = FLUSH_TIMEOUT) -> None:
    """Let every daemon logger's queued lines out, waiting at most ``timeout`` s in all
    (before an exec, which would lose them)."""
    end = time.monotonic() + timeout
    for handler in list(_BACKGROUND):
        handler.flush(max(0.0, end - time.monotonic()))


def setup(identifier: str, level: int = logging.INFO) -> logging.Logger:
    """Route the ``identifier`` logger to journald if it is there, else to stderr.

    Extra fields must be UPPERCASE (``extra={"CLOWDER_SESSION": id}``): journald drops
    invalid field names silently.  ``level`` applies to the loggers below it too
    (``clowder-control.vcs``); event kinds carry a MESSAGE_ID (events.py).
    """
    logger = logging.getLogger(identifier)
    logger.setLevel(level)
    logger.propagate = False
    if os.path.exists("/run/systemd/journal/socket") and os.environ.get("JOURNAL_STREAM"):
        handler: logging.Handler = JournalHandler(identifier)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{identifier}: %(levelname)s %(message)s"))
    logger.addHandler(BackgroundHandler(handler))
    return logger
