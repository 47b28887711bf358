"""The grid of a session's terminal model: pyte's screen with the fixes a terminal needs.

``Grid`` keeps the cells, the cursor, the modes pyte knows, tab stops, margins and the
one DECSC slot of the buffer it is showing; ``screen.Screen`` drives it (its tokenizer
calls these methods) and keeps everything pyte lacks beside it.  Each method that
replaces pyte's says on its first line what pyte got wrong.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import pyte
from pyte import modes as mo
from pyte.screens import Margins, StaticDefaultDict

from . import screen_render
from .screen_render import BLANK, Cell, char_width

ZWJ = "\u200d"  # zero-width joiner: the next character joins the cluster
_RI_FIRST, _RI_LAST = "\U0001f1e6", "\U0001f1ff"  # regional indicators: two make a flag

MAX_REPEAT = 65536  # REP counts are clamped: one sequence must not draw for ever
# A whole row erased with colours is stored as one row whose default is the coloured
# blank (O(1)), not a cell per column: ``ESC[41m ESC[2J`` cost 59 MiB and 1.6 s at
# 1000x1000 written cell by cell.  Missing cells of a row are its ``default``.


@functools.lru_cache(maxsize=256)
def row_type(fill: Cell) -> type:
    """A dict type whose missing cells are ``fill``: made in C, unlike pyte's
    StaticDefaultDict, whose Python ``__init__`` made a full-screen erase cost 5 us a row."""
    return type("Row", (dict,), {"__slots__": (), "default": fill,
                                 "__missing__": lambda self, key: fill})


class Saved(NamedTuple):
    """What DECSC saves (one slot per buffer, as in xterm)."""
    x: int
    y: int
    attrs: Cell
    origin: bool
    g0: str
    g1: str
    charset: int


class Grid(pyte.Screen):
    """pyte's screen with the fixes a real terminal needs."""

    @property
    def default_char(self) -> Cell:
        """A blank; reverse video (DECSCNM) is the client terminal's job, not baked into cells."""
        return BLANK

    def reset(self) -> None:
        """pyte's reset, with our cell type and a single DECSC slot."""
        super().reset()
        self.cursor.attrs = BLANK
        self.saved: Optional[Saved] = None
        # What REP repeats.  A space before anything is written, so that a repaint,
        # which writes cells, can always set it back.
        self.last_char = " "
        # Whether the last token was text (Screen's tokenizer clears it on every other
        # one): a ZWJ or a regional indicator joins the next character only then.
        self.cluster_open = False
        self._cell_attrs, self._cell_cache = None, {}
        # Cells and rows touched, ever: what feeding cost, so that a caller can bound it
        # (a few bytes can make a pass over a whole row or screen).
        self.work = getattr(self, "work", 0)

    def set_tab_stop(self) -> None:
        """HTS; during a pending wrap the cursor is in the last column, not past it."""
        self.tabstops.add(min(self.cursor.x, self.columns - 1))

    def save_cursor(self) -> None:
        """DECSC into one slot (pyte keeps a stack that DECRC pops; terminals keep one slot)."""
        c = self.cursor
        self.saved = Saved(c.x, c.y, c.attrs, mo.DECOM in self.mode,
                           self.g0_charset, self.g1_charset, self.charset)

    def restore_cursor(self) -> None:
        """DECRC; with nothing saved, home with default attributes and origin mode off."""
        s = self.saved or Saved(0, 0, BLANK, False, self.g0_charset, self.g1_charset, 0)
        self.mode.discard(mo.DECOM)
        if s.origin:
            self.mode.add(mo.DECOM)
        self.g0_charset, self.g1_charset, self.charset = s.g0, s.g1, s.charset
        self.cursor.x, self.cursor.y, self.cursor.attrs = min(s.x, self.columns), s.y, s.attrs
        self.cursor.y = min(self.cursor.y, self.lines - 1)

    def draw(self, data: str) -> None:
        """Write text at the cursor as xterm does (pyte's ``draw`` fails the first three).

        A zero-width character joins the previous cell instead of ending the write; a
        wide character that does not fit in the last column wraps first; overwriting
        half of a wide character blanks its other half.
        """
        if self.charset:
            data = data.translate(self.g1_charset)
        elif self.g0_charset is not pyte.charsets.LAT1_MAP:
            data = data.translate(self.g0_charset)
        if not data:
            return
        self.work += len(data)
        if data.isascii() and mo.IRM not in self.mode:
            self.cluster_open = True
            self._draw_run(data)
            return
        cursor, columns = self.cursor, self.columns
        autowrap, insert = mo.DECAWM in self.mode, mo.IRM in self.mode
        cells = self._cells()
        joinable, self.cluster_open = self.cluster_open, True
        for char in data:
            width = 1 if " " <= char <= "~" else char_width(char)
            if width <= 0:
                if width == 0:
                    self._join(char)
                continue
            if joinable and (self.last_char[-1:] == ZWJ or _RI_FIRST <= char <= _RI_LAST) \
                    and self._extends_cluster(char):
                self._join(char)
                continue
            joinable = True
            if cursor.x + width > columns:
                if autowrap:
                    cursor.x = 0
                    self.index()
                else:
                    cursor.x = columns - width
            if insert:
                self.insert_characters(width)
            line = self.buffer[cursor.y]
            x = cursor.x
            self._mend_before_write(line, x, x + width - 1)
            line[x] = cells.get(char) or cells.setdefault(char, self._cell(char))
            if width == 2 and x + 1 < columns:
                line[x + 1] = cells.get("") or cells.setdefault("", self._cell(""))
            cursor.x = min(x + width, columns)
            self.last_char = char

    def _draw_run(self, data: str) -> None:
        """Write printable ASCII, a row's worth at a time."""
        cursor, columns = self.cursor, self.columns
        autowrap = mo.DECAWM in self.mode
        cells = self._cells()
        pos, n = 0, len(data)
        while pos < n:
            if cursor.x >= columns:
                if autowrap:
                    cursor.x = 0
                    self.index()
                else:
                    cursor.x = columns - 1
            x = cursor.x
            room = columns - x
            if n - pos > room and not autowrap:
                # Without autowrap the rest overwrites the last column: only its last char stays.
                run = data[pos:pos + room - 1] + data[-1]
                pos = n
            else:
                run = data[pos:pos + room]
                pos += len(run)
            line = self.buffer[cursor.y]
            self._mend_before_write(line, x, x + len(run) - 1)
            for char in set(run).difference(cells):
                cells[char] = self._cell(char)
            # One C-level update for the run: this is most of what a flood costs to parse.
            line.update(zip(range(x, x + len(run)), map(cells.__getitem__, run)))
            cursor.x = x + len(run)
        self.last_char = data[-1]

    def _cells(self) -> dict:
        """Cells with the cursor's attributes, by text, reused instead of built each time."""
        attrs = self.cursor.attrs
        if self._cell_attrs is not attrs:
            self._cell_attrs, self._cell_cache = attrs, {}
        return self._cell_cache

    def _cell(self, char: str) -> Cell:
        """A cell of ``char`` with the cursor's attributes."""
        return self.cursor.attrs._replace(data=char)

    def _mend_before_write(self, line, first: int, last: int) -> None:
        """Before columns first..last are overwritten, blank the halves of wide characters
        cut at either end."""
        if first and not line[first].data and screen_render.is_wide(line[first - 1].data):
            self._blank(line, first - 1)
        if last + 1 < self.columns and screen_render.is_wide(line[last].data):
            self._blank(line, last + 1)

    def open_cluster(self) -> Optional[int]:
        """The column of the cell before the cursor if the next text may join it (it
        ends with a ZWJ or is one regional indicator, and ``cluster_open``), else None."""
        x = self.cursor.x - 1
        if not self.cluster_open or x < 0:
            return None
        line = self.buffer[self.cursor.y]
        if not line[x].data and x > 0:
            x -= 1
        data = line[x].data
        if data[-1:] == ZWJ or len(data) == 1 and _RI_FIRST <= data <= _RI_LAST:
            return x
        return None

    def _extends_cluster(self, char: str) -> bool:
        """Whether ``char`` continues the grapheme cluster of the cell before the cursor
        rather than starting a cell: after a ZWJ (a ZWJ emoji sequence), or a second
        regional indicator (a flag).  The cell keeps its width, as in tmux: one wide
        cell holds the sequence as the program wrote it, so a repaint writes it whole.
        Only text right after text joins (``cluster_open``): after a cursor move or any
        other sequence, a character starts its own cell, so a repaint (which moves the
        cursor after every such cell) rebuilds the same cells."""
        x = self.cursor.x - 1
        if x < 0:
            return False
        line = self.buffer[self.cursor.y]
        if not line[x].data and x > 0:
            x -= 1
        data = line[x].data
        if data[-1:] == ZWJ:
            return True
        return len(data) == 1 and _RI_FIRST <= data <= _RI_LAST and _RI_FIRST <= char <= _RI_LAST

    def _join(self, char: str) -> None:
        """Append a zero-width character to the cell before the cursor."""
        x = self.cursor.x - 1
        if x < 0:
            return
        line = self.buffer[self.cursor.y]
        if not line[x].data and x > 0:
            x -= 1
        cell = line[x]
        if len(cell.data) < 16:
            # As written, not NFC-composed: a repaint re-emits the cluster as the program
            # wrote it (issue 13; tmux showed e + U+0301 apart from U+00E9).
            line[x] = cell._replace(data=cell.data + char)
            self.last_char = line[x].data  # REP repeats the whole cell

    @staticmethod
    def _blank(line, x: int) -> None:
        """Replace the text of one cell by a space, keeping its attributes."""
        if x in line:
            line[x] = line[x]._replace(data=" ")

    def _mend(self, y: int, *xs: int) -> None:
        """Blank halves of wide characters left alone at the given columns of a row."""
        line = self.buffer.get(y)
        if not line:
            return
        for x in xs:
            if not 0 <= x < self.columns or x not in line:
                continue
            data = line[x].data
            if not data and not (x > 0 and screen_render.is_wide(line[x - 1].data)):
                self._blank(line, x)
            elif data and screen_render.is_wide(data) and \
                    (x + 1 >= self.columns or line[x + 1].data):
                self._blank(line, x)

    def insert_characters(self, count: Optional[int] = None) -> None:
        """ICH; pyte's leaves a cell past the right edge that reappears on a resize."""
        x, columns = self.cursor.x, self.columns
        count = min(count or 1, columns - x)
        line = self._plain(self.cursor.y)
        self.work += columns - x
        for i in range(columns - 1, x - 1, -1):
            cell = line.pop(i, None)
            if cell is not None and i + count < columns:
                line[i + count] = cell
        self._mend(self.cursor.y, x - 1, x + count, columns - 1)

    def delete_characters(self, count: Optional[int] = None) -> None:
        """DCH, mending wide characters cut at the cursor."""
        x0, columns = self.cursor.x, self.columns
        count = min(count or 1, columns - x0)
        line = self._plain(self.cursor.y)
        self.work += columns - x0
        for x in range(x0, columns):
            cell = line.pop(x + count, None) if x + count < columns else None
            if cell is None:
                line.pop(x, None)
            else:
                line[x] = cell
        self._mend(self.cursor.y, x0 - 1, x0)

    def _erase(self, y: int, start: int, stop: int) -> None:
        """Erase columns [start, stop) of a row with the current colours (only those, as xterm)."""
        attrs = self.cursor.attrs
        fill = BLANK if attrs.fg == attrs.bg == "default" else \
            BLANK._replace(fg=attrs.fg, bg=attrs.bg)
        if start <= 0 and stop >= self.columns:
            self.work += 1
            if fill == BLANK:
                self.buffer.pop(y, None)
            else:
                line = self.buffer.get(y)
                if line is None or line or line.default != fill:
                    self.buffer[y] = row_type(fill)()
            return
        self.work += stop - start
        line = self._plain(y) if fill == BLANK else self.buffer[y]
        if fill == line.default:
            for x in range(start, stop):
                line.pop(x, None)
        else:
            for x in range(start, stop):
                line[x] = fill
        self._mend(y, start - 1, stop)

    def _plain(self, y: int):
        """Row ``y`` with a blank default: a row a coloured erase left is written out cell
        by cell first, for the edits that remove cells (they leave blanks, not colour)."""
        line = self.buffer[y]
        if line.default != BLANK:
            self.work += self.columns
            plain = StaticDefaultDict(BLANK)
            plain.update(dict.fromkeys(range(self.columns), line.default))
            plain.update(line)
            self.buffer[y] = line = plain
        return line

    def alignment_display(self) -> None:
        """DECALN: every cell an E with default attributes, as on a VT, one default cell
        per row (pyte wrote each cell, keeping its attributes: 0.5 s at 500x500)."""
        make = row_type(BLANK._replace(data="E"))
        self.work += self.lines
        for y in range(self.lines):
            self.buffer[y] = make()

    def erase_characters(self, count: Optional[int] = None) -> None:
        """ECH."""
        x = min(self.cursor.x, self.columns - 1)
        self._erase(self.cursor.y, x, min(x + (count or 1), self.columns))

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        """EL.  An erase to the right while a wrap is pending erases nothing and keeps the
        wrap pending, as tmux does (xterm erases the last cell and ends the wrap).

        top writes its reverse-video header to the last column, then ``SGR 0`` and EL:
        a client whose terminal is tmux kept the last cell reverse from the live bytes,
        and lost it on a repaint of a model that had erased it.
        """
        if how == 0 and self.cursor.x >= self.columns:
            return
        self.unwrap()
        x = min(self.cursor.x, self.columns - 1)
        start, stop = {0: (x, self.columns), 1: (0, x + 1), 2: (0, self.columns)}.get(how, (0, 0))
        self._erase(self.cursor.y, start, stop)

    def erase_in_display(self, how: int = 0, *args, **kwargs) -> None:
        """ED; 3 erases scrollback only (pyte cleared the screen), and rows are erased whole.

        pyte only rewrote cells already stored, so a coloured erase left gaps.
        """
        if how != 0:
            self.unwrap()
        rows = {0: range(self.cursor.y + 1, self.lines), 1: range(self.cursor.y),
                2: range(self.lines)}.get(how, range(0))
        attrs = self.cursor.attrs
        self.work += len(rows)
        buffer = self.buffer
        if attrs.fg == attrs.bg == "default":
            for y in rows:
                buffer.pop(y, None)
        else:  # whole rows of one coloured blank each (see row_type)
            make = row_type(BLANK._replace(fg=attrs.fg, bg=attrs.bg))
            for y in rows:
                buffer[y] = make()
        if how in (0, 1):
            self.erase_in_line(how)

    def set_margins(self, top: Optional[int] = None, bottom: Optional[int] = None) -> None:
        """DECSTBM; pyte ignored ``0;0`` and did not home the cursor on a reset."""
        top, bottom = (top or 1) - 1, min(bottom or self.lines, self.lines) - 1
        if top >= bottom:
            return
        self.margins = None if (top, bottom) == (0, self.lines - 1) else Margins(top, bottom)
        self.cursor_position()

    def cursor_to_line(self, line: Optional[int] = None) -> None:
        """VPA; pyte asserted margins existed in origin mode."""
        top = self.margins.top if self.margins and mo.DECOM in self.mode else 0
        self.cursor.y = top + (line or 1) - 1
        self.ensure_vbounds()

    def _shift_rows(self, top: int, bottom: int, by: int) -> None:
        """Move rows top..bottom by ``by`` (up if negative); rows moved out are lost.

        pyte's IL/DL skipped rows absent from its sparse buffer and so left stale rows.
        """
        buffer, pop = self.buffer, self.buffer.pop
        self.work += bottom - top + 1
        # Each row takes the one ``by`` rows away, walking away from where rows go, so a
        # source is always read before it is overwritten: one pass, no copy (a flood
        # scrolls at every line).
        for y in range(top, bottom + 1) if by < 0 else range(bottom, top - 1, -1):
            src = y - by
            line = pop(src, None) if top <= src <= bottom else None
            if line is None:
                pop(y, None)
            else:
                buffer[y] = line

    def _region(self) -> Margins:
        """The scrolling region."""
        return self.margins or Margins(0, self.lines - 1)

    def index(self) -> None:
        """IND: down a row, scrolling at the region's bottom; below it, stop at the last row."""
        top, bottom = self._region()
        if self.cursor.y == bottom:
            self._shift_rows(top, bottom, -1)
        elif self.cursor.y < self.lines - 1:
            self.cursor.y += 1

    def reverse_index(self) -> None:
        """RI: up a row, scrolling at the region's top."""
        top, bottom = self._region()
        if self.cursor.y == top:
            self._shift_rows(top, bottom, 1)
        elif self.cursor.y > 0:
            self.cursor.y -= 1

    def cursor_down(self, count: Optional[int] = None) -> None:
        """CUD: stops at the region's bottom, or at the last row from below the region
        (pyte jumped up to the region)."""
        top, bottom = self._region()
        limit = bottom if self.cursor.y <= bottom else self.lines - 1
        self.cursor.y = min(self.cursor.y + (count or 1), limit)

    def cursor_up(self, count: Optional[int] = None) -> None:
        """CUU: stops at the region's top, or at the first row when above the region."""
        top, bottom = self._region()
        limit = top if self.cursor.y >= top else 0
        self.cursor.y = max(self.cursor.y - (count or 1), limit)

    def insert_lines(self, count: Optional[int] = None) -> None:
        """IL, inside the scrolling region only."""
        top, bottom = self._region()
        if top <= self.cursor.y <= bottom:
            self._shift_rows(self.cursor.y, bottom, count or 1)
            self.cursor.x = 0

    def delete_lines(self, count: Optional[int] = None) -> None:
        """DL, inside the scrolling region only."""
        top, bottom = self._region()
        if top <= self.cursor.y <= bottom:
            self._shift_rows(self.cursor.y, bottom, -(count or 1))
            self.cursor.x = 0

    def scroll(self, count: int, up: bool) -> None:
        """SU (``up``) or SD: move the scrolling region's rows; the cursor stays."""
        top, bottom = self._region()
        self._shift_rows(top, bottom, -(count or 1) if up else (count or 1))

    def tabs(self, count: int, forward: bool) -> None:
        """CHT or CBT: move over ``count`` tab stops."""
        count = min(count or 1, self.columns)
        self.work += count
        for _ in range(count):
            if forward:
                self.tab()
            else:
                stops = [s for s in self.tabstops if s < self.cursor.x]
                self.cursor.x = max(stops, default=0)

    def repeat(self, count: int) -> None:
        """REP: write the last written character again."""
        if self.last_char:
            self.draw(self.last_char * min(count or 1, MAX_REPEAT))

    def unwrap(self) -> None:
        """End a pending wrap (pyte keeps the cursor one past the last column)."""
        if self.cursor.x >= self.columns:
            self.cursor.x = self.columns - 1
