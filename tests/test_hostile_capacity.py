"""One user cannot exhaust the PTY host for everyone (system scope): a non-root user's
running sessions are capped (``CLOWDER_MAX_SESSIONS_PER_USER``); past the cap that user
is refused clearly while other users and root still spawn, and the journal gets one line
about it every 10 s, not one a refusal.  The ended sessions the host keeps are capped
for all users together, and past that cap one user's ends push out only their own."""

from __future__ import annotations

import datetime
import json
import pwd
import subprocess
import time

import pytest

import clowder_wire as P
from conftest import wait_for
from hostile import connect_as, environment
from test_access import system_host  # noqa: F401  (the fixture: alice, bob, the host)

LIMIT = 3


def refused_lines(since: str, cause: str = "user-limit") -> list[dict]:
    """The host's "spawn refused" lines past a user's limit (``cause``: ``user-limit``,
    the session limit; ``record-limit``, the record budget), since ``since``."""
    out = subprocess.run(["journalctl", "--no-pager", "-o", "json", "--since", since,
                          "-u", "clowder-ptyhost.service", f"CLOWDER_CAUSE={cause}"],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def capped_host(system_host):  # noqa: F811
    with environment(system_host, CLOWDER_MAX_SESSIONS_PER_USER=LIMIT) as h:
        yield h


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


ENDS = 300  # alice's sessions that end at once: past the host's 256 ended ones kept


def test_one_users_many_ends_never_push_out_anothers_unseen_end(system_host):  # noqa: F811
    """The host keeps at most ``Config.max_exited`` (256) ended sessions, every user's
    together.  Past it, the ones to go are the user's who keeps the most: alice's 300
    quick ends push out her own, and bob's end, unseen and older than all of hers,
    stays with its status and output.  (When the oldest went first, they erased it.)"""
    h = system_host
    bobs = h.spawn("sh", "-c", "echo bob-was-here; exit 7", user="bob", cwd="/home/bob")
    wait_for(lambda: h.ps()[bobs]["state"] == "exited", 20, "bob's session to end")
    # Alice's own connection, her spawns sent at once; each program ends at once.
    sock = connect_as("alice", h.socket)
    sock.settimeout(120)
    frames = [P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="many-ends"))]
    frames += [P.encode(P.Spawn(argv=["true"], cwd="/home/alice"))] * ENDS
    sock.sendall(b"".join(frames))
    reader, got = P.FrameReader(), []
    while len(got) < ENDS + 1:
        data = sock.recv(1 << 20)
        assert data, f"the host closed alice's connection after {len(got)} answers"
        got += [P.decode(kind, payload) for kind, payload in reader.frames(data)]
    sock.close()
    spawned = [m.session["id"] for m in got[1:] if isinstance(m, P.SessionInfo)]
    assert len(spawned) == ENDS, [m for m in got[1:] if not isinstance(m, P.SessionInfo)][:3]

    alice = pwd.getpwnam("alice").pw_uid

    def settled():
        ps = h.ps()  # root's: it marks nobody's end seen
        ended = [s for s in ps.values() if s["state"] in ("exited", "lost")]
        running = [s for s in ps.values() if s["uid"] == alice and s["state"] != "exited"]
        return ps if not running and len(ended) <= 256 else None
    ps = wait_for(settled, 60, "alice's sessions to end and the oldest ended ones to go")
    assert bobs in ps, "alice's ends pushed out bob's unseen end"
    mine = h.ps(user="bob")[bobs]
    assert (mine["state"], mine["exit_code"]) == ("exited", 7), mine
    assert b"bob-was-here" in h.backlog(bobs, user="bob")
    hers = [sid for sid in spawned if sid in ps]
    assert len(hers) == 255, f"alice keeps {len(hers)} ended sessions, not 256 - bob's 1"
