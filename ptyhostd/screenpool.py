"""The screen pool: the threads the terminal models are fed and rendered in, shared fairly.

Every session's model follows its output in these threads (screenwork.py), and every
repaint, snapshot and history is rendered in them.  A first-in-first-out pool
(``ThreadPoolExecutor``, until 2026-12-06) served that work in the order it came, so one
user's many floods kept a catching-up turn of each of their sessions queued ahead of
another user's snapshot: bob's snapshot p50 40 ms, p99 69 ms beside alice's 16 floods of
coloured text (0.5 ms idle; tests/test_hostile_screen_pool.py).

So work is taken by class, then by user in turn:
- a request's work (someone waits on it: an attach's repaint, a snapshot, a history)
  before a model's catching up and upkeep, except that while catching up waits, one
  thread is always left to it: requests can never hold every model back (a model that
  lags stops its pty's reading, so that would stall every session's output); and a
  thread feeding a model ends its turn at the next slice when a request waits and no
  thread serves one (``wants_a_thread``);
- within a class, each user's queue in turn (round robin), first come first served
  within a user's: a user's thousand sessions take one turn in each round, as a user
  with one does.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from typing import Callable, Optional

REQUEST, UPKEEP = 0, 1  # the classes of work: someone waits on it, or no one does


class Pool:
    """``workers`` threads (started at the first work) taking work as described above."""

    def __init__(self, workers: int = 2, name: str = "screen"):
        self.workers = workers
        self.name = name
        self._cv = threading.Condition()
        # Per class: owner (a uid, or None for the host's own work) -> that owner's queue.
        self._queues: tuple = (collections.OrderedDict(), collections.OrderedDict())
        self._requests_running = 0
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable, *args, owner: Optional[int] = None,
               request: bool = False) -> concurrent.futures.Future:
        """Queue ``fn(*args)`` as ``owner``'s work; its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            queues = self._queues[REQUEST if request else UPKEEP]
            queues.setdefault(owner, collections.deque()).append((future, fn, args))
            self._cv.notify()
        return future

    def wants_a_thread(self) -> bool:
        """Whether a request waits and none runs: a thread feeding a model then stops
        its turn early and takes it (screenwork.feed_plan's ``stop``), so a request waits
        for a slice of a feed, not a whole turn.  Read without the lock: a stale answer
        costs a turn ended early or a request served a slice later, nothing more."""
        return bool(self._queues[REQUEST]) and self._requests_running == 0

    def waiting(self) -> tuple[int, int]:
        """How many requests and upkeep works wait (for tests and the journal)."""
        with self._cv:
            return tuple(sum(map(len, q.values())) for q in self._queues)  # type: ignore

    def _take(self):
        """The next work (with the lock held), or None if there is none."""
        requests, upkeep = self._queues
        if requests and (not upkeep or self._requests_running < self.workers - 1):
            kind, queues = REQUEST, requests
        elif upkeep:
            kind, queues = UPKEEP, upkeep
        else:
            return None
        owner, queue = next(iter(queues.items()))
        work = queue.popleft()
        if queue:
            queues.move_to_end(owner)  # the next owner's turn
        else:
            del queues[owner]
        return kind, work

    def _work(self) -> None:
        while True:
            with self._cv:
                taken = self._take()
                while taken is None:
                    self._cv.wait()
                    taken = self._take()
                kind, (future, fn, args) = taken
                if kind == REQUEST:
                    self._requests_running += 1
            try:
                if future.set_running_or_notify_cancel():  # not cancelled while queued
                    try:
                        result = fn(*args)
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            finally:
                del future, fn, args  # no reference to a model kept while idle
                if kind == REQUEST:
                    with self._cv:
                        self._requests_running -= 1
