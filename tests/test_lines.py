"""The line model shared by history (ptyhostd/history.py) and busy/idle (activity.py)."""

from ptyhostd.history import text_lines
from clowder_common.lines import render


def test_history_keeps_what_a_clear_wiped_from_the_screen():
    raw = b"before\r\n\x1b[H\x1b[2Jafter\r\nmore\x1bclast\r\n"
    assert text_lines(raw) == ["before", "after", "more", "last"]
    # The screen's view (activity) starts over at each clear.
    assert [ln for ln in render(raw) if ln] == ["last"]


def test_history_overwrites_and_strips_like_a_terminal():
    raw = (b"\x1b]0;title\x07\x1b[1;31mred\x1b[0m text\r\n"
           b"progress 10%\rprogress 100%\r\n"
           b"abc\x1b[2Dx\x1b[K\r\n\ttab\r\n")
    assert text_lines(raw) == ["red text", "progress 100%", "ax", "        tab"]


def test_a_cut_start_drops_the_partial_first_line():
    raw = b"[31mtail of a line\r\nwhole line\r\n"
    assert text_lines(raw, cut=True) == ["whole line"]
    assert text_lines(raw)[-1] == "whole line"


def test_an_unfinished_sequence_at_the_end_is_not_shown():
    assert text_lines(b"done\r\nhalf\x1b[3") == ["done", "half"]
    assert text_lines("é".encode()[:1]) == []


def test_fit_gives_the_end_of_a_line_longer_than_the_budget():
    """history.fit: whole lines while they fit; a last line longer than the budget on its
    own gives its end, never starting inside a character or an escape sequence."""
    from ptyhostd.history import fit
    assert fit(["a", "bb", "ccc"], 7) == ["bb", "ccc"]
    assert fit(["a", "b" * 100], 50) == ["b" * 49]
    assert fit(["宽" * 100], 10) == ["宽" * 3]  # 9 bytes: a character is never cut
    line = "x" * 10 + "\x1b[38;5;123mYY" + "\x1b]8;;http://a\x1b\\Z"
    for budget in range(2, len(line.encode()) + 2):
        (got,) = fit([line], budget)
        assert len(got.encode()) < budget and line.endswith(got), (budget, got)
        cut = len(line) - len(got)
        assert not any(start < cut < end for start, end in ((10, 21), (23, 38))), (budget, got)
    assert fit([], 10) == [] and fit(["abc"], 1) == []
