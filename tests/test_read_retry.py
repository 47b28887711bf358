"""A session whose pty read fails for another cause than the pty's end (EIO) reads again
later (ptyhostd/session.py, READ_RETRY): an adopted ring is mapped at its first read, and
a mapping that fails (ENOMEM) must not leave the session unread for good."""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap as real_mmap
import os
import time
import tty
import types

from ptyhostd import ring as ring_mod
from ptyhostd import session as session_mod
from ptyhostd.fd import Fd
from ptyhostd.ring import Ring
from ptyhostd.session import Session


def test_a_ring_that_cannot_be_mapped_yet_is_read_once_it_can(monkeypatch, caplog):
    parked = Ring.create("retry", 1 << 16)
    before, printed = b"before the restart\n", b"printed while the host could not map\n"
    parked.put(before)
    ring = Ring.adopt(os.dup(parked.fd.fd), "retry")  # as a restarted host: not mapped
    parked.close()
    fails = [OSError(errno.ENOMEM, "Cannot allocate memory")] * 3
    maps = []

    def mapping(*args):
        maps.append(args)
        if fails:
            raise fails.pop()
        return real_mmap.mmap(*args)

    monkeypatch.setattr(ring_mod, "mmap", types.SimpleNamespace(mmap=mapping))
    monkeypatch.setattr(session_mod, "READ_RETRY", 0.05)
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    s = Session("retry", name="t", argv=[], cwd=None, uid=0, cols=80, rows=24,
                created=time.time(), ring=ring, state="running")
    s.master = Fd(master, "retry master")
    os.write(slave, printed)

    async def main():
        # Woken by the session's own forwarding of what it read, not by a clock.
        whole = asyncio.Event()
        forward = s._forward

        def forwarded(start, got):
            forward(start, got)
            if ring.head >= len(before + printed):
                whole.set()

        s._forward = forwarded
        s.start_reading(asyncio.get_running_loop())
        try:
            await asyncio.wait_for(whole.wait(), 10)
        except asyncio.TimeoutError:
            pass  # the assertions below say what is missing
        s.stop_reading()

    with caplog.at_level(logging.INFO, logger="ptyhostd"):
        asyncio.run(main())
    try:
        assert ring.read(0) == before + printed, \
            f"the session was not read again after the failed mappings ({len(maps)} tries)"
        assert len(maps) == 4, f"{len(maps)} mappings tried, not 3 failed and 1 made"
        errors = [r for r in caplog.records if "reading its pty" in r.getMessage()]
        assert len(errors) == 1 and "Cannot allocate memory" in errors[0].getMessage(), \
            "not one error line for the failures in a row"
        assert any("read again, after 3 failed tries" in r.getMessage()
                   for r in caplog.records), "the recovery was not logged"
    finally:
        s.master.close()
        os.close(slave)
        ring.close()
