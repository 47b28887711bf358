"""The budget on one user's manifest records (ptyhostd/recordbudget.py): what a spawn's
record is counted as, what a rename adds, the longest record, and the refusal's words.
The host's use of it, on a real host: test_hostile_records.py."""

from __future__ import annotations

import time

import clowder_wire as P
from ptyhostd import recordbudget
from ptyhostd.session import Session

ASTRAL = "\U0001f600"  # two \\uXXXX escapes in the manifest's ASCII JSON


def _ended(name: str, argv: list[str], cwd: str | None) -> Session:
    """A session with these fields and every other field at its longest, ended."""
    s = Session("ffffffff", name=name, argv=argv, cwd=cwd, uid=4294967294,
                cols=P.MAX_COLS, rows=P.MAX_ROWS, created=time.time() + 0.123456789,
                ring=None, state="starting", agent=True)
    s.state, s.pid, s.exit_status, s.exit_code = "exited", 4194304, "dumped", -2147483648
    s.signal, s.ended_at, s.seen, s.ended_by = 64, time.time() + 0.987654321, True, "reboot"
    return s


def test_a_spawns_count_bounds_its_record_through_its_end():
    for name, argv, cwd in [("", ["sleep", "1"], None),
                            (ASTRAL * 200, ["sh", "-c", "\x01\"\\é" * 1000], "/home/\x7f"),
                            ("x", ["true"], "/")]:
        counted = recordbudget.new_record(name, argv, cwd)
        record = len(_ended(name, argv, cwd).record_json())
        assert record <= counted <= record + recordbudget.FIXED, (name[:9], record, counted)


def test_the_longest_record_is_within_the_smallest_budget():
    """Control characters escape to six bytes each: the longest command line and
    working directory a spawn takes, and a name of 200 astral characters."""
    worst = ["\x01" * (P.MAX_ARGV_BYTES - 1)]
    assert P.argv_bytes(worst) == P.MAX_ARGV_BYTES
    cwd = "/" + "\x01" * (P.MAX_CWD_BYTES - 2)
    session = _ended(ASTRAL * 200, worst, cwd)
    assert len(session.record_json()) <= recordbudget.new_record(ASTRAL * 200, worst, cwd) \
        <= recordbudget.LARGEST


def test_a_rename_adds_what_its_name_encodes_to():
    assert recordbudget.renamed("a", "abc") == 2
    assert recordbudget.renamed("a", ASTRAL) == 11  # "a" -> "\ud83d\ude00"
    assert recordbudget.renamed(ASTRAL * 3, "short") == -31


def test_the_refusal_says_what_takes_what_and_what_to_do():
    assert recordbudget.refusal(2001, 1000, 24, 1024, "x") is None
    text = recordbudget.refusal(2001, 1000, 25, 1024, "this session's record")
    assert text is not None
    for said in ("uid 2001", "take 1000 bytes", "this session's record would add 25",
                 "past the 1024", "CLOWDER_MAX_RECORD_BYTES_PER_USER=1024",
                 "--max-record-bytes-per-user", "clowderctl rm", "shorter command line"):
        assert said in text, (said, text)


def test_a_user_over_the_budget_may_still_shrink_or_keep_records():
    """Records adopted past a lowered budget are kept: only growth is refused."""
    assert recordbudget.refusal(2001, 10_000, 0, 1024, "x") is None
    assert recordbudget.refusal(2001, 10_000, -5, 1024, "x") is None
    assert recordbudget.refusal(2001, 10_000, 1, 1024, "x") is not None
