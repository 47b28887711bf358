"""A recursive inotify watch of a directory tree, sending coalesced FileEvents.

inotify watches one directory, not a tree, so every directory under the watched one gets
its own watch (at most MAX_WATCHES; past that the client is told ``overflow`` once and
the rest is not watched), and a directory created or moved in later is walked and
watched as it appears (what it already holds is reported as created, since its events
were missed).  ``.git`` is never descended into: its churn is not the agent's work.
Directories are opened beneath the root like every client path (paths.Root) and handed
to inotify through their /proc fd link, so a symlink can never point a watch outside.

Events are coalesced: the first one starts a window of BATCH_DELAY seconds, then
everything gathered is sent as one FileEvents.  Each path appears once per batch with its
last kind, except that a path created and then modified stays "created", and a path
created and then deleted within one batch is dropped (it came and went).  A queue
overflow in the kernel, or a batch too big for one frame, sets ``overflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import struct

import clowder_wire as protocol

from . import paths

MAX_WATCHES = 4096
BATCH_DELAY = 0.1  # seconds over which events are coalesced
MAX_BATCH_EVENTS = 5000
MAX_BATCH_BYTES = 512 * 1024  # the JSON of one batch stays well under a frame

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
         | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name

_libc = ctypes.CDLL(None, use_errno=True)
# A child of clowder-control's logger, so its journal handler serves these lines too.
log = logging.getLogger("clowder-control.watch")


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _join(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent}/{name}"


class Watch:
    """One watched tree; owns its Root and its inotify fd until ``close``."""

    def __init__(self, root: paths.Root, top: str, send):
        self._root = root
        self._top = top
        self._send = send
        self._fd = -1
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory relative to the root
        self._pending: dict[str, str] = {}  # path -> kind, this batch
        self._pending_bytes = 0
        self._overflow = False
        self._limit_reported = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._reading = False

    def start(self) -> None:
        """Watch the tree (blocking: call it off the event loop for a big tree).

        Raises OSError or PathError, with everything it opened closed again."""
        try:
            self._fd = _check(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
            top_fd = self._root.open(self._top, os.O_RDONLY | os.O_DIRECTORY)
            os.close(top_fd)  # opened only to report a missing top or a file as its error
            self._add_tree(self._top, report=False)
        except BaseException:
            self._close_fds()
            raise

    def run(self) -> None:
        """Start delivering events (after the Ok of the FileWatch has been sent)."""
        if self._fd < 0:
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(self._fd, self._on_readable)
        self._reading = True
        self._task = loop.create_task(self._pump())
        if self._overflow:  # the first walk hit MAX_WATCHES
            self._wake.set()

    async def close(self) -> None:
        """Stop watching and close the inotify fd (which drops every watch); idempotent."""
        self._stop_reading()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._close_fds()

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            asyncio.get_running_loop().remove_reader(self._fd)

    def _close_fds(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        self._root.close()
        self._dirs.clear()

    # --- the tree ---------------------------------------------------------------------

    def _add_tree(self, top: str, report: bool) -> None:
        """Watch ``top`` and every directory under it; with ``report``, what they hold
        is reported as created (it appeared before its directory was watched)."""
        stack = [top]
        while stack:
            rel = stack.pop()
            if len(self._dirs) >= MAX_WATCHES:
                if not self._limit_reported:
                    self._limit_reported = True
                    self._overflow = True  # sent with the next batch
                return
            try:
                dfd = self._root.open(rel, os.O_RDONLY | os.O_DIRECTORY)
            except (OSError, paths.PathError):
                continue  # gone again, or swapped for a symlink out: nothing to watch
            try:
                wd = _libc.inotify_add_watch(self._fd, f"/proc/self/fd/{dfd}".encode(), _MASK)
                if wd < 0 or wd in self._dirs:
                    continue  # not watchable, or the same directory again (a loop)
                self._dirs[wd] = rel
                with os.scandir(dfd) as entries:
                    for entry in entries:
                        if entry.name.lower() == ".git":
                            continue
                        path = _join(rel, entry.name)
                        if report:
                            self._record(path, "created")
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(path)
            except OSError:
                continue
            finally:
                os.close(dfd)

    def _forget_tree(self, top: str) -> None:
        """Drop the watches of ``top`` and below (moved away: their paths are stale)."""
        prefix = top + "/"
        for wd, rel in list(self._dirs.items()):
            if rel == top or rel.startswith(prefix):
                del self._dirs[wd]
                _libc.inotify_rm_watch(self._fd, wd)

    # --- events -----------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            buf = os.read(self._fd, 64 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.warning("reading the inotify fd of a watch of %s: %s", self._top, exc,
                        extra={"CLOWDER_CAUSE": "watch-read"})
            self._stop_reading()
            return
        pos = 0
        while pos + _EVENT.size <= len(buf):
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
            raw = buf[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
            pos += _EVENT.size + length
            self._on_event(wd, mask, os.fsdecode(raw))
        if self._overflow:
            self._wake.set()

    def _on_event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self._overflow = True
            return
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return
        parent = self._dirs.get(wd)
        if parent is None or name.lower() == ".git":
            return
        if not name:
            # Events on a watched directory itself: its parent's watch reports them,
            # except for the top of the tree, which has no watched parent.
            if parent == self._top and mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                self._record(parent, "deleted")
            return
        path = _join(parent, name)
        if mask & (IN_CREATE | IN_MOVED_TO):
            self._record(path, "created")
            if mask & IN_ISDIR:
                self._add_tree(path, report=True)
        elif mask & (IN_DELETE | IN_MOVED_FROM):
            self._record(path, "deleted")
            if mask & IN_ISDIR and mask & IN_MOVED_FROM:
                self._forget_tree(path)
        elif mask & (IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB):
            self._record(path, "modified")

    def _record(self, path: str, kind: str) -> None:
        previous = self._pending.get(path)
        if previous is None:
            cost = len(json.dumps(path)) + 32
            if (len(self._pending) >= MAX_BATCH_EVENTS
                    or self._pending_bytes + cost > MAX_BATCH_BYTES):
                self._overflow = True  # the client must list again anyway
                return
            self._pending_bytes += cost
            self._pending[path] = kind
        elif previous == "created" and kind == "deleted":
            del self._pending[path]  # came and went within the batch: dropped
        elif not (previous == "created" and kind == "modified"):
            self._pending[path] = kind
        self._wake.set()

    async def _pump(self) -> None:
        """Send one FileEvents per window of BATCH_DELAY after the first event."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(BATCH_DELAY)
            self._wake.clear()
            events = [{"path": p, "kind": k} for p, k in self._pending.items()]
            overflow = self._overflow
            self._pending, self._pending_bytes, self._overflow = {}, 0, False
            if not events and not overflow:
                continue
            try:
                await self._send(protocol.FileEvents(events=events, overflow=overflow))
            except Exception as exc:  # the stream is gone: stop, close() cleans up
                log.info("watch of %s stopped: sending its events failed: %s", self._top, exc,
                         extra={"CLOWDER_CAUSE": "watch-send"})
                self._stop_reading()
                return
