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
"""

from __future__ import annotations

import codecs
import re

_TEXT = re.compile(r"[^\x00-\x1f\x7f-\x9f]+")
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
    """

    def __init__(self, keep_cleared: bool = False):
        self.keep_cleared = keep_cleared
        self.done: list[str] = []
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
                self.control(s[i])
                i += 1
                continue
            i = m.end()
        return self.done + ["".join(self.cur)]

    def put(self, text: str) -> None:
        if self.col > len(self.cur):
            self.cur.extend(" " * (self.col - len(self.cur)))
        end = self.col + len(text)
        self.cur[self.col:end] = text  # overwrites what a CR went back over
        self.col = end

    def newline(self, col: int = 0, moved: bool = False) -> None:
        """End the line; ``moved``: by a cursor movement, which leaves no empty line."""
        if self.cur or not moved:
            self.done.append("".join(self.cur))
        self.cur, self.col = [], max(col, 0)

    def clear(self) -> None:
        if self.keep_cleared:
            self.newline(moved=True)
            return
        self.done, self.cur = [], []

    def control(self, ch: str) -> None:
        if ch in "\n\v\f":
            self.newline()  # as the tty's ONLCR (or the program's own CR) makes it
        elif ch == "\r":
            self.col = 0
        elif ch == "\b":
            self.col = max(self.col - 1, 0)
        elif ch == "\t":
            self.col = self.col // 8 * 8 + 8

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
        nums = [int(p) if p.isdigit() else 0 for p in params.split(";")]
        first, count = nums[0], nums[0] or 1
        cur, col = self.cur, self.col
        if final in "ABd":
            self.newline(col, moved=True)
        elif final in "EF" or (final == "u" and not params):
            self.newline(moved=True)
        elif final in "Hf":
            self.newline((nums[1] if len(nums) > 1 else 0) - 1, moved=True)
        elif final in "G`":
            self.col = count - 1
        elif final == "C":
            self.col = col + count
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
                    self.done = []
                cur[:col + 1] = " " * min(col + 1, len(cur))
            else:
                del cur[col:]
        elif final == "X":
            cur[col:col + count] = " " * len(cur[col:col + count])
        elif final == "P":
            del cur[col:col + count]
        elif final == "@" and col < len(cur):
            cur[col:col] = " " * count


def render(raw: bytes, cut: bool = False, keep_cleared: bool = False) -> list[str]:
    """The lines a tail of raw output shows, per the line model; ``cut``: its start is lost
    (so its first line, which may begin inside a sequence, is dropped)."""
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(raw, final=False)
    lines = Lines(keep_cleared).run(text)
    return lines[1:] if cut and len(lines) > 1 else lines
