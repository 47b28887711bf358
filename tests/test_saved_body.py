"""The state directory's saved screen (issue 17): what a saved file's VT bytes give a
fresh terminal is the session's scrollback and screen, no line twice, none missing.

Pure: ghostty's model on both sides, no host.  The scrollback's lines come from
``history_lines(scrollback=True)`` and the screen from the repaint, as
``Session.saved_screen`` makes them in one look at the model; ``statedir.saved_body``
puts them together.  The whole path through a real host is
test_reboot.py::test_a_session_of_an_earlier_boot_is_listed_with_its_last_screen.
"""

from __future__ import annotations

import pytest

from ptyhostd import statedir

ghostty = pytest.importorskip("ptyhostd.screen_ghostty", reason="pyghostty not installed")

COLS, ROWS = 30, 8


def numbered(n: int, end: bytes = b"\r\n") -> bytes:
    return b"".join(b"line-%d\r\n" % i for i in range(n - 1)) + b"line-%d" % (n - 1) + end


STREAMS = {
    # The screen full to its last row (a prompt at the bottom): its first row was
    # saved twice when the scrollback's lines included the screen's.
    "full-screen": numbered(40, b""),
    "trailing-newline": numbered(40),
    "short-scrollback": numbered(ROWS + 2, b""),  # fewer lines than the screen's rows
    "no-scrollback": numbered(3),
    "wrapped": b"".join(b"%d-" % i + b"w" * 70 + b"\r\n" for i in range(12)) + b"$ ",
    # Wide characters filling rows to their last column.
    "wide": "".join(f"{i:x} 宽字符宽字符宽字符宽字符宽字符宽字符\r\n" for i in range(15)).encode(),
    "colours": b"".join(b"\x1b[3%dmred-%d\x1b[0m plain\r\n" % (i % 8, i) for i in range(20)),
    "cleared": numbered(30) + b"\x1b[H\x1b[2Jafter clear 1\r\nafter clear 2",
    # A line wrapped from the last scrollback row onto the screen's first, the row
    # ending in a space (kept) or in a wide character's spacer (the character once
    # came back twice: ghostty's formatter gave it with the row above too).
    "space-at-wrap": numbered(5) + b"a" * 29 + b" " + b"b" * 10 + b"\r\n" + numbered(7, b""),
    "wide-at-wrap": "".join(f"{i:02} 宽字符宽字符宽字符宽字符宽字符宽字符\r\n"
                            for i in range(15)).encode(),
    "alternate": numbered(25) + b"\x1b[?1049h\x1b[Hfull-screen app\x1b[5;5Hstatus",
}


def model(data: bytes):
    screen = ghostty.GhosttyScreen(COLS, ROWS)
    screen.feed(data)
    return screen


def restored(screen, room: int = statedir.FILE_MAX):
    lines = screen.history_lines(statedir.TAIL_LINES, ansi=True, scrollback=True)
    body = statedir.saved_body(lines, screen.repaint() + screen.pending, COLS, ROWS, room)
    return model(body)


# Lines wider than the screen: a repaint draws each row on its own (as tmux's does),
# so a line wrapped on the screen, or wrapped across its top, comes back as its rows:
# the same text, no row twice or missing, but no longer joined into one line.
WRAPPING = {"wrapped", "wide", "space-at-wrap", "wide-at-wrap"}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_saved_screen_gives_back_the_scrollback_and_the_screen(name):
    orig = model(STREAMS[name])
    back = restored(orig)
    want, got = orig.history_lines(500, ansi=True), back.history_lines(500, ansi=True)
    if name in WRAPPING:
        assert "".join(got) == "".join(want), got
        assert len(got) > len(want) - 2, got  # only the screen's wrapped lines split
    else:
        assert got == want
    assert back.snapshot() == orig.snapshot()


def test_a_file_too_small_for_the_whole_scrollback_keeps_its_last_lines():
    orig = model(numbered(400, b""))
    back = restored(orig, room=2000)
    want = orig.history_lines(1000)
    got = back.history_lines(1000)
    assert 10 < len(got) < len(want) and got == want[-len(got):], got

