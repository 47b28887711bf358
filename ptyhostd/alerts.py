"""Alerts: what a program's output asks of the person at the terminal, found in the
byte stream: a bell (BEL outside OSC and DCS strings) and a desktop notification (OSC 9,
OSC 777 ``notify``, OSC 99, kitty's).

It runs on the byte path, on every chunk the pty gives (sessionevents.py), so a chunk
with neither BEL nor ESC costs two memchr scans and nothing else; a chunk with escapes
one C-level regex scan for string introducers (``ESC ]``, ``ESC P``, ``ESC X``, ``ESC ^``,
``ESC _``) and a memchr per string for its end.  A sequence split across reads is held in
the state (an ESC at the end of a chunk, an OSC's text so far, capped at OSC_KEEP).
No VT parsing beyond that: CSI sequences cannot hold BEL or start a string.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from typing import Optional

# States between chunks.
GROUND, ESC, OSC, OSC_ESC, STRING, STRING_ESC = range(6)

OSC_KEEP = 4096  # bytes of one OSC's text kept; the rest is skipped up to its end
TEXT_CAP = 512  # characters of a notification's title or body shown
# Strings parsed in one chunk before the rest of it is skipped to its last introducer:
# a program printing tiny OSCs in a loop would otherwise cost a Python turn per few bytes.
MAX_STRINGS = 256

_INTRO = re.compile(rb"\x1b[]PX^_]")
_LAST_INTROS = (b"\x1b]", b"\x1bP", b"\x1bX", b"\x1b^", b"\x1b_")
# ConEmu's and Windows Terminal's OSC 9 with a number first (9;4 is a progress bar) are
# not notifications.
_CONEMU = re.compile(rb"[0-9]+(;|$)")
_BEL, _ESC, _ST_FINAL = 0x07, 0x1B, 0x5C  # BEL, ESC, and the "\" of ST (ESC \)


def clean(raw: bytes) -> str:
    """A notification's text, as shown: UTF-8 (bad bytes replaced), control and format
    characters removed (they would move the cursor or reorder the text of a journal line
    or a terminal it is printed in), capped at TEXT_CAP characters."""
    text = raw[:TEXT_CAP * 4].decode("utf-8", "replace")
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf", "Cs"))
    return text[:TEXT_CAP]


class Alerts:
    """The scanner of one session's output.  ``feed`` returns the alerts in a chunk, as
    (kind, fields): ("bell", {}) at most once per chunk, ("notification", {"source",
    "title", "body"})."""

    def __init__(self):
        self.state = GROUND
        self._osc = bytearray()
        self._kitty: Optional[dict] = None  # an OSC 99 notification sent in chunks (d=0)

    def feed(self, d: bytes) -> list:
        state = self.state
        if state == GROUND and _ESC not in d and _BEL not in d:
            return []  # the flood path: two memchr
        out: list = []
        bell = False
        strings = 0
        i, n = 0, len(d)
        while i < n:
            if state == GROUND:
                m = _INTRO.search(d, i)
                end = m.start() if m else n
                if not bell and d.find(b"\x07", i, end) >= 0:
                    bell = True
                    out.append(("bell", {}))
                if m is None:
                    if d[n - 1] == _ESC:
                        state = ESC  # maybe the start of a string, split
                    break
                strings += 1
                if strings > MAX_STRINGS:
                    # Only the last string can still be open at the chunk's end.
                    last = max(d.rfind(intro, i) for intro in _LAST_INTROS)
                    m = _INTRO.match(d, last)
                    strings = -n  # no second skip
                i = m.end()
                state = OSC if d[i - 1] == 0x5D else STRING
                self._osc.clear()
            elif state == ESC:
                c = d[i]
                if c == 0x5D:
                    state, i = OSC, i + 1
                    self._osc.clear()
                elif c in b"PX^_":
                    state, i = STRING, i + 1
                else:
                    state = GROUND  # a CSI or another escape: ground reads it
            elif state == OSC:
                b, e = d.find(b"\x07", i), d.find(b"\x1b", i)
                j = min(x for x in (b, e, n) if x >= 0)
                if len(self._osc) < OSC_KEEP:
                    self._osc += d[i:min(j, i + OSC_KEEP - len(self._osc))]
                if j == n:
                    break
                if d[j] == _BEL:
                    self._done(out)
                    state, i = GROUND, j + 1
                elif j + 1 < n:
                    self._done(out)  # ESC \ ends it; any other ESC cuts it short
                    state, i = GROUND, j + 2 if d[j + 1] == _ST_FINAL else j
                else:
                    state = OSC_ESC
                    break
            elif state == OSC_ESC:
                self._done(out)
                state, i = GROUND, i + 1 if d[i] == _ST_FINAL else i
            elif state == STRING:
                # DCS, SOS, PM, APC: end at ST; a BEL inside is data.  ESC ESC is an
                # escaped ESC (tmux's passthrough), not the start of an ST.
                j = d.find(b"\x1b", i)
                if j < 0:
                    break
                if j + 1 == n:
                    state = STRING_ESC
                    break
                c = d[j + 1]
                if c == _ST_FINAL:
                    state = GROUND
                i = j + 2
            else:  # STRING_ESC
                state = GROUND if d[i] == _ST_FINAL else STRING
                i += 1
        self.state = state
        return out

    def _done(self, out: list) -> None:
        """An OSC ended: a notification if it is one."""
        code, _, rest = bytes(self._osc).partition(b";")
        self._osc.clear()
        if code == b"9" and rest and not _CONEMU.match(rest):
            out.append(("notification", {"source": "osc9", "title": "", "body": clean(rest)}))
        elif code == b"777":
            parts = rest.split(b";", 2)
            if parts[0] == b"notify":
                title = parts[1] if len(parts) > 1 else b""
                body = parts[2] if len(parts) > 2 else b""
                out.append(("notification", {"source": "osc777", "title": clean(title),
                                             "body": clean(body)}))
        elif code == b"99":
            self._kitty_chunk(rest, out)

    def _kitty_chunk(self, rest: bytes, out: list) -> None:
        """OSC 99 ; metadata ; payload: ``p=title|body`` (default title), ``d=0`` more
        chunks follow, ``e=1`` base64, ``i=ID`` ties chunks; other payload kinds (icons,
        buttons, queries) are not shown."""
        meta, _, payload = rest.partition(b";")
        keys = {}
        for item in meta.split(b":"):
            k, _, v = item.partition(b"=")
            keys[k] = v
        if keys.get(b"e") == b"1":
            try:
                payload = base64.b64decode(payload, validate=False)
            except ValueError:
                return
        part = keys.get(b"p", b"title")
        pending = self._kitty
        if pending is None or pending["id"] != keys.get(b"i", b""):
            pending = {"id": keys.get(b"i", b""), "title": b"", "body": b""}
        if part in (b"title", b"body") and len(pending[part.decode()]) < OSC_KEEP:
            pending[part.decode()] += payload[:OSC_KEEP]
        if keys.get(b"d", b"1") == b"0":
            self._kitty = pending
            return
        self._kitty = None
        if pending["title"] or pending["body"]:
            out.append(("notification", {"source": "osc99", "title": clean(pending["title"]),
                                         "body": clean(pending["body"])}))
