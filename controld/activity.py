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
- The bytes are rendered by the line model of ``clowder_common/lines.py`` (escape
  sequences removed, CR overwrites, cursor moves to another row end the line, a clear
  starts over).
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

import re

from clowder_common.lines import render

TAIL = 4096
DEFAULT_PROMPTS = (
    r"[$#%>] +$",
    r"❯\s*$",
    r"^[\s│┃|]*[>❯›▌](?:\s|$)",
)
DEFAULT_FOOTERS = (r"\? for shortcuts", r"\(shift\+tab to cycle\)", r"⏎ send")

_DECORATION = re.compile(r"[\s\u2500-\u259f]*")  # blank, box drawing, block elements


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
