"""The cells of a ghostty screen, read from ghostty itself: what its JSON snapshot
(screen_json) and its views for clients of another size (screen_view) are made of.

One read copies the active area into a ghostty render state (in C), then takes each
row's cells as one array of packed 64-bit cells (``GhosttyCellsView``): a Python loop
over plain integers, not a C call per cell.  A packed value is decoded once per read
(equal values are equal cells: the same code point, style id, width and flags), a style
once per style id and row (ids are local to a page of ghostty's memory), and only the
cells that need more are asked about one by one: grapheme clusters (several code
points) and OSC 8 hyperlinks (the URI, through a grid reference).

Cells come out as ``screen_render.Cell`` attributes (the pyte engine's terms, so that
both engines share the renderers and the JSON styles), with ghostty's own width.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Iterator, NamedTuple, Optional

from . import ghostty_abi

ghostty_abi.load()  # before the names below are bound: one cffi instance for all
from .ghostty_abi import GhosttyError, ffi, grid_ref_fn, init_sized, lib

from .screen_render import ATTRS_DEFAULT, NAMES, Cell

# Once rows have been read for YIELD_AFTER seconds since the last pause, the reading
# thread (the screen pool's) sleeps briefly so the event loop gets the GIL.  The switch
# interval does not do it here: the cffi calls of each row release and retake the GIL,
# and CPython forces a switch only when a waiting thread saw no release for a whole
# interval, so the loop waited for the end of a 500x500 JSON snapshot: a 1 ms ticker
# thread beside one was 170-290 ms late, 4.6 ms with a sleep every 8 rows (in one
# process; the JSON took 290 ms, 300 ms with them).  Paced by time, not rows: every 8
# rows, an 80x24 screen's JSON slept 3 times, 0.85 of its 2.1 ms (docs/design.md
# "Snapshots beside other sessions' echo").
YIELD_AFTER = 0.002
YIELD_SECONDS = 0.0002

_URI_CONTROLS = re.compile(rb"[\x00-\x1f\x7f]")
_WIDE, _TAIL, _HEAD = (lib.GHOSTTY_CELL_WIDE_WIDE, lib.GHOSTTY_CELL_WIDE_SPACER_TAIL,
                       lib.GHOSTTY_CELL_WIDE_SPACER_HEAD)
_GRAPHEME = lib.GHOSTTY_CELL_CONTENT_CODEPOINT_GRAPHEME
_BG_PALETTE, _BG_RGB = lib.GHOSTTY_CELL_CONTENT_BG_COLOR_PALETTE, lib.GHOSTTY_CELL_CONTENT_BG_COLOR_RGB
MAX_GRAPHEME = 32  # code points of one cluster read (ghostty keeps more only for bombs)


# The packed cell, as ghostty's terminal/page.zig lays out its ``Cell`` (a Zig packed
# struct, first field lowest): content tag u2, content u24 (code point u21, palette
# index u8, or r, g, b), style id u16, wide u2, protected, hyperlink, semantic u2.
# Five cffi calls a distinct cell (ABI mode, ~6 us each) were most of a JSON snapshot's
# time; the bits of a kind of cell (its tag, width and link flag) are read directly once
# AGREE distinct values of that kind gave the same answer both ways; one disagreement
# (another pyghostty's layout) and ghostty is asked for ever.
AGREE = 8
_KIND_BITS = 3 | (3 << 42) | (1 << 45)
_AGREED: dict = {}
_BITS_DISAGREED: list = []


def _by_bits(value: int) -> tuple:
    tag = value & 3
    content = (value >> 2) & 0xFFFFFF
    bg = None
    if tag == _BG_PALETTE:
        index = content & 0xFF
        bg = NAMES[index] if index < 16 else f"i{index}"
    elif tag == _BG_RGB:
        bg = f"{content & 0xFF:02x}{(content >> 8) & 0xFF:02x}{(content >> 16) & 0xFF:02x}"
    point = 0 if bg is not None else content & 0x1FFFFF
    if point > 0x10FFFF:
        point = 0xFFFD
    return (tag, point, (value >> 42) & 3, (value >> 26) & 0xFFFF,
            bool((value >> 45) & 1), bg)


class RowCell(NamedTuple):
    """One cell that starts a character: column, text, columns it covers, attributes
    (a ``screen_render.Cell`` without its text)."""
    x: int
    text: str
    width: int
    attrs: tuple


def runs(cells: int, key) -> Iterator[tuple]:
    """(first, end, value) of each run of equal ``key(i)`` for ``i`` in ``range(cells)``:
    the one loop behind every "cells of one kind" reading of a row."""
    x = 0
    while x < cells:
        value = key(x)
        end = x + 1
        while end < cells and key(end) == value:
            end += 1
        yield x, end, value
        x = end


def _colour(tag: int, value) -> str:
    """A ghostty style colour in ``screen_render.Cell`` terms."""
    if tag == lib.GHOSTTY_STYLE_COLOR_PALETTE:
        index = value.palette
        return NAMES[index] if index < 16 else f"i{index}"
    if tag == lib.GHOSTTY_STYLE_COLOR_RGB:
        rgb = value.rgb
        return f"{rgb.r:02x}{rgb.g:02x}{rgb.b:02x}"
    return "default"


@functools.lru_cache(maxsize=4096)
def _attrs(fg: str, bg: str, flags: tuple, underline: int, link: str) -> tuple:
    """``screen_render.Cell`` attributes (one tuple object for equal ones, which the
    JSON snapshot's span merging relies on)."""
    bold, italic, faint, blink, inverse, invisible, strike = flags
    return Cell(" ", fg=fg, bg=bg, bold=bold, italics=italic, underscore=underline != 0,
                strikethrough=strike, reverse=inverse, blink=blink, dim=faint,
                hidden=invisible, ul_style=underline if underline >= 2 else 0,
                link=link)[1:]


def style_attrs(style, link: str = "") -> tuple:
    """A ``GhosttyStyle`` (and an OSC 8 link, "params;uri") as Cell attributes."""
    flags = (bool(style.bold), bool(style.italic), bool(style.faint), bool(style.blink),
             bool(style.inverse), bool(style.invisible), bool(style.strikethrough))
    return _attrs(_colour(style.fg_color.tag, style.fg_color.value),
                  _colour(style.bg_color.tag, style.bg_color.value), flags,
                  max(0, min(int(style.underline), 5)), link)


class Cells:
    """The active area of one ghostty terminal, read once (``rows()``); ``close()``
    frees the C objects (use it as a context manager)."""

    _grid_ref = None

    def __init__(self, terminal, cols: int, rows: int):
        if Cells._grid_ref is None:  # a point is a union passed by value: see ghostty_abi
            Cells._grid_ref = grid_ref_fn()
        self._t, self._cols, self._rows = terminal, cols, rows
        self._state = ffi.new("GhosttyRenderState*")
        self._iter = ffi.new("GhosttyRenderStateRowIterator*")
        self._cells = ffi.new("GhosttyRenderStateRowCells*")
        _check(lib.ghostty_render_state_new(ffi.NULL, self._state), "making a render state")
        try:
            _check(lib.ghostty_render_state_row_iterator_new(ffi.NULL, self._iter),
                   "making a row iterator")
            _check(lib.ghostty_render_state_row_cells_new(ffi.NULL, self._cells),
                   "making a row's cells")
            _check(lib.ghostty_render_state_update(self._state[0], terminal),
                   "reading the screen into a render state")
            _check(lib.ghostty_render_state_get(
                self._state[0], lib.GHOSTTY_RENDER_STATE_DATA_ROW_ITERATOR, self._iter),
                "iterating the render state's rows")
        except BaseException:
            self.close()
            raise
        self._view = ffi.new("GhosttyCellsView*")
        # One typed out-value per C type asked (a type named by a string is parsed by
        # cffi's C parser on each use: 40 us a call).
        self._outs = {ctype: ffi.new(ctype + "*") for ctype in
                      ("uint8_t", "uint16_t", "uint32_t", "bool", "GhosttyCellContentTag",
                       "GhosttyCellWide")}
        self._style = init_sized("GhosttyStyle")
        self._count = ffi.new("uint32_t*")
        self._points = ffi.new("uint32_t[]", MAX_GRAPHEME)
        self._rgb = ffi.new("GhosttyColorRgb*")
        self._pt = ffi.new("GhosttyPointS*")
        self._pt.tag = lib.GHOSTTY_POINT_TAG_ACTIVE
        self._ref = init_sized("GhosttyGridRef")
        self._decoded: dict = {}

    def __enter__(self) -> "Cells":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Free the render state and its iterators, once."""
        for handle, free in ((self._cells, lib.ghostty_render_state_row_cells_free),
                             (self._iter, lib.ghostty_render_state_row_iterator_free),
                             (self._state, lib.ghostty_render_state_free)):
            if handle[0] != ffi.NULL:
                free(handle[0])
                handle[0] = ffi.NULL

    def rows(self) -> Iterator[list]:
        """Each row of the active area, top to bottom, as a list of ``RowCell``: every
        cell that starts a character (a wide one's right half is left out; a spacer a
        wide character left at the end of a row is a blank), up to the last one that is
        not a blank of the default attributes."""
        y = 0
        clock = time.perf_counter
        since = clock()
        while y < self._rows and lib.ghostty_render_state_row_iterator_next(self._iter[0]):
            yield self._row(y)
            y += 1
            if clock() - since >= YIELD_AFTER:
                time.sleep(YIELD_SECONDS)
                since = clock()
        while y < self._rows:  # never seen: a render state has every row of the area
            yield []
            y += 1

    def link_runs(self, rows) -> list:
        """(row, first column, last column, URI) of each run of cells in one OSC 8
        hyperlink (the URI without controls) in ``rows`` (those ghostty flags as holding
        one), instead of ``rows()``: in them only the cells whose packed value has the
        link bit are asked their URI (asking each cell, ~5 us, was a third of the
        repaint of a screen of links: docs/design.md "A repaint of links")."""
        runs: list = []
        wanted = set(rows)
        for y in range(self._rows):
            if not wanted or not lib.ghostty_render_state_row_iterator_next(self._iter[0]):
                break
            if y not in wanted:
                continue
            wanted.discard(y)
            if lib.ghostty_render_state_row_get(
                    self._iter[0], lib.GHOSTTY_RENDER_STATE_ROW_DATA_CELLS_RAW, self._view):
                continue
            raw = ffi.unpack(self._view.ptr, min(self._view.len, self._cols))
            end = -1  # the column after the last run's last cell
            for x, value in enumerate(raw):
                info = self._decoded.get(value)
                if info is None:
                    info = self._decoded[value] = self._decode(value)
                if not info[4]:
                    continue
                uri = link_uri(self._t, x, y, self._pt, self._ref)
                if not uri:
                    continue
                if end == x and runs[-1][3] == uri:
                    runs[-1] = (y, runs[-1][1], x, uri)
                else:
                    runs.append((y, x, x, uri))
                end = x + 1
        return runs

    def _row(self, y: int) -> list:
        if lib.ghostty_render_state_row_get(
                self._iter[0], lib.GHOSTTY_RENDER_STATE_ROW_DATA_CELLS_RAW, self._view):
            return []
        raw = ffi.unpack(self._view.ptr, min(self._view.len, self._cols))
        last = len(raw) - 1
        while last >= 0 and raw[last] == 0:  # 0: no text, no style, no colour, no link
            last -= 1
        if last < 0:
            return []
        cells_ok = not lib.ghostty_render_state_row_get(
            self._iter[0], lib.GHOSTTY_RENDER_STATE_ROW_DATA_CELLS, self._cells)
        styles: dict = {0: ATTRS_DEFAULT}
        out = []
        for x in range(last + 1):
            value = raw[x]
            info = self._decoded.get(value)
            if info is None:
                info = self._decoded[value] = self._decode(value)
            tag, point, wide, style_id, linked, bg = info
            if wide == _TAIL:
                continue
            attrs = styles.get(style_id)
            if attrs is None:
                attrs = styles[style_id] = self._style_at(x) if cells_ok else ATTRS_DEFAULT
            if bg is not None:  # a cell that holds only a colour (an erase with one)
                attrs = _attrs("default", bg, (False,) * 7, 0, "")
            if linked:
                link = self._link(x, y)
                if link:
                    attrs = Cell(" ", *attrs)._replace(link=link)[1:]
            if tag == _GRAPHEME and cells_ok:
                text = self._grapheme(x) or chr(point)
            else:
                text = chr(point) if point and wide != _HEAD else " "
            out.append(RowCell(x, text, 2 if wide == _WIDE else 1, attrs))
        while out and out[-1].text == " " and out[-1].attrs == ATTRS_DEFAULT:
            out.pop()
        return out

    def _get(self, value: int, data: int, ctype: str):
        out = self._outs[ctype]
        out[0] = 0
        lib.ghostty_cell_get(value, data, out)
        return out[0]

    def _decode(self, value: int) -> tuple:
        """(content tag, code point, width kind, style id, has a link, colour of a
        colour-only cell) of a packed cell: by its bits once they were seen to agree
        with ghostty's own answers (``_by_bits``), else by asking ghostty."""
        kind = value & _KIND_BITS  # content tag, wide and hyperlink: what decoding varies on
        seen = _AGREED.get(kind, 0)
        if seen >= AGREE and not _BITS_DISAGREED:
            return _by_bits(value)
        info = self._decode_by_api(value)
        if not _BITS_DISAGREED:
            if _by_bits(value) == info:
                _AGREED[kind] = seen + 1
            else:
                _BITS_DISAGREED.append(value)  # another layout: ask ghostty from now on
        return info

    def _decode_by_api(self, value: int) -> tuple:
        tag = self._get(value, lib.GHOSTTY_CELL_DATA_CONTENT_TAG, "GhosttyCellContentTag")
        bg = None
        if tag == _BG_PALETTE:
            index = self._get(value, lib.GHOSTTY_CELL_DATA_COLOR_PALETTE, "uint8_t")
            bg = NAMES[index] if index < 16 else f"i{index}"
        elif tag == _BG_RGB:
            lib.ghostty_cell_get(value, lib.GHOSTTY_CELL_DATA_COLOR_RGB, self._rgb)
            bg = f"{self._rgb.r:02x}{self._rgb.g:02x}{self._rgb.b:02x}"
        point = 0 if bg is not None else \
            self._get(value, lib.GHOSTTY_CELL_DATA_CODEPOINT, "uint32_t")
        if point > 0x10FFFF:
            point = 0xFFFD
        return (tag, point, self._get(value, lib.GHOSTTY_CELL_DATA_WIDE, "GhosttyCellWide"),
                self._get(value, lib.GHOSTTY_CELL_DATA_STYLE_ID, "uint16_t"),
                bool(self._get(value, lib.GHOSTTY_CELL_DATA_HAS_HYPERLINK, "bool")), bg)

    def _style_at(self, x: int) -> tuple:
        """The attributes of the style of cell ``x`` of the current row."""
        if lib.ghostty_render_state_row_cells_select(self._cells[0], x) or \
                lib.ghostty_render_state_row_cells_get(
                    self._cells[0], lib.GHOSTTY_RENDER_STATE_ROW_CELLS_DATA_STYLE,
                    self._style):
            return ATTRS_DEFAULT
        return style_attrs(self._style)

    def _grapheme(self, x: int) -> str:
        """The code points of the cluster in cell ``x`` of the current row."""
        cells = self._cells[0]
        if lib.ghostty_render_state_row_cells_select(cells, x) or \
                lib.ghostty_render_state_row_cells_get(
                    cells, lib.GHOSTTY_RENDER_STATE_ROW_CELLS_DATA_GRAPHEMES_LEN, self._count):
            return ""
        count = self._count[0]
        if count > MAX_GRAPHEME:
            return ""  # the base code point alone
        if lib.ghostty_render_state_row_cells_get(
                cells, lib.GHOSTTY_RENDER_STATE_ROW_CELLS_DATA_GRAPHEMES_BUF, self._points):
            return ""
        return "".join(chr(p) if p <= 0x10FFFF else "\ufffd" for p in self._points[0:count])

    def _link(self, x: int, y: int) -> str:
        """The OSC 8 link of cell (x, y) as ";uri" (ghostty keeps no params), or ""."""
        uri = link_uri(self._t, x, y, self._pt, self._ref)
        return ";" + uri.decode("utf-8", "replace") if uri else ""


def link_uri(terminal, x: int, y: int, point=None, ref=None) -> bytes:
    """The OSC 8 URI of active cell (x, y), without controls; b"" if it has none."""
    if Cells._grid_ref is None:
        Cells._grid_ref = grid_ref_fn()
    if point is None:
        point = ffi.new("GhosttyPointS*")
        point.tag = lib.GHOSTTY_POINT_TAG_ACTIVE
    ref = ref if ref is not None else init_sized("GhosttyGridRef")
    point.value.x, point.value.y = x, y
    if Cells._grid_ref(terminal, point[0], ref):
        return b""
    n = ffi.new("size_t*")
    if lib.ghostty_grid_ref_hyperlink_uri(ref, ffi.NULL, 0, n) \
            not in (0, lib.GHOSTTY_OUT_OF_SPACE) or not n[0]:
        return b""
    buf = ffi.new("uint8_t[]", n[0])
    if lib.ghostty_grid_ref_hyperlink_uri(ref, buf, n[0], n):
        return b""
    return _URI_CONTROLS.sub(b"", ffi.buffer(buf, n[0])[:])


def _check(result: int, what: str) -> None:
    if result:
        raise GhosttyError(f"ghostty: {what} failed (result {result})")


def pen(terminal) -> Optional[tuple]:
    """The cursor's pen (what the next character is written with) as Cell attributes."""
    style = init_sized("GhosttyStyle")
    if lib.ghostty_terminal_get(terminal, lib.GHOSTTY_TERMINAL_DATA_CURSOR_STYLE, style):
        return None
    return style_attrs(style)
