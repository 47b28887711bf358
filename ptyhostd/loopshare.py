"""The loop's share of time for model work done in place, without a hop to the screen
pool: small renders (RENDERS) and a flood's reads fed to its model (FEEDS).

A snapshot of a model that has every byte already is a read of it: for a small screen,
tens to hundreds of microseconds of ghostty's C (session.py, INLINE_RENDER_CELLS).
Made in the screen pool it costs two thread hand-offs more, and after a pause those
are the most of it: a text snapshot of a quiet 80x24 session 0.74-0.85 ms after 20-200
ms of quiet against 0.21 ms back to back, where a request that never leaves the loop
(ListSessions) took 0.38-0.44 ms (docs/design.md "Small renders on the loop").

So such a render is made on the loop while the loop has spent less than ``share`` of
its time on them (a token bucket: ``burst`` seconds at most, refilled at ``share``
seconds a second), and in the pool otherwise: a client that asks for snapshots without
end gets them from the pool, as before, and the loop keeps at least 1 - ``share`` of its
time for every other session (tests/test_loopshare.py).  One bucket for every user:
one user who uses it up sends every user's renders to the pool, which is fair by user
(screenpool.py), never to a longer wait than before.
"""

from __future__ import annotations

import time
from typing import Callable


class LoopShare:
    """Up to ``share`` of the loop's time, ``burst`` seconds of it at once."""

    def __init__(self, share: float, burst: float,
                 clock: Callable[[], float] = time.perf_counter):
        self.share = share
        self.burst = burst
        self._clock = clock
        self._left = burst
        self._at = clock()

    def allows(self) -> bool:
        """Whether the loop may do one more such piece of work now."""
        now = self._clock()
        self._left = min(self.burst, self._left + (now - self._at) * self.share)
        self._at = now
        return self._left > 0

    def spent(self, seconds: float) -> None:
        """The loop spent ``seconds`` on one (a piece may overdraw: the next wait)."""
        self._left -= seconds


# Renders on the loop: at most 5 % of its time, 2 ms at once (one made there costs
# less than 0.5 ms, or a few ms once when its screen turned costly: session.py).
RENDERS = LoopShare(share=0.05, burst=0.002)
# A flood's reads fed to its model on the loop (session.INLINE_FEED_ASCII): at most half
# of its time, 4 ms at once.  One flood of text takes ~30 % (its parse, ~0.2-0.4 ms a
# 64 KiB read); past the share, as with several floods at once, reads go to the screen
# pool as before, where the second core parses them.
FEEDS = LoopShare(share=0.5, burst=0.004)
