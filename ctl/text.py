"""Text from the wire made safe to print: what a terminal would act on is shown escaped.

Session names are checked by the host (ptyhostd.spawn._check_name), but an old manifest,
another host's version, an agent's configuration or a program's argv can still hold
characters that move the cursor, retitle the window, reorder a line (bidi overrides) or
hide text; clowderctl prints every such field through ``shown``.
"""

from __future__ import annotations

import unicodedata

# Controls (C0, DEL, C1), format characters (bidi, zero-width), surrogates, separators.
_UNSHOWABLE = ("Cc", "Cf", "Cs", "Zl", "Zp")


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def shown(value, lines: bool = False) -> str:
    """``value`` as text, with every character a terminal would act on escaped; with
    ``lines`` (a message), newlines and tabs are kept."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text  # the common case: nothing to look at per character
    keep = "\n\t" if lines else ""
    return "".join(_escape(c) if unicodedata.category(c) in _UNSHOWABLE and c not in keep
                   else c for c in text)
