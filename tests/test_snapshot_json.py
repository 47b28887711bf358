"""``clowderctl snapshot --format json`` through the real host (issue 13, acceptance 5).

A session's program sets colours, attributes, the cursor and modes; the JSON snapshot
read back says what it set (schema: docs/snapshot-json.md).  Both scopes, as every
host test, and both engines (``--screen-engine``): ghostty's snapshot is read from its
own cells (ptyhostd/screen_cells.py), pyte's from its grid.
"""

from __future__ import annotations

import json

import pytest

from conftest import ENGINES, PYTHON, use_engine, wait_for

# What the program prints, as printf(1) arguments: one line per thing it sets.
PROGRAM = "".join((
    r"\033]2;json-title\007",
    r"\033[1;31mbold-red\033[0m ",
    r"\033[2;3;5;7;9mattrs\033[0m ",
    r"\033[4:3;38;5;208mcurly\033[0m\033[21mdouble\033[0m\r\n",
    r"\033[38;2;1;2;3;48;5;17mtrue\033[0m\033[8mpw\033[0m\r\n",
    r"wide:\344\270\255|\360\237\207\253\360\237\207\267|end",
    r"\033[?1h\033=\033[?2004h\033[?1002h\033[?1006h\033[?1004h\033[>5u",
    r"\033[4 q\033[5;7H",
    r"\033[?1049h\033[?25l",
    r"alt-text",
))


def snapshot(host, sid: str) -> dict:
    return json.loads(host.ctl("snapshot", sid, "--format", "json").stdout)


def cell_at(doc: dict, x: int, y: int) -> tuple:
    """(text, style) of the span covering column x of row y; text is the cell's own."""
    for span in doc["rows"][y]:
        width = span.get("width")
        if width is not None and span["x"] <= x < span["x"] + width:
            return span["text"], doc["styles"][span["style"]]
        if width is None and span["x"] <= x < span["x"] + len(span["text"]):
            return span["text"][x - span["x"]], doc["styles"][span["style"]]
    return " ", {}


def row_text(doc: dict, y: int) -> str:
    return "".join(span["text"] for span in doc["rows"][y])


@pytest.mark.parametrize("engine", ENGINES)
def test_json_snapshot_reads_back_what_the_program_set(host, engine):
    use_engine(host, engine)
    sid = host.spawn("sh", "-c", f"printf '{PROGRAM}'; exec sleep 100000", size="60x12")
    wait_for(lambda: b"alt-text" in host.backlog(sid), 10, "the program's output")
    doc = snapshot(host, sid)
    assert doc["engine"] == engine
    assert doc["version"] == 1 and doc["size"] == {"cols": 60, "rows": 12}, doc
    assert doc["title"] == "json-title"
    # The alternate screen is shown: its text, the cursor after it, hidden.
    assert doc["modes"]["alternate_screen"] is True
    assert row_text(doc, 4).strip() == "alt-text", doc["rows"]
    assert doc["cursor"] == {"x": 14, "y": 4, "visible": False, "style": 4,
                             "pending_wrap": False}, doc["cursor"]
    assert {k: doc["modes"][k] for k in ("application_cursor", "application_keypad",
                                         "bracketed_paste", "mouse", "mouse_encoding",
                                         "focus", "autowrap", "origin", "keyboard")} == {
        "application_cursor": True, "application_keypad": True, "bracketed_paste": True,
        "mouse": "button", "mouse_encoding": "sgr", "focus": True, "autowrap": True,
        "origin": False, "keyboard": 0}, doc["modes"]  # the alternate screen's own stack

    # The same program, then back to the primary screen: its attributes as set.
    sid2 = host.spawn("sh", "-c", f"printf '{PROGRAM}\\033[?1049l'; exec sleep 100000",
                      size="60x12")
    wait_for(lambda: b"\x1b[?1049l" in host.backlog(sid2), 10, "the program's output")
    doc = snapshot(host, sid2)
    assert doc["modes"]["alternate_screen"] is False and doc["modes"]["keyboard"] == 5
    assert doc["cursor"]["x"] == 6 and doc["cursor"]["y"] == 4, doc["cursor"]
    assert cell_at(doc, 0, 0) == ("b", {"fg": 1, "bold": True})
    assert cell_at(doc, 9, 0) == ("a", {"dim": True, "italic": True, "blink": True,
                                        "reverse": True, "strikethrough": True})
    assert cell_at(doc, 15, 0) == ("c", {"fg": 208, "underline": 3})
    assert cell_at(doc, 20, 0) == ("d", {"underline": 2})
    assert cell_at(doc, 0, 1) == ("t", {"fg": "#010203", "bg": 17})
    assert cell_at(doc, 4, 1) == ("p", {"hidden": True})
    # Wide cells are spans of their own, with the model's width: what follows is where
    # the model has it.  A flag is one cluster to pyte; ghostty (its grapheme clustering,
    # mode 2027, off) keeps each of its two regional indicators as a wide cell, and its
    # cursor agrees.
    wide = [span for span in doc["rows"][2] if "width" in span]
    flag = [(8, "\U0001f1eb\U0001f1f7", 2)] if engine == "pyte" else \
        [(8, "\U0001f1eb", 2), (10, "\U0001f1f7", 2)]
    assert [(s["x"], s["text"], s["width"]) for s in wide] == [
        (5, "\u4e2d", 2)] + flag, doc["rows"][2]
    after = 10 if engine == "pyte" else 12
    assert cell_at(doc, after, 2) == ("|", {})
    # Runs of equal style are merged: the row of plain text is one span, then the wides.
    assert doc["rows"][2][0] == {"x": 0, "text": "wide:", "style": 0}
    assert doc["styles"][0] == {}


def test_a_bad_format_gets_a_clear_error(host):
    sid = host.spawn("sh", "-c", "echo hi; exec sleep 100000")
    wait_for(lambda: b"hi" in host.backlog(sid), 10, "the program's output")
    # clowderctl refuses it itself; the host's own answer, on the wire:
    r = host.run([PYTHON, "-c", f"""
from ctl.client import Client, RequestFailed
import clowder_wire as P
with Client({host.socket!r}) as c:
    try:
        c.request(P.GetSnapshot(session={sid!r}, format="pdf"), P.SnapshotData)
    except RequestFailed as exc:
        print(exc.code, exc)
"""])
    out = r.stdout.decode()
    assert out.startswith("bad-request") and "'pdf'" in out and "json" in out, out
    proc = host.ctl("snapshot", sid, "--format", "pdf", check=False)
    assert proc.returncode == 2 and b"invalid choice" in proc.stderr


def _model(engine: str, cols: int, rows: int):
    if engine == "ghostty":
        from ptyhostd.screen_ghostty import GhosttyScreen
        return GhosttyScreen(cols, rows)
    from ptyhostd.screen import Screen
    return Screen(cols, rows)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_json_written_a_row_at_a_time_is_the_whole_document(engine):
    """The snapshot is encoded row by row (so that no call holds the GIL for long,
    docs/design.md "Snapshots beside other sessions' echo"): the same text as one
    json.dumps of the document, with every kind of cell, styles named by later rows,
    blank rows, and a first and last row that are empty; and no call of json's encoder
    wrote more than a row or the head."""
    from ptyhostd import screen_json
    model = _model(engine, 40, 12)
    model.feed("\r\n\x1b[1;31mred\x1b[0m plain \x1b[38;5;200;48;2;1;2;3mpal\x1b[0m "
               "wide 中文 e\u0301 \x1b]8;;https://example.org/\x1b\\link\x1b]8;;\x1b\\"
               "\r\n\r\n\x1b[4:3mcurly\x1b[0m \x1b[7mrev\x1b[0m 🇫🇷 👩\u200d💻\r\n"
               "\x1b[44m\x1b[2K\x1b[0m\r\n\x1b]2;a title\x07last\x1b[3;5H".encode())
    encoded = []  # what each call of json's encoder (one C call, the GIL held) made
    real = screen_json.json.dumps

    def dumps(*args, **kw):
        encoded.append(real(*args, **kw))
        return encoded[-1]
    screen_json.json.dumps = dumps
    try:
        text = model.snapshot("json")
    finally:
        screen_json.json.dumps = real
    whole = json.dumps(screen_json.document(model), ensure_ascii=False,
                       separators=(",", ":")) + "\n"
    assert text == whole
    # No one call encoded the rows with the head, or two rows (before: one call, all).
    assert not any('"rows":[' in e or e.startswith("[[") for e in encoded), \
        [e[:40] for e in encoded]
    assert len(encoded) == 13  # the head, and each row
    doc = json.loads(text)
    assert doc["rows"][0] == [] and doc["rows"][-1] == [] and len(doc["rows"]) == 12
    assert "red" in row_text(doc, 1) and "curly" in row_text(doc, 3)
    assert len(doc["styles"]) > 4


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("format", ["text", "ansi", "html", "json"])
def test_a_snapshot_given_a_limit_gives_up_only_when_it_cannot_fit(engine, format):
    """With ``limit`` (the host passes a reply's MAX_DATA), a snapshot that is certain to
    be more UTF-8 bytes than that raises engine.TooLarge before it is all made (HTML and
    JSON of a big screen are megabytes, and decoding them holds the GIL), and never
    when it fits: at its own size it is the same text as without a limit."""
    from ptyhostd.engine import TooLarge
    model = _model(engine, 120, 40)
    for y in range(40):  # coloured words, wide and combined characters: bytes > chars
        model.feed(("\x1b[%d;1H" % (y + 1) + " ".join(
            "\x1b[38;5;%dm%s中e\u0301\x1b[0m" % ((y * 7 + i) % 256, "w" * (i % 5))
            for i in range(14))).encode())
    whole = model.snapshot(format)
    size = len(whole.encode())
    assert model.snapshot(format, limit=size) == whole
    assert model.snapshot(format, limit=10 * size) == whole
    try:
        model.snapshot(format, limit=size // 4)
    except TooLarge as exc:
        assert size // 4 < exc.at_least <= size, (exc.at_least, size)
        gave_up = True
    else:
        gave_up = False
    # HTML of ghostty (its formatter's bytes, before decoding) and JSON (its rows, as they
    # are encoded) give up; the others are checked by the host on the whole text.
    assert gave_up == (format == "json" or (format, engine) == ("html", "ghostty")), \
        (format, engine, gave_up)


def test_the_repaints_common_prefix_is_os_paths():
    """screen_ghostty.common_prefix (by memcmp halving) agrees with
    os.path.commonprefix, on random bytes around every kind of boundary."""
    import os
    import random
    from ptyhostd.screen_ghostty import common_prefix
    rng = random.Random(5)
    for _ in range(3000):
        n = rng.randint(0, 64)
        a = bytes(rng.randrange(3) for _ in range(n))
        b = a[:rng.randint(0, n)] + bytes(rng.randrange(3) for _ in range(rng.randint(0, 5)))
        if rng.random() < 0.5:
            a, b = b, a
        assert common_prefix(a, b) == len(os.path.commonprefix([a, b])), (a, b)


# One piece of output per keystroke, so each is a read of its own: plain text (fed on
# the loop at once), sequences cut in two (the pool's; the plain half after the cut must
# not be fed on the loop while the parser is inside the sequence), a UTF-8 character cut
# in two.  ptyhostd/session.py, ``_feed_inline``.
PIECES = ["ab", "\x1b[3", "1m", "red", "\x1b[0", "m", " A\x1b[3", "b", "z\r\n",
          "\xc3", "\xa9", "x",
          # whole cheap sequences (fed on the loop), then one cut in two (the pool's)
          "\x1b[32mg\x1b[0m", "\x1b[4;2Hq\x1b[?25l", "\x1b[2", "Kw"]
PIECER = """\
import os, sys, termios, tty
tty.setraw(0)
pieces = [p.encode("latin-1") for p in sys.argv[1:]]
os.write(1, b"ready\\r\\n")
for p in pieces:
    os.read(0, 1)
    os.write(1, p)
os.read(0, 1)
"""


def test_only_output_whose_cost_is_its_length_is_fed_on_the_loop():
    """What ``_feed_inline`` takes: text, and whole sequences bounded by a row."""
    from ptyhostd.session import cheap_output
    for data in (b"plain text\r\n", "é\t\b".encode(), b"\x1b[1;38;5;208mred\x1b[0m",
                 b"\x1b[2K\x1b[3A\x1b[1G\x1b[12;40H\x1b[?25l\x1b[?2026h\x1b[?2026l",
                 b"\x1b[38:2::1:2:3m"):
        assert cheap_output(data, 500), data
    assert cheap_output(b"x\x1b[2K" * 60, 500)  # a screenful of erased rows
    assert not cheap_output(b"\x1b[2K" * 100, 500), "50,000 cells cleared by 400 bytes"
    assert cheap_output(b"x\x1b[K" * 32, 1000)
    assert not cheap_output(b"x\x1b[K" * 33, 1000), "each EL a look at ghostty's cursor"
    assert not cheap_output(b"x\x1b[0K" * 20 + b"\x1b[K" * 13, 1000)
    for data in (b"\x1b[9999b", b"\x1b#8", b"\x1b[2J", b"\x1b[?1049h", b"\x1b[?3h",
                 b"\x1b[99999L", b"\x1b[500S", b"text\x1b[", b"\x1b[31", b"\x1b", b"a\x07",
                 b"\x1b]0;title\x07", b"\x1b[" + b"1;" * 40 + b"m", b"\x1b\x1b[0m"):
        assert not cheap_output(data, 80), data


def test_small_reads_fed_on_the_loop_and_in_the_pool_make_one_screen(host):
    """Keystroke by keystroke, each echo a read of its own: the model sees every byte
    once, in order, whichever way it was fed; the host logs no error meanwhile."""
    use_engine(host, "ghostty")
    pid = host.main_pid()
    sid = host.spawn(PYTHON, "-c", PIECER, *PIECES, size="40x6")
    wait_for(lambda: b"ready" in host.backlog(sid), 10, "the program to start")
    shown = b"ready\r\n"
    for piece in PIECES:
        host.ctl("send", sid, "k")
        shown += piece.encode("latin-1")
        wait_for(lambda: host.backlog(sid).endswith(shown), 10,
                 f"the program's piece {piece!r} in the backlog")
    doc = snapshot(host, sid)
    assert row_text(doc, 1).rstrip() == "abred AAAAz", doc["rows"]
    assert row_text(doc, 2).rstrip() == "éxg", doc["rows"]
    assert cell_at(doc, 1, 1) == ("b", {}), doc
    assert cell_at(doc, 2, 1) == ("r", {"fg": 1}), doc
    assert cell_at(doc, 5, 1)[1] == {}, doc
    assert cell_at(doc, 2, 2) == ("g", {"fg": 2}), doc
    assert row_text(doc, 3).rstrip() == "  w", doc["rows"]  # the q erased by CSI 2 K
    assert doc["cursor"]["x"] == 3 and doc["cursor"]["y"] == 3, doc["cursor"]
    log = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={pid}"]
                   ).stdout.decode(errors="replace")
    assert "Traceback" not in log and "Exception in callback" not in log, log[-3000:]
