"""The budget on one user's manifest records: the bytes a non-root user's sessions,
running and ended together, may take in the manifest.

Every start of the host (a restart, a crash's recovery, a hand-off) reads and parses
the manifest whole before it serves anyone, so one user's records lengthen every
user's blackout: 1,024 sessions of ~35 KB records parsed in ~50-60 ms (docs/design.md
"One user's records").  The host sums a user's encoded records (Session.record_json,
kept between changes) and asks here before a spawn or a rename would add to them.
Arithmetic and wording only, no state.
"""

from __future__ import annotations

import json
from typing import Optional

import clowder_wire as protocol

DEFAULT = 4 << 20  # bytes: ~6 ms of a start's parse (docs/design.md)

# A record's fields besides its name, argv and cwd at their longest (keys, id, uid,
# sizes, the two times, state, pid, how it ended, flags): ~250 bytes, rounded up, so
# that a record counted at spawn does not outgrow its count when it ends.
FIXED = 512

# The longest record a spawn can make: JSON escapes a control character as six bytes
# (``\u0001``), so a command line and a working directory within their limits take up
# to six times their bytes, and a name of 200 characters outside the BMP 12 bytes each
# (two ``\uXXXX`` escapes).  The budget may not be set below it.
LARGEST = 6 * protocol.MAX_ARGV_BYTES + 6 * protocol.MAX_CWD_BYTES + 12 * 200 + FIXED

ENV = "CLOWDER_MAX_RECORD_BYTES_PER_USER"


def new_record(name: str, argv: list[str], cwd: Optional[str]) -> int:
    """At most the bytes of the record of a session spawned with these, through its end
    (the manifest's ASCII JSON: Session.record_json)."""
    return len(json.dumps([name, argv, cwd])) + FIXED


def renamed(old: str, new: str) -> int:
    """How many bytes renaming a session from ``old`` to ``new`` adds to its record
    (negative: it frees some)."""
    return len(json.dumps(new)) - len(json.dumps(old))


def refusal(uid: int, held: int, adding: int, limit: int, what: str) -> Optional[str]:
    """Why adding ``adding`` bytes (``what``: "this session's record", "the new name")
    to the ``held`` bytes of ``uid``'s records must be refused, or None.  Adding nothing
    is never refused, even past the limit: records adopted at start are all kept, and
    a user over the limit (it was lowered) may still end, remove and shorten."""
    if adding <= 0 or held + adding <= limit:
        return None
    return (f"uid {uid}'s session records take {held} bytes of the host's manifest and "
            f"{what} would add {adding}: past the {limit} one user's may take "
            f"(--max-record-bytes-per-user / {ENV}={limit} on "
            f"clowder-ptyhost.service; every start of the host parses them all before it "
            f"serves anyone); remove ended sessions (`clowderctl rm ID`), or use a "
            f"shorter command line or name (a long script or payload goes in a file)")
