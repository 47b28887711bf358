"""One user's session records cannot lengthen everyone's restart (system scope).

Every start of the host parses the whole manifest before it serves anyone, and one
user's 1,024 sessions of ~35 KB records (a command line at MAX_ARGV_BYTES, a long name)
made ~36 MB of it: ~60 ms more of every user's blackout.  A non-root user's records,
running and ended, are held within ``CLOWDER_MAX_RECORD_BYTES_PER_USER``
(ptyhostd/recordbudget.py): a spawn or rename past it is refused before anything
starts, with the numbers and what to do, while other users and root go on; removing
ended sessions makes room again.  On the code before, every one of alice's spawns ran.
"""

from __future__ import annotations

import datetime
import pwd
import re

import pytest

from conftest import wait_for
from hostile import environment
from ptyhostd import recordbudget
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)
from test_hostile_capacity import refused_lines
from test_hostile_listing import EMOJI, LONG

BUDGET = 300_000  # ~8 of alice's records of ~33 KB (at least recordbudget.LARGEST)
TRIES = 20  # long spawns alice tries: past the budget well before, never past it before
HOME = "/home/alice"
FILL = ["sleep", "100000", "--"]  # its last argument padded to fill the room left
TOOK = re.compile(r"take (\d+) bytes of the host's manifest and (.+) would add (\d+): "
                  r"past the (\d+)")


@pytest.fixture
def budget_host(system_host):  # noqa: F811
    assert BUDGET >= recordbudget.LARGEST
    with environment(system_host, **{recordbudget.ENV: BUDGET}) as h:
        yield h


def _names(h, user: str) -> dict[str, str]:
    return {s["name"]: sid for sid, s in h.ps(user=user).items()}


def _refused(h, *args) -> tuple[int, str, int]:
    """Run an alice's clowderctl command that must be refused for her budget, and check
    what she is told; (the bytes her records take, what was added, how many)."""
    proc = h.ctl(*args, user="alice", check=False)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode != 0, f"alice's `{' '.join(args)[:80]}` was not refused"
    assert "Traceback" not in err and "internal error" not in err, err
    for said in (f"uid {pwd.getpwnam('alice').pw_uid}'s session records",
                 f"{recordbudget.ENV}={BUDGET}", "--max-record-bytes-per-user",
                 "clowderctl rm", "shorter command line or name"):
        assert said in err, (said, err)
    took = TOOK.search(err)
    assert took, err
    held, what, adding, limit = int(took[1]), took[2], int(took[3]), int(took[4])
    assert limit == BUDGET and held <= BUDGET < held + adding, err
    return held, what, adding


def test_one_users_records_are_budgeted_others_are_not(budget_host):
    h = budget_host
    spawn = ["spawn", "--cwd", HOME]
    since = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    mine: list[str] = []
    for i in range(TRIES):
        proc = h.ctl(*spawn, "--name", f"long-{i}", "--", *LONG, user="alice", check=False)
        if proc.returncode != 0:
            break
        mine.append(proc.stdout.decode().strip())
    assert 0 < len(mine) < TRIES, f"alice spawned {len(mine)} sessions of ~33 KB records " \
        f"within a budget of {BUDGET} bytes"
    # Refused before anything started: no unit, not listed; the numbers say why.
    units = sorted(h.session_units())
    held, what, adding = _refused(h, *spawn, "--name", "refused", "--", *LONG)
    assert what == "this session's record"
    assert adding == recordbudget.new_record("refused", LONG, HOME), adding
    assert sorted(h.session_units()) == units
    assert "refused" not in _names(h, "alice") and len(h.ps(user="alice")) == len(mine)
    lines = wait_for(lambda: refused_lines(since, "record-limit"), 10,
                     "the refusal's line in the journal")
    assert lines[0]["MESSAGE"].startswith("spawn refused: uid "), lines[0]
    assert lines[0]["CLOWDER_EVENT"] == "spawn-refused", lines[0]

    # Bob's own records are his own: his long spawn runs.
    bobs = h.spawn(*LONG, user="bob", cwd="/home/bob", name="bobs-long")
    assert h.ps(user="bob")[bobs]["state"] == "running"

    # What is left of her room, filled (a name of 200 emoji and a padded argument,
    # counted as the host counts them); then a rename that makes a name longer is
    # refused, and one that makes it shorter is not.
    room = BUDGET - held
    name = EMOJI * 200
    pad = room - recordbudget.new_record(name, FILL + [""], HOME)
    assert 0 <= pad < 32_000, pad
    h.spawn(*FILL, "y" * pad, user="alice", cwd=HOME, name=name)
    _, what, _ = _refused(h, "rename", mine[0], EMOJI * 150)
    assert what == "the new name"
    assert h.ps(user="alice")[mine[0]]["name"] == "long-0"
    h.ctl("rename", mine[0], "l0", user="alice")
    assert h.ps(user="alice")[mine[0]]["name"] == "l0"

    # Ended sessions keep their records, so a kill alone frees nothing; removing
    # them does, and she spawns again.
    for sid in mine[:2]:
        h.ctl("kill", sid, user="alice")
    wait_for(lambda: all(h.ps(user="alice")[sid]["state"] != "running" for sid in mine[:2]),
             10, "alice's two killed sessions to end")
    _refused(h, *spawn, "--name", "after-kill", "--", *LONG)
    for sid in mine[:2]:
        h.ctl("rm", sid, user="alice")
    again = h.ctl(*spawn, "--name", "again", "--", *LONG, user="alice").stdout.decode().strip()
    assert h.ps(user="alice")[again]["state"] == "running"

    # Root is not budgeted, on its own behalf or alice's (as for the session limit).
    for_her = h.ctl("spawn", "--user", "alice", "--cwd", "/", "--name", "roots", "--",
                    *LONG).stdout.decode().strip()
    assert h.ps(user="alice")[for_her]["state"] == "running"
