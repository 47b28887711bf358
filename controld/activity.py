"""Busy or idle, for one agent, judged from its terminal output alone.

The daemon feeds each agent's raw output to its ``Activity`` as it arrives and asks for
the state; this module does no I/O and reads no clock (every call takes ``now``, from
whatever clock the caller uses, ``time.monotonic()`` being the sensible one).  The rule:

1. **busy, "recent activity"**: output arrived less than ``quiet`` seconds (default 2.0)
   before ``now``.
2. **idle, "prompt"**: otherwise, when the output ends at a prompt waiting for input.
3. **idle, "quiet"**: otherwise (including when there was no output at all).

So only silence makes an agent idle; the prompt test merely says why it is idle.
"At a prompt" is a heuristic, read from the tail of the output as follows.

- Only the last ``tail`` bytes (default 4 KiB) of raw output are kept, so memory is
  bounded however much is fed.  They are re-read when asked (and the result cached until
  the next feed), so an escape sequence or UTF-8 character split across ``feed`` calls is
  whole again once its rest arrives; an unfinished one at the very end is pending: not
  shown until it completes.  If the tail was cut, its first line, which may begin in the
  middle of a sequence, is dropped.
- The bytes are decoded as UTF-8 (invalid bytes replaced) and rendered by a tiny line
  model, not a screen: escape sequences (CSI, OSC, DCS/SOS/PM/APC, charset designations
  such as ``ESC ( B`` and other single ``ESC x``) are removed; LF, VT and FF end a line; CR
  returns to column 0 so later text overwrites (a progress bar shows its last state); BS,
  TAB and CSI C/D/G move along the line; CSI K, X, P and @ erase, delete and insert;
  moving the cursor to another row (CSI A B E F H f d, ESC D E M, restoring the cursor)
  ends the line, since what follows is drawn elsewhere; CSI 2J/3J and ESC c clear it all.
- A line that is blank, or made only of box-drawing and block characters (a border, a
  rule), is decoration; a line matching one of ``footers`` is a hint row drawn under an
  agent's input box (defaults: Claude Code's and Codex's "? for shortcuts", "(shift+tab
  to cycle)", "⏎ send").
- The output is at a prompt when the last line that is neither blank, decoration nor
  footer matches one of ``prompts``; or when, among the last ``box_window`` (6) non-blank
  lines, the line just above the lowest decoration line matches: the input box of an
  agent with a status footer of any kind below it (Claude Code draws its ``❯`` between
  two rules, with status lines under them).
- ``prompts`` are regular expressions searched in the line (trailing spaces kept).  The
  defaults: a line ending in ``$ ``, ``# ``, ``% `` or ``> `` (sh, bash, zsh, REPLs such as
  ``>>>``) or in ``❯`` (starship, pure); a line starting, after spaces and box sides
  ``│``, with ``>``, ``❯``, ``›`` or ``▌`` (Claude Code's and Codex's input lines).

Known misses: a right-hand prompt (zsh RPROMPT) hides the prompt character from "ends
with"; full-screen programs that repaint rows out of order confuse the line model; a
quoted ``> `` or a ``$ `` at the end of ordinary output reads as a prompt.  None of them
can make a busy agent look idle or the other way round.
"""

from __future__ import annotations

import codecs
import re

TAIL = 4096
DEFAULT_PROMPTS = (
    r"[$#%>] +$",
    r"❯\s*$",
    r"^[\s│┃|]*[>❯›▌](?:\s|$)",
)
DEFAULT_FOOTERS = (r"\? for shortcuts", r"\(shift\+tab to cycle\)", r"⏎ send")

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
_DECORATION = re.compile(r"[\s\u2500-\u259f]*")  # blank, box drawing, block elements


class _Lines:
    """The line model described in the module docstring."""

    def __init__(self):
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

    def newline(self, col: int = 0) -> None:
        self.done.append("".join(self.cur))
        self.cur, self.col = [], max(col, 0)

    def clear(self) -> None:
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
                self.newline(self.col)
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
            self.newline(col)
        elif final in "EF" or (final == "u" and not params):
            self.newline()
        elif final in "Hf":
            self.newline((nums[1] if len(nums) > 1 else 0) - 1)
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


def render(raw: bytes, cut: bool = False) -> list[str]:
    """The lines a tail of raw output shows, per the line model; ``cut``: its start is lost."""
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(raw, final=False)
    lines = _Lines().run(text)
    return lines[1:] if cut and len(lines) > 1 else lines


class Activity:
    """The busy/idle state of one agent, from the output fed to it."""

    def __init__(self, quiet: float = 2.0, prompts=DEFAULT_PROMPTS, footers=DEFAULT_FOOTERS,
                 tail: int = TAIL, box_window: int = 6):
        self.quiet = quiet
        self.prompts = [re.compile(p) for p in prompts]
        self.footers = [re.compile(p) for p in footers]
        self.tail = tail
        self.box_window = box_window
        self.last_output: float | None = None  # ``now`` of the latest non-empty feed
        self.bytes = 0  # every byte ever fed
        self._raw = bytearray()
        self._cut = False
        self._seen: tuple[str, bool] | None = None  # (last line, at a prompt), until a feed

    def feed(self, data: bytes, now: float) -> None:
        """Take output that arrived at ``now``."""
        if not data:
            return
        self.bytes += len(data)
        self.last_output = now if self.last_output is None else max(self.last_output, now)
        if len(data) >= self.tail:
            self._cut = self._cut or bool(self._raw) or len(data) > self.tail
            self._raw[:] = data[-self.tail:]  # copies the tail only, not all of data
        else:
            self._raw += data
            excess = len(self._raw) - self.tail
            if excess > 0:
                del self._raw[:excess]
                self._cut = True
        self._seen = None

    def _matches(self, line: str) -> bool:
        return any(p.search(line) for p in self.prompts)

    def _look(self) -> tuple[str, bool]:
        """(the last visible line, whether the output is at a prompt)."""
        if self._seen is None:
            lines = [ln for ln in render(bytes(self._raw), self._cut) if ln.strip()]
            deco = [bool(_DECORATION.fullmatch(ln)) for ln in lines]
            last = ""
            for ln, d in zip(reversed(lines), reversed(deco)):
                if not d and not any(p.search(ln) for p in self.footers):
                    last = ln
                    break
            self._seen = (last, self._matches(last))
            if not self._seen[1]:
                start = max(len(lines) - self.box_window, 0)
                for i in range(len(lines) - 1, start, -1):
                    if deco[i]:  # the lowest border: is the line above it a prompt?
                        if not deco[i - 1] and self._matches(lines[i - 1]):
                            self._seen = (lines[i - 1], True)
                        break
        return self._seen

    def last_line(self) -> str:
        """The line the prompt test looked at (the prompt itself when one was found)."""
        return self._look()[0]

    def at_prompt(self) -> bool:
        return self._look()[1]

    def state(self, now: float) -> tuple[str, str]:
        """("busy", "recent activity"), ("idle", "prompt") or ("idle", "quiet")."""
        if self.last_output is not None and now - self.last_output < self.quiet:
            return "busy", "recent activity"
        return "idle", "prompt" if self.at_prompt() else "quiet"

    def snapshot(self, now: float) -> dict:
        """The state and its evidence, as JSON-ready values."""
        state, reason = self.state(now)
        since = None if self.last_output is None else round(now - self.last_output, 3)
        return {"state": state, "reason": reason, "last_output": self.last_output,
                "since_output": since, "bytes": self.bytes, "tail_bytes": len(self._raw),
                "last_line": self.last_line().strip()[-200:]}
