"""No spawn is accepted that could not be kept; running out is a clear refusal.

With the FD store full (``FileDescriptorStoreMax`` reached) systemd closes what is
parked past the max, so a spawn accepted then is lost at the next ``kill -9``: the host
refuses it instead, before anything starts, and every session it did accept comes back.
At ``LimitNOFILE`` the host refuses spawns and connections with one clear sentence, stays
up, keeps its sessions, and does not flood the journal.
"""

from __future__ import annotations

import datetime
import subprocess
import time

from conftest import wait_for
from hostile import held_connections
from test_hostile_frames import exchange
from test_watchdog import watchdog_period

import clowder_wire as P
from ptyhostd.fdstore import STORE_FIXED, STORE_PER_SESSION

# A store that holds the host's own fds (the two manifest copies, the input record) and
# exactly three sessions (a master and a ring each).
FITS = 3
SMALL_STORE = STORE_FIXED + FITS * STORE_PER_SESSION


def spawn_refused(host, *argv) -> str:
    proc = host.ctl("spawn", "--", *argv, check=False)
    assert proc.returncode != 0, f"spawn was accepted: {proc.stdout!r}"
    err = proc.stderr.decode(errors="replace")
    assert "Traceback" not in err and "internal error" not in err, err
    return err


def stored(host) -> tuple[int, int]:
    p = host.show("clowder-ptyhost.service", "NFileDescriptorStore", "FileDescriptorStoreMax")
    return int(p["NFileDescriptorStore"]), int(p["FileDescriptorStoreMax"])


def test_full_store_refuses_and_kill9_keeps_every_session(host):
    # A daemon-reload alone changes the running service's limit (systemd enforces the
    # new FileDescriptorStoreMax at once): the host must see it without a restart.
    host.drop_in(f"[Service]\nFileDescriptorStoreMax={SMALL_STORE}\n")
    assert stored(host)[1] == SMALL_STORE
    sids = [host.spawn("sh", "-c", f"echo hello-{i}; exec sleep 100000") for i in range(FITS)]
    err = spawn_refused(host, "sleep", "100000")
    assert "FD store" in err and f"{SMALL_STORE} of {SMALL_STORE}" in err, err
    assert "FileDescriptorStoreMax" in err, err
    wait_for(lambda: stored(host)[0] == SMALL_STORE, 10,
             f"systemd to hold the {SMALL_STORE} parked fds")
    # After a restart (which keeps the store) the host still counts it full.
    host.restart()
    assert "FD store" in spawn_refused(host, "true")
    before = host.ps()
    assert len(before) == FITS
    for sid in sids:
        wait_for(lambda: f"hello-{sids.index(sid)}".encode() in host.backlog(sid), 10,
                 f"session {sid} to print")
    host.kill9()
    after = host.ps()
    assert set(after) == set(sids), (before, after)
    for i, sid in enumerate(sids):
        assert after[sid]["state"] == "running", after[sid]
        assert after[sid]["pid"] == before[sid]["pid"]
        assert f"hello-{i}".encode() in host.backlog(sid)
    # The refused spawn left nothing behind, and a raised limit is seen at once.
    assert len(host.session_units()) == FITS
    host.drop_in(f"[Service]\nFileDescriptorStoreMax={SMALL_STORE + 2}\n")
    sid = host.spawn("sh", "-c", "echo fourth; exec sleep 100000")
    wait_for(lambda: b"fourth" in host.backlog(sid), 10, "the fourth session to print")


def _journal(host, since: str) -> list[str]:
    unit = ["-u"] if host.scope == "system" else ["--user-unit"]
    out = subprocess.run(["journalctl", "--no-pager", "-o", "cat", "--since", since,
                          *unit, "clowder-ptyhost.service"], capture_output=True)
    return out.stdout.decode(errors="replace").splitlines()


def test_out_of_fds_is_a_clear_refusal(host):
    keep = host.spawn("sh", "-c", "echo kept; exec cat")
    host.drop_in("[Service]\nLimitNOFILE=64\n")
    pid = host.restart()
    assert b"kept" in host.backlog(keep)
    errs = []
    for _ in range(40):  # 64 fds hold at most ~20 sessions of 3 fds each
        proc = host.ctl("spawn", "--", "sleep", "100000", check=False)
        if proc.returncode != 0:
            errs.append(proc.stderr.decode(errors="replace"))
            break
    assert errs, "the host accepted 40 sessions at LimitNOFILE=64"
    assert "no file descriptors left" in errs[0] and "LimitNOFILE=64" in errs[0], errs[0]
    assert "Traceback" not in errs[0] and "internal error" not in errs[0], errs[0]
    assert host.main_pid() == pid
    assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == "active"
    host.ctl("send", keep, "still-here\n")
    wait_for(lambda: host.backlog(keep).count(b"still-here") >= 2, 10,
             "the kept session to echo its input")

    # Clients that connect and hold their connection use up the rest: the next client
    # is told why, and the journal gets a line, not a traceback a second.
    # To the microsecond: the lines of the spawns just before must not count.
    since = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    with held_connections(host.socket, 80):
        # Clients keep coming for longer than the watchdog period (old asyncio: a
        # traceback each second; a host that cannot ping while its table is full is
        # replaced by the watchdog, which the main PID below would show).
        until = time.monotonic() + watchdog_period(host) + 2
        while time.monotonic() < until:
            proc = host.ctl("ps", check=False)
            err = proc.stderr.decode(errors="replace")
            assert proc.returncode != 0 and "no file descriptors left" in err, err
            assert "LimitNOFILE=64" in err, err
        lines = _journal(host, since)
        assert not [line for line in lines if "Traceback" in line
                    or "out of system resource" in line], lines
        assert len(lines) <= 5, lines
    assert host.main_pid() == pid
    wait_for(lambda: host.ctl("ps", check=False).returncode == 0, 10,
             "the host to serve again once the clients went")
    assert host.ps()[keep]["state"] == "running"


def test_refusal_before_hello_is_a_protocol_error(host):
    """A connection refused for lack of fds still gets a frame a client can decode."""
    host.drop_in("[Service]\nLimitNOFILE=40\n")
    main = host.restart()
    # The screen engine loads after READY (imports, a dlopen): once it has, the fds this
    # test exhausts are the connections' alone (a load racing for the listener's
    # reserve fd is engine.py's retry, not this test's subject).
    wait_for(lambda: host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main}",
                               "CLOWDER_CAUSE=screen-engine-loaded"]).stdout, 20,
             "the host's screen engine to load")
    with held_connections(host.socket, 60):
        frames = exchange(host.socket, b"")
        assert frames and isinstance(frames[0], P.Error) and frames[0].fatal, frames
        assert "no file descriptors left" in frames[0].message


def test_max_lowered_below_what_is_parked_is_reported(host):
    """A daemon-reload that lowers the max below the count makes systemd close parked
    fds at once (measured on 252): the next spawn is refused and says so."""
    for _ in range(2):
        host.spawn("sleep", "100000")
    held = STORE_FIXED + 2 * STORE_PER_SESSION
    wait_for(lambda: stored(host)[0] == held, 10, "systemd to hold the host's fds + 2 sessions")
    host.drop_in("[Service]\nFileDescriptorStoreMax=4\n")
    assert stored(host)[0] == 4
    err = spawn_refused(host, "true")
    assert f"{held} of 4" in err and f"already closed {held - 4} parked fds" in err, err
