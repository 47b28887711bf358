"""One user's many sessions and another user's saved screen (ptyhostd/statedir.py).

The host saves each session's record and last screen in its state directory, for the
next boot, within bounds shared by every user: a round every INTERVAL seconds makes
files for at most ROUND_SECONDS, and the directory holds at most $CLOWDER_STATE_BYTES.
Shared by session, alice's many sessions pushed bob aside twice: a round took the least
recently saved sessions first, so bob's file waited for every one of hers that changed
(a reboot then gives him back a screen a minute old or more); and past the cap the oldest ended
session's file went, bob's, though alice's files made the excess.  Now a round takes
users in turn, and past the cap files go only from users over an equal share of it.
"""

from __future__ import annotations

import os
import time

import clowder_wire as P
from conftest import wait_for
from ctl.client import Client
from hostile import environment
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)
from test_reboot import journal_problem, read_saved, saved_file, state_dir

from ptyhostd import statedir

# Alice's sessions: each prints LINES lines of 60 characters (a file of ~125 KB: a round
# writes at most ROUND_BUDGET, 1 MiB, so about eight of hers), then a line whenever
# TICKS grows.
CROWD = 120
LINES = 2000
TICKS = "/tmp/hostile-statedir-ticks"  # both users' sessions follow it
CAP = 200_000  # bytes: bob's one ended file and a part of alice's running ones
FILLERS = 15  # alice's sessions of ~17 KB files each: ~260 KB, past the cap


def _saved(h, sid: str, mark: bytes) -> bool:
    path = saved_file(h, sid)
    return os.path.exists(path) and mark in read_saved(path)[1]


def test_anothers_file_is_saved_in_the_next_round_beside_one_users_many(system_host):
    h = system_host
    with open(TICKS, "w") as f:
        f.write("tick 0\n")
    os.chmod(TICKS, 0o644)
    # Bob's session prints at every tick too, as an agent at work does: his file is in
    # the same rotation as hers.
    bobs = h.spawn("sh", "-c", f"echo BEFORE; exec tail -n 1 -f {TICKS}", user="bob",
                   cwd="/home/bob")
    with Client(h.socket, timeout=120) as c:
        argv = ["sh", "-c", f"yes \"$(printf %060d 0)\" | head -n {LINES}; "
                f"exec tail -n 1 -f {TICKS}"]
        sids = [c.request(P.Spawn(argv=argv, user="alice", cwd="/home/alice"),
                          P.SessionInfo).session["id"] for _ in range(CROWD)]
    try:
        wait_for(lambda: _saved(h, bobs, b"BEFORE"), 30, "bob's file, first saved")
        wait_for(lambda: all(os.path.exists(saved_file(h, sid)) for sid in sids), 600,
                 f"alice's {CROWD} files, first saved", interval=1)
        # From here every one of alice's sessions changes at every round: a line each
        # time the last one reached her sessions (the last of them to be spawned shows it).
        n = 0

        def tick() -> None:
            nonlocal n
            n += 1
            with open(TICKS, "a") as f:
                f.write(f"tick {n}\n")
            wait_for(lambda: f"tick {n}".encode() in h.backlog(sids[-1], user="alice"), 10,
                     f"alice's line {n} printed")
        began = time.monotonic()
        while time.monotonic() < began + 2 * statedir.INTERVAL:  # every file changes
            tick()
        with open(TICKS, "a") as f:
            f.write("MARK\n")
        wait_for(lambda: b"MARK" in h.backlog(bobs, user="bob"), 10, "bob's MARK printed")
        t0 = time.monotonic()
        while not _saved(h, bobs, b"MARK") and time.monotonic() < t0 + 120:
            tick()
        took = time.monotonic() - t0
    finally:
        for sid in sids:
            h.ctl("kill", sid, user="alice", check=False)
        os.unlink(TICKS)
    print(f"\nbob's MARK saved {took:.1f} s after it was printed, beside alice's "
          f"{CROWD} sessions printing")
    assert _saved(h, bobs, b"MARK"), "bob's MARK was not saved within 120 s"
    assert took < 3 * statedir.INTERVAL, \
        f"bob's file was saved {took:.1f} s after his output, behind alice's sessions"


def test_past_the_cap_another_users_files_make_no_one_elses_go(system_host):
    h = system_host
    with environment(system_host, CLOWDER_STATE_BYTES=CAP):
        since = time.time()
        bobs = h.spawn("seq", "100000", "104000", user="bob", cwd="/home/bob")
        wait_for(lambda: os.path.exists(saved_file(h, bobs))
                 and read_saved(saved_file(h, bobs))[0]["state"] == "exited", 30,
                 "bob's ended session's file")
        sids = [h.spawn("sh", "-c", "seq 100000 104000; exec sleep 100000", user="alice",
                        cwd="/home/alice") for _ in range(FILLERS)]
        wait_for(lambda: all(os.path.exists(saved_file(h, sid)) for sid in sids), 60,
                 f"alice's {FILLERS} files")
        total = sum(os.path.getsize(os.path.join(state_dir(h), statedir.SUBDIR, name))
                    for name in os.listdir(os.path.join(state_dir(h), statedir.SUBDIR)))
        assert total > CAP, f"the files take {total} bytes, not past the cap"
        over = wait_for(lambda: journal_problem(h, "state-over-cap", since), 30,
                        "the host to report the cap's excess")
        assert os.path.exists(saved_file(h, bobs)), \
            "bob's file went for the cap alice's running sessions' files passed"
        assert "running sessions' files" in over, over
        for sid in sids:
            h.ctl("kill", sid, user="alice")
