"""The terminal models' work, done off the event loop, in bounded amounts.

Feeding a model and rendering it (a snapshot, a repaint) is pure Python and can take a
second at the largest size (a repaint of a 500x500 screen of distinct colours: ~0.3 s;
a full coloured screen erase, many times over in a few KiB of output).  On the loop
that forwards every session's bytes that froze every session, so the work runs in a
small pool of worker threads instead: the loop only copies bytes out of the ring and
hands them over, and the GIL's switch interval bounds what the loop waits for the GIL
at each wake-up while a worker runs Python (``SWITCH_INTERVAL``, set by the host).

A feed is also bounded in work, not only in bytes: escape sequences make a few bytes
cost a pass over a row or the whole screen (``ESC # 8``, ``CSI 9999 b``, scrolling), so
a catch-up stops after ``WORK_BUDGET`` units of the model's ``work`` (pyte: cells and
rows touched; ghostty: time in C, whose loops over the screen are fast but not free).  What it
skipped is then lost to the model (the session rebuilds it from the newest bytes).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional, Union

from . import screenmemory
from .screenpool import Pool

# Two threads: one session's costly catch-up does not hold up every other's snapshot;
# taken by class and by user in turn (screenpool.py).
POOL = Pool(workers=2, name="screen")
# Cells and rows one catch-up may touch: ~1-2 s of pyte on this machine at its busiest.
# Ordinary output stays far below it (256 KiB of text costs ~0.3 M; a TUI redrawing a
# 500x500 screen in it, ~1 M).
WORK_BUDGET = 4_000_000
# The GIL's switch interval in the host (CPython's default is 5 ms): the longest the
# loop waits for the GIL at a wake-up while a worker runs Python.  An echo is two
# wake-ups (the key in, the program's answer out); pyte's 500x500 JSON snapshot beside
# it: echo p50 8.3 ms at 5 ms, 1.4 ms at 1 ms (bench/snapshot_gil.py, docs/design.md
# "Snapshots beside other sessions' echo").  Only threads that wait pay for switches.
SWITCH_INTERVAL = 0.001
SLICE = 2048  # bytes fed between budget checks: ~0.3 s at the worst rate measured
MAX_SLICE = 32 * 1024  # ... and at most this much while slices cost little (a bomb that
# follows text overshoots the budget by one slice: DECALN over 500x500, ~3.5 s of C)
SLICE_WORK = WORK_BUDGET // 100  # a slice's work that counts as "little": ~10 ms

Step = Union[bytes, tuple]  # output to feed, or (cols, rows) to resize to


BUDGET_HIT = -1  # feed_plan: the plan cost more than its budget


def feed_plan(screen, plan: list[Step], budget: int = WORK_BUDGET,
              stop: Optional[Callable[[], bool]] = None) -> int:
    """Feed ``plan`` to ``screen`` (in a worker thread); what it left unfed: 0 (none),
    ``BUDGET_HIT`` (it stopped at the budget), or, when ``stop()`` said a request waits
    for this thread, the bytes of the plan's last step not fed yet (asked between its
    slices, after the first: a turn of a costly flood is 5-50 ms, a slice well under
    one; the caller feeds the rest at its next turn)."""
    start = screen.work
    screenmemory.fit(screen)  # a share changed since: trimmed before it grows again
    last = len(plan) - 1
    for n, step in enumerate(plan):
        if isinstance(step, tuple):
            screen.resize(*step)
            continue
        i, size = 0, SLICE
        while i < len(step):
            before = screen.work
            screen.feed(step[i:i + size])
            i += size
            if screen.work - start > budget:
                return BUDGET_HIT
            if n == last and stop is not None and i < len(step) and stop():
                return len(step) - i
            # Cheap output is fed in bigger slices, costly output in SLICE: each feed is
            # a cffi call that gives the GIL up and takes it back, and a thread doing that
            # thousands of times a second starves the loop of the GIL (CPython switches
            # only after an interval with no release), which paced a flood to 25 MB/s.
            cost = screen.work - before
            if cost < SLICE_WORK // 4:
                size = min(size * 2, MAX_SLICE)
            elif cost > SLICE_WORK:
                size = SLICE
    # Not compacted here: compression waits for quiet output (session.COMPACT_AFTER).
    return 0


def run_plan(screen, plan: list[Step], budget: int = WORK_BUDGET) -> bool:
    """Feed all of ``plan`` to ``screen``; False if it stopped at the budget."""
    return feed_plan(screen, plan, budget) != BUDGET_HIT


def run_plan_then(screen, plan: list[Step], what: Optional[Callable],
                  budget: int = WORK_BUDGET,
                  stop: Optional[Callable[[], bool]] = None) -> tuple:
    """``feed_plan``, then what a request wants from the model, in the same turn of the
    worker: a repaint or snapshot that finds output not fed yet (an attach right after
    a flood) takes one hop to the pool, not two (~0.1-0.3 ms each).  Returns
    ``(ok, seconds, result, error, unfed)``: ``seconds``, the CPU this thread spent
    feeding (the model's own cost, whatever else the machine is doing); nothing is
    rendered when the plan stopped at the budget (the caller rebuilds the model first);
    an error of ``what`` is returned, to be raised on the loop once the feed is
    accounted for; ``unfed``, the bytes ``stop`` left for the next turn (a feed alone)."""
    began = time.thread_time()
    left = feed_plan(screen, plan, budget, stop if what is None else None)
    seconds = time.thread_time() - began
    if left == BUDGET_HIT or what is None:
        return left != BUDGET_HIT, seconds, None, None, max(left, 0)
    try:
        return True, seconds, what(screen), None, 0
    except Exception as exc:
        return True, seconds, None, exc, 0


async def run(fn: Callable, *args, owner: Optional[int] = None, request: bool = False):
    """``fn(*args)`` in the screen pool, as ``owner``'s work (a uid; None: the host's);
    ``request``: someone waits on it (screenpool.py serves those first)."""
    return await asyncio.wrap_future(POOL.submit(fn, *args, owner=owner, request=request))


def render(screen, what: Optional[Callable]):
    """What a request wants from the model, computed in the worker thread."""
    return what(screen) if what is not None else None
