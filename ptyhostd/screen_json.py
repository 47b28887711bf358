"""A screen as JSON: ``clowderctl snapshot --format json`` (schema: docs/snapshot-json.md).

``snapshot(view)`` reads a terminal model through a small read API, so that any
engine can offer it (``screen.Screen`` for pyte; another engine answers the same
calls).  The engine provides:

- ``cols``, ``rows``, ``title``, ``icon_name``, ``engine`` (a short name);
- ``read_rows()``: the active screen's rows, top to bottom (any iterable); each a list of
  ``ViewCell`` (one for each cell that starts a character: the right half of a wide
  one is not listed), trailing blanks with default attributes left out;
- ``read_cursor()``: a ``Cursor``;
- ``read_modes()``: a dict with exactly the keys of ``MODES``.

Runs of cells with equal style are merged into one span; a cell that is wide or holds
more than one code point is a span of its own with its width, so that a reader can put
every code point of a merged span in its own column.
"""

from __future__ import annotations

import json
from typing import NamedTuple, Optional, Union

VERSION = 1

Colour = Union[None, int, str]  # None: the default; 0-255: the palette; "#rrggbb"


class Style(NamedTuple):
    """A cell's attributes, engine-neutral; the defaults are a blank cell's."""
    fg: Colour = None
    bg: Colour = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: int = 0  # 0 none, 1 single, 2 double, 3 curly, 4 dotted, 5 dashed
    blink: bool = False
    reverse: bool = False
    strikethrough: bool = False
    hidden: bool = False
    link: Optional[str] = None  # an OSC 8 hyperlink's URI, if the engine keeps them


DEFAULT_STYLE = Style()


class ViewCell(NamedTuple):
    """One cell: its column, its text (a grapheme cluster), columns it covers, style."""
    x: int
    text: str
    width: int
    style: Style


class Cursor(NamedTuple):
    """The cursor: ``x`` is the last column while a wrap is pending."""
    x: int
    y: int
    visible: bool
    style: int  # DECSCUSR: 0 the terminal's default, 1-6 block/underline/bar, blinking or not
    pending_wrap: bool


# The modes a snapshot reports, and what each is.
MODES = {
    "alternate_screen": "the alternate screen is shown (?47, ?1047, ?1049)",
    "application_cursor": "cursor keys send SS3 sequences (DECCKM, ?1)",
    "application_keypad": "the keypad sends application sequences (DECKPAM, ESC =)",
    "bracketed_paste": "pastes are bracketed (?2004)",
    "mouse": "mouse tracking: null, x10 (?9), normal (?1000), highlight (?1001), "
             "button (?1002) or any (?1003)",
    "mouse_encoding": "null, utf8 (?1005), sgr (?1006), urxvt (?1015) or sgr_pixels (?1016)",
    "focus": "focus in/out is reported (?1004)",
    "autowrap": "text wraps at the right margin (DECAWM, ?7)",
    "origin": "rows count from the top margin (DECOM, ?6)",
    "insert": "insert mode (IRM, 4)",
    "reverse_video": "the whole screen in reverse video (DECSCNM, ?5)",
    "keyboard": "the kitty keyboard protocol's flags on top of the stack (0: off)",
    "modify_other_keys": "xterm's modifyOtherKeys level (CSI > 4 ; N m), 0 off",
    "synchronized_output": "a synchronized update is open (?2026)",
}
# The mouse modes and encodings, by the name MODES gives them; the most specific one
# wins when a program set several (as in xterm).
MOUSE_MODES = ((1003, "any"), (1002, "button"), (1001, "highlight"), (1000, "normal"),
               (9, "x10"))
MOUSE_ENCODINGS = ((1016, "sgr_pixels"), (1006, "sgr"), (1015, "urxvt"), (1005, "utf8"))


def _style_dict(style: Style) -> dict:
    """A style with only what differs from the default."""
    return {name: value for name, value, default in zip(Style._fields, style, DEFAULT_STYLE)
            if value != default}


def _spans(row: list, styles: dict) -> list:
    """A row's cells as spans (see the module docstring), styles by index."""
    spans: list = []
    run: Optional[dict] = None
    end = -1  # the column after the last cell of ``run``
    style, index = None, 0
    for cell in row:
        if cell.style is not style:  # engines hand out one Style object for a run
            style = cell.style
            index = styles.setdefault(style, len(styles))
        single = cell.width == 1 and len(cell.text) == 1
        if single and run is not None and run["style"] == index and cell.x == end:
            run["text"] += cell.text
            end += 1
            continue
        span = {"x": cell.x, "text": cell.text, "style": index}
        if not single:
            span["width"] = cell.width
        spans.append(span)
        run, end = (span, cell.x + 1) if single else (None, -1)
    return spans


def _head(view, styles: dict) -> dict:
    """Everything but the rows, once the rows have named their ``styles``."""
    cursor = view.read_cursor()
    modes = view.read_modes()
    missing = set(MODES) - set(modes)
    if missing:
        raise ValueError(f"the {view.engine} engine's modes lack {sorted(missing)}")
    return {
        "version": VERSION,
        "engine": view.engine,
        "size": {"cols": view.cols, "rows": view.rows},
        "title": view.title,
        "icon_name": view.icon_name,
        "cursor": cursor._asdict(),
        "modes": {name: modes[name] for name in MODES},
        "styles": [_style_dict(style) for style in styles],
    }


def document(view) -> dict:
    """The snapshot of ``view`` as plain data."""
    styles: dict = {DEFAULT_STYLE: 0}
    rows = [_spans(row, styles) for row in view.read_rows()]
    doc = _head(view, styles)
    doc["rows"] = rows
    return doc


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def snapshot(view, limit: Optional[int] = None) -> str:
    """The snapshot of ``view`` as compact JSON, one line: the same text as one
    ``json.dumps`` of ``document(view)``, but each row encoded as soon as it is read.
    ``limit``: engine.TooLarge as soon as the rows alone are more characters (so more
    UTF-8 bytes) than that.
    So no call holds the GIL long (json's encoder is one C call that lets no other
    thread run: the whole document of the largest screen, 2.5 MB, held it 0.3-0.4 s,
    stalling the event loop, hence every session's echo, that long), and a row's span
    objects die young instead of 75,000 of them living to the end, which made the
    collector's full passes (50-70 ms each, the GIL held) run during the snapshot
    (bench/snapshot_gil.py)."""
    styles: dict = {DEFAULT_STYLE: 0}
    rows, size = [], 0
    for row in view.read_rows():
        rows.append(_dumps(_spans(row, styles)))
        size += len(rows[-1]) + 1
        if limit is not None and size > limit:
            from .engine import TooLarge
            raise TooLarge(size)
    head = _dumps(_head(view, styles))  # ends with "}": the rows go in before it
    return "".join([head[:-1], ',"rows":[', ",".join(rows), "]}\n"])
