"""Repaint faults of issue 13, checked in a real terminal: tmux 3.3a as the client's.

One tmux pane is fed a program's own bytes, another the repaint of a model fed the
same bytes; the two panes' contents (``capture-pane -e``: text and attributes) must be
the same.  tmux runs on a private socket and is ended by the test.  The model-level
checks of the same faults are in tests/test_screen.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import test_screen
from conftest import wait_for
from ptyhostd.screen import Screen

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _tmux_installed():
    # `make deps` installs it: a missing tmux is a broken set-up, not a test to skip.
    if shutil.which("tmux") is None:
        pytest.fail("these tests need tmux (make deps installs it)")


class Tmux:
    """A private tmux server whose panes show files written into them."""

    def __init__(self, tmp_path):
        # A socket of each test's own: a server being killed by the test before still
        # answers on a shared name for a moment.
        self.argv = ["tmux", "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
        self.tmp = tmp_path

    def run(self, *args) -> str:
        proc = subprocess.run(self.argv + list(args), capture_output=True, text=True,
                              timeout=10)
        if proc.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def show(self, name: str, data: bytes, cols: int, rows: int) -> None:
        path = self.tmp / f"{name}.bin"
        path.write_bytes(data)
        self.run("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
                 f"cat {path}; exec cat")

    def lines(self, name: str, keep_trailing: bool = False) -> list:
        args = ["capture-pane", "-p", "-e", "-t", name] + (["-N"] if keep_trailing else [])
        return self.run(*args).split("\n")

    def close(self) -> None:
        subprocess.run(self.argv + ["kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.close()


def live_and_repainted(tmux, data: bytes, cols: int, rows: int, ready: str, row=None,
                       keep_trailing=False):
    """Wait until both panes show ``ready``, then until they are the same (all rows, or
    ``row``); fail with both if they never are."""
    screen = Screen(cols, rows)
    screen.feed(data)
    tmux.show("live", data, cols, rows)
    tmux.show("repaint", screen.repaint() + screen.pending, cols, rows)

    def both():
        got = [tmux.lines(name, keep_trailing) for name in ("live", "repaint")]
        if row is not None:
            got = [[lines[row]] for lines in got]
        return got

    wait_for(lambda: all(any(ready in line for line in lines) for lines in both()), 15,
             f"both panes to show {ready!r}")
    try:
        wait_for(lambda: both()[0] == both()[1], 5, "the repaint to show what the bytes did")
    except BaseException:
        live, repainted = both()
        diff = [f"row {i}:\n  live    {a!r}\n  repaint {b!r}"
                for i, (a, b) in enumerate(zip(live, repainted), row or 0) if a != b]
        pytest.fail("the repaint differs in tmux:\n" + "\n".join(diff))


def test_top_header_keeps_its_last_column_in_tmux(tmux):
    with open(os.path.join(HERE, "recordings", "top.bin"), "rb") as f:
        data = f.read()
    first_frame = data[:data.index(b"\x1b[7m  PID") + 2000]
    # Trailing cells kept (-N): the header's reverse spaces run to the last column.
    live_and_repainted(tmux, first_frame, 100, 30, "COMMAND", row=6, keep_trailing=True)


def test_grapheme_clusters_lay_out_as_the_bytes_did_in_tmux(tmux):
    data = ("A\U0001f469\u200d\U0001f4bbB\r\n"  # ZWJ sequence
            "C\U0001f1eb\U0001f1f7D\r\n"  # a flag
            "E\u2764\ufe0fF\r\n"  # VS16
            "G\U0001f468\u200d\U0001f469\u200d\U0001f467H end").encode()
    live_and_repainted(tmux, data, 20, 5, "end")


# --- every recording, attached at split points, in tmux (issue 13, acceptance 3) ----------

# What tmux says of a pane besides its cells: the cursor, the screen in use and the modes
# a program sets (tmux's own names for them).
PANE_STATE = ",".join("#{%s}" % v for v in (
    "cursor_x", "cursor_y", "alternate_on", "cursor_flag", "keypad_cursor_flag",
    "keypad_flag", "insert_flag", "origin_flag", "wrap_flag", "mouse_any_flag",
    "mouse_button_flag", "mouse_standard_flag", "mouse_sgr_flag", "mouse_utf8_flag",
    "scroll_region_upper", "scroll_region_lower"))
# Split points of test_screen.split_point: plain, inside a sequence, inside a character.
TMUX_SPLITS = (0, 7, 14, 22)
# Where tmux, shown a program's bytes, ends in another state than the model does (so a
# repaint from the model cannot match it), and why.  Strict: each fails every run, and
# one that passes (a cause gone) fails the suite until its entry goes.
_LEGACY = ("tmux enters ?47 as ?1047, a new cleared alternate screen each time (input.c: "
           "both call window_pane_alternate_on), and does not know ?1048, where xterm, "
           "ghostty and pyte show again what ?47 left there and save the cursor; the "
           "stream's box, drawn there, lands elsewhere")
_HALF = ("a wide character whose right half was overwritten: tmux keeps its left half "
         "(row 9: '中x'), ghostty and pyte, as xterm, blank it (' x')")
KNOWN_TMUX = {
    ("ghostty", "wide", 22): _HALF,
    ("pyte", "wide", 22): _HALF,
    ("ghostty", "printf-alt", 22): (
        "the 3 blanks ICH inserts into a row erased blue, with a default pen: ghostty "
        "gives them the row's blue, tmux the pen's default background"),
    ("ghostty", "printf-legacy", 7): _LEGACY,
    ("ghostty", "printf-legacy", 14): _LEGACY,
    ("ghostty", "printf-legacy", 22): _LEGACY,
    ("pyte", "printf-legacy", 14): _LEGACY,
    ("pyte", "printf-legacy", 22): _LEGACY,
}


def _pane(tmux, name: str, data: bytes, cols: int, rows: int) -> None:
    """A pane shown ``data``; -echo, so tmux's answers to the program's queries (which
    the recording holds, and tmux answers as input) are not drawn on it.  The pane then
    stays open (tail of /dev/null: it reads no input and prints nothing) until the
    test's tmux server is killed."""
    path = tmux.tmp / f"{name}.bin"
    path.write_bytes(data)
    done = tmux.tmp / f"{name}.done"
    tmux.run("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
             f"stty -echo; cat {path}; touch {done}; exec tail -f /dev/null")


# A pane is compared as what it shows: each cell's character and the attributes in force
# there, parsed from capture-pane -e (whose SGR between cells depends on cells it leaves
# out).  Two forms that look the same are one: ghostty keeps SGR 34 and 38;5;4 as one
# palette index (the repaint writes the first, the form programs use most: screen_ghostty
# _basic_colours); and blanks at a row's end that show only a background are left out in
# both (cells erased with that colour, which capture-pane omits, are painted as blanks
# of that colour by a repaint).  Blanks that show more (reverse video, an underline, a
# strike: top's header) are kept.
_TOKEN = re.compile(r"\x1b\[([0-9;:]*)m|(.)", re.S)
_FLAGS = {"1": "bold", "2": "dim", "3": "italic", "4": "underline", "5": "blink",
          "7": "reverse", "8": "hidden", "9": "strike", "53": "overline"}
_OFF = {"22": ("bold", "dim"), "23": ("italic",), "24": ("underline",), "25": ("blink",),
        "27": ("reverse",), "28": ("hidden",), "29": ("strike",), "55": ("overline",)}
_SHOWS = {"reverse", "underline", "strike", "overline"}
# capture-pane writes line drawing as SO, the DEC special graphics letters, SI; a repaint
# may draw the same with Unicode's box characters (pyte's does).
_DEC = dict(zip("`abcdefghijklmnopqrstuvwxyz{|}~",
                "◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£·"))


def _colour(params: list, i: int) -> tuple:
    """(colour, next index) of an extended colour at params[i] (after 38/48/58)."""
    if i < len(params) and params[i] == "5" and i + 1 < len(params):
        return ("p", int(params[i + 1] or 0)), i + 2
    if i < len(params) and params[i] == "2" and i + 3 < len(params):
        return ("rgb",) + tuple(params[i + 1:i + 4]), i + 4
    return None, len(params)


def _sgr(pen: dict, text: str) -> None:
    params = text.split(";") if text else ["0"]
    i = 0
    while i < len(params):
        p = params[i]
        head = p.split(":")[0]
        i += 1
        if head in ("", "0"):
            pen.clear()
        elif head == "4" and ":" in p:
            if p.endswith(":0"):
                pen.pop("underline", None)
            else:
                pen["underline"] = p.split(":")[1]
        elif head in _FLAGS:
            pen[_FLAGS[head]] = True
        elif head in _OFF:
            for k in _OFF[head]:
                pen.pop(k, None)
        elif head in ("38", "48", "58"):
            pen[head], i = _colour(params, i)
        elif head in ("39", "49", "59"):
            pen.pop(str(int(head) - 1), None)
        elif head.isdigit():
            n = int(head)
            for low, key, base in ((30, "38", 0), (90, "38", 8), (40, "48", 0), (100, "48", 8)):
                if low <= n < low + 8:
                    pen[key] = ("p", base + n - low)


def _cells(capture: str) -> list:
    """The pane's rows as lists of (character, attributes), the blanks at each row's end
    that show only a background left out."""
    pen: dict = {}
    rows = []
    for line in capture.split("\n"):
        row = []
        acs = False  # between SO and SI: the line-drawing set
        for m in _TOKEN.finditer(line):
            ch = m.group(2)
            if ch is None:
                _sgr(pen, m.group(1))
            elif ch in "\x0e\x0f":
                acs = ch == "\x0e"
            else:
                row.append((_DEC.get(ch, ch) if acs else ch, tuple(sorted(pen.items()))))
        while row and row[-1][0] == " " and not _SHOWS & dict(row[-1][1]).keys():
            row.pop()
        rows.append(row)
    return rows


def _seen(tmux, name: str) -> tuple:
    return (_cells(tmux.run("capture-pane", "-p", "-e", "-N", "-t", name)),
            tmux.run("display-message", "-p", "-t", name, PANE_STATE).strip())


def _shown(row: list) -> str:
    out, last = [], None
    for ch, attrs in row:
        if attrs != last:
            out.append("{%s}" % ",".join(f"{k}={v}" for k, v in attrs))
            last = attrs
        out.append(ch)
    return "".join(out)


@pytest.mark.parametrize("split", TMUX_SPLITS)
@pytest.mark.parametrize("name", test_screen.RECORDINGS)
@test_screen.engines
def test_attach_at_a_split_point_in_tmux(request, tmux, engine, name, split):
    """A real terminal (tmux) shown a model's repaint at byte k, then the rest, ends with
    the cells, attributes, cursor and modes of one shown every byte of the program."""
    if (engine, name, split) in KNOWN_TMUX:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_TMUX[engine, name, split],
                                              strict=True))
    data, cols, rows = test_screen.recording(name)
    k = test_screen.split_point(data, split)
    model = test_screen.ENGINES[engine](cols, rows)
    test_screen.feed_in_chunks(model, data[:k], seed=split)
    _pane(tmux, "live", data, cols, rows)
    _pane(tmux, "attached", model.repaint() + model.pending + data[k:], cols, rows)
    wait_for(lambda: all((tmux.tmp / f"{n}.done").exists() for n in ("live", "attached")),
             15, "both panes' cat to finish")
    try:
        wait_for(lambda: _seen(tmux, "live") == _seen(tmux, "attached"), 5,
                 f"{name} attached at {k} of {len(data)} to show what the bytes did")
    except BaseException:
        (live, live_state), (att, att_state) = _seen(tmux, "live"), _seen(tmux, "attached")
        diff = [f"row {i}:\n  live     {_shown(a)}\n  attached {_shown(b)}"
                for i, (a, b) in enumerate(zip(live, att)) if a != b]
        pytest.fail(f"{engine}, {name} attached at {k}: in tmux\n  state live     "
                    f"{live_state}\n  state attached {att_state}\n" + "\n".join(diff[:8]))
