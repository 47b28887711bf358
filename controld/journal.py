"""An agent's lifecycle events read back from the journal, for `clowderctl logs`.

Group members cannot read the system journal, so clowder-control (which can) answers a
GetLogs of a user who may drive the agent (Supervisor.may_drive) with that agent's
entries only.  Only entries clowder-control itself wrote are read: the match includes
``_UID`` (set by journald from the sender's credentials, so another user's program
cannot forge one) and ``SYSLOG_IDENTIFIER``; each entry is cut down to the fields below.
An answer is bounded: MAX_LOG_LINES entries, MAX_BYTES of them, messages cut at
MAX_MESSAGE characters.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from collections import deque
from typing import Optional

from systemd import journal

from clowder_wire import MAX_LOG_LINES

# What a member is shown of each entry (journalctl -o json's names).
FIELDS = ("MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "_PID", "MESSAGE_ID",
          "CLOWDER_AGENT", "CLOWDER_SESSION", "CLOWDER_CAUSE", "CLOWDER_EVENT")
MAX_MESSAGE = 4096
MAX_BYTES = 512 * 1024  # of JSON: an answer stays well inside one frame


def _plain(value) -> str:
    """A converted journal value back as journalctl -o json writes it."""
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _entry(raw: dict) -> dict:
    out = {"__CURSOR": raw["__CURSOR"]}
    when = raw.get("__REALTIME_TIMESTAMP")
    if isinstance(when, datetime.datetime):
        out["__REALTIME_TIMESTAMP"] = str(round(when.timestamp() * 1_000_000))
    for name in FIELDS:
        if name in raw:
            out[name] = _plain(raw[name])[:MAX_MESSAGE]
    return out


def read(agent: str, lines: int, since: Optional[int] = None, after: str = "",
         uid: Optional[int] = None) -> tuple[list[dict], str]:
    """(entries oldest first, the cursor to continue from) for ``agent``: the newest
    ``lines`` at or after ``since``, or the first ``lines`` after cursor ``after``.
    Blocking: run it in a thread."""
    lines = max(0, min(lines, MAX_LOG_LINES))
    reader = journal.Reader()
    try:
        reader.add_match(CLOWDER_AGENT=agent, SYSLOG_IDENTIFIER="clowder-control",
                         _UID=str(os.getuid() if uid is None else uid))
        kept: deque = deque(maxlen=lines)
        if after:
            reader.seek_cursor(after)
            raw = reader.get_next()
            if raw and not reader.test_cursor(after):  # it was rotated away: the next one
                kept.append(_entry(raw))
            while len(kept) < lines:
                raw = reader.get_next()
                if not raw:
                    break
                kept.append(_entry(raw))
        else:
            if since is not None:
                reader.seek_realtime(float(since))  # an int would be microseconds
            else:
                reader.seek_head()
            # The newest `lines`: walking back from the tail would not honour `since`.
            while True:
                raw = reader.get_next()
                if not raw:
                    break
                when = raw.get("__REALTIME_TIMESTAMP")
                if since is not None and isinstance(when, datetime.datetime) \
                        and when.timestamp() < since:
                    continue  # the seek lands on the nearest entry, maybe an earlier one
                kept.append(_entry(raw))
        entries = list(kept)
    finally:
        reader.close()
    # Newest first within the byte budget.
    size, cut = 0, len(entries)
    for i in range(len(entries) - 1, -1, -1):
        size += len(json.dumps(entries[i]))
        if size > MAX_BYTES:
            break
        cut = i
    entries = entries[cut:]
    return entries, (entries[-1]["__CURSOR"] if entries else after)
