"""Logging to the journal with CLOWDER_* fields, or to stderr outside systemd."""

from __future__ import annotations

import logging
import os
import sys

from systemd import journal


def setup(identifier: str, level: int = logging.INFO) -> logging.Logger:
    """Route the ``identifier`` logger to journald if it is there, else to stderr.

    Extra fields must be UPPERCASE (``extra={"CLOWDER_SESSION": id}``): journald drops
    invalid field names silently.
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
