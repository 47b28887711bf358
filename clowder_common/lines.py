"""The text lines that terminal output shows, by a tiny line model (not a screen).

Used for a session's history (``clowderctl history``: the tail of its raw backlog as
text) and by clowder-control to tell whether an agent waits at a prompt.

The bytes are decoded as UTF-8 (invalid bytes replaced); an escape sequence or UTF-8
character unfinished at the very end is pending: not shown.  Escape sequences (CSI,
OSC, DCS/SOS/PM/APC, charset designations such as ``ESC ( B`` and other single
``ESC x``) are removed; LF, VT and FF end a line; CR returns to column 0 so later text
overwrites (a progress bar shows its last state); BS, TAB and CSI C/D/G move along the
line; CSI K, X, P and @ erase, delete and insert; moving the cursor to another row (CSI
A B E F H f d, ESC D E M, restoring the cursor) ends the line, since what follows is
drawn elsewhere; CSI 2J/3J and ESC c clear it all (unless ``keep_cleared``).

Bounds that output cannot pass (a few bytes must not buy megabytes):

- a cursor move (CSI C, G, `, H, f, TAB, a column kept across a row change) goes at most
  to column ``MAX_COLUMN`` (the widest terminal a session may have, or the terminal's
  width when the caller knows it) or the end of the
  text already on the line, whichever is further: a real terminal stops at its right
  edge, so ``CSI 20000000 C`` is a move to column 1000, not 20 million spaces;
- a line holds at most ``MAX_LINE`` characters; text past that goes on in a new line
  (it wraps, nothing is lost but the line break);
- numeric parameters are read as at most ``MAX_PARAM``;
- ``Lines(keep=N)`` holds only the last N finished lines, and at most ``MAX_HELD``
  characters of them whatever N: the oldest go first.
"""

from __future__ import annotations

import codecs
import re
from collections import deque

MAX_COLUMN = 1000  # clowder_wire.host.MAX_COLS: no terminal of a session is wider
MAX_LINE = 64 * 1024
MAX_PARAM = 99999
MAX_HELD = 8 << 20  # characters of finished lines kept, at most

_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")
# A run of one control (or of controls the model ignores), handled at once.
_CONTROLS = re.compile(r"\n+|\t+|\x08+|\r+|\v+|\f+|[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f]+")
# What follows an ESC.  The single ESC x excludes [ ] P X ^ _, which open CSI and strings.
_SEQ = re.compile(r"""
    \[ (?P<params>[0-?]*) [ -/]* (?P<final>[@-~])    # CSI
  | [\]PX^_] .*? (?:\x07|\x1b\\)                      # OSC, DCS, SOS, PM, APC: to BEL or ST
  | [ -/]+ [0-~]                                      # nF: ESC ( B, ESC # 8, ESC % G ...
  | (?P<single>[0-OQ-WYZ\\`-~])                       # ESC 7, ESC M, ESC c ...
""", re.X | re.S)
# An ESC whose sequence can still be completed by more output.
_PARTIAL = re.compile(r"\[[0-?]*[ -/]*|[\]PX^_].*|[ -/]*", re.S)


class Lines:
    """The line model described in the module docstring.

    ``keep_cleared``: a screen clear (``ESC c``, ``CSI 2J``/``3J``/``1J``) keeps the lines
    before it, as scrollback does, instead of starting over, as the screen does.
    ``keep``: how many finished lines to hold (the last ones); ``dropped`` counts the
    lines let go for it or for ``MAX_HELD``.  ``width``: the terminal's width, if known
    (moves stop there instead of at ``MAX_COLUMN``).
    """

    def __init__(self, keep_cleared: bool = False, keep: int | None = None,
                 width: int = MAX_COLUMN):
        self.keep_cleared = keep_cleared
        self.keep = keep
        self.width = max(1, min(width, MAX_COLUMN))
        self.done: deque[str] = deque()
        self.held = 0  # characters in ``done``
        self.dropped = 0
        self.cur: list[str] = []
        self.col = 0

    def run(self, s: str) -> list[str]:
        i, n = 0, len(s)
        while i < n:
            m = _TEXT.match(s, i)
            if m:
                self.put(m.group())
            elif s[i] == "\x1b":
                m = _SEQ.match(s, i + 1)
                if not m:
                    if _PARTIAL.fullmatch(s, i + 1):
                        break  # unfinished: the rest arrives with the next feed
                    i += 1  # a stray ESC
                    continue
                self.escape(m)
            else:
                m = _CONTROLS.match(s, i)
                self.control(s[i], m.end() - i)
                i = m.end()
                continue
            i = m.end()
        return list(self.done) + ["".join(self.cur)]

    def move(self, col: int) -> None:
        """Put the cursor at ``col``, no further right than a terminal's edge would allow."""
        self.col = max(0, min(col, max(len(self.cur), self.width), MAX_LINE))

    def put(self, text: str) -> None:
        while True:
            if self.col > len(self.cur):
                self.cur.extend(" " * (self.col - len(self.cur)))
            room = MAX_LINE - self.col
            end = self.col + min(len(text), room)
            self.cur[self.col:end] = text[:room]  # overwrites what a CR went back over
            self.col = end
            if len(text) <= room:
                return
            text = text[room:]
            self.newline()  # over MAX_LINE: the rest wraps onto a new line

    def newline(self, col: int = 0, moved: bool = False) -> None:
        """End the line; ``moved``: by a cursor movement, which leaves no empty line."""
        if self.cur or not moved:
            line = "".join(self.cur)
            self.done.append(line)
            self.held += len(line)
            while self.done and (self.held > MAX_HELD or
                                 (self.keep is not None and len(self.done) > self.keep)):
                self.held -= len(self.done.popleft())
                self.dropped += 1
        self.cur = []
        self.move(col)

    def clear(self) -> None:
        if self.keep_cleared:
            self.newline(moved=True)
            return
        self.done, self.cur, self.held = deque(), [], 0

    def control(self, ch: str, times: int = 1) -> None:
        """``times`` of the control ``ch`` in a row (a run is handled at once)."""
        if ch in "\n\v\f":
            for _ in range(times):
                self.newline()  # as the tty's ONLCR (or the program's own CR) makes it
        elif ch == "\r":
            self.col = 0
        elif ch == "\b":
            self.col = max(self.col - times, 0)
        elif ch == "\t":
            self.move(self.col // 8 * 8 + 8 * min(times, MAX_LINE))

    def escape(self, m: re.Match) -> None:
        if m.group("final"):
            self.csi(m.group("params"), m.group("final"))
        elif m.group("single"):
            ch = m.group("single")
            if ch in "DM":
                self.newline(self.col, moved=ch == "M")
            elif ch in "E8":
                self.newline()
            elif ch == "c":
                self.clear()
                self.col = 0

    def csi(self, params: str, final: str) -> None:
        if params[:1] in ("<", "=", ">", "?"):
            return  # private modes, keyboard protocols: nothing on the line
        nums = [_number(p) for p in params.split(";")]
        first, count = nums[0], nums[0] or 1
        cur, col = self.cur, self.col
        if final in "ABd":
            self.newline(col, moved=True)
        elif final in "EF" or (final == "u" and not params):
            self.newline(moved=True)
        elif final in "Hf":
            self.newline((nums[1] if len(nums) > 1 else 0) - 1, moved=True)
        elif final in "G`":
            self.move(count - 1)
        elif final == "C":
            self.move(col + count)
        elif final == "D":
            self.col = max(col - count, 0)
        elif final == "K":
            if first == 0:
                del cur[col:]
            elif first == 1:
                cur[:col + 1] = " " * min(col + 1, len(cur))
            elif first == 2:
                cur.clear()
        elif final == "J":
            if first in (2, 3):
                self.clear()
            elif first == 1:
                if not self.keep_cleared:
                    self.done, self.held = deque(), 0
                cur[:col + 1] = " " * min(col + 1, len(cur))
            else:
                del cur[col:]
        elif final == "X":
            cur[col:col + count] = " " * len(cur[col:col + count])
        elif final == "P":
            del cur[col:col + count]
        elif final == "@" and col < len(cur):
            # What is pushed past the terminal's edge (or the line's end, if longer) is
            # lost, as on a terminal: an insert never makes the line longer.
            keep = max(len(cur), self.width)
            cur[col:col] = " " * min(count, self.width)
            del cur[keep:]


def _number(param: str) -> int:
    """A numeric parameter, at most MAX_PARAM (int() of thousands of digits is slow, or
    refused by Python's digit limit)."""
    if not param.isdigit():
        return 0
    param = param.lstrip("0") or "0"
    return int(param) if len(param) <= 5 else MAX_PARAM


def render(raw: bytes, cut: bool = False, keep_cleared: bool = False,
           keep: int | None = None, width: int = MAX_COLUMN) -> list[str]:
    """The lines a tail of raw output shows, per the line model; ``cut``: its start is lost
    (so its first line, which may begin inside a sequence, is dropped); ``keep``: at most
    that many lines before the last one are returned (the last ones)."""
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(raw, final=False)
    model = Lines(keep_cleared, keep, width)
    lines = model.run(text)
    return lines[1:] if cut and len(lines) > 1 and not model.dropped else lines
