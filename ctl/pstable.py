"""The table `clowderctl ps` prints: one row a session, with its columns.

Apart from ctl/commands/ps.py because `clowderctl ps` is answered before the rest of
clowderctl is imported (ctl/quickps.py) and prints the same table: this imports only
time and ctl/text.py.
"""

import time

from .text import shown

COLUMNS = ("id", "name", "pid", "unit", "state", "exit", "size", "created")


def exit_text(s: dict) -> str:
    if s.get("ended_by"):  # "reboot": a session of a previous boot, its last screen kept
        return s["ended_by"]
    if s.get("signal") is not None:
        return f"sig{s['signal']}"
    return "" if s.get("exit_code") is None else str(s["exit_code"])


def oldest_first(sessions: list[dict]) -> list[dict]:
    """``sessions`` sorted as ps lists them (in place, and returned)."""
    sessions.sort(key=lambda s: s.get("created", 0))
    return sessions


def row(s: dict) -> tuple:
    # Escaped: a name from an old manifest or another host may hold controls.
    return tuple(shown(v) for v in (
        s["id"], s["name"], str(s["pid"] or "-"), s["unit"], s["state"], exit_text(s),
        f"{s['cols']}x{s['rows']}",
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["created"]))))


def print_table(rows: list[tuple]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
