"""Two clients of different sizes on one session (issue 13, "Repaint").

The session's size belongs to the client that typed last.  The other one must see its
own top-left part of the session, with the area past the session's edges marked
(ptyhostd/screen_view.py), never the owner's frame squashed into its corner.  Both
clients are real ``clowderctl attach`` processes on ptys of their own (test_attach's
``Attach``); what each terminal shows is read by playing all it was sent into a
terminal model of its size.  On both engines (``--screen-engine``): each renders the
frames from its own cells.
"""

from __future__ import annotations

import time

import pytest

from conftest import ENGINES, use_engine, wait_for
from ptyhostd.screen import Screen
import test_attach
from test_attach import ready, shell

attach = test_attach.attach  # the fixture of Attach clients

FILL = "."  # ptyhostd.screen_view.FILL (not imported: the test reads what a terminal shows)


class Seen:
    """What one client's terminal shows: everything it read, in a model of its size."""

    def __init__(self, client, cols: int, rows: int):
        self.client = client
        self.screen = Screen(cols, rows)
        self.fed = 0

    def lines(self) -> list:
        self.client._read(0.05)
        out = self.client.out
        if len(out) > self.fed:
            self.screen.feed(bytes(out[self.fed:]))
            self.fed = len(out)
        return self.screen.snapshot().split("\n")[:self.screen.rows]

    def wait(self, predicate, what: str, timeout: float = 15) -> list:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if predicate(lines):
                return lines
            if time.monotonic() > deadline:
                pytest.fail(f"{timeout} s passed before {what}; the terminal shows:\n"
                            + "\n".join(f"{i:2}|{line}" for i, line in enumerate(lines)))


# A frame drawn with absolute moves: a marker at the top left, a status line on the
# last row of a 100x30 session, a word near its right edge.  Octal escapes, so that the
# shell's echo of the command does not contain the words themselves.
DRAW = (b"printf '\\033[H\\033[2J\\033[1;1HTOP\\055LEFT\\033[30;1HSTATUS\\055LINE"
        b"\\033[10;90HRIGHT\\055EDGE\\033[3;1H'\r")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_client_that_does_not_own_the_size_sees_its_own_top_left(host, attach, engine):
    use_engine(host, engine)
    sid = shell(host, size="80x24")
    owner = attach(sid, cols=100, rows=30)
    ready(owner)
    wait_for(lambda: (host.ps()[sid]["cols"], host.ps()[sid]["rows"]) == (100, 30), 10,
             "the first client's size to reach the session")
    # Wider and shorter than the session: it never types, so it never owns the size.
    other = attach(sid, cols=120, rows=20)
    ready(other)
    seen = Seen(other, 120, 20)
    owner.type(DRAW)
    lines = seen.wait(lambda ls: ls[0].startswith("TOP-LEFT") and "RIGHT-EDGE" in ls[9],
                      "the frame to reach the other client")
    assert (host.ps()[sid]["cols"], host.ps()[sid]["rows"]) == (100, 30)
    # Its own top-left part: row 10 as the session has it (cut at column 100, where
    # the session ends), and the session's last row (30) is not on its 20 rows.
    assert lines[9][89:99] == "RIGHT-EDGE", lines[9]
    assert not any("STATUS" in line for line in lines), \
        "the session's last row was squashed onto the smaller terminal's:\n" + "\n".join(lines)
    # Past the session's right edge, every row is marked.
    assert all(line[100:] == FILL * 20 for line in lines), "\n".join(lines)

    # Now it types: it takes the size, and the first client sees its own part of that.
    seen_owner = Seen(owner, 100, 30)
    other.type(b"echo took-$((6*7))\r")
    other.expect(b"took-42", what="the shell's answer to the second client")
    wait_for(lambda: (host.ps()[sid]["cols"], host.ps()[sid]["rows"]) == (120, 20), 10,
             "the typing client's size to reach the session")
    lines = seen_owner.wait(lambda ls: any("took-42" in line for line in ls[:20])
                            and all(line == FILL * 100 for line in ls[20:]),
                            "the first client's view of the 120x20 session")
    assert not any(FILL * 3 in line for line in lines[:20]), "\n".join(lines)
    # And the typing client shows the program's own bytes again: no marks left.
    lines = seen.wait(lambda ls: any("took-42" in line for line in ls), "the typed answer")
    assert not any(line.endswith(FILL * 20) for line in lines), "\n".join(lines)

    # The owner leaves: the size goes back to the client that remains, which shows the
    # program's bytes again (no marks) without having to type.
    other.type(b"\x1c")
    assert other.finish() == 0
    wait_for(lambda: (host.ps()[sid]["cols"], host.ps()[sid]["rows"]) == (100, 30), 10,
             "the size to pass to the remaining client")
    host.ctl("send", sid, "echo back-$((5*5))\r")  # sent another way: it has not typed
    seen_owner.wait(lambda ls: any("back-25" in line for line in ls)
                            and not any(line == FILL * 100 for line in ls),
                            "the remaining client's screen, unmarked")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_read_only_watcher_follows_its_own_terminal_size(host, attach, engine):
    """A watcher never resizes the session; its frames follow its terminal: marked past
    the session's edge, then the program's own bytes once it is the session's size."""
    use_engine(host, engine)
    sid = shell(host, size="80x24")
    host.ctl("send", sid, "printf '\\033[H\\033[2JW\\055ONE\\033[24;1HW\\055BOTTOM\\033[2;1H'\r")
    wait_for(lambda: b"W-BOTTOM" in host.backlog(sid), 10, "the frame drawn")
    watcher = attach(sid, "--read-only", cols=90, rows=24)
    watcher.wait_raw()
    seen = Seen(watcher, 90, 24)
    lines = seen.wait(lambda ls: ls[0].startswith("W-ONE") and ls[23].startswith("W-BOTTOM"),
                      "the watcher's first frame")
    assert all(line[80:] == FILL * 10 for line in lines), "\n".join(lines)
    # Its terminal shrinks to 80x20: the session's top-left part, its last row not shown.
    watcher.set_size(80, 20)
    seen.screen.resize(80, 20)
    lines = seen.wait(lambda ls: ls[0].startswith("W-ONE") and not any(
        FILL * 3 in line for line in ls), "a frame of the watcher's new size")
    assert not any("W-BOTTOM" in line for line in lines), "\n".join(lines)
    assert (host.ps()[sid]["cols"], host.ps()[sid]["rows"]) == (80, 24), \
        "a read-only watcher resized the session"
    # The session's own size: the program's bytes, live.
    watcher.set_size(80, 24)
    seen.screen.resize(80, 24)
    seen.wait(lambda ls: ls[23].startswith("W-BOTTOM"), "the session's whole screen")
    host.ctl("send", sid, "echo live-$((8*8))\r")
    seen.wait(lambda ls: any(line.startswith("live-64") for line in ls), "live output")
