"""Ending things escalates without blocking; clowder-control answers whatever the host does.

Acceptance 5, 6 and 7 of the control issue, plus the default ``clowderctl kill`` of an
interactive bash and the file/vcs/watch loggers reaching the journal.  Run against system
and user units (the ``host`` fixture), under a real systemd.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from conftest import PYTHON, wait_for
from ctl.client import Client
import clowder_wire as P
from test_control import agent_yaml, control  # noqa: F401 - the fixture

# A program that ignores the polite signals: only SIGKILL ends it.
STUBBORN = ["bash", "-c", "trap '' HUP TERM; echo stubborn-up; while :; do sleep 1; done"]
# The documented escalation (docs/design.md, "Ending a session"): SIGHUP, 3 s, SIGTERM,
# 3 s, SIGKILL, 2 s for the end to be recorded; plus slack for a loaded test machine.
ESCALATION_BOUND = 3 + 3 + 2 + 4
STATUS_DEADLINE = 1.0  # what `status` may take while the host does not answer, plus slack


def control_socket(host) -> str:
    return "/run/clowder/control.sock" if host.scope == "system" else \
        f"/run/user/{host.uid}/clowder/control.sock"


def timed_status(host, timeout: float = 10.0) -> tuple[float, P.StatusReport]:
    """(seconds the GetStatus request took, its answer), connected beforehand."""
    with Client(control_socket(host), timeout=timeout, peer="clowder-control") as c:
        c.sock.settimeout(timeout)
        t0 = time.monotonic()
        rep = c.request(P.GetStatus(), P.StatusReport)
        return time.monotonic() - t0, rep


def test_down_of_a_stubborn_agent_escalates_and_status_answers_meanwhile(host, control):
    control.write_config("agents:\n" + agent_yaml("stubborn", STUBBORN, control.workdir))
    info = control.wait_running(["stubborn"])["stubborn"]
    wait_for(lambda: b"stubborn-up" in host.backlog(info["session"]), 10,
             "the stubborn agent to have set its traps")
    t0 = time.monotonic()
    down = subprocess.Popen(host._as([PYTHON, "-m", "ctl", "down", "stubborn"]),
                            env=host.env, cwd="/", stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # While the down waits out SIGHUP and SIGTERM, status answers at once.
        wait_for(lambda: timed_status(host)[1].agents[0]["state"] in ("stopping", "down"),
                 10, "the agent to be shown stopping")
        took, rep = timed_status(host)
        assert down.poll() is None, "the down ended before the escalation could"
        assert took < 1.0, f"status took {took:.2f} s while a down was in progress"
        assert rep.agents[0]["state"] == "stopping", rep.agents[0]
        out, err = down.communicate(timeout=ESCALATION_BOUND + 20)
    finally:
        if down.poll() is None:
            down.kill()
            down.wait()
    elapsed = time.monotonic() - t0
    assert down.returncode == 0, err
    assert elapsed < ESCALATION_BOUND, f"down took {elapsed:.1f} s"
    assert b"SIGKILL" in out, out
    assert info["session"] not in host.ps() or \
        host.ps()[info["session"]]["state"] != "running"
    assert not os.path.exists(f"/proc/{info['pid']}/stat") or \
        open(f"/proc/{info['pid']}/stat").read().split()[2] == "Z"
    st = control.agents()["stubborn"]
    assert st["state"] == "down", st
    wait_for(lambda: any("SIGKILL" in e["MESSAGE"] for e in control.journal("stubborn")
                         if e.get("CLOWDER_CAUSE") == "stop"), 10,
             "a stop event naming SIGKILL in the journal")


def test_agent_removed_from_the_config_is_stopped_and_gone(host, control):
    control.write_config("agents:\n" + agent_yaml("keep", "sleep 100000", control.workdir)
                         + agent_yaml("gone", STUBBORN, control.workdir))
    before = control.wait_running(["keep", "gone"])
    control.write_config("agents:\n" + agent_yaml("keep", "sleep 100000", control.workdir))
    host.systemctl("reload", "clowder-control.service")
    wait_for(lambda: "gone" not in control.agents(), 10, "the removed agent to leave status")
    assert b"gone" not in host.ctl("status").stdout
    gone = [before["gone"]["session"]] + [s["session"] for s in before["gone"]["shells"]]

    def ended():
        now = host.ps()
        return all(now.get(sid, {}).get("state") != "running" for sid in gone)
    wait_for(ended, ESCALATION_BOUND, "the removed agent's sessions to be ended")
    after = control.agents()
    assert list(after) == ["keep"] and after["keep"]["pid"] == before["keep"]["pid"]
    causes = {e.get("CLOWDER_CAUSE") for e in control.journal("gone")}
    assert "removed" in causes, causes
    # It stays gone: a restart of clowder-control does not bring it back or report it.
    control.restart()
    st = wait_for(lambda: (lambda s: s if s["agents"] else None)(control.status()), 20,
                  "clowder-control to answer after its restart")
    assert [a["name"] for a in st["agents"]] == ["keep"] and not st["unclaimed"] and \
        not st["sessions"], st


def test_status_answers_while_the_host_is_frozen(host, control):
    control.write_config("agents:\n" + agent_yaml("calm", "sleep 100000", control.workdir))
    control.wait_running(["calm"])
    pid = host.main_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        # Within ~2-3 s of freezing: a watchdog may replace a frozen host after that.
        took, rep = timed_status(host)
        assert took < STATUS_DEADLINE + 0.5, f"status took {took:.2f} s"
        assert rep.host.get("answering") is False, rep.host
        assert "not answering" in rep.host.get("error", ""), rep.host
        assert [a["name"] for a in rep.agents] == ["calm"]
        t0 = time.monotonic()
        r = host.ctl("status", timeout=10, check=False)
        assert time.monotonic() - t0 < 5
        text = r.stdout.decode()
        assert "PTY host" in text and "not answering" in text, text
        assert r.returncode == 3, r  # unreachable (ctl/exits.py), not a healthy 0
        r = host.ctl("status", "--json", timeout=10, check=False)
        js = json.loads(r.stdout)
        assert js["host"]["answering"] is False and r.returncode == 3, (js["host"], r)
        # A request that needs the host fails fast, saying why (unless the host was
        # replaced meanwhile, and then it simply works).
        t0 = time.monotonic()
        r = host.ctl("up", "calm", check=False, timeout=15)
        assert time.monotonic() - t0 < 5, "up waited on the frozen host"
        if r.returncode != 0:
            assert b"PTY host" in r.stderr and b"not answering" in r.stderr, r.stderr
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # a watchdog replaced the frozen host meanwhile
    wait_for(lambda: control.status()["host"].get("answering"), 20,
             "the host to be answering again")


def test_default_kill_of_an_interactive_bash_ends_it(host):
    sid = host.spawn("bash", "--norc", "-i")
    wait_for(lambda: b"$ " in host.backlog(sid) or b"# " in host.backlog(sid), 10,
             "bash's prompt")
    r = host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
    assert b"signal" in r.stdout, r.stdout
    w = host.ctl("wait", sid, "--timeout", "5", check=False)
    assert w.returncode > 128 and w.stdout.startswith(b"signal "), (w.returncode, w.stdout)
    host.ctl("rm", sid)  # right after: it has ended, so it can be forgotten
    assert sid not in host.ps()
    # --signal sends exactly that signal; bash ignores TERM, and clowderctl says so.
    sid = host.spawn("bash", "--norc", "-i")
    wait_for(lambda: b"$ " in host.backlog(sid) or b"# " in host.backlog(sid), 10,
             "bash's prompt")
    r = host.ctl("kill", "--signal", "TERM", sid)
    assert b"still running" in r.stderr, r.stderr
    assert host.ps()[sid]["state"] == "running"
    host.ctl("kill", sid, timeout=ESCALATION_BOUND + 10)
    assert host.ps()[sid]["state"] != "running"


def test_file_service_lines_reach_the_journal_with_fields(host, control):
    control.write_config("agents:\n" + agent_yaml("files", "sleep 100000", control.workdir))
    control.wait_running(["files"])
    host.run([PYTHON, "-m", "ctl", "file", "put", "files", "journal-note.txt"],
             input=b"hello\n")
    lines = wait_for(lambda: [e for e in control.journal("files")
                              if e.get("CLOWDER_CAUSE") == "file-write"], 10,
                     "the file service's journal line for the write")
    assert "journal-note.txt" in lines[0]["MESSAGE"], lines[0]
    assert lines[0].get("CODE_FILE", "").endswith("files.py"), lines[0]
