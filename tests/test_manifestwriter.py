"""The manifest's writer (ptyhostd/manifestwriter.py): rewrites off the loop, one at a
time, the changes made meanwhile coalesced into the next; a change awaited is in the
manifest when the wait returns.  Each write here is held in its thread on an Event, so
what the loop does meanwhile is seen, not timed."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from ptyhostd import manifest
from ptyhostd.manifest import SLOTS, Manifest
from ptyhostd.manifestwriter import ManifestWriteError, ManifestWriter

DEADLINE = 10  # seconds, for anything this file waits on


class Table:
    """A session table whose writes the test lets through one at a time."""

    def __init__(self):
        self.records = [b'{"id":"a1","name":"first"}']
        self.m = Manifest.create()
        self.started = threading.Semaphore(0)  # a write began in the thread
        self.go = threading.Semaphore(0)  # let one write finish
        self.fail = False
        real = self.m.write_sessions

        def held(records, left=""):
            self.started.release()
            assert self.go.acquire(timeout=DEADLINE), "the test never let the write go"
            if self.fail:
                raise OSError(28, "No space left on device")
            real(records, left)
        self.m.write_sessions = held
        self.writer = ManifestWriter(self.m, lambda: list(self.records))
        self.changes = 0  # changed() calls the writer has seen
        real_changed = self.writer.changed

        self.counted = None  # an asyncio.Event set at each change (taken)

        def counted() -> None:
            real_changed()
            self.changes += 1
            if self.counted is not None:
                self.counted.set()
        self.writer.changed = counted

    def names(self) -> list[str]:
        """The names in the newest copy, as a next start would read them."""
        got, content = Manifest.adopt({slot: os.dup(self.m.fds[slot].fd) for slot in SLOTS})
        got.close()
        return [r["name"] for r in content["sessions"]]

    async def taken(self, changes: int) -> None:
        """Return once the writer has seen ``changes`` changes in all (a waiter's
        ``written()`` runs on the loop's next turn after it is made a task)."""
        if self.counted is None:
            self.counted = asyncio.Event()

        async def seen():
            while self.changes < changes:
                self.counted.clear()
                await self.counted.wait()
        await asyncio.wait_for(seen(), DEADLINE)

    async def began(self) -> None:
        ok = await asyncio.to_thread(self.started.acquire, timeout=DEADLINE)
        assert ok, "no write began in the thread"

    def close(self) -> None:
        self.writer.close()
        self.m.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE))


def test_changes_during_a_write_are_written_once_by_the_next():
    async def main():
        t = Table()
        first = asyncio.ensure_future(t.writer.written())
        await t.began()  # the first write is in the thread, held
        waits = []
        for i in range(100):  # the loop turns while it is held, and each change is taken
            t.records = [b'{"id":"a1","name":"n%d"}' % i]
            waits.append(asyncio.ensure_future(t.writer.written()))
            await t.taken(i + 2)  # the first write's change, and this one's
        assert not first.done() and not any(w.done() for w in waits)
        t.go.release()
        await first
        assert t.names() == ["first"]
        await t.began()  # one more write, with every change of the hundred
        assert not any(w.done() for w in waits), "a wait returned before its write"
        t.go.release()
        await asyncio.gather(*waits)
        assert t.names() == ["n99"]
        await t.writer.settled()
        assert t.writer.writes == 2, t.writer.writes
        t.close()
    run(main())


def test_a_failed_write_fails_its_waiters_and_the_next_change_writes_again():
    async def main():
        t = Table()
        t.fail = True
        t.go.release()
        with pytest.raises(ManifestWriteError, match="No space left"):
            await t.writer.written()
        t.fail = False
        t.records = [b'{"id":"a1","name":"again"}']
        t.go.release()
        await t.writer.written()
        assert t.names() == ["again"]
        t.close()
    run(main())


def test_write_now_waits_for_the_write_in_flight_and_does_the_waiting_ones():
    async def main():
        t = Table()
        first = asyncio.ensure_future(t.writer.written())
        await t.began()
        t.records = [b'{"id":"a1","name":"second"}']
        second = asyncio.ensure_future(t.writer.written())
        await t.taken(2)
        t.go.release()  # the held write may finish; write_now waits for it, then writes
        t.go.release()  # write_now's own (through the same held method)
        t.writer.write_now(left="restart")
        await asyncio.gather(first, second)
        assert t.names() == ["second"]
        got, content = Manifest.adopt({s: os.dup(t.m.fds[s].fd) for s in SLOTS})
        got.close()
        assert content["left"] == "restart"
        await t.writer.settled()
        assert t.writer.writes == 1, "the change write_now wrote was written again"
        t.close()
    run(main())


def test_a_pending_change_keeps_mark_from_writing_a_stale_body():
    """mark() writes the body unmark() wrote when it is the newest; a change not yet
    written makes it stale, so mark() must refuse and the host write the table."""
    async def main():
        m = Manifest.create()
        m.write_sessions([b'{"id":"a1","name":"old"}'], left="restart")
        adopted, _ = Manifest.adopt({s: os.dup(m.fds[s].fd) for s in SLOTS})
        records = [b'{"id":"a1","name":"old"}']
        writer = ManifestWriter(adopted, lambda: list(records))
        assert writer.now(Manifest.unmark) is True
        records[0] = b'{"id":"a1","name":"new"}'
        writer.changed()  # not yet written: the loop has not turned
        assert writer.now(lambda x: x.mark("restart")) is False
        writer.write_now(left="restart")
        got, content = Manifest.adopt({s: os.dup(adopted.fds[s].fd) for s in SLOTS})
        got.close()
        assert content["sessions"][0]["name"] == "new" and content["left"] == "restart"
        await writer.settled()
        writer.close()
        m.close()
        adopted.close()
    run(main())


def test_the_thread_writes_the_largest_table_a_user_can_make():
    """One user's 1,024 sessions with a 32 KiB command line each: written whole by the
    thread, read back whole (manifest.py writes the long records without a copy)."""
    async def main():
        big = [b'{"id":"s%05d","argv":["%s"]}' % (i, b"x" * 32_000) for i in range(1024)]
        m = Manifest.create()
        writer = ManifestWriter(m, lambda: big)
        await writer.written()
        got, content = Manifest.adopt({s: os.dup(m.fds[s].fd) for s in SLOTS})
        got.close()
        assert [r["id"] for r in content["sessions"]] == ["s%05d" % i for i in range(1024)]
        assert os.fstat(m.fds[SLOTS[m.generation % 2]].fd).st_size > 1024 * 32_000
        writer.close()
        m.close()
    assert manifest._IOV_MAX <= 1024
    run(main())
