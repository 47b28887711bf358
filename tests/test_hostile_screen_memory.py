"""One user's many sessions printing incompressible coloured text cannot make the host's
terminal models hold more than the host-wide scrollback budget, nor shrink another
user's history (issue 13's follow-up; ptyhostd/screenmemory.py, docs/design.md "Screen
memory").

A host started with a small budget (``CLOWDER_SCREEN_MEMORY``) and a small ring per
session; alice's SESSIONS sessions each print a random colour and a random character in
every cell, far past their share.  The host's peak memory must grow by at most the
budget plus a per-session fixed cost, bob's session must still echo, and alice's
backlog rings must hold exactly the newest bytes of what was printed (the ring is the
ground truth; the history a model keeps is what shrinks).
"""

from __future__ import annotations

import os
import pwd
import random
import re

import pytest

from conftest import wait_for
from hostile import MiB, Memory, environment
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)

SESSIONS = 32
BUDGET = 64 * MiB  # 2 MiB a model for 32 models (screenmemory.share_for)
BACKLOG = 256 * 1024
# What the host holds per session beyond its share (docs/design.md "Screen memory"): its
# ring (BACKLOG here), ghostty's screen and the pages it keeps past the limit (~1.5 MB
# for coloured text, bench/screen_memory.py), the session's Python objects.
PER_SESSION = 2 * MiB
LINES = 5_000  # of 80 columns: ~6.7 MB each, ~10 MB of model per session without a share
WIDE = "一二三四五六七八九十中文字漢"
FLOOD = "/home/alice/flood.bin"  # read by alice's sessions: the instance's /home


def coloured(lines: int, cols: int = 80) -> bytes:
    """Every cell its own random pen and character (a fifth of them wide)."""
    rng = random.Random(13)
    out = []
    for _ in range(lines):
        width, row = 0, []
        while width < cols - 2:
            wide = rng.random() < 0.2
            ch = rng.choice(WIDE) if wide else chr(rng.randrange(0x21, 0x7f))
            row.append("\x1b[38;5;%d;48;5;%dm%s" % (rng.randrange(256), rng.randrange(256), ch))
            width += 2 if wide else 1
        out.append(("".join(row) + "\x1b[0m\n").encode())
    return b"".join(out)


@pytest.fixture
def budget_host(system_host):  # noqa: F811
    with environment(system_host, CLOWDER_SCREEN_MEMORY=BUDGET,
                     CLOWDER_BACKLOG_BYTES=BACKLOG) as h:
        yield h
    if os.path.exists(FLOOD):
        os.unlink(FLOOD)


def _journal(h, pid: int) -> str:
    return h.run(["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=screen-memory",
                  f"_PID={pid}"]).stdout.decode(errors="replace")


def test_many_sessions_of_coloured_text_stay_within_the_screen_budget(budget_host):
    h = budget_host
    data = coloured(LINES)
    with open(FLOOD + ".tmp", "wb") as f:
        f.write(data)
    os.chmod(FLOOD + ".tmp", 0o644)
    go = FLOOD + ".go"
    script = (f"echo READY; while [ ! -e {go} ]; do sleep 0.1; done; "
              f"cat {FLOOD}; echo FLOOD-END; exec sleep 100000")
    pid = h.main_pid()
    echo = h.spawn("sh", "-c", "stty -echo; echo READY; exec cat", user="bob", cwd="/home/bob")
    sids = [h.spawn("sh", "-c", script, user="alice", cwd="/home/alice")
            for _ in range(SESSIONS)]
    for sid in sids + [echo]:
        wait_for(lambda: b"READY" in h.backlog(sid, user="alice" if sid != echo else "bob"),
                 30, "each session to start", interval=0.2)
    # Each session's model is made on its first output: with all of them counted, the
    # share is 2 MiB, logged once as it changed.
    wait_for(lambda: "may now keep 2 MiB" in _journal(h, pid), 30,
             "the host to log the share of 2 MiB for 32 models")
    os.rename(FLOOD + ".tmp", FLOOD)
    mem = Memory(pid)
    try:
        open(go, "w").close()
        for sid in sids:
            wait_for(lambda: b"FLOOD-END" in h.backlog(sid, user="alice"), 120,
                     "each flood to be written", interval=0.2)
        # The models have followed all of it once their history ends with the end mark.
        for sid in sids:
            wait_for(lambda: b"FLOOD-END" in h.ctl("history", sid, "--lines", "5",
                                                   user="alice").stdout,
                     120, f"session {sid}'s model to have followed its flood", interval=0.2)
        h.ctl("send", echo, "still-here\r", user="bob")
        wait_for(lambda: b"still-here" in h.backlog(echo, user="bob"), 10,
                 "bob's session to echo while alice's models are full")
        growth = mem.stop()
    finally:
        mem._stop.set()
        os.unlink(go)
    bound = BUDGET + SESSIONS * PER_SESSION
    print(f"\n{SESSIONS} sessions of {len(data) / 1e6:.1f} MB of coloured text: host peak "
          f"+{growth / MiB:.0f} MiB (bound {bound / MiB:.0f} MiB)")
    assert growth < bound, f"the host's peak grew by {growth / MiB:.0f} MiB, over the " \
        f"budget's {BUDGET / MiB:.0f} MiB plus {PER_SESSION / MiB:.0f} MiB a session"
    # The ring is untouched by the models' share: each holds the newest bytes printed.
    printed = (b"READY\n" + data + b"FLOOD-END\n").replace(b"\n", b"\r\n")
    for sid in sids:
        ring = h.backlog(sid, user="alice")
        assert len(ring) >= BACKLOG // 2 and printed.endswith(ring), \
            f"session {sid}'s ring lost or changed bytes ({len(ring)} bytes)"
    # What shrank is the history the model keeps, not to nothing: the floor's lines.
    lines = h.ctl("history", sids[0], "--lines", "300", user="alice").stdout.splitlines()
    assert len(lines) >= 100, f"the history kept only {len(lines)} lines"


def test_one_users_many_sessions_never_shrink_anothers_history(budget_host):
    """The budget is split by user first: alice's 32 sessions bring her own models down
    to the floor (2 MiB), while bob's one session keeps what a model may keep at 80
    columns (8 MiB: 2,111 of these lines measured).  Before the split was by user, bob's
    model got the same 2 MiB as each of alice's and kept 955 (a2a01d0)."""
    h = budget_host
    flood = "/home/bob/flood.bin"
    data = coloured(LINES)
    with open(flood, "wb") as f:
        f.write(data)
    os.chmod(flood, 0o644)
    alice = pwd.getpwnam("alice").pw_uid
    pid = h.main_pid()
    sids = [h.spawn("sh", "-c", "echo READY; exec sleep 100000", user="alice",
                    cwd="/home/alice") for _ in range(SESSIONS)]
    for sid in sids:
        wait_for(lambda: b"READY" in h.backlog(sid, user="alice"), 30,
                 "each of alice's sessions to start", interval=0.2)
    # Her share reaches 2 MiB at her 17th model (64 MiB / 17 < 4 MiB), logged once.
    wait_for(lambda: re.search(rf"uid {alice}'s \d+ sessions may now keep 2 MiB",
                               _journal(h, pid)), 30,
             "the host to log alice's share of 2 MiB for her models")
    try:
        sid = h.spawn("sh", "-c", f"cat {flood}; echo FLOOD-END; exec sleep 100000",
                      user="bob", cwd="/home/bob", size="80x24")
        wait_for(lambda: b"FLOOD-END" in h.ctl("history", sid, "--lines", "5",
                                               user="bob").stdout,
                 120, "bob's model to have followed his flood", interval=0.2)
        kept = len(h.ctl("history", sid, "--lines", str(LINES), user="bob")
                   .stdout.splitlines())
    finally:
        os.unlink(flood)
    print(f"\nbob's history beside alice's {SESSIONS} sessions: {kept} lines")
    assert kept > 1500, f"bob's history kept {kept} lines of coloured text beside " \
        f"alice's {SESSIONS} sessions: his share was cut for hers"
    for sid in sids:  # alice's models are still counted: nothing ended meanwhile
        assert h.ps(user="alice")[sid]["state"] == "running"


def test_the_budget_is_split_by_user_then_by_model():
    """Without a host: each user gets at least what an equal split of the budget among
    users gives, whatever another user has; the shares never exceed the budget unless
    the floor wins; one user alone gets what ``share_for`` gives."""
    from ptyhostd import screenmemory as sm
    assert sm.shares_for({1000: 32, 1001: 1}, BUDGET) == {1000: 2 * MiB, 1001: 16 * MiB}
    assert sm.shares_for({1000: 1000, 1001: 1}, BUDGET) == {1000: 2 * MiB, 1001: 16 * MiB}
    assert sm.shares_for({1000: 4, 1001: 4}, BUDGET) == {1000: 8 * MiB, 1001: 8 * MiB}
    assert sm.shares_for({1000: 3}, 0) == {1000: sm.CEILING}
    rng = random.Random(13)
    for _ in range(2000):
        total = rng.choice([64, 256, 1536, 2048]) * MiB
        counts = {uid: rng.choice([1, 2, 3, 7, 40, 300, 1024])
                  for uid in range(rng.randrange(1, 9))}
        shares = sm.shares_for(counts, total)
        for uid, n in counts.items():
            assert shares[uid] >= sm.share_for(n, total // len(counts)), (counts, total)
        if len(counts) == 1:
            [(uid, n)] = counts.items()
            assert shares[uid] == sm.share_for(n, total)
        held = sum(n * shares[uid] for uid, n in counts.items() if shares[uid] > sm.FLOOR)
        assert held <= total, (counts, total, shares)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_share_halves_as_models_grow_and_trims_a_live_model_at_once():
    """Without a host: the shares ``screenmemory`` hands out, and a full model given a
    smaller one gives its memory back at once (no more output needed)."""
    from ptyhostd import screenmemory
    from ptyhostd.screen_ghostty import GhosttyScreen
    shares = [screenmemory.share_for(n, BUDGET) // MiB for n in (1, 4, 5, 8, 9, 16, 17, 32, 99)]
    assert shares == [16, 16, 8, 8, 4, 4, 2, 2, 2], shares
    assert screenmemory.share_for(1000, 0) == screenmemory.CEILING  # no budget: no share
    models = [GhosttyScreen(80, 24) for _ in range(4)]
    data = coloured(4000)
    for m in models:
        m.feed(data)
    full = _rss()
    for m in models:
        m.set_scrollback_bytes(screenmemory.FLOOR)
    freed = full - _rss()
    rows = models[0].get("scrollback_rows", "size_t")
    assert freed > 4 * 4 * MiB, f"4 full models gave back only {freed / MiB:.1f} MiB"
    assert 100 <= rows < 4000, f"{rows} rows kept at the floor"
    for m in models:
        m.close()

