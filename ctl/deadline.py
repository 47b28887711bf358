"""How long clowderctl waits for a daemon before saying it is not answering.

One deadline for every request: connecting (a connection can sit in the listen backlog
of a frozen host for ever), the handshake, and each reply.  A restarting host answers
within a second or two, a frozen or wedged one is replaced by systemd's watchdog
(WatchdogSec=10 on the host's unit): a person waiting longer than that wants to be told.
``--timeout`` wins over ``$CLOWDER_TIMEOUT``, which wins over DEFAULT.
"""

from __future__ import annotations

import math
import os

from . import exits

DEFAULT = 10.0
ENV = "CLOWDER_TIMEOUT"
# The exit status of a clowderctl whose daemon did not answer in time: timeout(1)'s.
EXIT_CODE = exits.TIMEOUT

_given: float | None = None


def parse(text: str) -> float:
    """A deadline in seconds; ValueError unless it is a finite number above zero."""
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{text!r} is not a number of seconds above zero")
    return value


def set_seconds(value: float | None) -> None:
    """The deadline given on the command line (``--timeout``), if any."""
    global _given
    _given = value


def given() -> float | None:
    """The deadline given on the command line, if any."""
    return _given


def seconds() -> float:
    """The deadline in force; ValueError if ``$CLOWDER_TIMEOUT`` is not a valid one."""
    if _given is not None:
        return _given
    text = os.environ.get(ENV)
    if not text:
        return DEFAULT
    try:
        return parse(text)
    except ValueError:
        raise ValueError(f"${ENV}={text!r}: expected a number of seconds above zero") \
            from None
