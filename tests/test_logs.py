"""Issue 15, journald: MESSAGE_IDs with a catalog, the log level, `clowderctl logs`.

Under a real systemd (the instance's own journald): `journalctl -x` explains the
events once packaging/clowder.catalog is installed and `--update-catalog` has run;
CLOWDER_LOG_LEVEL=debug adds the spawn path's debug lines (absent by default);
`clowderctl logs` takes --since, -o json/--json and -o cat, and a member of group
clowder (who cannot read the system journal) is shown their own agent's events through
clowder-control, and refused another's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import PYTHON, ROOT, wait_for
from test_control import agent_yaml, control  # noqa: F401  (control: fixture)
from test_hostile_agents import alices_and_roots_agents

sys.path.insert(0, ROOT)
from clowder_common import events  # noqa: E402
from ctl.commands.logs import parse_since  # noqa: E402

CATALOG = os.path.join(ROOT, "packaging", "clowder.catalog")


# --- the ids and their catalog -------------------------------------------------------------

def test_every_event_kind_has_a_distinct_id_and_a_catalog_entry():
    ids = list(events.IDS.values())
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    text = open(CATALOG).read()
    in_catalog = re.findall(r"^-- ([0-9a-f]{32})$", text, re.M)
    assert sorted(in_catalog) == sorted(ids)
    assert set(events.AGENT_CAUSES.values()) <= set(events.IDS)
    assert set(events.SESSION_STATES.values()) <= set(events.IDS)


def test_since_forms():
    now = 1_800_000_000
    assert parse_since("2 h ago", now) == now - 7200
    assert parse_since("30min ago", now) == now - 1800
    assert parse_since("-5s", now) == now - 5
    assert parse_since("@1700000000", now) == 1_700_000_000
    assert parse_since("now", now) == now
    assert parse_since("yesterday", now) == parse_since("today", now) - 86400
    with pytest.raises(ValueError, match="use 'YYYY-MM-DD"):
        parse_since("last tuesday", now)


def _journal_x(*matches: str) -> str:
    return subprocess.run(["journalctl", "--no-pager", "-x", *matches], capture_output=True,
                          text=True).stdout


@pytest.fixture
def catalog():
    dest = "/usr/lib/systemd/catalog/clowder.catalog"  # the instance's overlay
    shutil.copy(CATALOG, dest)
    subprocess.run(["journalctl", "--update-catalog"], check=True)
    yield
    os.unlink(dest)
    subprocess.run(["journalctl", "--update-catalog"], check=True)


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_journalctl_x_explains_the_session_and_agent_events(host, control, catalog):
    sid = host.spawn("sleep", "100000", name="explained")
    started = events.IDS["session-started"]
    text = wait_for(lambda: (t := _journal_x(f"MESSAGE_ID={started}",
                                             f"CLOWDER_SESSION={sid}")) and sid in t and t,
                    15, "the session-started entry")
    assert f"The PTY host (clowder-ptyhost.service) started session {sid}" in text, text
    assert "Subject: clowder session" in text or f"clowder session {sid} started" in text, text
    host.ctl("kill", sid, "--signal", "KILL")
    ended = events.IDS["session-ended"]
    text = wait_for(lambda: (t := _journal_x(f"MESSAGE_ID={ended}",
                                             f"CLOWDER_SESSION={sid}")) and sid in t and t,
                    15, "the session-ended entry")
    assert f"The program of session {sid} ended" in text, text

    control.write_config("agents:\n" + agent_yaml("cat", "sleep 100000", control.workdir))
    control.wait_running(["cat"])
    spawned = events.IDS["agent-spawned"]
    text = wait_for(lambda: (t := _journal_x(f"MESSAGE_ID={spawned}", "CLOWDER_AGENT=cat"))
                    and "started agent" in t and t, 15, "the agent-spawned entry")
    assert "clowder-control started agent cat" in text, text


# --- the log level ---------------------------------------------------------------------------

def _debug_lines(host, sid: str, pid: int) -> str:
    return host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={pid}",
                     f"CLOWDER_SESSION={sid}", "PRIORITY=7"]).stdout.decode()


def _started(host, sid: str) -> bool:
    return bool(host.run(["journalctl", "--no-pager", "-o", "cat", f"CLOWDER_SESSION={sid}",
                          f"MESSAGE_ID={events.IDS['session-started']}"]).stdout.strip())


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_debug_lines_only_at_log_level_debug(host):
    pid = host.main_pid()
    quiet = host.spawn("sleep", "100000")
    wait_for(lambda: _started(host, quiet), 15, "the default host's session-started line")
    assert _debug_lines(host, quiet, pid) == "", "debug lines at the default level"

    host.drop_in("[Service]\nEnvironment=CLOWDER_LOG_LEVEL=debug\n")
    pid = host.restart()
    loud = host.spawn("sleep", "100000")
    wait_for(lambda: "parked its pty and ring" in _debug_lines(host, loud, pid), 15,
             "the spawn path's debug line at CLOWDER_LOG_LEVEL=debug")
    accepted = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={pid}",
                         "CLOWDER_CAUSE=accept", "PRIORITY=7"]).stdout.decode()
    assert "accepted a client" in accepted, accepted
    for sid in (quiet, loud):
        host.ctl("kill", sid, "--signal", "KILL")


def test_a_bad_log_level_is_refused_clearly():
    for prog in ("ptyhostd", "controld"):
        r = subprocess.run([PYTHON, "-m", prog, "--log-level", "loud"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "unknown log level 'loud'" in r.stderr, r
        # Refused while parsing, before anything is served.
        r = subprocess.run([PYTHON, "-m", prog, "--socket", "/nonexistent/x.sock"],
                           capture_output=True, text=True,
                           env={**os.environ, "CLOWDER_LOG_LEVEL": "nope"}, timeout=30)
        assert r.returncode == 2 and "unknown log level 'nope'" in r.stderr, r


# --- clowderctl logs ----------------------------------------------------------------------

def _json_lines(out: bytes) -> list[dict]:
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_logs_json_since_and_cat(host, control):
    control.write_config("agents:\n" + agent_yaml("lg", "sleep 100000", control.workdir))
    info = control.wait_running(["lg"])["lg"]
    for flag in (["--json"], ["-o", "json"]):
        got = wait_for(lambda: [e for e in _json_lines(host.ctl("logs", "lg", *flag).stdout)
                                if e.get("MESSAGE_ID") == events.IDS["agent-spawned"]
                                and "spawned agent" in e["MESSAGE"]],
                       15, f"logs {flag} to list the agent's spawn")
        assert got[-1]["CLOWDER_AGENT"] == "lg" and got[-1]["CLOWDER_SESSION"] == \
            info["session"], got
    all_of_them = _json_lines(host.ctl("logs", "lg", "--json").stdout)
    assert all(e["CLOWDER_AGENT"] == "lg" for e in all_of_them)
    future = f"@{int(time.time()) + 3600}"
    assert host.ctl("logs", "lg", "--json", "--since", future).stdout.strip() in (b"", b"-- No entries --")
    assert _json_lines(host.ctl("logs", "lg", "--json", "--since", "1 h ago").stdout)
    cat = host.ctl("logs", "lg", "-o", "cat").stdout.decode()
    assert f"agent lg: spawned agent as session {info['session']}" in cat, cat
    assert not re.search(r"^\d{4}-", cat, re.M), "cat has no timestamps"
    short = host.ctl("logs", "lg", "-n", "1").stdout.decode().strip().splitlines()
    assert len(short) == 1 and re.match(r"\d{4}-\d\d-\d\dT", short[0]), short


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_a_member_reads_only_their_own_agents_logs(host, control):
    alice, other, info = alices_and_roots_agents(control)
    groups = subprocess.run(["id", "-Gn", "alice"], capture_output=True, text=True).stdout
    assert "systemd-journal" not in groups and "adm" not in groups, groups

    got = wait_for(lambda: _json_lines(host.ctl("logs", "hers", "--json", user="alice").stdout),
                   15, "alice's logs of her agent")
    assert {e["CLOWDER_AGENT"] for e in got} == {"hers"}, got
    assert any(e.get("MESSAGE_ID") == events.IDS["agent-spawned"] and
               e.get("CLOWDER_SESSION") == info["session"] for e in got), got
    assert "_UID" not in got[0] and "_CMDLINE" not in got[0], "only clowder's own fields"
    cat = host.ctl("logs", "hers", "-o", "cat", user="alice").stdout.decode()
    assert "agent hers: spawned agent" in cat and "roots" not in cat, cat
    future = f"@{int(time.time()) + 3600}"
    assert host.ctl("logs", "hers", "--json", "--since", future, user="alice").stdout == b""
    assert _json_lines(host.ctl("logs", "hers", "--json", "--since", "1 h ago",
                                user="alice").stdout)
    r = host.ctl("logs", "hers", "--since", "last tuesday", user="alice", check=False)
    assert r.returncode != 0 and b"use 'YYYY-MM-DD" in r.stderr, r

    # Never another user's lines: root's agent, and bob on alice's agent.
    r = host.ctl("logs", "roots", user="alice", check=False)
    assert r.returncode == 1 and b"may not read the logs of agent 'roots'" in r.stderr, r
    assert r.stdout == b""
    r = host.ctl("logs", "hers", user=other, check=False)
    assert r.returncode == 1 and b"may not read the logs of agent 'hers'" in r.stderr, r
    assert r.stdout == b""

    # --follow: a restart's events arrive on the running command.
    follow = subprocess.Popen(["runuser", "-u", "alice", "--", PYTHON, "-m", "ctl",
                               "--socket", host.socket, "logs", "hers", "-f", "-o", "cat"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
                              env={**host.env, "HOME": "/home/alice", "USER": "alice"})
    try:
        os.set_blocking(follow.stdout.fileno(), False)
        seen = bytearray()

        def read(text: bytes) -> bool:
            seen.extend(follow.stdout.read() or b"")
            return text in seen
        wait_for(lambda: read(b"agent hers: spawned agent"), 15, "follow's first lines")
        host.ctl("restart", "hers", user="alice", timeout=40)
        again = control.wait_running(["hers"])["hers"]
        wait_for(lambda: read(f"as session {again['session']}".encode()), 20,
                 "follow to print the restart's spawn")
    finally:
        follow.kill()
        follow.wait()
