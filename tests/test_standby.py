"""The standby (ptyhostd/standby.py) under a real systemd: a host that dies is taken over
by the process that was waiting for it, with no restart of the unit and nothing lost; a
stop, a restart and a hand-off leave no standby behind; a standby that dies is replaced.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

from conftest import wait_for

HOST = "clowder-ptyhost.service"
READY = re.compile(r"standby (\d+) ready")


def current_standby(host) -> int:
    """The pid of the host's standby if one is ready now (the unit's status), else 0."""
    m = READY.search(host.show(HOST, "StatusText")["StatusText"])
    return int(m.group(1)) if m else 0


def ready_standby(host, other_than: int = 0) -> int:
    """The pid of the host's standby once it holds the whole copy (the unit's status
    says so), other than ``other_than``."""
    def ready():
        m = READY.search(host.show(HOST, "StatusText")["StatusText"])
        return int(m.group(1)) if m and int(m.group(1)) != other_than else 0
    return wait_for(ready, 30, f"the {host.scope} host's standby to be ready"
                               f"{f' (not {other_than})' if other_than else ''}")


def is_standby(pid: int) -> bool:
    """Whether process ``pid`` was started as a host's standby (its environment says so;
    a host's other children are the hand-off's check and bridge)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(b"CLOWDER_STANDBY=") for v in f.read().split(b"\0"))
    except OSError:
        return False


def cgroup_pids(host) -> set[int]:
    group = host.show(HOST, "ControlGroup")["ControlGroup"]
    if not group:
        return set()
    with open(f"/sys/fs/cgroup{group}/cgroup.procs") as f:
        return {int(line) for line in f.read().split()}


def test_a_killed_host_is_taken_over_by_its_standby_with_nothing_lost(host):
    sid = host.spawn("/bin/sh", "-c", "echo before; exec cat")
    wait_for(lambda: b"before" in host.backlog(sid), 10, "the session's first line")
    standby = ready_standby(host)
    old = host.main_pid()
    assert cgroup_pids(host) == {old, standby}
    restarts = host.show(HOST, "NRestarts")["NRestarts"]
    os.kill(old, signal.SIGKILL)
    new = host.wait_ready(old)
    assert new == standby, f"the unit's main process is {new}, not the standby {standby}"
    assert host.show(HOST, "NRestarts")["NRestarts"] == restarts, \
        "the unit was restarted: the standby did not take over"
    ps = host.ps()
    assert ps[sid]["state"] == "running", ps[sid]
    host.ctl("send", sid, "after\n")
    wait_for(lambda: b"before" in host.backlog(sid) and b"after" in host.backlog(sid),
             10, "the session's backlog with both lines after the takeover")
    # The new host starts its own standby, which takes over in turn.
    second = ready_standby(host, other_than=standby)
    os.kill(new, signal.SIGKILL)
    assert host.wait_ready(new) == second
    host.ctl("send", sid, "again\n")
    wait_for(lambda: b"again" in host.backlog(sid), 10, "the line typed after the second")
    assert host.show(HOST, "NRestarts")["NRestarts"] == restarts


def test_a_dead_standby_is_replaced_and_a_stop_leaves_no_process(host):
    standby = ready_standby(host)
    os.kill(standby, signal.SIGKILL)
    ready_standby(host, other_than=standby)
    assert len(cgroup_pids(host)) == 2
    host.systemctl("stop", HOST)
    state = host.show(HOST, "ActiveState", "Result")
    assert state == {"ActiveState": "inactive", "Result": "success"}, state
    assert cgroup_pids(host) == set()


def test_a_restart_execs_the_host_and_its_old_standby_exits(host):
    sid = host.spawn("/bin/sh", "-c", "echo kept; exec cat")
    standby = ready_standby(host)
    restarts = int(host.show(HOST, "NRestarts")["NRestarts"])
    new = host.restart()
    assert new != standby, "a restart was served by the old standby"
    assert standby not in cgroup_pids(host)
    assert b"kept" in host.backlog(sid)
    ready_standby(host, other_than=standby)
    assert int(host.show(HOST, "NRestarts")["NRestarts"]) == restarts  # a job, not Restart=


def test_a_hand_off_replaces_the_standby_with_one_of_the_new_code(host):
    sid = host.spawn("/bin/sh", "-c", "echo kept; exec cat")
    standby = ready_standby(host)
    main = host.main_pid()
    host.systemctl("reload", HOST)
    assert host.main_pid() == main
    fresh = ready_standby(host, other_than=standby)
    assert standby not in cgroup_pids(host)
    os.kill(main, signal.SIGKILL)
    assert host.wait_ready(main) == fresh
    assert b"kept" in host.backlog(sid)


def test_a_refused_hand_off_keeps_the_standby_and_says_so(host):
    """A hand-off the installed code refuses: the running code serves on with the same
    standby, and the unit's status says it is ready again (the refusal's READY=1 and
    STATUS= replaced it once, and a wait on it then timed out)."""
    from test_handoff import SITE, _break, _reload_refused
    standby = ready_standby(host)
    main = host.main_pid()
    path = os.path.join(SITE, "handoff.py")
    original = _break(path, "raise SystemExit('this build is broken')")
    try:
        _reload_refused(host, main)
    finally:
        with open(path, "w") as f:
            f.write(original)
    assert ready_standby(host) == standby
    os.kill(main, signal.SIGKILL)
    assert host.wait_ready(main) == standby


def test_a_death_systemd_saw_first_leaves_no_failure_to_stop_the_unit_later(host):
    """When systemd handles the host's death before the standby's MAINPID= (the standby
    descheduled: here, stopped), it keeps the unit's result as failed ('signal'), and at
    the end of the next reload it stopped the whole unit (seen in test_input.py's kill -9
    then reload: "Reload failed", a restart).  The new host clears it."""
    sid = host.spawn("/bin/sh", "-c", "echo kept; exec cat")
    standby = ready_standby(host)
    old = host.main_pid()
    os.kill(standby, signal.SIGSTOP)
    try:
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: host.show(HOST, "MainPID")["MainPID"] == "0", 20,
                 "systemd to see the host's death")
        assert host.show(HOST, "ActiveState", "Result") == {
            "ActiveState": "active", "Result": "signal"}
    finally:
        os.kill(standby, signal.SIGCONT)
    assert host.wait_ready(old) == standby
    wait_for(lambda: host.show(HOST, "Result")["Result"] == "success", 20,
             "the unit's failure to be cleared after the takeover")
    host.systemctl("reload", HOST)
    assert host.main_pid() == standby
    assert host.show(HOST, "ActiveState")["ActiveState"] == "active"
    assert b"kept" in host.backlog(sid)


def _manager_image(host) -> bytes:
    """The service manager's auxiliary vector: ASLR makes it differ after every exec."""
    pid = 1 if host.scope == "system" else int(subprocess.run(
        ["systemctl", "show", "-p", "MainPID", "--value", f"user@{host.uid}.service"],
        capture_output=True, check=True).stdout)
    with open(f"/proc/{pid}/auxv", "rb") as f:
        return f.read()


def test_after_the_manager_re_executes_a_crash_is_still_taken_over(host):
    """A systemd package upgrade re-executes the manager (daemon-reexec): the unit's
    state goes through its serialization, and the standby's MAINPID= must still be
    taken afterwards, with no restart and nothing lost."""
    sid = host.spawn("/bin/sh", "-c", "echo kept; exec cat")
    standby = ready_standby(host)
    old = host.main_pid()
    restarts = host.show(HOST, "NRestarts")["NRestarts"]
    before = _manager_image(host)
    host.systemctl("daemon-reexec")
    wait_for(lambda: _manager_image(host) != before and host.systemctl(
        "show", "-p", "Version", check=False).returncode == 0, 30,
        "the service manager to re-execute and answer again")
    assert host.main_pid() == old and current_standby(host) == standby
    os.kill(old, signal.SIGKILL)
    assert host.wait_ready(old) == standby
    assert host.show(HOST, "NRestarts")["NRestarts"] == restarts, \
        "the unit was restarted: the standby's MAINPID= was not taken after the re-exec"
    host.ctl("send", sid, "after\n")
    wait_for(lambda: b"kept" in host.backlog(sid) and b"after" in host.backlog(sid), 10,
             "the session's backlog with the line typed after the takeover")


def test_the_standby_has_loaded_the_screen_engine_before_it_takes_over(host):
    """A standby loads the engine and makes its first renders while it waits
    (ptyhostd/__main__.py _warm_engine), so the first reattach after a crash does not
    wait for ghostty's cffi look-ups; the host that takes over is the same process."""
    standby = ready_standby(host)
    wait_for(lambda: host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={standby}",
                               "CLOWDER_CAUSE=screen-engine-loaded"]).stdout, 20,
             "the standby's line saying it loaded the screen engine")
    sid = host.spawn("/bin/sh", "-c", "echo kept; exec cat")
    old = host.main_pid()
    os.kill(old, signal.SIGKILL)
    assert host.wait_ready(old) == standby
    shown = host.ctl("snapshot", sid).stdout
    assert b"kept" in shown, f"the taken-over host's snapshot: {shown!r}"
