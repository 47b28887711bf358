"""A journal line at most once per key every INTERVAL, with how many were skipped.

A client that repeats a refused request in a loop (a spawn past its user's limit, a
connection past its uid's cap, a forged Origin, a login token a connection) must not
write a journal line a request: one connection pipelining forged Origins made 14,700.
Each daemon keeps a RateLimitedLog and names a key for each kind of line (a cause, and
the uid it is about); a line is written when its key's last one is an INTERVAL old, and
ends "(N more since the last line)" when N were skipped meanwhile.

The table of keys is bounded: past ``keys`` entries, those logged more than an interval
ago are forgotten (with the count skipped under them), and when all are recent a new key
shares one overflow entry with every other new key, so the table never holds more than
``keys`` + 1 entries and keys past the table cost at most one line an interval together.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Hashable, Optional

INTERVAL = 10.0  # seconds between two lines of one key
KEYS = 1024  # entries the table holds before it forgets or shares (~200 bytes each)
_OVERFLOW = object()  # the key of the keys past a full table of recent ones


class RateLimitedLog:
    """Lines to ``logger``, at most one per key every ``interval`` seconds."""

    def __init__(self, logger: logging.Logger, interval: float = INTERVAL, *,
                 keys: int = KEYS, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.interval = interval
        self.keys = keys
        self.clock = clock
        # key -> (logged at, skipped since), oldest line first: a key logged again is
        # moved to the end, so forgetting pops stale entries from the front.
        self._last: dict[Hashable, tuple[float, int]] = {}

    def warning(self, key: Hashable, message: str, *args,
                extra: Optional[dict] = None) -> bool:
        """Log ``message % args`` at warning level unless ``key`` had a line within the
        interval; True if it was written."""
        return self._log(logging.WARNING, key, message, args, extra)

    def info(self, key: Hashable, message: str, *args,
             extra: Optional[dict] = None) -> bool:
        """As warning(), at info level."""
        return self._log(logging.INFO, key, message, args, extra)

    def _log(self, level: int, key: Hashable, message: str, args: tuple,
             extra: Optional[dict]) -> bool:
        now = self.clock()
        if key not in self._last and len(self._last) >= self.keys:
            self._forget(now)
            if len(self._last) >= self.keys:
                key = _OVERFLOW
        at, skipped = self._last.get(key, (now - self.interval, 0))
        if now - at < self.interval:
            self._last[key] = (at, skipped + 1)
            return False
        self._last.pop(key, None)
        self._last[key] = (now, 0)
        more = f" ({skipped} more since the last line)" if skipped else ""
        # Formatted here: the message may hold a client's text, '%' included.  The
        # journal's CODE_FILE/CODE_LINE name the caller of warning()/info(), not us.
        self.logger.log(level, "%s%s", message % args if args else message, more,
                        extra=extra, stacklevel=3)
        return True

    def _forget(self, now: float) -> None:
        """Drop the entries whose line is an interval old (the oldest come first)."""
        stale = []
        for key, (at, _skipped) in self._last.items():
            if now - at < self.interval:
                break
            stale.append(key)
        for key in stale:
            del self._last[key]

    def __len__(self) -> int:
        """The entries the table holds (at most ``keys`` + 1)."""
        return len(self._last)
