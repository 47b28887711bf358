"""One user cannot exhaust the PTY host for everyone (system scope): a non-root user's
running sessions are capped (``CLOWDER_MAX_SESSIONS_PER_USER``); past the cap that user
is refused clearly while other users and root still spawn, and the journal gets one line
about it every 10 s, not one a refusal."""

from __future__ import annotations

import datetime
import json
import pwd
import subprocess
import time

import pytest

from conftest import wait_for
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)

LIMIT = 3


def refused_lines(since: str) -> list[dict]:
    """The host's "spawn refused" lines past a user's limit, since ``since``."""
    out = subprocess.run(["journalctl", "--no-pager", "-o", "json", "--since", since,
                          "-u", "clowder-ptyhost.service", "CLOWDER_CAUSE=user-limit"],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def capped_host(system_host):  # noqa: F811
    system_host.drop_in(f"[Service]\nEnvironment=CLOWDER_MAX_SESSIONS_PER_USER={LIMIT}\n")
    system_host.restart()
    yield system_host
    system_host.remove_drop_ins()


def test_one_user_is_capped_others_are_not(capped_host):
    h = capped_host
    mine = [h.spawn("sleep", "100000", user="alice", cwd="/home/alice") for _ in range(LIMIT)]
    since = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    t0 = time.monotonic()
    for _ in range(3):
        proc = h.ctl("spawn", "--cwd", "/home/alice", "--", "sleep", "100000", user="alice",
                     check=False)
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode != 0, "alice got a session past her limit"
        assert f"{LIMIT} running sessions" in err and "CLOWDER_MAX_SESSIONS_PER_USER" in err, err
        assert "Traceback" not in err and "internal error" not in err, err
    # One journal line for her refusals (at most one each 10 s), an event's.
    lines = wait_for(lambda: refused_lines(since), 10, "the refusal's line in the journal")
    seconds = time.monotonic() - t0
    assert len(lines) <= 1 + seconds // 10, [x["MESSAGE"] for x in lines]
    alice = pwd.getpwnam("alice").pw_uid
    assert lines[0]["MESSAGE"].startswith(f"spawn refused: uid {alice} already has"), lines[0]
    assert lines[0]["CLOWDER_EVENT"] == "spawn-refused", lines[0]
    assert len(h.ps(user="alice")) == LIMIT
    # Others are not affected: bob, and root (also on alice's behalf).
    theirs = h.spawn("sleep", "100000", user="bob", cwd="/home/bob")
    root = h.spawn("sleep", "100000")
    as_alice = h.ctl("spawn", "--user", "alice", "--cwd", "/", "--", "sleep",
                     "100000").stdout.decode().strip()
    ps = h.ps()
    for sid in (theirs, root, as_alice, *mine):
        assert ps[sid]["state"] == "running", ps[sid]
    # The cap counts running sessions: one of alice's ends, and she may spawn again.
    h.ctl("kill", mine[0], user="alice")
    h.ctl("kill", as_alice)
    wait_for(lambda: h.ps(user="alice")[mine[0]]["state"] != "running", 10,
             "alice's killed session to end")
    wait_for(lambda: h.ps(user="alice")[as_alice]["state"] != "running", 10,
             "the session root started for alice to end")
    h.spawn("sleep", "100000", user="alice", cwd="/home/alice")
