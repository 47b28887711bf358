"""The model's scrollback is compressed once output has been quiet for COMPACT_AFTER:
one timer a quiet spell, whatever the number of reads (ptyhostd/session.py).  A pure
test of the timing logic on a session of our own, under a loop whose clock the test
moves (no host, no sleeping)."""

from __future__ import annotations

import time

from ptyhostd import session as session_mod
from ptyhostd.ring import Ring
from ptyhostd.session import Session


class Clock:
    """The parts of an event loop the compression timer uses, on a clock we move."""

    def __init__(self):
        self.now = 0.0
        self.timers: list = []  # (when, callback)
        self.armed = 0
        self.compressions = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when, callback):
        self.timers.append((when, callback))
        self.armed += 1
        return self

    def create_task(self, coro):
        coro.close()  # Session._compact: counted, not run
        self.compressions += 1
        return self

    def add_done_callback(self, _fn):
        pass

    def advance(self, to: float) -> None:
        self.now = to
        while True:
            due = sorted((w, i) for i, (w, _) in enumerate(self.timers) if w <= self.now)
            if not due:
                return
            _, i = due[0]
            _, callback = self.timers.pop(i)
            callback()


def test_compression_waits_for_a_quiet_spell_and_runs_once(monkeypatch):
    monkeypatch.setattr(session_mod, "COMPACT_AFTER", 0.2)
    ring = Ring.create("compact-test", 1 << 16)
    s = Session("compact-test", name="t", argv=[], cwd=None, uid=0, cols=80, rows=24,
                created=time.time(), ring=ring)
    s.screen = object()
    clock = s._loop = Clock()
    try:
        for i in range(40):  # a read every 10 ms for 0.4 s: never quiet for 0.2 s
            clock.advance(i * 0.01)
            s._compact_later()
            assert clock.compressions == 0, "compressed while output went on"
        last = clock.now
        assert clock.armed <= 3, f"{clock.armed} timers for one spell of output"
        clock.advance(last + 0.2 - 0.001)
        assert clock.compressions == 0, "compressed before the quiet spell was over"
        clock.advance(last + 0.2)
        assert clock.compressions == 1, "not compressed once after the quiet spell"
        clock.advance(last + 1.0)
        assert clock.compressions == 1, "compressed again with no new output"
        # A read, then a follow turn starts (it holds compression off); its end re-arms.
        s._compact_later()
        s._compact_due = float("inf")
        clock.advance(clock.now + 1.0)
        assert clock.compressions == 1, "compressed while a follow ran"
        s._compact_later()
        clock.advance(clock.now + 0.2)
        assert clock.compressions == 2, "the end of the follow did not re-arm it"
    finally:
        s._loop = None
        s.screen = None
        ring.close()
