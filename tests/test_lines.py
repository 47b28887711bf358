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
