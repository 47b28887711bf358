"""Every failure in the host's adopt, hand-off and reload paths keeps the sessions.

Each failure is provoked in a real host under the real systemd (both scopes): by
$CLOWDER_FAULT (ptyhostd/faults.py), set with a drop-in, or, for a corrupt ring, by
damaging the ring's memfd itself through /proc.  After each: every other session (and the
affected one: same pid, its unit not stopped) is kept, the host is active (not left
`reloading`), the journal says why with CLOWDER_CAUSE, and the FD store holds exactly
what the sessions hold, also after a further restart.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import PYTHON, wait_for
from test_ptyhost import COUNTER

from ptyhostd import fdstore

HOST = "clowder-ptyhost.service"


def numbers(host, sid) -> list[int]:
    return [int(n) for n in re.findall(rb"n(\d+)\r\n", host.backlog(sid))]


def flowing(host, sid, what: str) -> None:
    mark = len(numbers(host, sid))
    wait_for(lambda: len(numbers(host, sid)) > mark + 20, 10, f"{what}: output to flow")


def journal(host, cause: str, pid: int) -> str:
    return host.run(["journalctl", "--no-pager", "-o", "cat", f"CLOWDER_CAUSE={cause}",
                     f"_PID={pid}"]).stdout.decode(errors="replace")


def said(host, cause: str, pid: int, text: str) -> str:
    return wait_for(lambda: text in journal(host, cause, pid) and journal(host, cause, pid),
                    15, f"the journal to say {text!r} with CLOWDER_CAUSE={cause}")


def host_state(host) -> tuple[str, str]:
    p = host.show(HOST, "ActiveState", "SubState")
    return p["ActiveState"], p["SubState"]


def wait_active(host) -> None:
    wait_for(lambda: host_state(host) == ("active", "running"), 20,
             "the host to be active/running (not left reloading)")


def stored(host) -> int:
    return int(host.show(HOST, "NFileDescriptorStore")["NFileDescriptorStore"])


def held(host) -> int:
    """What the host holds in the FD store: its own fds (both manifest copies, the input
    record), every session's ring, and the pty master of each running one."""
    return fdstore.STORE_FIXED + sum(
        fdstore.STORE_PER_SESSION if s["state"] == "running" else fdstore.STORE_PER_ENDED
        for s in host.ps().values())


def store_matches(host) -> None:
    wait_for(lambda: stored(host) == held(host), 10,
             f"the FD store to hold what the sessions hold ({held(host)}), "
             f"it holds {stored(host)}")


def reload(host) -> None:
    """systemctl reload: its job ends when ExecReload= (ptyhostd --hand-off) has seen the
    outcome; a refused hand-off fails it, which these faults are not about."""
    try:
        host.run(["systemctl", *(["--user"] if host.scope == "user" else []), "reload",
                  HOST], timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("systemctl reload did not return in 30 s: the host never said READY=1")


def fault(host, points: str) -> int:
    """Restart the host with $CLOWDER_FAULT set; its new main PID."""
    host.drop_in(f"[Service]\nEnvironment=CLOWDER_FAULT={points}\n")
    return host.restart()


def orphan(host) -> str:
    """A session unit no host knows: its stop marks the new host's sweep of orphans."""
    name = "clowder-session-0rphan00.service"
    host.run(["systemd-run", *(["--user"] if host.scope == "user" else []),
              f"--unit={name}", "--quiet", "sleep", "100000"])
    return name


def swept(host, name: str) -> None:
    wait_for(lambda: host.show(name, "ActiveState")["ActiveState"] == "inactive", 15,
             "the new host to sweep the orphaned units")


def kept(host, before: dict, sid: str) -> None:
    now = host.ps()
    assert sid in now, f"session {sid} was lost"
    assert now[sid]["pid"] == before[sid]["pid"], f"{sid} changed pid"
    assert now[sid]["state"] == "running", now[sid]
    props = host.show(now[sid]["unit"], "MainPID", "ActiveState")
    assert props["ActiveState"] == "active", f"{sid}'s unit was stopped: {props}"
    assert int(props["MainPID"]) == before[sid]["pid"]


def sessions(host) -> tuple[str, str, str, dict]:
    """A counter, a quiet one, and one that has ended; and ps of them."""
    a = host.spawn(PYTHON, "-c", COUNTER, name="counter")
    b = host.spawn("sh", "-c", "echo quiet; exec sleep 100000", name="quiet")
    c = host.spawn("sh", "-c", "exit 3", name="ended")
    host.ctl("wait", c, check=False)
    return a, b, c, host.ps()


def test_a_session_whose_adoption_fails_is_kept(host):
    a, b, c, before = sessions(host)
    stray = orphan(host)
    main = fault(host, f"adopt:{a}")
    swept(host, stray)
    for sid in (a, b):
        kept(host, before, sid)
    assert host.ps()[c]["state"] == "exited" and host.ps()[c]["exit_code"] == 3
    assert host.ps()[a]["name"] == "counter"
    flowing(host, a, "the session whose adoption failed")
    said(host, "adopt-failed", main, a)
    assert host_state(host) == ("active", "running")
    store_matches(host)
    host.restart()  # the fault still fires: the same again
    kept(host, before, a)
    store_matches(host)
    host.remove_drop_ins()
    host.restart()
    kept(host, before, a)
    kept(host, before, b)
    store_matches(host)


def test_a_session_systemd_cannot_be_asked_about_is_kept(host):
    """Its adoption fails, and so does asking systemd how its unit is: the recorded pid,
    found in its unit, is watched; its pty is read; its end is still noticed."""
    a, b, c, before = sessions(host)
    stray = orphan(host)
    main = fault(host, f"adopt:{a},ask:{a}")
    swept(host, stray)
    for sid in (a, b):
        kept(host, before, sid)
    flowing(host, a, "the session systemd was not asked about")
    said(host, "adopt-failed", main, "injected fault at ask")
    store_matches(host)
    host.ctl("kill", a, "--signal", "TERM")
    wait_for(lambda: host.ps()[a]["state"] == "exited", 10, "its end to be noticed")
    assert host.ps()[a]["signal"] == 15
    store_matches(host)
    host.remove_drop_ins()
    host.restart()
    kept(host, before, b)
    store_matches(host)


def test_a_corrupt_ring_is_replaced_once(host):
    """A ring whose header is damaged: its backlog is lost (said in the journal), the
    session is kept, and the fresh ring is the one parked, the only one under its name."""
    a, b, c, before = sessions(host)
    hpid = host.main_pid()
    damaged = set()  # memfds by inode: Python's mmap holds a dup of the ring's fd
    for fd in os.listdir(f"/proc/{hpid}/fd"):
        path = f"/proc/{hpid}/fd/{fd}"
        if os.readlink(path).startswith(f"/memfd:clowder-ring-{a} ") \
                and os.stat(path).st_ino not in damaged:
            with open(path, "r+b") as f:
                f.write(b"\0" * 8)  # the magic
            damaged.add(os.stat(path).st_ino)
    assert len(damaged) == 1, f"found {len(damaged)} rings of {a} in the host's fds"
    main = host.restart()
    kept(host, before, a)
    kept(host, before, b)
    said(host, "ring-corrupt", main, a)
    flowing(host, a, "the session with a fresh ring")
    store_matches(host)
    mark = numbers(host, a)
    main = host.restart()
    kept(host, before, a)
    assert numbers(host, a)[:len(mark)] == mark, "the next start did not get the fresh ring"
    assert a not in journal(host, "ring-corrupt", main), "the corrupt ring came back"
    store_matches(host)


@pytest.mark.parametrize("point", ["check", "screens", "exec"])
def test_a_failed_handoff_keeps_serving_and_says_why(host, point):
    """A hand-off that fails at ``point`` (not the check's refusal): the old code keeps
    serving every session, systemd is told READY=1, and a second reload is answered too."""
    main = fault(host, point)
    a, b, c, before = sessions(host)
    for n in (1, 2):
        reload(host)
        wait_for(lambda: journal(host, "handoff-failed", main).count(
            "hand-off failed") >= n, 20, f"the host to log why hand-off {n} failed")
        wait_active(host)
    assert f"injected fault at {point}" in journal(host, "handoff-failed", main)
    assert host.main_pid() == main
    for sid in (a, b):
        kept(host, before, sid)
    flowing(host, a, "a session after the failed hand-off")
    store_matches(host)
    assert host_state(host) == ("active", "running")
    host.remove_drop_ins()
    host.restart()
    kept(host, before, a)
    store_matches(host)


def test_reloads_all_through_a_handoff_do_not_kill_the_new_code(host):
    """SIGHUP (what ExecReload sends) flooded at the host all through a hand-off, also
    while the new code starts up, before its handler is set: same main PID, no restart."""
    a = host.spawn(PYTHON, "-c", COUNTER, name="counter")
    before = host.ps()
    main = host.main_pid()
    restarts = host.show(HOST, "NRestarts")["NRestarts"]
    host.systemctl("reload", "--no-block", HOST)
    # A flood for a fixed time, paced by waiting (5 ms at a time) on the one event that
    # ends it early: the host's exit, seen on a pidfd of it.
    pidfd = os.pidfd_open(main)
    try:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGHUP)
            except ProcessLookupError:
                break
            if select.select([pidfd], [], [], 0.005)[0]:
                break  # it exited: the asserts below say so
    finally:
        os.close(pidfd)
    wait_for(lambda: "took over by hand-off" in journal(host, "handoff", main), 20,
             "the new code to take over")
    wait_active(host)
    assert host.main_pid() == main, "the host died during the hand-off"
    assert host.show(HOST, "NRestarts")["NRestarts"] == restarts
    kept(host, before, a)
    flowing(host, a, "the session after the hand-offs")
    store_matches(host)
