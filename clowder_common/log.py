"""Logging to the journal with CLOWDER_* fields, or to stderr outside systemd."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from systemd import journal


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
        handler: logging.Handler = journal.JournalHandler(SYSLOG_IDENTIFIER=identifier)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{identifier}: %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger
