"""The loop's share for renders made in place (ptyhostd/loopshare.py), on a clock of
our own: how much of the loop's time a client that asks without end can take."""

from __future__ import annotations

import random

from ptyhostd.loopshare import LoopShare


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_share():
    clock = Clock()
    share = LoopShare(share=0.05, burst=0.002, clock=clock)
    assert share.allows()
    share.spent(0.0015)
    assert share.allows()  # 0.5 ms left
    share.spent(0.001)  # overdrawn by 0.5 ms
    assert not share.allows()
    clock.now += 0.005  # refills 0.25 ms: still 0.25 ms short
    assert not share.allows()
    clock.now += 0.006  # 0.3 ms more
    assert share.allows()


def test_a_quiet_spell_never_saves_more_than_the_burst():
    clock = Clock()
    share = LoopShare(share=0.05, burst=0.002, clock=clock)
    clock.now += 3600
    spent = 0.0
    while share.allows():
        share.spent(0.0005)
        spent += 0.0005
    assert spent <= 0.002 + 0.0005


def test_a_client_that_asks_without_end_gets_the_share_at_most():
    """Renders of random cost asked back to back for 60 s of the loop's time: the loop
    spends at most share x time + the burst + one render on them."""
    rng = random.Random(3)
    clock = Clock()
    share = LoopShare(share=0.05, burst=0.002, clock=clock)
    start, inline, pooled = clock.now, 0.0, 0
    while clock.now - start < 60:
        cost = rng.uniform(0.00005, 0.0008)
        if share.allows():
            clock.now += cost  # made on the loop
            share.spent(cost)
            inline += cost
        else:
            pooled += 1
            clock.now += 0.0002  # the loop's part of a pool hop
    elapsed = clock.now - start
    assert inline <= 0.05 * elapsed + 0.002 + 0.0008, inline / elapsed
    assert inline >= 0.04 * elapsed, "the share is there to be used"
    assert pooled > 0

