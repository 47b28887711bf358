"""Which reads of output are fed to the model on the loop and which in the screen pool
(``Session._forward``, ``_feed_inline``; docs/design.md "A flood's model on the loop"):
a real session's ring and ghostty model under a loop of our own, no host.  Where a read
was fed is read from the session: on the loop, the model has it when ``_forward``
returns and no feeding task was started; in the pool, a task follows the output."""

from __future__ import annotations

import asyncio

import pytest

from ptyhostd import engine, loopshare
from ptyhostd import session as session_mod
from ptyhostd.ring import Ring
from ptyhostd.session import (INLINE_FEED, INLINE_FEED_ASCII, INLINE_LINES, Session,
                              cheap_output)
from test_inline_render import Clock  # time as session.py sees it, moved by the test

pytestmark = pytest.mark.skipif(engine._pyghostty_where() is None,
                                reason="pyghostty not installed")

# A flood's read: lines of ASCII text, as `cat` of a log gives, one wake's worth.
TEXT = b"".join(b"%05d the quick brown fox jumps over the lazy dog, KEY=%d, ok\r\n" % (i, i)
               for i in range(3000))


@pytest.fixture
def fed(monkeypatch):
    """``feed(reads, cost)``: a 200x50 session with a current model is given each read
    as a wake of its pty would; returns where each went ("loop" or "pool") and the
    model's text at the end, once everything was fed."""
    monkeypatch.setattr(engine, "chosen", "ghostty")
    clock = Clock()  # only a feed moves it, by ``cost``: what _feed_inline then spends
    monkeypatch.setattr(session_mod, "time", clock)
    monkeypatch.setattr(session_mod, "FEEDS",
                        loopshare.LoopShare(0.5, 0.004, clock=clock.perf_counter))
    rings = []

    def feed(reads: list[bytes], cost: float = 0.0) -> tuple[list[str], str]:
        ring = Ring.create(f"inline-feed-{len(rings)}", 1 << 20)
        rings.append(ring)
        s = Session(f"feed-{len(rings)}", name="t", argv=[], cwd=None, uid=0, cols=200,
                    rows=50, created=0.0, ring=ring)
        clock.cost = cost

        async def go():
            s._loop = asyncio.get_running_loop()
            await s.screen_call()  # the model made (in the pool) and current
            feed = s.screen.feed

            def costly_feed(data):
                clock.now += clock.cost
                feed(data)
            s.screen.feed = costly_feed
            where = []
            for data in reads:
                start = ring.head
                ring.put(data)
                s._forward(start, len(data))
                inline = s.screen_pos == ring.head and s._following is None
                where.append("loop" if inline else "pool")
                if s._following is not None:
                    await s._following  # (it feeds nothing here: no pty to follow)
                    await s.screen_call()  # fed in the pool before the next read
            text = (await s.screen_call(lambda screen: screen.snapshot("text")))[0]
            s._loop = None
            return where, text
        return asyncio.run(go())

    yield feed
    for ring in rings:
        ring.close()


def test_a_floods_ascii_reads_are_fed_on_the_loop(fed):
    assert len(TEXT) > INLINE_FEED
    reads = [TEXT[:INLINE_FEED_ASCII], TEXT[INLINE_FEED_ASCII:2 * INLINE_FEED_ASCII]]
    where, text = fed(reads)
    assert where == ["loop", "loop"]
    last = reads[1].rstrip(b"\r\n").rsplit(b"\r\n", 1)[-1].decode()
    assert text.rstrip().endswith(last.rstrip()), "the model has every byte, in order"


def test_a_big_read_of_utf8_or_costly_sequences_goes_to_the_pool(fed):
    """Over INLINE_FEED, only ASCII: a combining mark or a cluster costs ghostty more
    than its length on one cell.  Small reads of UTF-8 stay on the loop (the echo's)."""
    utf8 = "é".encode() * (INLINE_FEED // 2 + 1)
    where, _ = fed([utf8, "é".encode() * 100, (b"x" * 199 + b"\x1b[2J") * 40])
    assert where == ["pool", "loop", "pool"]


def test_past_the_loops_share_a_floods_reads_go_to_the_pool(fed):
    """Each read costing 6 ms of the loop, back to back: the share (half the loop's
    time, 4 ms at once) lets the first overdraw it, refills 3 ms while it ran, lets the
    second, and then sends the third to the pool."""
    reads = [TEXT[i * 30000:(i + 1) * 30000] for i in range(3)]
    where, text = fed(reads, cost=0.006)
    assert where == ["loop", "loop", "pool"]
    last = reads[2].rstrip(b"\r\n").rsplit(b"\r\n", 1)[-1].decode()
    assert text.rstrip().endswith(last.rstrip()), "the pool fed the rest, in order"


def test_what_a_big_read_may_hold():
    """Over INLINE_FEED: ASCII only; an erase in line counted as a sequence, not as every
    K of the text (a flood of text with K in it is cheap, erases that would clear too
    many cells are not); at most INLINE_LINES line feeds (each may scroll a row)."""
    text = (b"KKKK KEY=K " * 7 + b"\r\n") * 1000
    assert len(text) > INLINE_FEED and cheap_output(text, 500)
    coloured = (b"\x1b[31mKEY\x1b[0m=value " * 4 + b"\r\n") * 1000
    assert cheap_output(coloured, 500)
    assert not cheap_output(b"x\x1b[2K" * 100, 500), "50,000 cells cleared"
    assert not cheap_output("é".encode() * 3000, 80), "UTF-8 over INLINE_FEED"
    assert cheap_output("é".encode() * 100, 80), "a small read of UTF-8: the echo's"
    lines = b"x" * 30 + b"\r\n"
    assert cheap_output(lines * INLINE_LINES, 80)
    assert not cheap_output(lines * (INLINE_LINES + 1), 80), "a scroll a line feed"
    assert not cheap_output(b"\r\n" * 3000, 80), "64 KiB of them: ~25 ms of ghostty"
