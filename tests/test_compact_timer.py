"""The model's scrollback is compressed once output has been quiet for COMPACT_AFTER:
one timer a quiet spell, whatever the number of reads (ptyhostd/session.py).  A pure
test of the timing logic, on a session of our own with a stand-in model (no host)."""

from __future__ import annotations

import asyncio
import threading
import time

from ptyhostd import session as session_mod
from ptyhostd.ring import Ring
from ptyhostd.session import Session


class Model:
    def __init__(self):
        self.compacted: list[float] = []
        self.lock = threading.Lock()

    def compact(self) -> None:
        with self.lock:
            self.compacted.append(time.monotonic())


def test_compression_waits_for_a_quiet_spell_and_runs_once(monkeypatch):
    monkeypatch.setattr(session_mod, "COMPACT_AFTER", 0.2)
    ring = Ring.create("compact-test", 1 << 16)
    s = Session("compact-test", name="t", argv=[], cwd=None, uid=0, cols=80, rows=24,
                created=time.time(), ring=ring)
    model = s.screen = Model()

    async def scenario():
        s._loop = asyncio.get_running_loop()
        last = None
        for _ in range(40):  # output every 10 ms for 0.4 s: never quiet for 0.2 s
            s._compact_later()
            last = time.monotonic()
            await asyncio.sleep(0.01)
            assert not model.compacted, "compressed while output went on"
        deadline = time.monotonic() + 5
        while not model.compacted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(model.compacted) == 1, "not compressed once after the quiet spell"
        assert model.compacted[0] - last >= 0.2 - 0.01, "compressed before the spell"
        await asyncio.sleep(0.4)
        assert len(model.compacted) == 1, "compressed again with no new output"
        # A follow turn holds it off; its end re-arms it.
        s._compact_due = float("inf")
        s._compact_later()
        s._compact_due = float("inf")
        await asyncio.sleep(0.4)
        assert len(model.compacted) == 1, "compressed while a follow ran"
        s._compact_later()
        deadline = time.monotonic() + 5
        while len(model.compacted) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(model.compacted) == 2, "the end of the follow did not re-arm it"
        s._loop = None
    try:
        asyncio.run(scenario())
    finally:
        s.screen = None
        ring.close()
