"""Who typed last: so a flooding session reads its pty in smaller wakes while someone
types into another one.

The loop serves one pty wake at a time, and an echo waits for up to two of a flood's
wakes (the keystroke's read, then its echo's).  A 64 KiB wake (session.WAKE_BYTES) is
~2.5 ms of the host's time at its ~25 MB/s.  8 KiB wakes always took ~40 % off the echo
beside a flood but ~15 % off a lone `cat`'s throughput; small only while another
session had input in the last TYPING_WINDOW seconds, the echo beside a flood gained as
much (p50 2.27 -> 1.59 ms, p99 7.50 -> 3.91) and the `cat` lost nothing (26.6 vs 26.0
MB/s, same rounds; docs/bench.md section 3, docs/design.md "Smaller wakes beside
someone typing").

Two slots answer "when did a session other than S last have input?" for every S in O(1),
without a table of all sessions read at every wake: the latest input (its session and
time), and the latest input of any session but that one.
"""

from __future__ import annotations

import math
import time

TYPING_WAKE_BYTES = 8 * 1024
TYPING_WINDOW = 1.0  # seconds after another session's input that wakes stay small


class Keystrokes:
    __slots__ = ("sid", "at", "other_at")

    def __init__(self) -> None:
        self.sid: str | None = None  # the session of the latest input
        self.at = -math.inf  # its time (monotonic)
        self.other_at = -math.inf  # the latest input of any session but ``sid``

    def typed(self, sid: str, now: float | None = None) -> None:
        """Input (keystrokes, a paste or a Send) for session ``sid`` now."""
        if sid != self.sid:
            # The previous latest was another session's: it is now the latest of
            # "everyone but sid" (any older one is older than it).
            self.other_at, self.sid = self.at, sid
        self.at = time.monotonic() if now is None else now

    def others_typing(self, sid: str, now: float) -> bool:
        """Whether a session other than ``sid`` had input within TYPING_WINDOW."""
        last = self.other_at if sid == self.sid else self.at
        return now - last < TYPING_WINDOW


# One for the host: the sessions' byte path reads it, the connections' input writes it.
KEYSTROKES = Keystrokes()
