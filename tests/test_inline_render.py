"""Which snapshots are made on the loop and which in the screen pool
(``Session.screen_call(..., inline=True)``, docs/design.md "Small renders on the loop"):
a real session's ring and ghostty model under a loop of our own, no host.  Where a
render ran is read from the thread it ran in; what it cost, from a clock the test moves
(``_timed`` reads ``session.time.perf_counter``), so nothing here depends on the
machine's speed."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ptyhostd import engine, loopshare
from ptyhostd import session as session_mod
from ptyhostd.ring import Ring
from ptyhostd.session import Session

pytestmark = pytest.mark.skipif(engine._pyghostty_where() is None,
                                reason="pyghostty not installed")


class Clock:
    """``time`` as session.py sees it, with a perf_counter a render moves."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def made(monkeypatch):
    """A session of ``cols`` x ``rows`` with its output fed to its model, and a
    snapshot function that says where it ran: (text, "loop" or "pool")."""
    monkeypatch.setattr(engine, "chosen", "ghostty")
    clock = Clock()
    monkeypatch.setattr(session_mod, "time", clock)
    # A share of our own, on the same clock: full unless a test spends it.
    monkeypatch.setattr(session_mod, "RENDERS",
                        loopshare.LoopShare(0.05, 0.002, clock=clock.perf_counter))
    rings = []

    def make(cols: int = 80, rows: int = 24):
        ring = Ring.create(f"inline-test-{len(rings)}", 1 << 16)
        rings.append(ring)
        s = Session(f"inline-{len(rings)}", name="t", argv=[], cwd=None, uid=0, cols=cols,
                    rows=rows, created=0.0, ring=ring)
        loop_thread = threading.current_thread()

        async def snapshot(cost: float = 0.0, output: bytes = b""):
            if output:
                ring.put(output)

            def what(screen):
                clock.now += cost  # the render's cost, as _timed will read it
                where = "loop" if threading.current_thread() is loop_thread else "pool"
                return screen.snapshot("text").rstrip("\n"), where
            return (await s.screen_call(what, inline=True))[0]
        return s, snapshot, clock

    yield make
    for ring in rings:
        ring.close()


def run(coro):
    return asyncio.run(coro)


def test_before_the_engine_is_warm_the_first_snapshot_is_made_in_the_pool(made, monkeypatch):
    """Until preload has loaded the formats, a first render would pay their cffi
    look-ups on the loop (tens of ms): the pool; once it is known cheap, the loop."""
    monkeypatch.setattr(engine, "warm", False)
    s, snapshot, _ = made()

    async def go():
        s.ring.put(b"hello")
        await s.screen_call()  # fed (as the session follows its output): a current model
        first = await snapshot(0.0001)
        second = await snapshot(0.0001)
        third = await snapshot(0.0001)
        return first, second, third
    first, second, third = run(go())
    assert first == ("hello", "pool"), "no cost known yet, the engine cold: the pool"
    assert second == ("hello", "loop") and third == ("hello", "loop")


def test_once_the_engine_is_warm_a_first_snapshot_is_made_on_the_loop(made, monkeypatch):
    """A fresh session's first snapshot, or the first right after a flood: no hop."""
    monkeypatch.setattr(engine, "warm", True)
    s, snapshot, _ = made()

    async def go():
        s.ring.put(b"hello")
        await s.screen_call()
        return await snapshot(0.0001)
    assert run(go()) == ("hello", "loop")


def test_a_costly_first_snapshot_sends_the_next_ones_to_the_pool(made, monkeypatch):
    """A first that turns out costly (a screen full of combining marks) stalls the loop
    once, as a screen that turned costly since its last snapshot does."""
    monkeypatch.setattr(engine, "warm", True)
    monkeypatch.setattr(session_mod, "RENDERS",
                        loopshare.LoopShare(1.0, 10.0, clock=time.perf_counter))
    s, snapshot, _ = made()

    async def go():
        s.ring.put(b"x")
        await s.screen_call()  # a current model: only the cost decides
        return [await snapshot(0.003), await snapshot(0.0001)]
    assert [where for _, where in run(go())] == ["loop", "pool"]


def test_preload_warms_every_format_made_on_the_loop(monkeypatch):
    monkeypatch.setattr(engine, "warm", False)
    monkeypatch.setattr(engine, "chosen", "ghostty")
    engine.preload()
    assert engine.warm


def test_output_not_fed_yet_goes_to_the_pool_with_its_snapshot(made):
    _, snapshot, _ = made()

    async def go():
        await snapshot(0.0001, b"one")
        return await snapshot(0.0001, b" two")
    assert run(go()) == ("one two", "pool")


def test_a_costly_snapshot_sends_the_next_ones_to_the_pool_until_one_is_cheap(
        made, monkeypatch):
    """A screen that turned costly since its last snapshot stalls the loop once, then
    its snapshots go to the pool; once one is cheap again, the loop makes them again.
    (A share that never runs out here: only the cost decides.)"""
    _, snapshot, clock = made()
    monkeypatch.setattr(session_mod, "RENDERS",
                        loopshare.LoopShare(1.0, 10.0, clock=clock.perf_counter))

    async def go():
        await snapshot(0.0001, b"x")
        costly = await snapshot(0.003)  # cheap before: on the loop, once
        after = [await snapshot(0.003), await snapshot(0.0001)]
        return costly, after, await snapshot(0.0001)
    costly, after, again = run(go())
    assert costly[1] == "loop"
    assert [where for _, where in after] == ["pool", "pool"]
    assert again[1] == "loop"


def test_a_big_screen_is_never_rendered_on_the_loop(made):
    _, snapshot, _ = made(cols=101, rows=50)  # 5,050 cells: over INLINE_RENDER_CELLS

    async def go():
        return [await snapshot(0.0001, b"big") for _ in range(3)]
    assert {where for _, where in run(go())} == {"pool"}


def test_past_the_loops_share_snapshots_go_to_the_pool(made):
    """A client asking without end: the loop makes them until its share is spent
    (2 ms at once), then the pool does, until the share has come back."""
    _, snapshot, clock = made()

    async def go():
        await snapshot(0.0004, b"x")  # the pool's: known to be cheap
        wheres = [(await snapshot(0.0004))[1] for _ in range(10)]
        clock.now += 1.0  # a second later: the share is whole again
        return wheres, (await snapshot(0.0004))[1]
    wheres, later = run(go())
    assert wheres[:5] == ["loop"] * 5 and "pool" in wheres[5:], wheres
    assert later == "loop"


def test_pyte_never_renders_on_the_loop(made, monkeypatch):
    _, snapshot, _ = made()

    async def go():
        await snapshot(0.0001, b"x")
        monkeypatch.setattr(engine, "chosen", "pyte")
        return await snapshot(0.0001)
    assert run(go())[1] == "pool"

