"""The screen pool's order (ptyhostd/screenpool.py): requests first but never on every
thread while upkeep waits, users in turn within a class, cancelled work skipped, errors
passed back.  The workers are held on a semaphore, so what is queued meanwhile is seen,
not timed."""

from __future__ import annotations

import threading

import pytest

from ptyhostd.screenpool import Pool

DEADLINE = 10


class Gate:
    """Work that records its name, then waits until let through by name."""

    def __init__(self):
        self.order: list[str] = []
        self.names: list[str] = []  # all work submitted, in order
        self.started = threading.Semaphore(0)
        self._go: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _event(self, name: str) -> threading.Event:
        with self._lock:
            return self._go.setdefault(name, threading.Event())

    def let(self, *names: str) -> None:
        for name in names:
            self._event(name).set()

    def work(self, name: str):
        self.order.append(name)
        self.started.release()
        assert self._event(name).wait(DEADLINE), f"{name} never let through"
        return name

    def wait_started(self, count: int = 1):
        for _ in range(count):
            assert self.started.acquire(timeout=DEADLINE), \
                f"work did not start within {DEADLINE} s: {self.order}"


def _fill(pool: Pool, gate: Gate, work: list[tuple[str, int, bool]]):
    gate.names += [name for name, _, _ in work]
    return [pool.submit(gate.work, name, owner=owner, request=request)
            for name, owner, request in work]


def _drain(gate: Gate, futures) -> None:
    """Let every work through, in whatever order the pool runs it; wait for them all."""
    gate.let(*gate.names)
    for f in futures:
        f.result(timeout=DEADLINE)


def test_users_take_turns_within_a_class():
    """Alice's ten queued feeds do not all go before bob's one: he is second."""
    pool, gate = Pool(workers=1), Gate()
    first = _fill(pool, gate, [("busy", 9, False)])
    gate.wait_started()
    queued = _fill(pool, gate, [(f"a{i}", 1000, False) for i in range(10)]
                   + [("b0", 1001, False), ("c0", 1002, False), ("b1", 1001, False)])
    _drain(gate, first + queued)
    assert gate.order == ["busy", "a0", "b0", "c0", "a1", "b1"] + [f"a{i}" for i in range(2, 10)]


def test_a_request_goes_before_upkeep_but_never_takes_the_last_thread_from_it():
    """Two threads: while feeds wait, requests run on one thread at most; a request
    waiting goes before every feed queued earlier."""
    pool, gate = Pool(workers=2), Gate()
    held = _fill(pool, gate, [("feed0", 1000, False), ("feed1", 1000, False)])
    gate.wait_started(2)
    later = _fill(pool, gate, [("feed2", 1000, False), ("feed3", 1001, False),
                               ("snap0", 1001, True), ("snap1", 1002, True)])
    gate.let("feed0")  # its thread takes the first request
    gate.wait_started()
    assert gate.order[2] == "snap0", gate.order
    gate.let("feed1")  # a request runs, so this thread feeds: the first in turn
    gate.wait_started()
    assert gate.order[3] == "feed2", gate.order
    gate.let("snap0")  # no request runs now: the next request goes first
    gate.wait_started()
    assert gate.order[4] == "snap1", gate.order
    _drain(gate, held + later)
    assert gate.order[5:] == ["feed3"], gate.order


def test_requests_use_every_thread_when_no_upkeep_waits():
    pool, gate = Pool(workers=2), Gate()
    futures = _fill(pool, gate, [("snap0", 1000, True), ("snap1", 1001, True)])
    gate.wait_started(2)  # both run at once: fails by its deadline if one waited
    _drain(gate, futures)


def test_cancelled_work_is_skipped_and_errors_come_back():
    pool, gate = Pool(workers=1), Gate()
    first = _fill(pool, gate, [("busy", 1, False)])
    gate.wait_started()
    skipped = pool.submit(gate.work, "skipped", owner=1)
    assert skipped.cancel()
    failing = pool.submit(lambda: 1 // 0, owner=1)
    _drain(gate, first)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=DEADLINE)
    gate.let("after")
    assert pool.submit(gate.work, "after").result(timeout=DEADLINE) == "after"
    assert gate.order == ["busy", "after"]
    assert pool.waiting() == (0, 0)


def test_a_feed_is_asked_to_give_its_thread_only_while_a_request_waits_and_none_runs():
    pool, gate = Pool(workers=2), Gate()
    feeds = _fill(pool, gate, [("feed0", 1000, False), ("feed1", 1000, False)])
    gate.wait_started(2)
    assert not pool.wants_a_thread()  # nothing waits
    snaps = _fill(pool, gate, [("snap0", 1001, True), ("snap1", 1002, True)])
    assert pool.wants_a_thread()  # a request waits, none runs: a feed should stop
    gate.let("feed0")
    gate.wait_started()
    assert gate.order[2] == "snap0" and not pool.wants_a_thread()  # one runs now
    _drain(gate, feeds + snaps)
    assert not pool.wants_a_thread()
