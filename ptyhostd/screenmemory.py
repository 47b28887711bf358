"""The host-wide budget for the terminal models' scrollback, shared out among them.

A ghostty model (screen_ghostty.py) keeps what scrolled off its screen as cells, up to a
byte limit of its own (GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES), and every session's
model follows its output all the time: with the limit fixed at 16 MiB, one user's 1,024
sessions printing coloured text could hold ~10-16 GiB.  So the limit is a share of one
budget (``ptyhostd --screen-memory``, $CLOWDER_SCREEN_MEMORY): ``budget / models``,
rounded down to a power of two between ``FLOOR`` and the engine's ceiling.  Rounding to
powers of two keeps ``models x share <= budget`` (until the floor wins) and means the
share changes a handful of times as sessions come and go, not at every spawn.

Who does what: a model gets the current share when it is made (in the screen pool);
the share changes as models are counted (``note_model``, ``recount``), and each model
takes a new one in the screen pool, under its session's lock (``Session.fit_screen``,
and ``screenwork.run_plan`` before each feed), never on the event loop.  The measured
costs behind the figures are in docs/design.md "Screen memory" (bench/screen_memory.py).
"""

from __future__ import annotations

import logging
import threading
import weakref

log = logging.getLogger("ptyhostd")

MiB = 1 << 20
# A share never goes under this: 2 MiB of cells keep ~800 lines of plain text at 200
# columns, ~1,450 at 80 (bench/screen_memory.py), more than ``attach --history``'s 500;
# coloured text keeps fewer (~330 lines at 200 columns).  It is less than the session's
# own ring (4 MiB by default), which the host keeps for every session anyway.
FLOOR = 2 * MiB
CEILING = 16 * MiB  # screen_ghostty.SCROLLBACK_BYTES: what one model may ever keep
DEFAULT_FRACTION = 16  # the default budget: MemTotal / 16 ...
DEFAULT_CAP = 2 << 30  # ... at most 2 GiB (16 MiB of scrollback for 128 sessions)
DEFAULT_MIN = 64 * MiB

_lock = threading.Lock()  # models are made in the pool's threads, counted on the loop
_models: "weakref.WeakSet" = weakref.WeakSet()
budget = 0  # 0 until configured: every model keeps the ceiling (bench, unit tests)
share = CEILING
generation = 0  # bumped at each change of ``share``: the host then walks the models


def default_budget(meminfo: str = "/proc/meminfo") -> int:
    """MemTotal / DEFAULT_FRACTION, within [DEFAULT_MIN, DEFAULT_CAP]."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    return max(DEFAULT_MIN, min(DEFAULT_CAP, total // DEFAULT_FRACTION))
    except (OSError, ValueError):
        pass
    return DEFAULT_MIN


def configure(total: int) -> None:
    """Set the budget (bytes), at start."""
    global budget
    budget = total
    recount()


def share_for(count: int, total: int) -> int:
    """The scrollback bytes each of ``count`` models may keep out of ``total``."""
    if total <= 0:
        return CEILING
    fair = total // max(count, 1)
    step = CEILING
    while step > FLOOR and step > fair:
        step //= 2
    return step


def note_model(model) -> int:
    """Count a new model (one that has ``set_scrollback_bytes``); the share it gets."""
    with _lock:
        _models.add(model)
    return recount()


def recount() -> int:
    """The share for the models alive now; a change is logged once and bumps
    ``generation`` (models freed with their session drop out of the count by
    themselves)."""
    global share, generation
    with _lock:
        count = len(_models)
        new = share_for(count, budget)
        if new == share:
            return share
        share, generation = new, generation + 1
    log.info("screen memory: each session's scrollback may now keep %d MiB (%d models, "
             "budget %d MiB)", new // MiB, count, budget // MiB,
             extra={"CLOWDER_CAUSE": "screen-memory", "CLOWDER_SHARE": new,
                    "CLOWDER_MODELS": count, "CLOWDER_BUDGET": budget})
    return new


def fit(model) -> None:
    """Give ``model`` the current share if it has another (in the screen pool, with the
    model's session's lock held: ghostty trims its scrollback at once)."""
    if getattr(model, "scrollback_bytes", share) != share:
        model.set_scrollback_bytes(share)
