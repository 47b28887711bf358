"""Output timestamps: when the bytes of a session's backlog ring arrived, coarsely.

Kept in the ring's own header page (ring.py: the header uses its first 40 bytes of
4096), so they live in the same parked memfd and survive what the ring survives (host
restarts, ``kill -9``, hand-offs) with no FD store entry of their own.  A ring made by
older code has zeros there: no stamps, and the first read starts them.

A stamp is (ring offset, wall time): the bytes from its offset up to the next stamp's
arrived at its time or less than the gap to the next stamp after it (they are assigned
to the earlier stamp).  A read adds one only when ``INTERVAL`` has passed since the last
(``Stamps.note`` is one clock read and a compare otherwise: measured in docs/design.md).

The index has ``SLOTS`` entries, a fixed 3,968 bytes whatever the ring's size.  When it
is full, the stamps whose bytes no longer are in the ring are dropped first; otherwise the
stamp closest in time to the one before it is merged into it (its bytes take the earlier
time), ``MERGE`` times at once: pauses, which are what replay timing is made of, are kept
longest, and each merge takes the smallest gap left.

Crash safety: each entry is written before the count that includes it; a merge rewrites
entries after the merged one, so a ``kill -9`` in the middle leaves an index that may hold
an entry twice or out of order; ``load`` keeps only strictly increasing offsets with
non-decreasing times (a torn merge costs at most one stamp's precision, never the ring).
"""

from __future__ import annotations

import struct
import time

MAGIC = b"CLWSTMP1"
AT = 64  # where in the ring's header page the index starts (the ring header ends at 40)
_HEAD = struct.Struct("<8sI")  # magic, count
_ENTRY = struct.Struct("<Qd")  # ring offset, wall time (seconds since the epoch)
FIRST = AT + 64
PAGE = 4096
SLOTS = (PAGE - FIRST) // _ENTRY.size  # 248
INTERVAL = 0.02  # seconds: at most one stamp per this much time of output
MERGE = SLOTS // 8  # stamps merged at once when the index is full (see _make_room)


class Stamps:
    """The index in one ring's header page (``mm``: the ring's mapping)."""

    def __init__(self, mm, entries: list[tuple[int, float]]):
        self._mm = mm
        self.entries = entries
        self._last = entries[-1][1] if entries else 0.0

    @classmethod
    def create(cls, mm) -> "Stamps":
        _HEAD.pack_into(mm, AT, MAGIC, 0)
        return cls(mm, [])

    @classmethod
    def load(cls, mm, head: int) -> "Stamps":
        """The index of an adopted ring holding bytes up to ``head``; a ring without one
        (older code) starts an empty one."""
        magic, count = _HEAD.unpack_from(mm, AT)
        if magic != MAGIC:
            return cls.create(mm)
        entries: list[tuple[int, float]] = []
        for i in range(min(count, SLOTS)):
            off, t = _ENTRY.unpack_from(mm, FIRST + i * _ENTRY.size)
            if off > head or t != t:  # past what the ring holds, or NaN: torn
                break
            if entries and (off <= entries[-1][0] or t < entries[-1][1]):
                continue
            entries.append((off, t))
        stamps = cls(mm, entries)
        stamps._write_from(0)
        return stamps

    def note(self, offset: int, tail: int, now: float | None = None) -> None:
        """Bytes from ``offset`` on are arriving now; ``tail``: the oldest offset held."""
        now = time.time() if now is None else now
        if abs(now - self._last) < INTERVAL:
            return
        self._last = now
        entries = self.entries
        if entries:
            if offset <= entries[-1][0]:
                return  # nothing was added since the last stamp
            # The wall clock was set back: keep times in order (the bytes get the last
            # stamp's time until the clock passes it again).
            now = max(now, entries[-1][1])
        if len(entries) >= SLOTS:
            self._make_room(tail)
        entries.append((offset, now))
        i = len(entries) - 1
        _ENTRY.pack_into(self._mm, FIRST + i * _ENTRY.size, offset, now)
        _HEAD.pack_into(self._mm, AT, MAGIC, len(entries))

    def _make_room(self, tail: int) -> None:
        entries = self.entries
        # Stamps whose bytes all precede the tail (the next stamp is at or before it).
        gone = 0
        while gone + 1 < len(entries) and entries[gone + 1][0] <= tail:
            gone += 1
        if gone:
            del entries[:gone]
            self._write_from(0)
            return
        # Merge the stamp nearest in time to its predecessor (never the first), MERGE
        # times over, each pick among what the merges before it left: one merge a note
        # cost a scan and a rewrite of the index at every read of a session printing
        # every INTERVAL (~0.1 ms each; with 100 such sessions a fifth of the loop).
        times = [t for _, t in entries]
        gaps = [b - a for a, b in zip(times, times[1:])]  # gaps[i]: entry i+1 after i
        first = len(entries)
        for _ in range(min(MERGE, len(gaps) - 1)):
            i = gaps.index(min(gaps))
            del entries[i + 1]  # its bytes take entry i's time
            if i + 1 < len(gaps):
                gaps[i] += gaps.pop(i + 1)
            else:
                del gaps[i]
            first = min(first, i + 1)
        self._write_from(first)

    def _write_from(self, k: int) -> None:
        for i in range(k, len(self.entries)):
            _ENTRY.pack_into(self._mm, FIRST + i * _ENTRY.size, *self.entries[i])
        _HEAD.pack_into(self._mm, AT, MAGIC, len(self.entries))

    def held(self, tail: int) -> list[tuple[int, float]]:
        """The stamps that time bytes still in the ring (the first may start before
        ``tail``: it times the oldest bytes held)."""
        entries = self.entries
        first = 0
        while first + 1 < len(entries) and entries[first + 1][0] <= tail:
            first += 1
        return entries[first:]
