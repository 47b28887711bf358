"""The terminal model of a session on libghostty-vt (``pyghostty``), behind Screen's seam.

The same seam as ``screen.Screen`` (``feed``, ``resize``, ``cols``/``rows``,
``pending``, ``repaint()``, ``snapshot()``, ``errors``, ``work``, ``compact()``), but the cells, the
parser and the renderers are ghostty's, in C: it is fed at tens of MB/s and releases the
GIL during each call (cffi in ABI mode), so a worker thread feeding it does not hold up
the event loop the way pyte does.

- ``pending`` is ghostty's parser continuation (``ghostty_terminal_continuation_buf``):
  the bytes of the sequence or UTF-8 character the parser is in the middle of.
- ``repaint()`` is ghostty's VT formatter over the active area, with the modes,
  scrolling region, tab stops, keyboard flags, cursor, pen and charsets it knows how to
  emit, and what it leaves out put back: the primary screen under an active alternate
  one (the formatter sees only the active screen: it is formatted from a copy, ghostty's
  binary snapshot decoded into a second terminal and switched back there), rows holding
  only a background colour, OSC 8 hyperlinks, the title, origin mode (set last) and a
  synchronized update the program is in.  ``tests/test_screen.py`` has a case for each.
- Queries the program sends are answered by no one (no reply callback is set): a
  repaint is rebuilt from state and never re-sends them.

Bounds: the host caps the size (``pty.valid_size``) before a model is made; ghostty
clamps cursor moves and counts to the screen itself, and keeps an OSC/DCS only up to its
own limits, so a bomb costs CPU in C, not memory.  Scrollback is bounded in bytes alone:
``SCROLLBACK_BYTES`` lowered to the model's share of the host's budget (screenmemory.py),
and to what ``SCROLLBACK_LINES`` lines of plain text take at the model's width
(``_limit_scrollback``).  ghostty's own line limit is out of that limit's reach: once a
line limit bound, ghostty parsed ~4x slower (bench/scrollback_limit.py).
"""

from __future__ import annotations

import re
import time
from typing import Optional

from . import ghostty_abi

ghostty_abi.load()  # before the names below are bound: one cffi instance for all
from .ghostty_abi import GhosttyError, Terminal, ffi, grid_ref_fn, init_sized, lib

from . import screen_cells

SCROLLBACK_LINES = 10_000  # about this many lines of text that scrolled off, kept as cells
SCROLLBACK_BYTES = 16 << 20  # and at most this much memory of them, whatever the width
# What a cell of text costs in ghostty's pages, row and page overhead included: 9.1-11.3
# bytes at every width from 10 to 500 columns, plain or with a few colours a line
# (bench/scrollback_limit.py), so lines x columns x this bytes keep about that many lines.
CELL_BYTES = 10
MAX_PENDING = 64 * 1024  # longest unfinished sequence ``pending`` hands over (as Screen)
COMPACT_ROWS = 1_000  # rows changed (ghostty's compression activity) between compressions
SCAN_CELLS = 500  # cells of rows without text read one by one for a repaint (~5 us each)
# ``work`` counts seconds of feeding in screenwork's units (its budget, 4 M, is ~1 s of
# pyte): a few bytes cost ghostty a pass over the screen too (DECALN over 500x500,
# repeated for 256 KiB, takes 28 s here), so the budget bounds its time, not its bytes.
WORK_PER_SECOND = 4_000_000
# A repaint starts from a known state, as screen_render's does: a synchronized update,
# cursor hidden, primary screen, no pen, no charsets, no insert, origin or margins,
# the keypad numeric (ESC >: the repaint sets ESC = again if the model has it), and the
# screen cleared (the formatter paints from the top, skipping blank cells).
_PRELUDE = b"\x1b[?2026h\x1b[?25l\x1b[?1049l\x1b[0m\x1b(B\x0f\x1b[4l\x1b[?6l\x1b[r" \
           b"\x1b>\x1b[H\x1b[2J"
_EPILOGUE = b"\x1b[?2026l"
_ERASE = b"\x1b[%d;%dH\x1b[0;%sm\x1b[%dX"  # row, column, colour, cells: colour-only cells
_SHAPE = re.compile(rb"\x1b\[(\d{0,3}) q|\x1b(c)")  # DECSCUSR, or RIS (which resets it)
_SGR = re.compile("\x1b\\[[0-9;:]*m")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
MAX_TITLE = 4096  # characters of a title a repaint sends (as screen.py keeps)
_CHARSETS = re.compile(rb"(?:\x1b[()*+].|[\x0e\x0f])*\Z")  # the formatter's last words
_MARGINS = re.compile(rb"\x1b\[(\d+);(\d+)r")
# ghostty keeps the 16 basic colours as palette indices, and its formatter writes them
# as 38;5;N / 48;5;N; tmux, xterm and others keep SGR 34 apart from 38;5;4 (bold makes
# only the first bright in many), so a repaint in those forms changed how cells looked
# (test_repaint_tmux.py's split points).  Programs set them with 30-37, 90-97, 40-47 and
# 100-107 far more than with 38;5;N, so they go back to those.
# The formatter writes each colour as an SGR of its own; a literal head keeps re's fast
# search (a look-behind instead made it scan at 27 MB/s).
_PALETTE16 = re.compile(rb"\x1b\[([34])8;5;(1[0-5]|[0-9])m")


def _basic(kind: bytes, n: int) -> bytes:
    """SGR 30-37 / 90-97 (``kind`` b"3"), 40-47 / 100-107 (b"4") for colour ``n`` < 16."""
    base = 30 if kind == b"3" else 40
    return b"%d" % (base + n if n < 8 else base + 52 + n)


def _basic_colours(vt: bytes) -> bytes:
    """``vt`` with the 16 basic colours in their own SGR forms (30-37, 90-97, 40-47,
    100-107) instead of 38;5;N and 48;5;N."""
    if b";5;" not in vt:
        return vt
    # ~1 us a colour in re's callback: a dense 1 MB history ~20 ms, in the screen pool,
    # where the callback's Python lets the loop have the GIL every switch interval.
    return _PALETTE16.sub(lambda m: _SHORT[m.group(0)], vt)


_SHORT = {b"\x1b[%s8;5;%dm" % (k, n): b"\x1b[%sm" % _basic(k, n)
          for k in (b"3", b"4") for n in range(16)}


# EL to the right (feed: left out while a wrap is pending), and the ends of one cut at
# a write's end after the parser's continuation.
_EL = re.compile(rb"\x1b\[0?K")  # (a group with + would cost re its fast search: 40 MB/s)
_MORE_EL = re.compile(rb"(?:\x1b\[0?K)*")
_WRAP_PENDING = lib.GHOSTTY_TERMINAL_DATA_CURSOR_PENDING_WRAP
_EL_TAILS = {b"\x1b": (b"[K", b"[0K"), b"\x1b[": (b"K", b"0K"), b"\x1b[0": (b"K",)}

# Back to the primary screen in a copy, to paint it: by 1049 if it was entered so (the
# cursor is then the one 1049 saved, where the client's own 1049 must save it), else
# by 47, which only switches.
_TO_PRIMARY = {True: b"\x1b[?1049l", False: b"\x1b[?47l"}


def _check(result: int, what: str) -> None:
    if result:
        raise GhosttyError(f"ghostty: {what} failed (result {result})")


def _set_size_t(term, option: int, value: int, what: str) -> None:
    _check(lib.ghostty_terminal_set(term, option, ffi.new("size_t*", value)), what)


def _formatted(fmt) -> bytes:
    """What formatter ``fmt`` writes, formatted once: the ``_buf`` dance formats twice
    (the size, then the bytes): a quarter of a history's or a repaint's time (500
    coloured lines of 80 columns 6.3 -> 4.5 ms, a 200x50 repaint 1.20 -> 0.87 ms;
    docs/design.md "Small renders on the loop")."""
    ptr = ffi.new("uint8_t**")
    n = ffi.new("size_t*")
    _check(lib.ghostty_formatter_format_alloc(fmt, ffi.NULL, ptr, n), "formatting the screen")
    if ptr[0] == ffi.NULL:
        return b""
    try:
        return ffi.buffer(ptr[0], n[0])[:]
    finally:
        lib.ghostty_free(ffi.NULL, ptr[0], n[0])


def _sized(ctype: str):
    """A struct that carries its own size (ghostty's ABI convention), nested ones too."""
    return init_sized(ctype)


def _read(call, what: str) -> bytes:
    """The size-then-fill dance of ghostty's ``*_buf`` functions (each call does the
    whole work: for a formatter, ``_formatted`` does it once)."""
    n = ffi.new("size_t*")
    call(ffi.NULL, 0, n)
    buf = ffi.new("uint8_t[]", max(n[0], 1))
    _check(call(buf, len(buf), n), what)
    return ffi.buffer(buf, n[0])[:]


class GhosttyScreen:
    """The terminal model of one session, on libghostty-vt."""

    engine = "ghostty"

    def __init__(self, cols: int = 80, rows: int = 24, scrollback: int = SCROLLBACK_LINES):
        # ghostty's line limit: twice as far as the byte limit reaches (_limit_scrollback),
        # so that it never binds.
        self._term = Terminal.new(cols, rows, 2 * scrollback)
        t = self._t = self._term.handle
        _set_size_t(t, lib.GHOSTTY_TERMINAL_OPT_CONTINUATION_MAX_BYTES, MAX_PENDING,
                    "setting the continuation's bytes")
        self.scrollback_bytes = SCROLLBACK_BYTES  # lowered to a share: screenmemory.py
        self._cols, self._rows, self._keep_lines = cols, rows, scrollback
        self._limit_scrollback()
        self.cursor_shape, self._shape_tail = 0, b""  # DECSCUSR's last word (_follow_shape)
        self._activity = ffi.new("uint64_t*")
        self._compression = ffi.new("GhosttyTerminalCompressionResult*")
        self._compressed_at = 0
        self.errors = 0  # kept for the seam: ghostty skips what it cannot parse itself
        self.work = 0  # time spent feeding, in screenwork's budget units
        self._flag = ffi.new("bool*")  # _wrap_pending's answer

    # The seam.

    @property
    def cols(self) -> int:
        """Width in columns."""
        return self._cols

    @property
    def rows(self) -> int:
        """Height in rows."""
        return self._rows

    @property
    def pending(self) -> bytes:
        """The unfinished sequence the parser is in: write it after ``repaint()``."""
        return _read(lambda b, n, out: lib.ghostty_terminal_continuation_buf(self._t, b, n, out),
                     "reading the continuation")

    def feed(self, data: bytes) -> None:
        """Take output from the session's pty."""
        if data:
            start = time.perf_counter()
            rest = self._past_wrapped_erases(data) if b"K" in data else data
            lib.ghostty_terminal_vt_write(self._t, rest, len(rest))
            if b" q" in data or b"\x1bc" in data or self._shape_tail \
                    or b"\x1b" in data[-16:]:
                self._follow_shape(data)
            self.work += int((time.perf_counter() - start) * WORK_PER_SECOND)

    def _past_wrapped_erases(self, data: bytes) -> bytes:
        """Write ``data`` up to its last EL (erase to the right), leaving out each EL
        that comes with a wrap pending; the rest, to write.  tmux's cursor is then past
        the right margin, so its EL erases nothing; ghostty's (as xterm's) is on the last
        cell, which it erased: top's reverse header, written to the last column and then
        EL, was one cell short when repainted into tmux (test_repaint_tmux.py).  pyte's
        grid does the same (grid.py), so both engines keep the cell."""
        write, t = lib.ghostty_terminal_vt_write, self._t
        if data[:1] in b"[0K":  # maybe the end of an EL cut at the last write
            pending = self.pending
            for tail in _EL_TAILS.get(pending, ()):
                if data.startswith(tail):
                    if self._wrap_pending():
                        write(t, b"\x18", 1)  # CAN: the parser drops the sequence
                        data = data[len(tail):]
                    break
        pos = 0
        m = _EL.search(data)
        while m:
            start = m.start()
            end = _MORE_EL.match(data, m.end()).end()  # a run: all see the same cursor
            write(t, data[pos:start], start - pos)
            pos = end if self._wrap_pending() else start
            m = _EL.search(data, end)
        return data[pos:]

    def _wrap_pending(self) -> bool:
        """Whether the cursor waits at the right margin to wrap (~0.3 us: one buffer,
        kept, where ``get`` makes one a call; an EL in every few bytes asks this)."""
        lib.ghostty_terminal_get(self._t, _WRAP_PENDING, self._flag)
        return bool(self._flag[0])

    def _follow_shape(self, data: bytes) -> None:
        """Keep the cursor's shape (DECSCUSR), which ghostty's C API does not give back
        (its CURSOR_STYLE is the pen, not the shape); RIS resets it.  A sequence cut
        between two feeds is found in the joined edge."""
        edge = self._shape_tail + data[:16]
        for part in (edge, data):
            last = None
            for m in _SHAPE.finditer(part):
                last = m
            if last is not None:
                self.cursor_shape = 0 if last.group(2) else min(int(last.group(1) or 0), 6)
        self._shape_tail = data[-16:] if b"\x1b" in data[-16:] else b""

    def resize(self, cols: int, rows: int) -> None:
        """Follow the pty's new size (ghostty reflows the primary screen, as it would)."""
        cols, rows = max(cols, 1), max(rows, 1)
        if (cols, rows) != (self._cols, self._rows):
            _check(lib.ghostty_terminal_resize(self._t, cols, rows, 8, 16), "resize")
            narrower_or_wider = cols != self._cols
            self._cols, self._rows = cols, rows
            if narrower_or_wider:
                self._limit_scrollback()

    def set_scrollback_bytes(self, limit: int) -> None:
        """Keep at most ``limit`` bytes of scrollback cells (ghostty counts the cells'
        pages, not their compressed size, and drops the oldest pages over it at once:
        bench/screen_memory.py), less where SCROLLBACK_LINES take less."""
        self.scrollback_bytes = limit
        self._limit_scrollback()

    def _limit_scrollback(self) -> None:
        """Bound the scrollback by bytes alone: the share, or what ``_keep_lines`` lines
        of text take at this width if less.  Once its line limit bound, ghostty parsed
        text at ~90 MB/s; under a byte limit, which it keeps by dropping whole pages, at
        ~330 (bench/scrollback_limit.py).  Not the share alone: at 80 columns it holds
        ~23,000 lines, and the copy an alternate screen's repaint makes of the model
        (``_Copy``) took 15 ms with them instead of 6."""
        _set_size_t(self._t, lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES,
                    min(self.scrollback_bytes, self._keep_lines * self._cols * CELL_BYTES),
                    "setting the scrollback's bytes")

    def compact(self) -> None:
        """Compress the scrollback once enough rows changed since the last time (in the
        screen pool, after a feed): 10,000 lines of 80 columns cost 6.4 MB as cells,
        ~0.3 MB compressed, for ~4.5 ms of compression (bench/engines.py)."""
        _check(lib.ghostty_terminal_compression_activity(self._t, self._activity),
               "reading the compression activity")
        if self._activity[0] - self._compressed_at >= COMPACT_ROWS:
            _check(lib.ghostty_terminal_compress(
                self._t, lib.GHOSTTY_TERMINAL_COMPRESSION_MODE_FULL, self._compression),
                "compressing the scrollback")
            self._compressed_at = self._activity[0]

    def repaint(self) -> bytes:
        """VT bytes that bring a terminal of this size to this state (see ``pending``)."""
        out = [_PRELUDE]
        if self.alt:
            with _Copy(self) as primary:
                primary.feed(_TO_PRIMARY[self._term.mode(1049)])
                # Its cursor is where the active screen's 1049 saves it; its pen is reset,
                # since the formatter paints the cells from a default pen.
                out += primary._painted(inactive=True) + [b"\x1b[0m"]
        out += self._painted()
        title = self.title
        if title:
            out.append(b"\x1b]2;" + title.encode() + b"\x1b\\")
        out.append(b"\x1b[%d q" % self.cursor_shape)
        if self.get("cursor_visible", "bool"):
            out.append(b"\x1b[?25h")
        if self._term.mode(66):
            # The formatter sets keypad application mode as DECNKM (?66h), which tmux
            # and others do not know; DECKPAM is what programs send and all know.
            out.append(b"\x1b=")
        if not self._term.mode(2026):  # in a program's own synchronized update, it ends it
            out.append(_EPILOGUE)
        return b"".join(out)

    def _painted(self, inactive: bool = False) -> list:
        """The formatter's repaint of the active screen with the coloured blank rows and
        the hyperlinks put in after the cells, before the margins, cursor and pen.
        ``inactive``: the primary screen painted under an active alternate one, without
        the terminal-wide modes and margins (its 1049 would paint it on the alternate
        screen, its margins would scroll the alternate screen's painting)."""
        full = self.format(lib.GHOSTTY_FORMATTER_FORMAT_VT, extras=True, wide=not inactive)
        cells = self.format(lib.GHOSTTY_FORMATTER_FORMAT_VT, extras=True, tail=False,
                            wide=not inactive)
        cut = common_prefix(full, cells)
        if cut < len(full) and full[cut] != 0x1B:  # inside a sequence both began
            cut = full.rfind(b"\x1b", 0, cut)
        head, tail = full[:cut], full[cut:]
        if not inactive and self._term.mode(6):
            # The formatter sets origin mode before the margins and the cursor, which
            # then lands that far below where it was: set it last, and place the cursor
            # again relative to the margin (DECOM homes it).
            head = head.replace(b"\x1b[?6h", b"", 1)
            margin = _MARGINS.search(tail)
            top = int(margin.group(1)) if margin else 1
            x, y = self._term.cursor
            tail += b"\x1b[?6h\x1b[%d;%dH" % (y + 2 - top, x + 1)
        return [head, self.blank_colours(), self.hyperlinks(), tail]

    def snapshot(self, format: str = "text", limit: Optional[int] = None) -> str:
        """The active screen as ``text``, ``ansi`` (SGR, no cursor moves), ``html`` or
        ``json``; ``limit``: engine.TooLarge once it is certain to be more UTF-8 bytes
        than that (HTML and JSON: before it is all made or decoded)."""
        if format == "text":
            rows = self.format(lib.GHOSTTY_FORMATTER_FORMAT_PLAIN).decode("utf-8", "replace")
            return "\n".join(r.rstrip() for r in _rows(rows, self._rows)) + "\n"
        if format == "ansi":
            vt = self.format(lib.GHOSTTY_FORMATTER_FORMAT_VT)
            return "\n".join(_rows(vt.decode("utf-8", "replace"), self._rows)) + "\n"
        if format == "html":
            html = self.format(lib.GHOSTTY_FORMATTER_FORMAT_HTML)
            if limit is not None and len(html) > limit:  # decoding never shortens it
                from .engine import TooLarge
                raise TooLarge(len(html))
            return html.decode("utf-8", "replace")
        if format == "json":
            from .screen_json import snapshot  # only a JSON snapshot needs it
            return snapshot(self, limit)
        raise ValueError(f"unknown snapshot format {format!r}")

    def view(self, cols: int, rows: int) -> bytes:
        """VT bytes that show this screen on a terminal of another size: its top-left
        part, the area past its edges marked (screen_view.py)."""
        from .screen_view import view  # only a client of another size needs it
        return view(self, cols, rows)

    # The read API of screen_json and screen_view, from ghostty's own cells
    # (screen_cells.py), its cursor and its modes.

    icon_name = ""  # ghostty keeps no icon name (OSC 1)

    def read_rows(self):
        """The active screen's rows, top to bottom, as lists of ``screen_json.ViewCell``
        (one row at a time: a 500x500 screen's cells at once would cost tens of MiB)."""
        from .screen_json import ViewCell
        from .screen_render import view_style
        with screen_cells.Cells(self._t, self._cols, self._rows) as cells:
            for row in cells.rows():
                yield [ViewCell(c.x, c.text, c.width, view_style(c.attrs)) for c in row]

    def view_buffer(self, cols: int = 0, rows: int = 0) -> dict:
        """The active screen's rows as ``screen_render`` paints them: row number to a
        row of ``Cell`` by column (the right half of a wide character an empty one).
        ``cols`` x ``rows``: only that top-left part is read (a client's view): the
        cells are read in Python, ~2 us each, so a 80x24 view of a 500x500 screen read
        whole took 0.8 s of a pool thread, and of a 200x50 one 23 ms, against ~4 ms."""
        from .screen_render import BLANK, Cell, DefaultRow
        cols = min(cols or self._cols, self._cols)
        rows = min(rows or self._rows, self._rows)
        buffer = {}
        with screen_cells.Cells(self._t, cols, rows) as cells:
            for y, row in enumerate(cells.rows()):
                if not row:
                    continue
                line = buffer[y] = DefaultRow(BLANK)
                for c in row:
                    line[c.x] = Cell(c.text, *c.attrs)
                    if c.width == 2 and c.x + 1 < cols:
                        line[c.x + 1] = Cell("", *c.attrs)
        return buffer

    def read_cursor(self):
        """The cursor as a ``screen_json.Cursor`` (ghostty keeps it on the last column
        while a wrap is pending, as the schema does)."""
        from .screen_json import Cursor
        x, y = self._term.cursor
        return Cursor(x=min(x, self._cols - 1), y=y,
                      visible=bool(self.get("cursor_visible", "bool")),
                      style=self.cursor_shape,
                      pending_wrap=bool(self.get("cursor_pending_wrap", "bool")))

    def read_modes(self) -> dict:
        """The modes ``screen_json.MODES`` names.  ghostty keeps no modifyOtherKeys
        level in its C API: 0."""
        from .screen_json import MOUSE_ENCODINGS, MOUSE_MODES
        mode = self._mode
        return {
            "alternate_screen": self.alt, "application_cursor": mode(1),
            "application_keypad": mode(66), "bracketed_paste": mode(2004),
            "mouse": next((name for m, name in MOUSE_MODES if mode(m)), None),
            "mouse_encoding": next((name for m, name in MOUSE_ENCODINGS if mode(m)), None),
            "focus": mode(1004), "autowrap": mode(7), "origin": mode(6),
            "insert": mode(4, ansi=True), "reverse_video": mode(5),
            "keyboard": int(self.get("kitty_keyboard_flags", "uint8_t")),
            "modify_other_keys": 0, "synchronized_output": mode(2026),
        }

    def private_modes(self) -> set:
        """The DEC private modes a view sets or resets that are set, and DECTCEM."""
        from .screen_render import KNOWN_PRIVATE
        return {m for m in KNOWN_PRIVATE + (25,) if self._mode(m)}

    def _mode(self, mode: int, ansi: bool = False) -> bool:
        """Whether a mode is set; False for one ghostty does not know (1001, highlight
        tracking)."""
        try:
            return self._term.mode(mode, ansi=ansi)
        except GhosttyError:
            return False

    def keyboard_stack(self) -> list:
        """The kitty keyboard flags of the shown screen as a stack: ghostty's C API
        gives only the top entry."""
        flags = int(self.get("kitty_keyboard_flags", "uint8_t"))
        return [flags] if flags else []

    def pen(self) -> tuple:
        """The cursor's pen as ``screen_render.Cell`` attributes."""
        from .screen_render import ATTRS_DEFAULT
        return screen_cells.pen(self._t) or ATTRS_DEFAULT

    # Views for the renderer and for tests.

    @property
    def alt(self) -> bool:
        """Whether the alternate screen is active."""
        return self.get("active_screen", "int") == lib.GHOSTTY_TERMINAL_SCREEN_ALTERNATE

    @property
    def title(self) -> str:
        """The window title (OSC 0/2), without controls, at most ``MAX_TITLE`` characters."""
        out = ffi.new("GhosttyString*")
        if lib.ghostty_terminal_get(self._t, lib.GHOSTTY_TERMINAL_DATA_TITLE, out) \
                or not out.len:
            return ""
        text = ffi.buffer(out.ptr, out.len)[:].decode("utf-8", "replace")
        return _CONTROLS.sub("", text)[:MAX_TITLE]

    def get(self, key: str, ctype: str = "uint16_t"):
        """One ``ghostty_terminal_get`` value by its GHOSTTY_TERMINAL_DATA_ suffix."""
        return self._term.get(key, ctype)

    def history_lines(self, count: int, ansi: bool = False,
                      scrollback: bool = False) -> list[str]:
        """The last ``count`` lines of the primary screen as a terminal's scrollback has
        them: what scrolled off the top, then the screen's rows (trailing blank ones
        left out), soft wraps joined, as plain text.  A line redrawn in place is there
        once, as last drawn; the alternate screen's content never is.  ``ansi``: each
        line with its SGR (colours, attributes), ending with a reset.  ``scrollback``:
        only what scrolled off, not the screen's rows (the state directory saves those
        as the repaint: both would show them twice)."""
        if count <= 0:
            return []
        if self.alt:
            with _Copy(self) as primary:
                primary.feed(_TO_PRIMARY[self._term.mode(1049)])
                return primary.history_lines(count, ansi, scrollback)
        # Only the last rows are formatted, not the whole scrollback (a 2 MiB share of
        # coloured cells is tens of MB of VT text: every `history`, and the state
        # directory's saves, made and dropped it): enough rows for ``count`` lines and
        # the screen's trailing blank rows, twice as many while soft-wrapped lines make
        # that too few.  The first line of a part may be the tail of a wrapped one: dropped.
        total = self._term.get("total_rows", "size_t")
        end = total - self._rows if scrollback else None  # the screen's first row
        if end == 0:
            return []
        last_col = self._cols - 1
        if end and last_col > 0 and self._row_text(end - 1, last_col) == \
                self._row_text(end - 1, last_col - 1):
            # The last column adds nothing: a wide character's spacer, the character
            # wrapped to the screen's first row, where ghostty's formatter would also
            # give it with this row (and it would be saved twice).
            last_col -= 1
        want = count + (0 if scrollback else self._rows) + 1
        while True:
            first = max(0, (end or total) - want)
            lines = self._lines(ansi, first, end, last_col)
            if first > 0:
                lines = lines[1:]
            if len(lines) >= count or first == 0:
                return lines[-count:]
            want *= 2

    def _row_text(self, y: int, last_col: int) -> bytes:
        """Row ``y`` (counted from the top of the scrollback) up to ``last_col``, plain."""
        return self.format(lib.GHOSTTY_FORMATTER_FORMAT_PLAIN, whole="scrollback",
                           box=(0, y, last_col, y))

    def _lines(self, ansi: bool, first: int, end: Optional[int] = None,
               last_col: Optional[int] = None) -> list[str]:
        """The lines from the row ``first`` (counted from the top of the scrollback) to
        the end, or to the row ``end`` (not included; same count; its row before ends at
        ``last_col``), soft wraps joined, trailing blank ones left out."""
        box = (0, first, self._cols - 1 if last_col is None else last_col,
               self._rows - 1 if end is None else end - 1)
        whole = "scrollback" if end is not None else True
        if ansi:
            vt = self.format(lib.GHOSTTY_FORMATTER_FORMAT_VT, unwrap=True, whole=whole, box=box)
            lines = [line + "\x1b[0m" if "\x1b" in line and not line.endswith("\x1b[0m")
                     else line
                     for line in vt.decode("utf-8", "replace").split("\r\n")]
            while lines and not _SGR.sub("", lines[-1]).strip():
                lines.pop()
            return lines
        text = self.format(lib.GHOSTTY_FORMATTER_FORMAT_PLAIN, unwrap=True, whole=whole, box=box)
        lines = [line.rstrip() for line in text.decode("utf-8", "replace").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def format(self, emit: int, extras: bool = False, tail: bool = True,
               wide: bool = True, box: Optional[tuple] = None, unwrap: bool = False,
               whole: "bool | str" = False) -> bytes:
        """The active area through ghostty's formatter (VT: cells with their SGR):
        ``extras`` adds the terminal state a repaint needs (modes, margins, tab stops,
        keys, cursor, pen, charsets); ``tail=False`` leaves out what the formatter
        writes after the cells (margins, cursor, pen, key flags, charsets);
        ``wide=False`` leaves out the terminal-wide modes and margins; ``box``: only the
        cells from (x0, y0) to (x1, y1) instead of the whole area; ``whole``: from the
        top of the scrollback to the end of the active area ("scrollback": both corners
        of ``box`` counted from the top of the scrollback); ``unwrap``: soft-wrapped
        rows joined into their line."""
        opts = _sized("GhosttyFormatterTerminalOptions")
        opts.emit = emit
        opts.unwrap, opts.trim = unwrap, False
        e = opts.extra
        # No palette in VT: the formatter writes all 256 entries, set or not.
        e.tabstops = e.keyboard = extras
        e.modes = extras and wide
        e.scrolling_region = extras and tail and wide
        s = e.screen
        s.protection = extras
        s.cursor = s.kitty_keyboard = s.charsets = extras and tail
        s.style = s.hyperlink = extras and tail
        # HTML names palette colours as CSS variables the palette block defines.
        e.palette = emit == lib.GHOSTTY_FORMATTER_FORMAT_HTML
        sel = _sized("GhosttySelection")
        x0, y0, x1, y1 = box or (0, 0, self._cols - 1, self._rows - 1)
        sel.start = self._term.ref(x0, y0, "screen" if whole else "active")[0]
        sel.end = self._term.ref(x1, y1, "screen" if whole == "scrollback" else "active")[0]
        opts.selection = sel
        fmt = ffi.new("GhosttyFormatter*")
        _check(lib.ghostty_formatter_terminal_new(ffi.NULL, fmt, self._t, opts[0]),
               "making a formatter")
        try:
            out = _formatted(fmt[0])
            return _basic_colours(out) if emit == lib.GHOSTTY_FORMATTER_FORMAT_VT else out
        finally:
            lib.ghostty_formatter_free(fmt[0])

    def blank_colours(self) -> bytes:
        """VT bytes for the coloured blank cells of rows without text, which ghostty's
        formatter leaves out (an erase with a background colour makes cells that hold
        only a colour): an ECH with that colour for each run.

        Cells are read one by one through the C API (~5 us each), so only rows
        without text are read, and on a screen with more than ``SCAN_CELLS`` of them a
        row whose first and last cells agree is taken as erased whole (or blank): an
        ECH of the middle of such a row is then lost.
        """
        plain = self.format(lib.GHOSTTY_FORMATTER_FORMAT_PLAIN).decode("utf-8", "replace")
        empty = [y for y, row in enumerate(_rows(plain, self._rows)) if not row.strip()]
        if not empty:
            return b""
        cells = _Cells(self)
        whole = len(empty) * self._cols <= SCAN_CELLS
        out = []
        for y in empty:
            if not whole:
                first, last = cells.colour(0, y), cells.colour(self._cols - 1, y)
                if first == last:  # an erase of the whole row, or nothing: taken as such
                    if first is not None:
                        out.append(_ERASE % (y + 1, 1, first, self._cols))
                    continue
            for x, end, colour in screen_cells.runs(self._cols, lambda x: cells.colour(x, y)):
                if colour is not None:
                    out.append(_ERASE % (y + 1, x + 1, colour, end - x))
        return b"".join(out) + (b"\x1b[0m" if out else b"")

    def links(self) -> list:
        """(row, first column, last column, URI) of each run of cells in one OSC 8
        hyperlink; only the rows ghostty marks as holding one are read.  Their cells
        are read through a render state, which copies the whole screen (~45 ns a cell:
        11 ms at 500x500), so only once a row is seen to have a link."""
        flags = _Cells(self)
        rows = [y for y in range(self._rows) if flags.has_link(y)]
        if not rows:
            return []
        with screen_cells.Cells(self._t, self._cols, self._rows) as cells:
            return cells.link_runs(rows)

    def hyperlinks(self) -> bytes:
        """VT bytes that write the hyperlinked cells again inside their OSC 8 (ghostty's
        formatter writes their text without it)."""
        runs = self.links()
        if not runs:
            return b""
        boxes = _Boxes(self)
        return b"".join(b"\x1b[%d;%dH\x1b]8;;%s\x1b\\%s\x1b]8;;\x1b\\"
                        % (y + 1, x0 + 1, uri, boxes.vt(y, x0, x1))
                        for y, x0, x1, uri in runs) + b"\x1b[0m"

    def encode(self) -> bytes:
        """ghostty's binary snapshot of the whole terminal (both screens, scrollback)."""
        return _read(lambda b, n, out: lib.ghostty_snapshot_encode_buf(self._t, b, n, out),
                     "encoding a snapshot")

    @classmethod
    def decode(cls, data: bytes) -> "GhosttyScreen":
        """A model from ``encode()``'s bytes."""
        dec = ffi.new("GhosttySnapshotDecoder*")
        _check(lib.ghostty_snapshot_decoder_new_buf(ffi.NULL, dec, data, len(data)),
               "opening a snapshot")
        try:
            term = ffi.new("GhosttyTerminal*")
            _check(lib.ghostty_snapshot_decoder_decode(dec[0], term), "decoding a snapshot")
        finally:
            lib.ghostty_snapshot_decoder_free(dec[0])
        return cls._adopt(term[0])

    @classmethod
    def _adopt(cls, handle) -> "GhosttyScreen":
        self = cls.__new__(cls)
        term = Terminal(handle)
        self._term, self._t = term, handle
        self._cols, self._rows = term.size
        self.errors = self.work = self._compressed_at = 0
        self.scrollback_bytes = SCROLLBACK_BYTES  # a throwaway copy: not counted
        self._keep_lines = SCROLLBACK_LINES  # its limits are the snapshot's until resized
        self._activity = ffi.new("uint64_t*")
        self._compression = ffi.new("GhosttyTerminalCompressionResult*")
        self.cursor_shape, self._shape_tail = 0, b""  # not in ghostty's snapshot
        return self

    def close(self) -> None:
        """Free the C terminal now (the garbage collector would, later)."""
        self._term.close()

    def state(self) -> dict:
        """Everything a repaint must reproduce, in ghostty's own terms: for tests."""
        active = _same_charsets(self.format(lib.GHOSTTY_FORMATTER_FORMAT_VT, extras=True))
        primary = active
        if self.alt:
            with _Copy(self) as copy:
                copy.feed(_TO_PRIMARY[self._term.mode(1049)])
                primary = _same_charsets(copy.format(lib.GHOSTTY_FORMATTER_FORMAT_VT,
                                                     extras=True))
        return {
            "size": (self._cols, self._rows), "alt": self.alt,
            "active": active, "primary": primary,
            "text": self.snapshot("text"), "title": self.title, "links": self.links(),
            "cursor": self._term.cursor,
            "pending_wrap": self.get("cursor_pending_wrap", "bool"),
            "cursor_visible": self.get("cursor_visible", "bool"),
            "kitty_keys": self.get("kitty_keyboard_flags", "uint8_t"),
            "mouse": self.get("mouse_tracking", "bool"),
            "modes": sorted(m for m in _MODES if self._term.mode(m)),
            "ansi_modes": sorted(m for m in (4, 20) if self._term.mode(m, ansi=True)),
        }


# DEC private modes state() reports (the formatter emits those it tracks itself).
_MODES = (1, 5, 6, 7, 12, 25, 45, 47, 66, 1000, 1002, 1003, 1004, 1005, 1006, 1015,
          1047, 1049, 2004, 2026, 2027)


class _Cells:
    """Reads the colour of colour-only cells of the active area, and which rows hold a
    hyperlink."""

    _grid_ref = None

    def __init__(self, screen: GhosttyScreen):
        if _Cells._grid_ref is None:  # a point is a union passed by value: see ghostty_abi
            _Cells._grid_ref = grid_ref_fn()
        self._t = screen._t
        self._pt = ffi.new("GhosttyPointS*")
        self._pt.tag = lib.GHOSTTY_POINT_TAG_ACTIVE
        self._ref = _sized("GhosttyGridRef")
        self._cell = ffi.new("GhosttyCell*")
        self._tag = ffi.new("GhosttyCellContentTag*")
        self._index = ffi.new("uint8_t*")
        self._rgb = ffi.new("GhosttyColorRgb*")
        self._row = ffi.new("GhosttyRow*")
        self._flag = ffi.new("bool*")

    def _at(self, x: int, y: int) -> bool:
        """Point the reference at a cell; False if there is none."""
        self._pt.value.x, self._pt.value.y = x, y
        return not _Cells._grid_ref(self._t, self._pt[0], self._ref)

    def has_link(self, y: int) -> bool:
        """Whether row ``y`` holds a hyperlinked cell (a flag ghostty keeps per row)."""
        if not self._at(0, y) or lib.ghostty_grid_ref_row(self._ref, self._row):
            return False
        lib.ghostty_row_get(self._row[0], lib.GHOSTTY_ROW_DATA_HYPERLINK, self._flag)
        return bool(self._flag[0])

    def colour(self, x: int, y: int) -> Optional[bytes]:
        """The SGR background of a colour-only cell (``4N``/``10N`` for the 16 basic
        colours, ``48;5;N``, ``48;2;R;G;B``), else None."""
        if not self._at(x, y) or lib.ghostty_grid_ref_cell(self._ref, self._cell):
            return None
        cell = self._cell[0]
        lib.ghostty_cell_get(cell, lib.GHOSTTY_CELL_DATA_CONTENT_TAG, self._tag)
        if self._tag[0] == lib.GHOSTTY_CELL_CONTENT_BG_COLOR_PALETTE:
            lib.ghostty_cell_get(cell, lib.GHOSTTY_CELL_DATA_COLOR_PALETTE, self._index)
            n = self._index[0]
            return _basic(b"4", n) if n < 16 else b"48;5;%d" % n
        if self._tag[0] == lib.GHOSTTY_CELL_CONTENT_BG_COLOR_RGB:
            lib.ghostty_cell_get(cell, lib.GHOSTTY_CELL_DATA_COLOR_RGB, self._rgb)
            return b"48;2;%d;%d;%d" % (self._rgb.r, self._rgb.g, self._rgb.b)
        return None


class _Boxes:
    """The VT of one row's cells from column x0 to x1 of the active area, for each run
    of a repaint's hyperlinks: the formatter's options, selection and points made once,
    not at every run as ``GhosttyScreen.format`` would (a screen can hold a link in
    every cell; 26 -> 8 us a run, of which ghostty's own ~3: docs/design.md "A repaint
    of links")."""

    def __init__(self, screen: GhosttyScreen):
        self._t = screen._t
        self._opts = _sized("GhosttyFormatterTerminalOptions")
        self._opts.emit = lib.GHOSTTY_FORMATTER_FORMAT_VT
        self._opts.unwrap = self._opts.trim = False  # and no extras: the cells alone
        self._sel = _sized("GhosttySelection")
        self._pt = ffi.new("GhosttyPointS*")
        self._pt.tag = lib.GHOSTTY_POINT_TAG_ACTIVE
        self._ref = _sized("GhosttyGridRef")
        self._fmt = ffi.new("GhosttyFormatter*")
        self._grid_ref = grid_ref_fn()

    def _at(self, x: int, y: int):
        self._pt.value.x, self._pt.value.y = x, y
        _check(self._grid_ref(self._t, self._pt[0], self._ref), f"a grid ref of {x},{y}")
        return self._ref[0]

    def vt(self, y: int, x0: int, x1: int) -> bytes:
        self._sel.start = self._at(x0, y)
        self._sel.end = self._at(x1, y)
        self._opts.selection = self._sel
        _check(lib.ghostty_formatter_terminal_new(ffi.NULL, self._fmt, self._t, self._opts[0]),
               "making a formatter")
        try:
            return _basic_colours(_formatted(self._fmt[0]))
        finally:
            lib.ghostty_formatter_free(self._fmt[0])


class _Copy:
    """A throwaway copy of a model (through ghostty's snapshot), freed on exit."""

    def __init__(self, screen: GhosttyScreen):
        self._screen = screen
        self._copy: Optional[GhosttyScreen] = None

    def __enter__(self) -> GhosttyScreen:
        self._copy = GhosttyScreen.decode(self._screen.encode())
        return self._copy

    def __exit__(self, *exc) -> None:
        self._copy.close()


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``, by halving with
    slice comparisons (memcmp in C).  os.path.commonprefix compares a byte at a time in
    Python: ~0.1 s of a repaint of the largest screen (1 MB of VT), holding the GIL."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _same_charsets(vt: bytes) -> bytes:
    """Formatter output with G0 = ASCII written as the default: ghostty starts with a
    UTF-8 "charset" of its own that only RIS restores, and a repaint's ``ESC ( B``
    (needed by a client left in DEC graphics) designates ASCII, which shows the same."""
    charsets = _CHARSETS.search(vt)
    return vt[:charsets.start()] + charsets.group().replace(b"\x1b(B", b"")


def _rows(text: str, rows: int) -> list:
    """A formatter's output cut into the screen's rows (it ends rows with CRLF or LF)."""
    lines = text.replace("\r\n", "\n").split("\n")
    return (lines + [""] * rows)[:rows]
