"""Whether an agent needs its person, and why: the attention state of one agent.

The daemon tells an agent's ``Attention`` what happens to it (its output, busy/idle
periods from controld/activity.py, its session's end, a new session); this module does
no I/O and reads no clock.  Each call returns the new ``(state, cause)`` when the state
changed, else None; the caller logs and publishes the change.  The rule:

- **failed**: the agent's session ended with a non-zero code, by a signal, lost, or
  could not be started.
- **exited**: the agent's session ended with code 0.
- **notified**: the program asked for attention itself: a BEL (0x07) outside any escape
  string, an OSC 9 notification (``ESC ] 9 ; text``, not ConEmu's ``9;4`` progress), an
  OSC 777 ``notify`` or an OSC 99 (kitty) notification.  Sequences split across reads
  are found; an OSC's text is kept up to MAX_TEXT characters.
- **asking**: the agent went idle (quiet for Activity.quiet seconds) after a busy
  period, and the last line of its output matches one of its ``attention:`` patterns,
  or, without patterns, is a prompt by Activity's heuristic.
- **none**: otherwise.

Cleared (back to none): asking and notified by a new busy period that begins after
them (output after the agent was idle: typing into an interactive program echoes, so
input shows here as output; the output that carries a notification does not clear it),
and every state by a new session of the agent (a spawn, restart or `up`) or a stop
asked for (`down`, `restart`).  A
notification while asking replaces it; going idle while notified stays notified;
exited/failed are left only by a new session.  What clowder-control does not see: input
that is never echoed, and anything before it (re)started watching (the state starts at
none; the output replayed to a watch of a session it adopts, the last 4 KiB, comes
right after the host's Attached and cannot be told apart from live output on the wire:
the REPLAY_WINDOW seconds after Attached are read for the prompt only, their
notifications ignored).
"""

from __future__ import annotations

import re
from typing import Optional

NONE, ASKING, NOTIFIED, EXITED, FAILED = "none", "asking", "notified", "exited", "failed"
STATES = (NONE, ASKING, NOTIFIED, EXITED, FAILED)
REPLAY_WINDOW = 1.0  # seconds after an adopted session's Attached (controld/supervisor.py)
MAX_TEXT = 256  # characters of a notification's text kept (the rest is dropped)

_BEL, _ESC, _CAN, _SUB = 0x07, 0x1B, 0x18, 0x1A
_GROUND, _ESCAPE, _OSC, _OSC_ESC, _STRING, _STRING_ESC = range(6)
_STRINGS = frozenset(b"PX^_")  # DCS, SOS, PM, APC: their bodies are not the terminal's
_GROUND_STOP = re.compile(rb"[\x07\x1b]")
_OSC_STOP = re.compile(rb"[\x07\x1b\x18\x1a]")
_STRING_STOP = _OSC_STOP


class Notices:
    """Finds BELs and notification OSCs in a byte stream fed in pieces."""

    def __init__(self):
        self._state = _GROUND
        self._osc = bytearray()  # the OSC being read, bounded by MAX_TEXT * 4 + 16

    def feed(self, data: bytes) -> list[str]:
        """The notices completed in ``data``: "bell", or "notification: TEXT"."""
        found: list[str] = []
        st = self._state
        i, n = 0, len(data)
        while i < n:
            # Runs of ordinary bytes are skipped by the regex engine, not byte by byte
            # in Python: an agent's output is mostly text.
            if st == _GROUND:
                m = _GROUND_STOP.search(data, i)
                if m is None:
                    break
                i = m.start()
            elif st == _OSC:
                m = _OSC_STOP.search(data, i)
                end = n if m is None else m.start()
                room = MAX_TEXT * 4 + 16 - len(self._osc)
                if room > 0:
                    self._osc += data[i:min(end, i + room)]
                if m is None:
                    break
                i = end
            elif st == _STRING:
                m = _STRING_STOP.search(data, i)
                if m is None:
                    break
                i = m.start()
            b = data[i]
            i += 1
            if st == _GROUND:
                if b == _BEL:
                    found.append("bell")
                else:  # ESC
                    st = _ESCAPE
            elif st == _ESCAPE:
                if b == 0x5D:  # ]
                    st = _OSC
                    self._osc.clear()
                elif b in _STRINGS:
                    st = _STRING
                elif b == _BEL:
                    found.append("bell")
                    st = _GROUND
                elif b != _ESC:
                    st = _GROUND
            elif st == _OSC:
                if b == _BEL:
                    self._osc_done(found)
                    st = _GROUND
                elif b == _ESC:
                    st = _OSC_ESC
                else:  # CAN, SUB: cancelled
                    st = _GROUND
            elif st == _OSC_ESC:
                # ESC \ ends it; any other ESC x ends it too (a DEC parser's osc_end)
                # and x is read as after an ESC.
                self._osc_done(found)
                st = _ESCAPE
                i -= 1
                if b == 0x5C:  # \
                    st = _GROUND
                    i += 1
            elif st == _STRING:
                st = _STRING_ESC if b == _ESC else _GROUND  # CAN, SUB, BEL end it
            elif st == _STRING_ESC:
                st = _GROUND if b == 0x5C else _STRING
        self._state = st
        return found

    def _osc_done(self, found: list[str]) -> None:
        text = _notification(bytes(self._osc))
        self._osc.clear()
        if text is not None:
            found.append(f"notification: {text}" if text else "notification")


def _notification(osc: bytes) -> Optional[str]:
    """The text of a notification OSC (without ``ESC ]`` and its terminator), or None."""
    code, _, rest = osc.partition(b";")
    if code == b"9":
        if re.match(rb"\d;", rest):  # ConEmu's 9;N;... (progress, sleep, ...): not one
            return None
        text = rest
    elif code == b"777":
        kind, _, rest = rest.partition(b";")
        if kind != b"notify":
            return None
        title, _, body = rest.partition(b";")
        text = b": ".join(p for p in (title, body) if p)
    elif code == b"99":
        _params, _, text = rest.partition(b";")
    else:
        return None
    shown = text.decode("utf-8", "replace")
    return "".join(c if c.isprintable() else "?" for c in shown)[:MAX_TEXT]


class Attention:
    """The attention state of one agent and its cause."""

    def __init__(self, patterns=()):
        self.set_patterns(patterns)
        self.state = NONE
        self.cause = "not seen yet"
        self.notices = Notices()
        self._idle_since_notice = False  # a busy period after this clears notified

    def set_patterns(self, patterns) -> None:
        """The agent's ``attention:`` patterns (checked by controld/config.py)."""
        self.patterns = [re.compile(p) for p in patterns]

    def _set(self, state: str, cause: str) -> Optional[tuple[str, str]]:
        if (state, cause) == (self.state, self.cause) or \
                (state == self.state and state == NONE):
            return None
        self.state, self.cause = state, cause
        return state, cause

    def output(self, data: bytes, replayed: bool = False) -> Optional[tuple[str, str]]:
        """Output arrived; ``replayed``: old output sent again to a new watch."""
        found = self.notices.feed(data)
        if not found or replayed or self.state in (EXITED, FAILED):
            return None
        self._idle_since_notice = False
        return self._set(NOTIFIED, found[-1])

    def busy(self) -> Optional[tuple[str, str]]:
        """A busy period began (output after the agent was idle)."""
        if self.state == ASKING or (self.state == NOTIFIED and self._idle_since_notice):
            return self._set(NONE, "output again")
        return None

    def idle(self, last_line: str, at_prompt: bool) -> Optional[tuple[str, str]]:
        """The agent went quiet after a busy period; ``last_line`` as Activity read it."""
        if self.state == NOTIFIED:
            self._idle_since_notice = True
            return None
        if self.state != NONE:
            return None
        shown = last_line.strip()[-80:]
        if self.patterns:
            for p in self.patterns:
                if p.search(last_line):
                    return self._set(ASKING, f"waiting for input: {shown!r} matches "
                                             f"{p.pattern!r}")
            return None
        if at_prompt:
            return self._set(ASKING, f"idle at a prompt: {shown!r}")
        return None

    def ended(self, exit_code, signal, how: str) -> Optional[tuple[str, str]]:
        """The agent's session ended (``how``: supervisor.describe_exit's words)."""
        if exit_code == 0 and signal is None:
            return self._set(EXITED, how)
        return self._set(FAILED, how)

    def failed(self, cause: str) -> Optional[tuple[str, str]]:
        """The agent could not be started."""
        return self._set(FAILED, cause)

    def clear(self, cause: str) -> Optional[tuple[str, str]]:
        """A new session of the agent, or its session stopped on request: whatever
        was, is over."""
        self._idle_since_notice = False
        self.notices = Notices()
        if self.state == NONE:
            return None
        self.state, self.cause = NONE, cause
        return NONE, cause

    def snapshot(self) -> dict:
        return {"attention": self.state, "attention_cause": self.cause}
