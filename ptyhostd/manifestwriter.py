"""The manifest's writer: every rewrite off the event loop, one at a time, coalesced.

The manifest is rewritten whole after every change of the session table.  With the
largest records a spawn allows (a 32 KiB command line, a name of 190 emoji) one user's
1,024 sessions make it ~36 MB, and a rewrite on the loop held every session's echo for
~17 ms even with no copy made (~90 ms before; docs/design.md, "The manifest's rewrite").
So the writes run in one worker thread (the CRC and ``pwritev`` release the GIL), and
the changes made while one is in flight are all written by the next: a flood of changes
costs one write at a time back to back, not one write a change.

What must be recorded before it goes on (a spawn's program started, an end's unit
stopped, a request answered) awaits ``written()``; the rest calls ``changed()``.  What
writes the manifest on the loop itself (a start, an exit, a hand-off's exec) calls
``write_now()`` or ``now()``, which first waits for the write in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable, Optional, TypeVar

from .manifest import Manifest

log = logging.getLogger("ptyhostd")
T = TypeVar("T")


class ManifestWriteError(Exception):
    """A rewrite of the manifest failed: the change awaited is not recorded."""


class ManifestWriter:
    """Writes ``table()`` (the sessions' encoded records) into ``manifest``."""

    def __init__(self, manifest: Manifest, table: Callable[[], list[bytes]]):
        self.manifest = manifest
        self._table = table
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._dirty = False
        self._waiting: list[asyncio.Future] = []  # for the next write to begin
        self._task: Optional[asyncio.Task] = None
        self._inflight: Optional[concurrent.futures.Future] = None
        self.writes = 0  # done in the thread (the tests count coalescing by it)

    def changed(self) -> None:
        """The table changed: write it soon, off the loop."""
        # The newest body is no longer the table: mark() and unmark() must not write it.
        self.manifest.adopted = self.manifest.unmarked = b""
        self._dirty = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def written(self) -> None:
        """changed(), and return once a write begun after it is done
        (ManifestWriteError if that write failed)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self.changed()
        await fut

    async def settled(self) -> None:
        """Return once every change made so far is written (or its write failed)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    def now(self, op: Callable[[Manifest], T]) -> T:
        """``op(manifest)`` on the loop, after the write in flight (waited for, blocking
        the loop: only a start, an exit or a hand-off does this)."""
        self._wait_inflight()
        return op(self.manifest)

    def write_now(self, left: str = "") -> None:
        """Write the table on the loop, now (see now()); every change made so far is in
        it, so the writes waiting to begin are done by it."""
        self._wait_inflight()
        self._dirty = False
        waiting, self._waiting = self._waiting, []
        try:
            self.manifest.write_sessions(self._table(), left)
        except Exception as exc:
            _settle(waiting, exc)
            raise
        _settle(waiting, None)

    def close(self) -> None:
        """Wait for the write in flight and end the thread (an exit, not a hand-off:
        an exec ends the thread with the process image)."""
        self._wait_inflight()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _wait_inflight(self) -> None:
        inflight = self._inflight
        if inflight is not None:
            concurrent.futures.wait([inflight])  # its outcome is the task's to report

    async def _run(self) -> None:
        try:
            while self._dirty:
                self._dirty = False
                waiting, self._waiting = self._waiting, []
                error = None
                try:
                    records = self._table()
                    if self._pool is None:
                        self._pool = concurrent.futures.ThreadPoolExecutor(
                            max_workers=1, thread_name_prefix="clowder-manifest")
                    self._inflight = self._pool.submit(self.manifest.write_sessions, records)
                    await asyncio.wrap_future(self._inflight)
                    self.writes += 1
                except Exception as exc:
                    error = exc
                    log.error("writing the manifest: %s", exc, exc_info=exc,
                              extra={"CLOWDER_CAUSE": "manifest-write"})
                finally:
                    self._inflight = None
                _settle(waiting, error)
        finally:
            self._task = None


def _settle(waiting: list[asyncio.Future], error: Optional[Exception]) -> None:
    for fut in waiting:
        if fut.done():
            continue  # its waiter was cancelled (a client gone)
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(ManifestWriteError(f"the manifest was not written: {error}"))
