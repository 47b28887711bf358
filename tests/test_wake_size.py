"""A flooding session reads its pty in small wakes only while someone types into another
session (ptyhostd/keystrokes.py): the two-slot record answers for every session, and a
session's pump on a real pty fed by `yes` stops at the small size exactly then."""

from __future__ import annotations

import os
import select
import subprocess
import time
import tty

import pytest

from ptyhostd import keystrokes, pty
from ptyhostd.fd import Fd
from ptyhostd.keystrokes import TYPING_WAKE_BYTES, TYPING_WINDOW, Keystrokes
from ptyhostd.ring import READ_SIZE, Ring
from ptyhostd.session import SMALL_READ, WAKE_BYTES, Session

PTY_READ_MAX = READ_SIZE  # what one read of a pty master gives at most (n_tty's buffer)


def test_the_record_answers_for_every_session():
    k = Keystrokes()
    assert not k.others_typing("a", 0.0), "typing seen before any input"
    k.typed("a", 10.0)
    assert k.others_typing("b", 10.5), "b did not see a's typing"
    assert not k.others_typing("a", 10.5), "a's own typing counted as another's"
    k.typed("b", 11.0)
    assert k.others_typing("a", 11.5) and k.others_typing("b", 10.9 + TYPING_WINDOW - 1)
    k.typed("b", 12.0)  # b again: a's input (10.0) stays what "others" means for b
    assert not k.others_typing("b", 10.0 + TYPING_WINDOW), "a's old input still counts"
    assert k.others_typing("a", 12.0 + TYPING_WINDOW - 0.01), "b's latest input lost"
    assert not k.others_typing("c", 12.0 + TYPING_WINDOW), "the window does not end"
    k.typed("c", 13.0)
    assert k.others_typing("c", 12.5), "b's input at 12.0 is not another's for c"
    assert not k.others_typing("c", 12.0 + TYPING_WINDOW)


@pytest.fixture
def pty_session(monkeypatch):
    """A session of our own (no host: its pump alone) on a raw pty; yields it and the
    slave's fd, which the test owns."""
    monkeypatch.setattr(keystrokes, "KEYSTROKES", Keystrokes())
    from ptyhostd import session as session_mod
    monkeypatch.setattr(session_mod, "KEYSTROKES", keystrokes.KEYSTROKES)
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    ring = Ring.create("wake-test", 1 << 20)
    s = Session("wake-test", name="t", argv=[], cwd=None, uid=0, cols=80, rows=24,
                created=time.time(), ring=ring)
    s.master = Fd(master, "wake-test master")
    try:
        yield s, slave
    finally:
        os.close(slave)
        s.master.close()
        s.master = None
        ring.close()


@pytest.fixture
def flooded_session(pty_session):
    """A session of our own whose pty `yes` floods."""
    s, slave = pty_session
    yes = subprocess.Popen(["yes", "x" * 200], stdout=slave, stderr=subprocess.DEVNULL)
    try:
        yield s
    finally:
        yes.kill()
        yes.wait()


def _wakes(s: Session, now: float, count: int = 30) -> list[int]:
    """``count`` wakes of the pump, each once the pty is readable (bounded wait)."""
    got = []
    for _ in range(count):
        ready, _, _ = select.select([s.master.fd], [], [], 10.0)
        assert ready, "the flooded pty was not readable within 10 s"
        got.append(s._pump(now))
    return got


def test_a_flood_wakes_small_only_while_another_session_has_input(flooded_session):
    s = flooded_session
    record = keystrokes.KEYSTROKES
    now = time.monotonic()
    alone = _wakes(s, now)
    assert max(alone) > TYPING_WAKE_BYTES + PTY_READ_MAX, \
        f"with nobody typing no wake read more than the small size: {alone}"
    assert max(alone) < WAKE_BYTES + PTY_READ_MAX, f"a wake read past WAKE_BYTES: {alone}"
    record.typed(s.id, now)  # its own input: the flood's own user, not someone else
    own = _wakes(s, now)
    assert max(own) > TYPING_WAKE_BYTES + PTY_READ_MAX, \
        f"the session's own input made its wakes small: {own}"
    record.typed("another-session", now)
    beside = _wakes(s, now + TYPING_WINDOW / 2)
    assert max(beside) < TYPING_WAKE_BYTES + PTY_READ_MAX, \
        f"a wake read past the small size while another session had input: {beside}"
    after = _wakes(s, now + TYPING_WINDOW)
    assert max(after) > TYPING_WAKE_BYTES + PTY_READ_MAX, \
        f"wakes stayed small after the window: {after}"


def _reads(s: Session, now: float, wakes: int = 30) -> list[list[int]]:
    """For each of ``wakes`` wakes, what the pty held (FIONREAD) before each of its reads."""
    ring, real = s.ring, s.ring.fill_from
    seen: list[list[int]] = []

    def spy(fd):
        seen[-1].append(pty.held(fd))
        return real(fd)
    ring.fill_from = spy
    try:
        for _ in range(wakes):
            ready, _, _ = select.select([s.master.fd], [], [], 10.0)
            assert ready, "the flooded pty was not readable within 10 s"
            seen.append([])
            s._pump(now)
    finally:
        del ring.fill_from
    return seen


def test_beside_typing_a_flood_makes_no_read_that_waits_for_the_kernel(flooded_session):
    """A read of an empty line discipline waits for the kernel's worker (50-250 us in a
    flood): beside another session's input every read after a wake's first is made only
    when the pty already holds bytes; alone, a wake reads on through such waits."""
    s = flooded_session
    now = time.monotonic()
    alone = _reads(s, now)
    assert sum(len(w) for w in alone) > len(alone), f"no wake read twice alone: {alone}"
    keystrokes.KEYSTROKES.typed("another-session", now)
    beside = _reads(s, now + TYPING_WINDOW / 2, wakes=300)
    waited = [w for w in beside if 0 in w[1:]]
    assert not waited, f"reads of an empty pty beside typing (FIONREAD per read): {waited}"
    assert all(w and w[0] > 0 for w in beside), f"a wake found nothing to read: {beside}"


def test_after_a_small_read_no_read_of_an_empty_pty(pty_session):
    """An echo's few bytes, with nobody typing elsewhere: its wake reads them and stops,
    without the read of an empty pty that would only fail (session.SMALL_READ; ~20 us of
    the loop a keystroke, docs/design.md "The echo's second read").  A wake whose read
    was not small reads on (the flood test above: alone, it reads through)."""
    s, slave = pty_session
    now = time.monotonic()
    for echo in (b"x", b"\r\n$ ", b"y" * (SMALL_READ - 1)):
        os.write(slave, echo)
        # The wake's first read must find every byte: wait until the line discipline
        # holds them all (the kernel's worker moves them over), with a deadline.
        deadline = time.monotonic() + 10
        while pty.held(s.master.fd) < len(echo):
            assert time.monotonic() < deadline, f"the pty never held the {len(echo)} bytes"
            select.select([s.master.fd], [], [], 0.01)
        reads = _reads(s, now, wakes=1)
        assert reads == [[len(echo)]], \
            f"{len(echo)} bytes alone: reads (what the pty held before each) {reads}"
