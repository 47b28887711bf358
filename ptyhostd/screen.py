"""The terminal model of a session: pyte behind a small seam, with pyte's gaps filled.

A ``Screen`` is fed a session's raw pty output (``feed``), follows its size
(``resize``) and, on demand, renders what a terminal showing that output looks like:
``repaint()`` as VT bytes for a client that attaches, ``snapshot()`` as text, ANSI or
HTML.  It is slow (pure Python) and must stay off the byte path: the host feeds it on
its own time and only reads it when a client attaches.

pyte keeps the cells; its parser is not used.  A tokenizer here cuts the bytes into
text, controls and whole escape sequences and calls the grid's methods itself, so that:

- a half-received sequence (or UTF-8 character) is held back until it completes, and
  ``pending`` hands it to a host that must send it after the repaint;
- sequences pyte gets wrong never reach it: private SGR (``CSI ? 4 m`` made pyte raise
  and drop the rest of the chunk), ``CSI > 4;2 m`` (modifyOtherKeys, not underline),
  DCS/APC/PM/SOS strings (drawn as text by pyte), terminal queries (ignored here, and
  never re-sent since a repaint is rebuilt from state);
- what pyte lacks is done beside it: the alternate screen (47/1047/1048/1049, pyte#90)
  as a second buffer swapped in and out, SU/SD, REP, dim and hidden, the title stack,
  keypad and keyboard modes, cursor style, colours set by OSC.

The fixes inside pyte's screen are in ``grid.py``, listed on ``Grid``'s methods.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Optional

import pyte
from pyte import modes as mo
from pyte.screens import StaticDefaultDict

from . import screen_render
from .grid import Grid, Saved
from .screen_json import MOUSE_ENCODINGS, MOUSE_MODES
from .screen_render import BLANK, Cell, NAMES, charset_codes

MAX_STRING = 64 * 1024  # longest OSC/DCS held whole; longer ones are skipped to their end
MAX_PARAMS = 1024  # a longer unfinished CSI is garbage, not a sequence to wait for
MAX_TITLE = 4096  # characters of a title kept (ten of them on the title stack)
MAX_LINK = 2048  # characters of an OSC 8 hyperlink kept (params and URI); longer: no link
MAX_COLOUR_SPEC = 64  # a colour spec is short ("rgb:ffff/ffff/ffff"); longer ones are ignored
CHARSET_CODES = charset_codes()  # pyte's charset tables -> their codes (the saved state)
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")
_CSI = re.compile(rb"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")
_CSI_START = re.compile(rb"\x1b\[[\x30-\x3f]*[\x20-\x2f]*")
_ESC = re.compile(rb"\x1b([\x20-\x2f]*)([\x30-\x7e])")
_ESC_START = re.compile(rb"\x1b[\x20-\x2f]*")
_STRING_END = re.compile(rb"[\x07\x18\x1a\x1b]")
_STRINGS = b"]P_^X"  # OSC, DCS, APC, PM, SOS
_SKIP_OPENER = {0x5D: b"\x1b]_;"}  # an OSC no one acts on: its tail is never dispatched
# SGR and mode changes leave a grapheme cluster open to the next text (every other token
# ends it: Grid.cluster_open), so that a repaint can reopen one after setting modes.
_KEEP_CLUSTER = frozenset(b"mhl")
# Cursor movement and editing: they end a pending wrap, as in xterm.  ED and EL are not
# here: ``Grid.erase_in_line`` decides (an erase to the right in a pending wrap).
_UNWRAP = frozenset(b"@ABCDEFGHILMPSTXZ`abdef")


def _number(p: bytes) -> Optional[int]:
    """One parameter, at most 9999; None if empty (int() of thousands of digits is slow,
    or refused by Python's digit limit)."""
    if not p.isdigit():
        return None
    p = p.lstrip(b"0") or b"0"
    return min(int(p), 9999) if len(p) <= 5 else 9999


def _params(raw: bytes) -> list:
    """CSI parameters: an int, None for an empty one, or a list for colon sub-parameters."""
    out = []
    for field in raw.split(b";"):
        if b":" in field:
            out.append([_number(p) for p in field.split(b":")])
        else:
            out.append(_number(field))
    return out


def _ints(params: list) -> list:
    """Parameters as pyte takes them: plain ints, 0 for empty, first of any sub-parameters."""
    return [(p[0] if isinstance(p, list) else p) or 0 for p in params]


def _colour(args: list) -> Optional[str]:
    """A colour from the parameters after 38/48: ``5;N``, or ``2;R;G;B`` with an optional
    colour space before R."""
    if not args or any(isinstance(a, list) for a in args):
        return None
    if args[0] == 5 and len(args) >= 2 and args[1] is not None:
        return f"i{min(args[1], 255)}"
    if args[0] == 2 and len(args) >= 4:
        r, g, b = (min(v or 0, 255) for v in args[-3:])
        return f"{r:02x}{g:02x}{b:02x}"
    return None


_FLAGS = {1: ("bold", True), 2: ("dim", True), 3: ("italics", True), 4: ("underscore", True),
          5: ("blink", True), 6: ("blink", True), 7: ("reverse", True), 8: ("hidden", True),
          9: ("strikethrough", True), 21: ("underscore", True), 23: ("italics", False),
          24: ("underscore", False), 25: ("blink", False), 27: ("reverse", False),
          28: ("hidden", False), 29: ("strikethrough", False)}


def apply_sgr(attrs: Cell, params: list) -> Cell:
    """The attributes after an SGR: pyte's plus dim, hidden, colon forms and SGR 100-107."""
    change = {}
    i = 0
    while i < len(params):
        p = params[i]
        i += 1
        if isinstance(p, list):
            code, sub = p[0] or 0, p[1:]
            if code in (38, 48):
                colour = _colour(sub)
                if colour:
                    change["fg" if code == 38 else "bg"] = colour
            elif code == 4:
                style = sub[0] if sub and sub[0] is not None else 1
                change["underscore"] = style != 0
                change["ul_style"] = style if 2 <= style <= 5 else 0
            continue
        code = p or 0
        if code == 0:  # everything but the hyperlink (OSC 8 alone starts and ends one)
            change = dict(zip(Cell._fields[1:-1], BLANK[1:-1]))
        elif code in _FLAGS:
            name, value = _FLAGS[code]
            change[name] = value
            if name == "underscore":
                change["ul_style"] = 2 if code == 21 else 0
        elif code == 22:
            change["bold"] = change["dim"] = False
        elif 30 <= code <= 37 or 90 <= code <= 97:
            change["fg"] = NAMES[code - 30 if code < 90 else code - 82]
        elif 40 <= code <= 47 or 100 <= code <= 107:
            change["bg"] = NAMES[code - 40 if code < 100 else code - 92]
        elif code == 39:
            change["fg"] = "default"
        elif code == 49:
            change["bg"] = "default"
        elif code in (38, 48, 58):
            kind = params[i] if i < len(params) else None
            take = 2 if kind == 5 else 4 if kind == 2 else 1
            colour = _colour(params[i:i + take])
            i += take
            if colour and code != 58:  # 58: underline colour, not kept
                change["fg" if code == 38 else "bg"] = colour
    return attrs._replace(**change) if change else attrs


class Screen:
    """The terminal model of one session."""

    engine = "pyte"

    def __init__(self, cols: int = 80, rows: int = 24):
        self._grid = Grid(cols, rows)
        self._pending = b""
        self._skipping: Optional[bytes] = None
        self.errors = 0  # sequences whose handling raised; each was skipped alone
        self._csi_table = self._make_csi_table()
        self._full_reset()

    def _full_reset(self) -> None:
        """Power-on state of everything kept beside pyte."""
        self.alt = False
        self._other = defaultdict(self._grid.buffer.default_factory)
        self._other_saved: Optional[Saved] = None
        self._keys: list = []
        self._other_keys: list = []
        self.title = self.icon_name = ""
        self.title_stack: list = []
        self.keypad = False
        self.cursor_style = 0
        self.modify_keys: dict = {}
        self.colours: dict = {}

    # The seam.

    @property
    def cols(self) -> int:
        """Width in columns."""
        return self._grid.columns

    @property
    def rows(self) -> int:
        """Height in rows."""
        return self._grid.lines

    @property
    def work(self) -> int:
        """Cells and rows touched so far: what screenwork's budget counts."""
        return self._grid.work

    @property
    def pending(self) -> bytes:
        """The held, unfinished tail of the output: write it after ``repaint()``.

        A host that sends ``repaint()`` and then the output that follows the last byte
        fed must send these bytes in between, so the client's terminal finishes the
        sequence as this screen will.  Empty almost always.
        """
        return (self._skipping or b"") + self._pending

    def feed(self, data: bytes) -> None:
        """Take output from the session's pty."""
        if not data:
            return
        buf = self._pending + data if self._pending else data
        pos = 0
        if self._skipping is not None:
            pos = self._skip(buf, 0)
            if pos < 0:
                self._pending = buf[-1:] if buf[-1] == 0x1B else b""
                return
        pos = self._parse(buf, pos)
        self._pending = bytes(buf[pos:])

    def resize(self, cols: int, rows: int) -> None:
        """Follow the pty's new size; both buffers keep their top-left corner.

        When rows are lost, as many come off the top as keep the cursor on screen, the
        rest off the bottom.  Margins are reset and tab stops extended, as in xterm.
        """
        g = self._grid
        cols, rows = max(cols, 1), max(rows, 1)
        if (cols, rows) == (g.columns, g.lines):
            return
        shift = max(0, g.cursor.y - (rows - 1))
        for buffer in (g.buffer, self._other):
            moved = {y - shift: line for y, line in buffer.items() if shift <= y < shift + rows}
            buffer.clear()
            buffer.update(moved)
            for y, line in list(buffer.items()):
                for x in [x for x in line if x >= cols]:
                    del line[x]
                g.work += len(line)
                if cols > g.columns and line.default != BLANK:
                    # New columns are blank: the row's colour covers only the old ones.
                    wide = StaticDefaultDict(BLANK)
                    wide.update(dict.fromkeys(range(g.columns), line.default))
                    wide.update(line)
                    buffer[y] = line = wide
                if cols - 1 in line and screen_render.is_wide(line[cols - 1].data):
                    line[cols - 1] = line[cols - 1]._replace(data=" ")
        new_stops = range(8 * ((g.columns + 7) // 8), cols, 8)
        g.tabstops = {s for s in g.tabstops if s < cols} | set(new_stops)
        g.columns, g.lines = cols, rows
        g.margins = None
        g.cursor.y = max(0, g.cursor.y - shift)
        g.cursor.x = min(g.cursor.x, cols - 1)
        g.saved = self._clamp(g.saved, shift)
        self._other_saved = self._clamp(self._other_saved, shift)

    def _clamp(self, saved: Optional[Saved], shift: int) -> Optional[Saved]:
        """A saved cursor moved with its rows and kept on screen."""
        if saved is None:
            return None
        return saved._replace(x=min(saved.x, self.cols - 1),
                              y=min(max(0, saved.y - shift), self.rows - 1))

    def compact(self) -> None:
        """Nothing to compress: pyte keeps no scrollback (the ring keeps raw output)."""

    def repaint(self) -> bytes:
        """VT bytes that bring a fresh terminal of this size to this state (see ``pending``)."""
        return screen_render.repaint(self)

    def view(self, cols: int, rows: int) -> bytes:
        """VT bytes that show this screen on a terminal of another size: its top-left
        part, the area past its edges marked (screen_view.py)."""
        from .screen_view import view  # only a client of another size needs it
        return view(self, cols, rows)

    def snapshot(self, format: str = "text", limit: Optional[int] = None) -> str:
        """The active screen as ``text``, ``ansi`` (SGR, no cursor moves), ``html`` or
        ``json`` (docs/snapshot-json.md); ``limit``: a JSON snapshot gives up with
        engine.TooLarge once its rows are more than that (the others are pure Python,
        which lets the loop have the GIL every switch interval anyway)."""
        render = SNAPSHOT_FORMATS.get(format)
        if render is None:
            raise ValueError(f"unknown snapshot format {format!r}")
        return _json(self, limit) if render is _json else render(self)

    # The read API of screen_json: what any engine offers a JSON snapshot.

    engine = "pyte"

    def read_rows(self):
        """The active screen's rows, top to bottom, as lists of ``screen_json.ViewCell``."""
        return screen_render.view_rows(self)

    def read_cursor(self):
        """The cursor as a ``screen_json.Cursor``."""
        from .screen_json import Cursor
        g = self._grid
        pending = g.cursor.x >= g.columns
        return Cursor(x=min(g.cursor.x, g.columns - 1), y=g.cursor.y,
                      visible=mo.DECTCEM in g.mode, style=self.cursor_style,
                      pending_wrap=pending)

    def read_modes(self) -> dict:
        """The modes ``screen_json.MODES`` names."""
        private, ansi = self.private_modes(), self.ansi_modes()
        mouse = next((name for mode, name in MOUSE_MODES if mode in private), None)
        encoding = next((name for mode, name in MOUSE_ENCODINGS if mode in private), None)
        return {
            "alternate_screen": self.alt, "application_cursor": 1 in private,
            "application_keypad": self.keypad, "bracketed_paste": 2004 in private,
            "mouse": mouse, "mouse_encoding": encoding, "focus": 1004 in private,
            "autowrap": 7 in private, "origin": 6 in private, "insert": 4 in ansi,
            "reverse_video": 5 in private, "keyboard": self._keys[-1] if self._keys else 0,
            "modify_other_keys": self.modify_keys.get(4, 0),
            "synchronized_output": 2026 in private,
        }

    def view_buffer(self, cols: int = 0, rows: int = 0):
        """The active screen's cells, rows by number (what screen_view paints); pyte
        holds them already, so the part a view shows (``cols`` x ``rows``) costs nothing
        less."""
        return self._grid.buffer

    def keyboard_stack(self) -> list:
        """The shown screen's kitty keyboard-protocol flag stack."""
        return self._keys

    def pen(self) -> tuple:
        """The cursor's pen: the attributes of a ``screen_render.Cell``."""
        return self._grid.cursor.attrs[1:]

    # Views for the renderer and for tests.

    def buffers(self):
        """(primary, alternate) cell buffers, rows by number."""
        return (self._other, self._grid.buffer) if self.alt else (self._grid.buffer, self._other)

    def saved_slots(self):
        """(primary, alternate) DECSC slots."""
        g = self._grid
        return (self._other_saved, g.saved) if self.alt else (g.saved, self._other_saved)

    def keyboard_stacks(self):
        """(primary, alternate) kitty keyboard-protocol flag stacks."""
        return (self._other_keys, self._keys) if self.alt else (self._keys, self._other_keys)

    def private_modes(self) -> set:
        """DEC private modes that are set (pyte stores them shifted left by 5)."""
        return {m >> 5 for m in self._grid.mode if m >= 32 and not m & 31}

    def ansi_modes(self) -> set:
        """ANSI modes that are set (IRM 4, LNM 20)."""
        return {m for m in self._grid.mode if m < 32 or m & 31}

    def state(self) -> dict:
        """Everything a repaint must reproduce, as plain data: for tests and debugging."""
        g = self._grid

        def cells(buffer):
            return [tuple(buffer[y][x] if y in buffer else BLANK for x in range(g.columns))
                    for y in range(g.lines)]

        primary, alternate = self.buffers()
        return {
            "size": (g.columns, g.lines), "alt": self.alt,
            "primary": cells(primary), "alternate": cells(alternate),
            "cursor": (g.cursor.x, g.cursor.y, g.cursor.attrs),
            "saved": [slot and slot._replace(g0=CHARSET_CODES.get(slot.g0),
                                             g1=CHARSET_CODES.get(slot.g1))
                      for slot in self.saved_slots()],
            "keys": self.keyboard_stacks(),
            "private_modes": sorted(self.private_modes()),
            "ansi_modes": sorted(self.ansi_modes()),
            "margins": g.margins, "tabstops": sorted(g.tabstops),
            "charsets": (CHARSET_CODES.get(g.g0_charset), CHARSET_CODES.get(g.g1_charset),
                         g.charset),
            "title": (self.title, self.icon_name, list(self.title_stack)),
            "keypad": self.keypad, "cursor_style": self.cursor_style, "last_char": g.last_char,
            "modify_keys": dict(self.modify_keys), "colours": dict(self.colours),
        }

    # The tokenizer.

    def _parse(self, buf: bytes, pos: int) -> int:
        """Handle whole tokens of ``buf`` from ``pos``; return where an unfinished tail starts."""
        g, n = self._grid, len(buf)
        while pos < n:
            byte = buf[pos]
            if byte == 0x1B:
                end = self._escape(buf, pos)
                if end < 0:
                    return pos
                if buf[pos + 1] != 0x5B:  # CSI: see _csi
                    g.cluster_open = False
                pos = end
            elif byte < 0x20 or byte == 0x7F:
                g.cluster_open = False
                self._control(byte)
                pos += 1
            else:
                match = _CONTROL.search(buf, pos)
                end = match.start() if match else _utf8_cut(buf, pos, n)
                if end > pos:
                    self._guard(g.draw, buf[pos:end].decode("utf-8", "replace"))
                if not match and end < n:
                    return end
                pos = end
        return n

    def _guard(self, handler, *args) -> None:
        """Run one handler; a failure costs that sequence only (pyte's dropped the chunk)."""
        try:
            handler(*args)
        except Exception:
            self.errors += 1

    def _control(self, byte: int) -> None:
        """A C0 control outside any sequence."""
        g = self._grid
        if byte in (0x0A, 0x0B, 0x0C):
            g.unwrap()
            g.linefeed()
        elif byte == 0x0D:
            g.carriage_return()
        elif byte == 0x08:
            g.backspace()
        elif byte == 0x09:
            g.tab()
        elif byte == 0x0E:
            g.shift_out()
        elif byte == 0x0F:
            g.shift_in()

    def _escape(self, buf: bytes, pos: int) -> int:
        """Handle the sequence at ``buf[pos]`` (an ESC); return its end, or -1 if unfinished."""
        n = len(buf)
        if pos + 1 >= n:
            return -1
        kind = buf[pos + 1]
        if kind == 0x5B:  # CSI
            match = _CSI.match(buf, pos)
            if match:
                raw, inter, final = match.groups()
                self._guard(self._csi, raw, inter, final[0])
                return match.end()
            end = _CSI_START.match(buf, pos).end()
            if end == n and end - pos < MAX_PARAMS:
                return -1
            return end  # malformed: dropped, and what broke it is read on its own
        if kind in _STRINGS:
            return self._string(buf, pos)
        match = _ESC.match(buf, pos)
        if match:
            self._guard(self._esc, match.group(1), match.group(2)[0])
            return match.end()
        end = _ESC_START.match(buf, pos).end()
        return -1 if end == n else end

    def _string(self, buf: bytes, pos: int) -> int:
        """An OSC, DCS, APC, PM or SOS string: find its end; only OSC is acted on."""
        body = pos + 2
        end = self._string_end(buf, body)
        if end == -1:
            if len(buf) - pos <= MAX_STRING:
                return -1
            self._skipping = _SKIP_OPENER.get(buf[pos + 1], buf[pos:pos + 2])
            return len(buf) - 1 if buf[-1] == 0x1B else len(buf)
        stop, resume, complete = end
        if complete and buf[pos + 1] == 0x5D:
            self._guard(self._osc, buf[body:stop])
        return resume

    @staticmethod
    def _string_end(buf: bytes, start: int):
        """Where a string that began before ``start`` ends: (text end, resume at, terminated?).

        ST (ESC \\) or BEL ends it; CAN or SUB cancel it; ESC followed by anything else
        ends it and that ESC starts the next sequence.  -1: not yet.
        """
        match = _STRING_END.search(buf, start)
        if not match:
            return -1
        at = match.start()
        byte = buf[at]
        if byte == 0x07:
            return at, at + 1, True
        if byte in (0x18, 0x1A):
            return at, at + 1, False
        if at + 1 >= len(buf):
            return -1
        if buf[at + 1] == 0x5C:
            return at, at + 2, True
        return at, at, True

    def _skip(self, buf: bytes, pos: int) -> int:
        """In a string too long to hold: find its end; -1 if it goes on."""
        end = self._string_end(buf, pos)
        if end == -1:
            return -1
        self._skipping = None
        return end[1]

    def _esc(self, inter: bytes, final: int) -> None:
        """An escape sequence that is not CSI or a string."""
        g = self._grid
        if inter == b"(" or inter == b")":
            g.define_charset(chr(final), inter.decode())
        elif inter == b"#" and final == 0x38:
            g.alignment_display()
        elif inter:
            return
        elif final == 0x37:  # 7
            g.save_cursor()
        elif final == 0x38:  # 8
            g.restore_cursor()
        elif final in (0x3D, 0x3E):  # = >
            self.keypad = final == 0x3D
        elif final in (0x44, 0x45, 0x4D):  # D E M
            g.unwrap()
            if final == 0x45:
                g.carriage_return()
            (g.reverse_index if final == 0x4D else g.index)()
        elif final == 0x48:  # H
            g.set_tab_stop()
        elif final == 0x63:  # c
            self._ris()

    def _ris(self) -> None:
        """RIS: a full reset of the terminal, both buffers included."""
        self._grid.buffer.clear()
        self._other.clear()
        self._grid.reset()
        self._full_reset()

    def _csi(self, raw: bytes, inter: bytes, final: int) -> None:
        """A control sequence: look it up by prefix, intermediates and final byte."""
        prefix = b""
        if raw[:1] in (b"<", b"=", b">", b"?"):
            prefix, raw = raw[:1], raw[1:]
        if final not in _KEEP_CLUSTER or inter:
            self._grid.cluster_open = False
        handler = self._csi_table.get((prefix, inter, final))
        if handler is None:
            return  # queries and everything unsupported: ignored, never replayed
        if final in _UNWRAP and not prefix and not inter:
            self._grid.unwrap()
        handler(_params(raw))

    def _make_csi_table(self) -> dict:
        """Handlers by (prefix, intermediates, final byte)."""
        g = self._grid
        plain = {"@": g.insert_characters, "A": g.cursor_up, "B": g.cursor_down,
                 "C": g.cursor_forward, "D": g.cursor_back, "E": g.cursor_down1,
                 "F": g.cursor_up1, "G": g.cursor_to_column, "H": g.cursor_position,
                 "J": g.erase_in_display, "K": g.erase_in_line, "L": g.insert_lines,
                 "M": g.delete_lines, "P": g.delete_characters, "X": g.erase_characters,
                 "`": g.cursor_to_column, "a": g.cursor_forward, "d": g.cursor_to_line,
                 "e": g.cursor_down, "f": g.cursor_position, "g": g.clear_tab_stop,
                 "r": g.set_margins}
        table = {(b"", b"", ord(k)): (lambda p, f=f: f(*_ints(p))) for k, f in plain.items()}
        first = lambda p: _ints(p)[0]  # noqa: E731
        table.update({
            (b"", b"", ord("I")): lambda p: g.tabs(first(p), True),
            (b"", b"", ord("Z")): lambda p: g.tabs(first(p), False),
            (b"", b"", ord("S")): lambda p: g.scroll(first(p), True),
            (b"", b"", ord("T")): lambda p: len(p) == 1 and g.scroll(first(p), False),
            (b"", b"", ord("b")): lambda p: g.repeat(first(p)),
            (b"?", b"", ord("J")): lambda p: g.erase_in_display(first(p)),
            (b"?", b"", ord("K")): lambda p: g.erase_in_line(first(p)),
            (b"", b"", ord("m")): self._sgr,
            (b"", b"", ord("h")): lambda p: self._modes(p, False, True),
            (b"", b"", ord("l")): lambda p: self._modes(p, False, False),
            (b"?", b"", ord("h")): lambda p: self._modes(p, True, True),
            (b"?", b"", ord("l")): lambda p: self._modes(p, True, False),
            (b"", b"", ord("s")): lambda p: p == [None] and g.save_cursor(),
            (b"", b"", ord("u")): lambda p: p == [None] and g.restore_cursor(),
            (b"", b"", ord("t")): self._window_op,
            (b">", b"", ord("m")): self._modify_keys,
            (b">", b"", ord("u")): self._keys_push,
            (b"<", b"", ord("u")): self._keys_pop,
            (b"=", b"", ord("u")): self._keys_set,
            (b"", b" ", ord("q")): lambda p: setattr(self, "cursor_style", min(first(p), 6)),
            (b"", b"!", ord("p")): lambda p: self._soft_reset(),
        })
        return table

    def _sgr(self, params: list) -> None:
        """SGR."""
        cursor = self._grid.cursor
        cursor.attrs = apply_sgr(cursor.attrs, params)

    def _modes(self, params: list, private: bool, on: bool) -> None:
        """SM/RM and DECSET/DECRST; the alternate screen and DECCOLM/DECSCNM are ours."""
        g = self._grid
        for mode in _ints(params):
            if private and mode in (47, 1047, 1048, 1049):
                self._alt_mode(mode, on)
            elif private and mode == 3:
                continue  # DECCOLM: xterm ignores it by default, and pyte would resize
            elif private and mode == 5:
                (g.mode.add if on else g.mode.discard)(mo.DECSCNM)  # pyte rewrote every cell
            elif private and mode == 66:
                self.keypad = on  # DECNKM is DECKPAM/DECKPNM as a mode (ghostty repaints so)
            elif on:
                g.set_mode(mode, private=private)
            else:
                g.reset_mode(mode, private=private)

    def _alt_mode(self, mode: int, on: bool) -> None:
        """The alternate screen, as xterm: 47 switches, 1047 clears on leaving, 1049 saves
        the cursor and clears on entering, 1048 only saves or restores the cursor.

        Leaving by 1049 also clears it (xterm keeps the cells, though only 47 or 1047
        could show them again), so that a screen a TUI left needs no repainting.
        """
        g = self._grid
        g.cluster_open = False
        if mode == 1048:
            (g.save_cursor if on else g.restore_cursor)()
            return
        if on:
            if mode == 1049:
                g.save_cursor()
            if not self.alt:
                self._swap()
            if mode == 1049:
                g.buffer.clear()
        else:
            if self.alt:
                if mode != 47:
                    g.buffer.clear()
                self._swap()
            if mode == 1049:
                g.restore_cursor()

    def _swap(self) -> None:
        """Exchange the active and the inactive buffer, with their saved cursors and key stacks."""
        g = self._grid
        g.buffer, self._other = self._other, g.buffer
        g.saved, self._other_saved = self._other_saved, g.saved
        self._keys, self._other_keys = self._other_keys, self._keys
        self.alt = not self.alt

    def _soft_reset(self) -> None:
        """DECSTR: modes, margins, charsets, attributes and the saved cursor to defaults."""
        g = self._grid
        g.mode.difference_update({mo.IRM, mo.DECOM, 1 << 5})
        g.mode.update({mo.DECAWM, mo.DECTCEM})
        g.margins = None
        g.g0_charset, g.g1_charset, g.charset = pyte.charsets.LAT1_MAP, pyte.charsets.VT100_MAP, 0
        g.cursor.attrs = BLANK
        g.saved = None
        self.keypad = False

    def _window_op(self, params: list) -> None:
        """XTWINOPS: only the title stack (22 push, 23 pop); resizes and reports are ignored."""
        op, which = (_ints(params) + [0, 0])[:2]
        if op == 22 and which in (0, 1, 2):
            self.title_stack.append((self.icon_name if which in (0, 1) else None,
                                     self.title if which in (0, 2) else None, which))
            del self.title_stack[:-10]
        elif op == 23 and which in (0, 1, 2) and self.title_stack:
            icon, title, _ = self.title_stack.pop()
            if icon is not None and which in (0, 1):
                self.icon_name = icon
            if title is not None and which in (0, 2):
                self.title = title

    def _modify_keys(self, params: list) -> None:
        """XTMODKEYS (``CSI > 4 ; 2 m``, which pyte took for underline)."""
        args = _ints(params)
        if params == [None]:
            self.modify_keys.clear()
        elif len(params) < 2 or params[1] is None:
            self.modify_keys.pop(args[0], None)
        elif args[0] <= 7:  # xterm's resources are 0-7: no table of 10,000 entries
            self.modify_keys[args[0]] = args[1]

    def _keys_push(self, params: list) -> None:
        """Kitty keyboard protocol: push flags."""
        self._keys.append(_ints(params)[0])
        del self._keys[:-16]

    def _keys_pop(self, params: list) -> None:
        """Kitty keyboard protocol: pop entries."""
        del self._keys[max(0, len(self._keys) - (_ints(params)[0] or 1)):]

    def _keys_set(self, params: list) -> None:
        """Kitty keyboard protocol: set, add or remove flags of the top entry."""
        flags, how = (_ints(params) + [1])[:2]
        if not self._keys:
            self._keys.append(0)
        top = self._keys[-1]
        self._keys[-1] = flags if how == 1 else top | flags if how == 2 else top & ~flags

    def _hyperlink(self, text: str) -> None:
        """OSC 8 ; params ; uri: the text drawn next is part of that link (an empty uri
        ends it).  Kept as written, params included (``id=`` groups a link's cells)."""
        params, sep, uri = text.partition(";")
        cursor = self._grid.cursor
        if not sep or not uri or len(text) > MAX_LINK or not text.isprintable():
            cursor.attrs = cursor.attrs._replace(link="")
        else:
            cursor.attrs = cursor.attrs._replace(link=text)

    def _osc(self, body: bytes) -> None:
        """An OSC string: titles and colours; queries (``?``) and the rest are ignored."""
        code, _, text = body.decode("utf-8", "replace").partition(";")
        if code == "8":
            self._hyperlink(text)
        elif code in ("0", "1", "2"):
            text = text[:MAX_TITLE]
            if code != "2":
                self.icon_name = text
            if code != "1":
                self.title = text
        elif code == "4":
            fields = text.split(";")
            for index, spec in zip(fields[::2], fields[1::2]):
                if spec != "?" and len(index) < 4 and index.isdigit() and int(index) < 256 \
                        and len(spec) <= MAX_COLOUR_SPEC:
                    self.colours[f"4;{index}"] = spec
        elif code == "104":
            indexes = text.split(";") if text else [k[2:] for k in self.colours if k[:2] == "4;"]
            for index in indexes:
                self.colours.pop(f"4;{index}", None)
        elif code.isdigit() and 10 <= int(code) <= 19:
            for number, spec in enumerate(text.split(";"), int(code)):
                if spec != "?" and number <= 19 and len(spec) <= MAX_COLOUR_SPEC:
                    self.colours[str(number)] = spec
        elif code.isdigit() and 110 <= int(code) <= 119:
            self.colours.pop(str(int(code) - 100), None)


def _json(screen: Screen, limit: Optional[int] = None) -> str:
    from . import screen_json  # only a JSON snapshot needs it
    return screen_json.snapshot(screen, limit)


SNAPSHOT_FORMATS = {"text": screen_render.text, "ansi": screen_render.ansi,
                    "html": screen_render.html, "json": _json}


def _utf8_cut(buf: bytes, start: int, end: int) -> int:
    """Where an unfinished UTF-8 character ending ``buf[start:end]`` begins (else ``end``)."""
    for i in range(end - 1, max(start, end - 4) - 1, -1):
        byte = buf[i]
        if byte < 0x80:
            return end
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return i if end - i < need else end
    return end
