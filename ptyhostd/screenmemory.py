"""The host-wide budget for the terminal models' scrollback, shared out among users.

A ghostty model (screen_ghostty.py) keeps what scrolled off its screen as cells, up to a
byte limit of its own (GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES), and every session's
model follows its output all the time: with the limit fixed at 16 MiB, one user's 1,024
sessions printing coloured text could hold ~10-16 GiB.  So the limit is a share of one
budget (``ptyhostd --screen-memory``, $CLOWDER_SCREEN_MEMORY), split first among the
users who have models, then among each user's models (``shares_for``): one user's many
sessions shrink their own history, never another user's.  A user's share is rounded down
to a power of two between ``FLOOR`` and the engine's ceiling: that keeps
``models x share`` within the user's part (until the floor wins), and means a share
changes a handful of times as sessions come and go, not at every spawn.

Who does what: a model gets its user's share when it is made (in the screen pool); the
shares change as models are counted (``note_model``, ``recount``), and each model takes
a new one in the screen pool, under its session's lock (``Session.fit_screen``, and
``screenwork.run_plan`` before each feed), never on the event loop.  The measured costs
behind the figures are in docs/design.md "Screen memory" (bench/screen_memory.py).
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
_models: "dict[int, weakref.WeakSet]" = {}  # uid -> that user's models
budget = 0  # 0 until configured: every model keeps the ceiling (bench, unit tests)
shares: dict[int, int] = {}  # uid -> what each of that user's models may keep
generation = 0  # bumped at each change of a share: the host then walks the models


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


def shares_for(counts: "dict[int, int]", total: int) -> "dict[int, int]":
    """Each user's share (what each of their models may keep), ``counts`` being how many
    models each uid has.

    The budget is split among users first, then among each user's models, so one
    user's thousand sessions shrink only their own history, not another's: every user
    may use ``total / users``, and what a user with few models leaves (at most the
    ceiling a model) goes to the others in equal parts (water-filling, smallest need
    first)."""
    if total <= 0:
        return {uid: CEILING for uid in counts}
    left, users, out = total, len(counts), {}
    for uid, count in sorted(counts.items(), key=lambda kv: kv[1]):
        given = min(count * CEILING, left // users)
        out[uid] = share_for(count, given)
        left, users = left - given, users - 1
    return out


def share_of(uid: "int | None") -> int:
    """What a model of ``uid`` may keep now (the ceiling for a model of no session's)."""
    return CEILING if uid is None else shares.get(uid, CEILING)


def note_model(model, uid: "int | None") -> int:
    """Count a new model (one that has ``set_scrollback_bytes``) as ``uid``'s, and fit
    it; the share it got.  A model of no session's (the engine's warm-up, the hand-off's
    check) is not counted: it is freed at once."""
    model.memory_uid = uid
    if uid is not None:
        with _lock:
            _models.setdefault(uid, weakref.WeakSet()).add(model)
        recount()
    fit(model)
    return share_of(uid)


def recount() -> "dict[int, int]":
    """The shares for the models alive now; each change is logged once and bumps
    ``generation`` (models freed with their session drop out of the count by
    themselves)."""
    global shares, generation
    with _lock:
        counts = {uid: len(ms) for uid, ms in _models.items() if len(ms)}
        for uid in [u for u in _models if u not in counts]:
            del _models[uid]
        new = shares_for(counts, budget)
        old = shares
        if new == old:
            return shares
        shares, generation = new, generation + 1
    for uid, share in new.items():
        if old.get(uid, CEILING) != share:
            log.info("screen memory: each of uid %d's %d sessions may now keep %d MiB of "
                     "scrollback (%d users, budget %d MiB)", uid, counts[uid], share // MiB,
                     len(counts), budget // MiB,
                     extra={"CLOWDER_CAUSE": "screen-memory", "CLOWDER_SHARE": share,
                            "CLOWDER_UID": uid, "CLOWDER_MODELS": counts[uid],
                            "CLOWDER_USERS": len(counts), "CLOWDER_BUDGET": budget})
    return new


def misfit(model) -> bool:
    """Whether ``model`` keeps another share than its user's now."""
    return getattr(model, "scrollback_bytes", None) not in (
        None, share_of(getattr(model, "memory_uid", None)))


def fit(model) -> None:
    """Give ``model`` its user's current share if it has another (in the screen pool,
    with the model's session's lock held: ghostty trims its scrollback at once)."""
    if misfit(model):
        model.set_scrollback_bytes(share_of(getattr(model, "memory_uid", None)))
