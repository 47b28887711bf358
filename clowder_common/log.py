"""Logging to the journal with CLOWDER_* fields, or to stderr outside systemd."""

from __future__ import annotations

import argparse
import logging
import os
import sys

try:
    # python-systemd's sender itself: its journal module (and JournalHandler) would also
    # import uuid, platform, datetime and the journal reader, ~4.5 ms of every daemon's
    # start here, which a restart of the host makes everyone wait for.
    from systemd._journal import sendv
except ImportError:  # a python-systemd laid out otherwise: the public name
    from systemd.journal import sendv


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
    lowercase attributes it passed too, which journald drops as invalid names."""

    def __init__(self, identifier: str):
        super().__init__()
        self.identifier = "SYSLOG_IDENTIFIER=" + identifier

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
            sendv(*fields)
        except Exception:
            self.handleError(record)


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
    logger.addHandler(handler)
    return logger
