"""The detach key of an attach, found in the keys typed whatever their encoding.

A terminal sends Ctrl-\\ as the byte 0x1c, but once the program in the session asked for
a richer keyboard protocol it sends an escape sequence instead: the kitty keyboard
protocol's ``CSI 92 ; 5 u`` (with its alternate-key and event-type fields,
``CSI 92:124 ; 5:1 u``; xterm's formatOtherKeys=1 is the same form), or xterm's
modifyOtherKeys ``CSI 27 ; 5 ; 92 ~``.  All of them detach.  A sequence cut across two
reads is held back until it is complete (a terminal writes one key at once, so the rest
follows at once); a lone ESC at the end of a read only briefly (it is the Escape key).

Pressing the key twice sends it once to the program, for a nested attach (as tmux's
prefix key): a press therefore waits ``DOUBLE_PRESS`` seconds for a second one before it
detaches; anything else typed in that time detaches at once.
"""

import re

DOUBLE_PRESS = 0.4
# How long the start of an escape sequence is held back waiting for its end: a CSI
# begun is finished by the terminal at once (the hold only bounds a stray one); a lone
# ESC is most likely the Escape key, which must not lag (tmux's escape-time is 10 ms).
HOLD_CSI = 1.0
HOLD_ESC = 0.01
# The longest unfinished sequence held: a key's report is far shorter, so a longer one
# (a paste of "ESC[" and digits) goes straight through instead of piling up here.
MAX_HELD = 64

# Kitty keyboard protocol modifier bits (the field is 1 + these): shift 1, alt 2,
# ctrl 4, super 8, hyper 16, meta 32; caps lock 64 and num lock 128 do not change a key.
_CTRL = 4
_LOCKS = 64 | 128

# A CSI sequence: parameters, intermediates, final byte.
_CSI = re.compile(rb"\x1b\[([0-?]*)([ -/]*)([@-~])")
_CSI_START = re.compile(rb"\x1b(\[[0-?]*[ -/]*)?\Z")


def parse_key(text: str) -> int:
    """The byte of a key written ^X (a control key) or as one character."""
    if len(text) == 2 and text[0] == "^" and 0x3f <= ord(text[1].upper()) <= 0x5f:
        return ord(text[1].upper()) ^ 0x40
    if len(text) == 1:
        return ord(text)
    raise ValueError(f"invalid detach key {text!r}: use ^X, e.g. ^]")


class DetachKey:
    """Feed it what stdin gives; it says what goes to the session and when to detach."""

    def __init__(self, byte: int):
        self.byte = byte
        if byte < 0x20:  # Ctrl-<char>: kitty names the key by the char, letters in lower case
            self.code, self.mods = ord(chr(byte ^ 0x40).lower()), _CTRL
        else:
            self.code, self.mods = byte, 0
        self.held = b""  # the start of an escape sequence, kept for the next read
        self.held_until = 0.0
        self.armed_at = None  # when a first press was seen (waiting for a second)
        self.first = b""  # that press, as it was encoded

    def deadline(self) -> float | None:
        """When ``expire`` must be called if nothing is typed before."""
        times = [t for t in (self.held and self.held_until,
                             self.armed_at is not None and self.armed_at + DOUBLE_PRESS)
                 if t]
        return min(times) if times else None

    def expire(self, now: float) -> tuple[bytes, bool]:
        """Time passed without input: let held bytes go; a lone press detaches."""
        out = b""
        if self.held and now >= self.held_until:
            out, self.held = self.held, b""
            if self.armed_at is not None:
                return b"", True  # typed after the key: detach, as for any other key
        if self.armed_at is not None and now >= self.armed_at + DOUBLE_PRESS:
            return out, True
        return out, False

    def feed(self, data: bytes, now: float) -> tuple[bytes, bool]:
        """Bytes read from the terminal: (what to send to the session, whether to detach)."""
        data, self.held = self.held + data, b""
        out = bytearray()
        i = 0
        while i < len(data):
            kind, end = self._token(data, i)
            if kind == "partial":
                self.held = data[i:]
                self.held_until = now + (HOLD_ESC if self.held == b"\x1b" else HOLD_CSI)
                break
            if kind == "ignore":  # the key's release or repeat: part of a press seen
                i = end
                continue
            if self.armed_at is not None:
                if kind != "press":
                    return bytes(out), True  # something else after the key: detach now
                out += self.first  # the second press: one key through, not a detach
                self.armed_at, self.first = None, b""
            elif kind == "press":
                self.armed_at, self.first = now, data[i:end]
            else:
                out += data[i:end]
            i = end
        return bytes(out), False

    def _token(self, data: bytes, i: int) -> tuple[str, int]:
        """What starts at ``data[i]``: a press of the key, its release, other, partial."""
        b = data[i]
        if b == self.byte:
            return "press", i + 1
        if b != 0x1b:
            j = data.find(b"\x1b", i)
            k = data.find(bytes([self.byte]), i)
            ends = [x for x in (j, k) if x > i]
            return "other", min(ends) if ends else len(data)
        m = _CSI.match(data, i)
        if m is None:
            if len(data) - i <= MAX_HELD and _CSI_START.match(data, i):
                return "partial", len(data)
            return "other", i + 1
        return self._csi(m.group(1), m.group(2), m.group(3)), m.end()

    def _csi(self, params: bytes, inter: bytes, final: bytes) -> str:
        """Whether a whole CSI sequence is this key (kitty or modifyOtherKeys form)."""
        if inter:
            return "other"
        fields = params.split(b";")
        try:
            if final == b"u" and fields[0][:1].isdigit():
                keys = [int(k) if k else 0 for k in fields[0].split(b":")]
                mod_event = fields[1].split(b":") if len(fields) > 1 else [b"1"]
                mods = int(mod_event[0] or 1) - 1
                event = int(mod_event[1] or 1) if len(mod_event) > 1 else 1
                # The key itself, or (third field) the key at its place on a US layout.
                if self.code not in (keys[0], keys[2] if len(keys) > 2 else None):
                    return "other"
            elif final == b"~" and len(fields) == 3 and fields[0] == b"27":
                mods, event = int(fields[1] or 1) - 1, 1
                if int(fields[2]) != self.code and int(fields[2]) != self.byte:
                    return "other"
            else:
                return "other"
        except ValueError:
            return "other"
        if mods & ~_LOCKS != self.mods:
            return "other"
        return "press" if event == 1 else "ignore"
