"""Busy/idle from terminal output: the quiet period, prompts, escapes and bounded memory."""

import sys

import pytest

from controld.activity import TAIL, Activity, render


def fed(*chunks, at=100.0) -> Activity:
    a = Activity()
    for chunk in chunks:
        a.feed(chunk if isinstance(chunk, bytes) else chunk.encode(), at)
    return a


def test_no_output_is_idle_quiet():
    a = Activity()
    assert a.state(0.0) == ("idle", "quiet")
    assert a.snapshot(0.0)["last_output"] is None


def test_busy_within_the_quiet_period():
    a = fed("compiling...\r\n$ ", at=100.0)  # even at a prompt: output is recent
    assert a.state(100.0) == ("busy", "recent activity")
    assert a.state(101.999) == ("busy", "recent activity")
    assert a.state(102.0) == ("idle", "prompt")
    a.feed(b"more\r\n", 103.0)
    assert a.state(104.0) == ("busy", "recent activity")
    assert a.last_output == 103.0


def test_custom_quiet_period():
    a = Activity(quiet=10)
    a.feed(b"x", 0.0)
    assert a.state(9.0)[0] == "busy" and a.state(10.0)[0] == "idle"


@pytest.mark.parametrize("prompt", [
    "user@host:~/src$ ", "root@host:/# ", "host% ", ">>> ", "~/src via 🐍 v3.11 ❯ ",
    "│ > Try \"write a test\"                  │", "› Ask Codex to do anything",
])
def test_idle_at_a_prompt(prompt):
    a = fed(f"some output\r\n{prompt}")
    assert a.state(200.0) == ("idle", "prompt"), prompt


def test_idle_quiet_without_a_prompt():
    a = fed("Running tests\r\n  42 passed\r\n")
    assert a.state(200.0) == ("idle", "quiet")
    assert a.last_line() == "  42 passed"
    assert fed("Downloading 100%").state(200.0) == ("idle", "quiet")


def test_claude_code_box_with_footer():
    old = ("╭────────────────╮\r\n│ > hello        │\r\n╰────────────────╯\r\n"
           "  ? for shortcuts\r\n")
    new = ("✻ Done\r\n\r\n────────────────\r\n❯ \r\n────────────────\r\n"
           "  Model: Opus  Ctx: 12k\r\n  ⏵⏵ accept edits on (shift+tab to cycle)\r\n")
    assert fed(old).state(200.0) == ("idle", "prompt")
    assert fed(new).state(200.0) == ("idle", "prompt")
    assert fed(new).last_line() == "❯ "


def test_colour_codes_around_a_prompt():
    a = fed("\x1b]0;user@host: ~\x07\x1b[01;32muser@host\x1b[00m:\x1b[01;34m~\x1b[00m$ \x1b[K")
    assert a.state(200.0) == ("idle", "prompt")
    assert a.last_line() == "user@host:~$ "


def test_escape_sequences_split_across_feeds():
    data = ("\x1b[1;32mok\x1b[0m\r\n\x1b]0;a title\x1b\\\x1bP+q544e\x1b\\"
            "\x1b(B\x1b[?2004h\x1b[38;5;208m❯\x1b[39m ").encode()
    whole = fed(data)
    assert whole.last_line() == "❯ "
    for cut in range(1, len(data)):
        a = Activity()
        a.feed(data[:cut], 100.0)
        a.state(200.0)  # look in the middle: the unfinished part must not leak as text
        assert "[" not in a.last_line() and "\x1b" not in a.last_line(), cut
        a.feed(data[cut:], 100.0)
        assert a.last_line() == "❯ " and a.state(200.0) == ("idle", "prompt"), cut


def test_unfinished_sequence_at_the_end_is_pending():
    assert render(b"done\r\n$ \x1b[38;5") == ["done", "$ "]
    assert render(b"$ \x1b]0;titl") == ["$ "]
    assert render(b"a\x1b") == ["a"]


def test_invalid_utf8_is_replaced_and_split_characters_rejoined():
    a = fed(b"\xff\xfe bad\r\n")
    assert a.last_line() == "\ufffd\ufffd bad"
    arrow = "❯ ".encode()
    a = Activity()
    a.feed(b"x\r\n" + arrow[:1], 1.0)
    assert "\ufffd" not in a.last_line()  # an unfinished character is pending, not garbage
    a.feed(arrow[1:], 1.0)
    assert a.state(10.0) == ("idle", "prompt")


def test_carriage_return_overwrites():
    assert render(b"progress 10%\rprogress 55%\rprogress 99%") == ["progress 99%"]
    assert render(b"Working...\r\x1b[K$ ") == ["$ "]
    assert render(b"Working...\r$ ") == ["$ rking..."]  # what a terminal really shows
    # zsh's PROMPT_SP: a "%" and spaces, then CR, space, CR, and the prompt over them
    a = fed("%" + " " * 79 + "\r \rhost% ")
    assert a.state(200.0) == ("idle", "prompt")


def test_line_editing_and_cursor_moves():
    assert render(b"abcdef\x1b[3D\x1b[KXY") == ["abcXY"]
    assert render(b"abc\x08\x08\x1b[P") == ["ac"]
    assert render(b"one\x1b[5;1Htwo\x1b[2;3Hthree") == ["one", "two", "  three"]
    assert render(b"old screen\r\n\x1b[H\x1b[2Jnew") == ["new"]


def test_bounded_memory_after_10_mb():
    a = Activity()
    chunk = (b"\x1b[32mline of busy output\x1b[0m\r\n" * 2000)[:65536]
    fed_bytes = 0
    while fed_bytes < 10 * 1024 * 1024:
        a.feed(chunk, 1.0)
        fed_bytes += len(chunk)
    a.feed(b"$ ", 1.0)
    assert a.bytes == fed_bytes + 2
    assert a.snapshot(5.0)["tail_bytes"] <= TAIL
    assert sys.getsizeof(a._raw) < 4 * TAIL
    assert a.state(5.0) == ("idle", "prompt")
    a.feed(b"x" * (10 * 1024 * 1024), 6.0)  # one huge chunk
    assert len(a._raw) == TAIL and a.bytes == fed_bytes + 2 + 10 * 1024 * 1024


def test_cut_tail_drops_its_partial_first_line():
    a = Activity(tail=16)
    a.feed(b"\x1b[31mxxxxxxxxxxxxxxx\x1b[0m\r\n$ ", 1.0)  # the cut lands inside "\x1b[31m"
    assert a.last_line() == "$ "
    assert render(b"31mjunk\r\n$ ", cut=True) == ["$ "]


def test_snapshot():
    a = fed("hello\r\n$ ", at=10.0)
    assert a.snapshot(11.0) == {"state": "busy", "reason": "recent activity",
                                "last_output": 10.0, "since_output": 1.0, "bytes": 9,
                                "tail_bytes": 9, "last_line": "$"}
    assert a.snapshot(20.0)["reason"] == "prompt"
