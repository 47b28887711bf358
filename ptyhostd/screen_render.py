"""Cells, and how a screen is written out: a repaint as VT bytes, text, ANSI or HTML.

A cell is pyte's ``Char`` with four more attributes (dim and hidden, which pyte drops,
the underline's style and the OSC 8 hyperlink).
Colours are ``"default"``, one of the sixteen names in ``NAMES`` (pyte's, including
its ``brown`` for yellow), ``"iN"`` for entry N of the 256-colour palette, or six hex
digits for a true colour.

``repaint`` reads the state of a ``ptyhostd.screen.Screen`` (its grid, the inactive
buffer and the modes kept beside pyte) and writes the bytes that bring a terminal of
the same size to that state.  It never writes a terminal query: everything it sends is
rebuilt from state, not copied from history.
"""

from __future__ import annotations

import functools
import html as _html
import operator
from itertools import groupby
from typing import NamedTuple


class Cell(NamedTuple):
    """One character cell: its text and attributes (field names are pyte's)."""
    data: str
    fg: str = "default"
    bg: str = "default"
    bold: bool = False
    italics: bool = False
    underscore: bool = False
    strikethrough: bool = False
    reverse: bool = False
    blink: bool = False
    dim: bool = False
    hidden: bool = False
    # The underline's style while ``underscore`` is set (SGR 4:N): 0 plain (SGR 4, 4:1),
    # 2 double (SGR 21, 4:2), 3 curly, 4 dotted, 5 dashed.
    ul_style: int = 0
    # The OSC 8 hyperlink the cell is part of, as the program set it ("params;uri"), or "".
    link: str = ""


BLANK = Cell(" ")
ATTRS_DEFAULT = BLANK[1:]
NAMES = ("black", "red", "green", "brown", "blue", "magenta", "cyan", "white")
NAMES = NAMES + tuple("bright" + name for name in NAMES)
_NAME_INDEX = {name: i for i, name in enumerate(NAMES)}


@functools.cache
def charset_codes() -> dict:
    """pyte's charset tables -> the codes that designate them (ESC ( B).  pyte and
    wcwidth are imported at first use here, not with this module: the ghostty engine's
    cells and views use this module too, and the two imports (~26 ms) were most of its
    first model's load, which a client reattaching after a restart waits for
    (docs/design.md "The first model after a restart")."""
    from pyte import charsets
    return {table: code for code, table in charsets.MAPS.items()}

# Private modes a repaint resets when they are off, so that a terminal that is not fresh
# (a reconnect) loses what an earlier program left on.  25 and 2026 are handled apart.
KNOWN_PRIVATE = (1, 5, 6, 7, 9, 12, 66, 1000, 1001, 1002, 1003, 1004, 1005, 1006,
                 1007, 1015, 1016, 2004)


def colour_sgr(colour: str, base: int) -> str:
    """SGR parameters for a colour; ``base`` is 30 for the foreground, 40 for the background."""
    if colour == "default":
        return ""
    index = _NAME_INDEX.get(colour)
    if index is not None:
        return str(base + index if index < 8 else base + 52 + index)
    if colour[0] == "i":
        return f"{base + 8};5;{colour[1:]}"
    return f"{base + 8};2;{int(colour[0:2], 16)};{int(colour[2:4], 16)};{int(colour[4:6], 16)}"


@functools.lru_cache(maxsize=1024)
def sgr(attrs: tuple) -> str:
    """The SGR sequence that sets exactly ``attrs`` (a cell without its text), from any state."""
    cell = Cell(" ", *attrs)
    params = ["0"]
    underline = "4" if not cell.ul_style else f"4:{cell.ul_style}"
    for flag, code in ((cell.bold, "1"), (cell.dim, "2"), (cell.italics, "3"),
                       (cell.underscore, underline), (cell.blink, "5"), (cell.reverse, "7"),
                       (cell.hidden, "8"), (cell.strikethrough, "9")):
        if flag:
            params.append(code)
    for colour, base in ((cell.fg, 30), (cell.bg, 40)):
        if colour != "default":
            params.append(colour_sgr(colour, base))
    return "\x1b[" + ";".join(params) + "m"


def hyperlink(link: str) -> str:
    """The OSC 8 that starts hyperlink ``link`` ("params;uri"), or ends one if empty."""
    return f"\x1b]8;{link}\x1b\\" if link else "\x1b]8;;\x1b\\"


def set_attrs(out: list, attrs: tuple, current) -> None:
    """Write what changes the attributes from ``current`` to ``attrs``: SGR, and OSC 8
    when the hyperlink changes (SGR 0 leaves it alone).  ``current`` None: the SGR is
    unknown, and no link is open."""
    out.append(sgr(attrs))
    link = attrs[-1]
    if link != (current[-1] if current is not None else ""):
        out.append(hyperlink(link))


def char_width(char: str) -> int:
    """wcwidth(), except that a regional indicator (half a flag) is wide whatever the
    wcwidth version: 0.2.5 (Debian 12's) says 1, later ones and tmux say 2."""
    if "\U0001f1e6" <= char <= "\U0001f1ff":
        return 2
    return (_wcwidth or _load_wcwidth())(char)


_wcwidth = None  # wcwidth.wcwidth, once a width is first asked (see charset_codes)


def _load_wcwidth():
    global _wcwidth
    from wcwidth import wcwidth
    _wcwidth = wcwidth
    return wcwidth


def is_wide(data: str) -> bool:
    """Whether a cell's text takes two columns."""
    return data > "\u10ff" and char_width(data[0]) == 2


class DefaultRow(dict):
    """A row of cells whose missing ones are one static default (blank, or the colour
    a whole-row erase left): pyte's StaticDefaultDict, without importing pyte."""

    __slots__ = ("default",)

    def __init__(self, default) -> None:
        self.default = default

    def __missing__(self, key):
        return self.default


EMPTY_ROW = DefaultRow(BLANK)


def buffer_row(buffer, y: int):
    """Row ``y`` of a buffer, without adding it (a row's missing cells are its default:
    blank, or the colour a whole-row erase left)."""
    line = buffer.get(y)
    return EMPTY_ROW if line is None else line


def last_used(line, cols: int) -> int:
    """The column of the last cell of a row that is not blank, or -1."""
    # A blank row default: only the cells stored can be used, so only they are looked at.
    xs = range(cols - 1, -1, -1) if line.default != BLANK else \
        sorted((x for x in line if x < cols), reverse=True)
    for x in xs:
        if line[x] != BLANK:
            return x
    return -1


def row_cells(line, cols: int):
    """The cells of one row to write, left to right, as ``(cell, x, risky)``.

    The right half of a wide character is skipped (it is written with the left half);
    one left alone becomes a space.  ``risky`` marks text whose width a terminal may
    count differently (wide or combined characters).  Trailing blanks are left out.
    """
    covered = -1
    for x in range(last_used(line, cols) + 1):
        if x <= covered:
            continue
        cell = line[x]
        data = cell.data
        if not data:
            yield cell._replace(data=" "), x, False
        elif len(data) > 1 or data > "~" and is_wide(data):
            if is_wide(data):
                covered = x + 1
            yield cell, x, True
        else:
            yield cell, x, False


_ATTRS = operator.itemgetter(*range(1, len(Cell._fields)))
_DATA = operator.itemgetter(0)


def write_cells(out: list, run: list, x: int) -> None:
    """Write cells one by one from column ``x``; after a wide or combined character,
    put the cursor where this model says the next cell is."""
    skip = -1
    for i, cell in enumerate(run):
        if i == skip:
            continue
        data = cell.data or " "
        out.append(data)
        # A cell of more than one code point (a cluster; a space and a ZWJ too) is
        # followed by a cursor move, which also ends the cluster for a model fed this.
        if len(data) > 1 or data > "~" and is_wide(data):
            width = 2 if is_wide(data) else 1
            if width == 2 and i + 1 < len(run) and not run[i + 1].data:
                skip = i + 1
            out.append(f"\x1b[{x + i + width + 1}G")


def paint_rows(out: list, buffer, cols: int, rows: int) -> None:
    """Write every row of ``buffer``: its cells, then an erase of the rest of the row.

    Runs of cells with the same attributes are written as one string; a run with
    characters other than ASCII goes cell by cell, so that the cursor can be put back
    in place after each one a terminal may count as a different width.
    """
    current = None
    for y in range(rows):
        out.append(f"\x1b[{y + 1}H")
        line = buffer_row(buffer, y)
        last = last_used(line, cols)
        x = 0
        if last >= 0:
            cells = [line[i] for i in range(last + 1)]
            for attrs, run in groupby(cells, _ATTRS):
                run = list(run)
                if attrs != current:
                    set_attrs(out, attrs, current)
                    current = attrs
                text = "".join(map(_DATA, run))
                if text.isascii() and len(text) == len(run):
                    out.append(text)
                    x += len(run)
                    continue
                write_cells(out, run, x)
                x += len(run)
        if last < cols - 1:
            if current != ATTRS_DEFAULT:
                set_attrs(out, ATTRS_DEFAULT, current)
                current = ATTRS_DEFAULT
            out.append("\x1b[K")
    if current is not None and current[-1]:
        out.append(hyperlink(""))  # what is written after the rows is not in the link


def place_cursor(out: list, grid, buffer, x: int, y: int, origin_top: int) -> None:
    """Move the cursor to (x, y); at ``x == cols`` (a pending wrap) rewrite the last cell.

    Rewriting the cell is the only way to leave a terminal with a wrap pending.  In
    origin mode, rows count from ``origin_top``.
    """
    cols = grid.columns
    if x < cols:
        out.append(f"\x1b[{y - origin_top + 1};{x + 1}H")
        return
    line = buffer_row(buffer, y)
    x = cols - 1
    cell = line[x]
    if not cell.data and x > 0 and is_wide(line[x - 1].data):
        x -= 1
        cell = line[x]
    out.append(f"\x1b[{y - origin_top + 1};{x + 1}H")
    out.append(sgr(cell[1:]))
    out.append(hyperlink(cell.link) + (cell.data or " ") + hyperlink("") if cell.link
               else cell.data or " ")


def reopen_cluster(out: list, grid, buffer, origin_top: int) -> None:
    """Rewrite the cell before the cursor if the next text may still join it (a ZWJ or a
    lone regional indicator at its end): an attach in the middle of a ZWJ sequence or a
    flag then gets the rest of it into the same cell.  Only SGR and mode changes follow;
    the cursor's hyperlink, which the cell must share, is already open."""
    x = grid.open_cluster()
    if x is None:
        return
    cell = buffer_row(buffer, grid.cursor.y)[x]
    if cell.link != grid.cursor.attrs.link:
        return  # an OSC 8 would have to follow, and it ends the cluster: left closed
    out.append(f"\x1b[{grid.cursor.y - origin_top + 1};{x + 1}H{sgr(cell[1:])}{cell.data}")


def designations(g0: str, g1: str) -> str:
    """ESC ( and ESC ) that designate these G0 and G1 character sets."""
    codes = charset_codes()
    return f"\x1b({codes.get(g0, 'B')}\x1b){codes.get(g1, '0')}"


def saved_cursor(out: list, grid, buffer, saved) -> None:
    """Recreate a DECSC save slot: position, attributes, origin mode and charsets, then ESC 7."""
    if saved is None:
        return
    if saved.origin:
        out.append("\x1b[?6h")
    # Margins are still the whole screen here, so origin mode addresses it all.
    place_cursor(out, grid, buffer, saved.x, saved.y, 0)
    out.append(sgr(saved.attrs[1:]))
    if saved.attrs.link:
        out.append(hyperlink(saved.attrs.link))
    out.append(designations(saved.g0, saved.g1))
    out.append("\x0e" if saved.charset else "\x0f")
    out.append("\x1b7\x1b(B\x0f")
    if saved.attrs.link:
        out.append(hyperlink(""))
    if saved.origin:
        out.append("\x1b[?6l")


def last_character(out: list, buffer, cols: int, rows: int, char: str) -> None:
    """Make ``char`` the last character written (what REP repeats) without changing a cell.

    It is written over a space that has only colours, and that space is put back with
    ECH under the same colours (erasing does not count as writing).  A screen with no
    such space keeps whatever the repaint wrote last.
    """
    width = 2 if is_wide(char) else 1
    for y in range(rows - 1, -1, -1):
        line = buffer_row(buffer, y)
        for x in range(cols - width + 1):
            cells = [line[x + i] for i in range(width)]
            if all(c.data == " " and c[3:] == BLANK[3:] and c[1:3] == cells[0][1:3]
                   for c in cells):
                out.append(f"\x1b[{y + 1};{x + 1}H\x1b[0m{char}\x1b[{y + 1};{x + 1}H"
                           f"{sgr(cells[0][1:])}\x1b[{width}X")
                return


def keyboard_stack(out: list, stack: list) -> None:
    """Recreate a kitty keyboard-protocol stack: pop whatever is there, push each entry."""
    out.append("\x1b[<99u")
    for flags in stack:
        out.append(f"\x1b[>{flags}u")


def _osc(code: str, text: str) -> str:
    """An OSC string with control characters removed from ``text``."""
    clean = "".join(ch for ch in text if ch >= " " and not "\x7f" <= ch <= "\x9f")
    return f"\x1b]{code};{clean}\x1b\\"


def repaint(screen) -> bytes:
    """VT bytes that bring a fresh terminal of the screen's size to the screen's state.

    Order: a prelude that puts the terminal in a known state (primary screen, no
    margins, no autowrap, cursor hidden, all inside a synchronized update); the
    inactive alternate screen if it holds anything (cells, a saved cursor, key flags);
    the primary screen and its saved cursor; if the alternate screen is active, the
    switch to it, its cells and its saved cursor; the last character written; then
    terminal-wide state (margins, tab stops, modes, keys, titles, colours), the
    cursor, charsets, attributes, insert mode and cursor visibility.  Each step can
    disturb what the earlier ones set, hence the order.
    """
    grid = screen._grid
    cols, rows = grid.columns, grid.lines
    primary, alternate = screen.buffers()
    p_saved, a_saved = screen.saved_slots()
    p_keys, a_keys = screen.keyboard_stacks()
    modes = screen.private_modes()
    out = ["\x1b[?2026h\x1b[?25l\x1b[?1049l\x1b[0m\x1b]8;;\x1b\\\x1b(B\x0f\x1b[4l\x1b[?6l\x1b[r"
           "\x1b[?7l"]
    keyboard_stack(out, p_keys)
    alternate_used = any(cell != BLANK for line in alternate.values() for cell in line.values())
    if not screen.alt and (alternate_used or a_saved is not None or a_keys):
        out.append("\x1b[?47h")
        if alternate_used:
            paint_rows(out, alternate, cols, rows)
        saved_cursor(out, grid, alternate, a_saved)
        keyboard_stack(out, a_keys)
        out.append("\x1b[?47l")
    paint_rows(out, primary, cols, rows)
    if screen.alt:
        if p_saved is not None:
            saved_cursor(out, grid, primary, p_saved)
            # 1049 saves the cursor just restored; charsets go back to ASCII to paint.
            out.append("\x1b8\x1b[?1049h\x1b(B\x0f")
        else:
            out.append("\x1b[?47h")
        keyboard_stack(out, a_keys)
        paint_rows(out, alternate, cols, rows)
        saved_cursor(out, grid, alternate, a_saved)
    else:
        saved_cursor(out, grid, primary, p_saved)

    if grid.last_char:
        last_character(out, alternate if screen.alt else primary, cols, rows, grid.last_char)
    top = 0
    if grid.margins is not None:
        top = grid.margins.top
        out.append(f"\x1b[{top + 1};{grid.margins.bottom + 1}r")
    if grid.tabstops != set(range(8, cols, 8)):
        out.append("\x1b[3g")
        out.extend(f"\x1b[{stop + 1}G\x1bH" for stop in sorted(grid.tabstops) if stop < cols)
    out.extend(f"\x1b[?{mode}l" for mode in KNOWN_PRIVATE if mode not in modes)
    out.extend(f"\x1b[?{mode}h" for mode in sorted(modes) if mode not in (25, 2026))
    ansi_modes = screen.ansi_modes()
    if 20 not in ansi_modes:
        out.append("\x1b[20l")
    out.extend(f"\x1b[{mode}h" for mode in sorted(ansi_modes) if mode != 4)
    out.append("\x1b=" if screen.keypad else "\x1b>")
    out.append(f"\x1b[{screen.cursor_style} q")
    out.extend(f"\x1b[>{resource};{value}m"
               for resource, value in sorted(screen.modify_keys.items()))
    for icon, title, which in screen.title_stack:
        if icon is not None:
            out.append(_osc("1", icon))
        if title is not None:
            out.append(_osc("2", title))
        out.append(f"\x1b[22;{which}t")
    # An empty title is left alone (a fresh terminal's own), unless the stack changed it.
    if screen.icon_name or screen.title_stack:
        out.append(_osc("1", screen.icon_name))
    if screen.title or screen.title_stack:
        out.append(_osc("2", screen.title))
    out.extend(_osc(key, spec) for key, spec in screen.colours.items())

    active = alternate if screen.alt else primary
    place_cursor(out, grid, active, grid.cursor.x, grid.cursor.y, top if 6 in modes else 0)
    out.append(designations(grid.g0_charset, grid.g1_charset))
    out.append("\x0e" if grid.charset else "\x0f")
    if grid.cursor.attrs.link:
        out.append(hyperlink(grid.cursor.attrs.link))
    reopen_cluster(out, grid, active, top if 6 in modes else 0)
    out.append(sgr(grid.cursor.attrs[1:]))
    if 4 in ansi_modes:
        out.append("\x1b[4h")
    out.append("\x1b[?25h" if 25 in modes else "\x1b[?25l")
    if 2026 not in modes:
        out.append("\x1b[?2026l")
    return "".join(out).encode("utf-8", "replace")


def _json_colour(colour: str):
    """A cell colour as the JSON snapshot gives it: None, a palette index or #rrggbb."""
    if colour == "default":
        return None
    index = _NAME_INDEX.get(colour)
    if index is not None:
        return index
    return int(colour[1:]) if colour[0] == "i" else "#" + colour


@functools.lru_cache(maxsize=1024)
def view_style(attrs: tuple):
    """A cell's attributes (without its text) as an engine-neutral ``screen_json.Style``."""
    from .screen_json import Style
    cell = Cell(" ", *attrs)
    return Style(fg=_json_colour(cell.fg), bg=_json_colour(cell.bg), bold=cell.bold,
                 dim=cell.dim, italic=cell.italics,
                 underline=(cell.ul_style or 1) if cell.underscore else 0, blink=cell.blink,
                 reverse=cell.reverse, strikethrough=cell.strikethrough, hidden=cell.hidden,
                 link=cell.link.partition(";")[2] or None)


def view_rows(screen):
    """The active screen's rows as lists of ``screen_json.ViewCell``, one row at a time
    (a 500x500 screen's cells at once would cost tens of MiB)."""
    from .screen_json import ViewCell
    grid = screen._grid
    attrs, style = None, None
    for y in range(grid.lines):
        row = []
        for cell, x, risky in row_cells(buffer_row(grid.buffer, y), grid.columns):
            if _ATTRS(cell) != attrs:  # neighbours mostly share attributes: one look-up
                attrs = _ATTRS(cell)
                style = view_style(attrs)
            row.append(ViewCell(x, cell.data, 2 if risky and is_wide(cell.data) else 1, style))
        yield row


def _visible_rows(screen):
    """The rows of the active screen as lists of (cell, columns taken), hidden text blanked."""
    grid = screen._grid
    for y in range(grid.lines):
        line = buffer_row(grid.buffer, y)
        row = []
        for cell, _x, _risky in row_cells(line, grid.columns):
            if cell.hidden:
                cell = cell._replace(data=" " * (2 if is_wide(cell.data) else 1))
            row.append(cell)
        yield row


def text(screen) -> str:
    """The active screen as plain text, one line a row, trailing spaces removed."""
    return "\n".join("".join(cell.data for cell in row).rstrip()
                     for row in _visible_rows(screen)) + "\n"


def ansi(screen) -> str:
    """The active screen as lines of text with SGR colours and attributes, no cursor moves."""
    lines = []
    for row in _visible_rows(screen):
        parts, current = [], ATTRS_DEFAULT
        for cell in row:
            if cell[1:] != current:
                set_attrs(parts, cell[1:], current)
                current = cell[1:]
            parts.append(cell.data)
        if current != ATTRS_DEFAULT:
            set_attrs(parts, ATTRS_DEFAULT, current)
        lines.append("".join(parts))
    return "\n".join(lines) + "\n"


# xterm's default palette: the sixteen colours, the 6x6x6 cube, the grey ramp.
_PALETTE = ["000000", "cd0000", "00cd00", "cdcd00", "0000ee", "cd00cd", "00cdcd", "e5e5e5",
            "7f7f7f", "ff0000", "00ff00", "ffff00", "5c5cff", "ff00ff", "00ffff", "ffffff"]
_PALETTE += [f"{r:02x}{g:02x}{b:02x}" for r in (0, 95, 135, 175, 215, 255)
             for g in (0, 95, 135, 175, 215, 255) for b in (0, 95, 135, 175, 215, 255)]
_PALETTE += [f"{v:02x}{v:02x}{v:02x}" for v in range(8, 248, 10)]
_HTML_FG, _HTML_BG = "e5e5e5", "000000"


def _html_colour(colour: str, default: str) -> str:
    """A CSS hex colour for a cell colour."""
    if colour == "default":
        return default
    if colour in _NAME_INDEX:
        return _PALETTE[_NAME_INDEX[colour]]
    if colour[0] == "i":
        return _PALETTE[int(colour[1:]) % 256]
    return colour


_CSS_LINE_STYLES = {2: "double", 3: "wavy", 4: "dotted", 5: "dashed"}


@functools.lru_cache(maxsize=256)
def _css(attrs: tuple) -> str:
    """Inline CSS for a cell's attributes (without its hyperlink: see ``html``)."""
    cell = Cell(" ", *attrs)
    fg, bg = _html_colour(cell.fg, _HTML_FG), _html_colour(cell.bg, _HTML_BG)
    if cell.reverse:
        fg, bg = bg, fg
    style = [f"color:#{fg}", f"background:#{bg}"]
    if cell.bold:
        style.append("font-weight:bold")
    if cell.dim:
        style.append("opacity:0.6")
    if cell.italics:
        style.append("font-style:italic")
    lines = [name for flag, name in ((cell.underscore, "underline"),
                                     (cell.strikethrough, "line-through")) if flag]
    if lines:
        style.append("text-decoration:" + " ".join(lines))
        if cell.underscore and cell.ul_style in _CSS_LINE_STYLES:
            style.append("text-decoration-style:" + _CSS_LINE_STYLES[cell.ul_style])
    return ";".join(style)


def html(screen) -> str:
    """The active screen as an HTML ``<pre>`` with inline styles."""
    out = [f'<pre class="clowder-screen" style="color:#{_HTML_FG};background:#{_HTML_BG}">']
    for row in _visible_rows(screen):
        current, link = None, ""
        for cell in row:
            attrs = cell[1:]
            if attrs != current:
                if current is not None:
                    out.append("</span>")
                if cell.link != link:
                    out.append(_html_link(link, cell.link))
                    link = cell.link
                out.append(f'<span style="{_css(attrs[:-1])}">')
                current = attrs
            out.append(_html.escape(cell.data))
        if current is not None:
            out.append("</span>")
        out.append(_html_link(link, "") + "\n")
    out.append("</pre>\n")
    return "".join(out)


_LINK_SCHEMES = ("http://", "https://", "ftp://", "file://", "mailto:")  # no javascript:


def _html_link(old: str, new: str) -> str:
    """Close hyperlink ``old`` and open ``new`` ("params;uri"; "" for none) as <a>."""
    out = "</a>" if _link_uri(old) else ""
    uri = _link_uri(new)
    return out + (f'<a href="{_html.escape(uri, quote=True)}">' if uri else "")


def _link_uri(link: str) -> str:
    """The URI of a hyperlink if it may be an HTML link, else ""."""
    uri = link.partition(";")[2]
    return uri if uri.lower().startswith(_LINK_SCHEMES) else ""
