"""Issue 16, "Events": `clowderctl events [--follow] [--json] [SESSION]` and the journal.

Under a real systemd, both scopes: a watcher following with --json sees, in order, a
session's start, busy, idle, a bell, an OSC 9 notification and its exit code; the journal
has each with its MESSAGE_ID; another user's stream shows none of it; following goes on
across a restart and a crash of the host (host-started says which).  The byte scanner's
cases (split sequences, strings, caps) are checked in-process.
"""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import threading

import pytest

from conftest import PYTHON, ROOT, wait_for
from test_access import system_host  # noqa: F401  (alice, bob and the system host)

sys.path.insert(0, ROOT)
from clowder_common import events  # noqa: E402
from ptyhostd.alerts import MAX_STRINGS, TEXT_CAP, Alerts  # noqa: E402

# Prints, goes quiet past the 2 s rule, rings, notifies, exits 7.
LIFE = ("echo hello; sleep 3; printf '\\a'; sleep 1; printf '\\033]9;build done\\007'; "
        "sleep 0.5; exit 7")


class Stream:
    """`clowderctl events --follow --json` running as ``user``, its lines collected."""

    def __init__(self, host, *args: str, user: str | None = None):
        env = dict(host.env)
        if user:
            env.update(HOME=pwd.getpwnam(user).pw_dir, USER=user)
        argv = host._as([PYTHON, "-m", "ctl", "--socket", host.socket, "events", "--follow",
                         "--json", *args], user)
        self.proc = subprocess.Popen(argv, env=env, cwd="/", stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._errors, daemon=True).start()
        wait_for(lambda: any("following" in e for e in self.errors), 15,
                 f"events --follow to start following: {self.errors}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def _errors(self) -> None:
        for line in self.proc.stderr:
            self.errors.append(line)

    def of(self, sid: str) -> list[dict]:
        return [e for e in self.events if e.get("session") == sid]

    def wait(self, predicate, what: str, timeout: float = 20) -> list[dict]:
        return wait_for(lambda: [e for e in list(self.events) if predicate(e)], timeout,
                        f"{what} in the event stream: {self.events[-10:]} {self.errors}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _in_order(got: list[str], wanted: list[str]) -> bool:
    it = iter(got)
    return all(any(k == w for k in it) for w in wanted)


ORDER = ["session-started", "session-busy", "session-idle", "session-bell",
         "session-notification", "session-ended"]


def test_follow_json_reports_a_sessions_life_in_order_and_the_journal_has_it(host):
    stream = Stream(host)
    try:
        sid = host.spawn("sh", "-c", LIFE, name="life")
        stream.wait(lambda e: e.get("session") == sid and e["kind"] == "session-ended",
                    "the session's end")
        mine = stream.of(sid)
        kinds = [e["kind"] for e in mine]
        assert _in_order(kinds, ORDER), kinds
        ended = mine[-1]
        assert ended["kind"] == "session-ended" and ended["exit_code"] == 7, ended
        assert ended["status"] == "exited" and ended["signal"] is None, ended
        note = next(e for e in mine if e["kind"] == "session-notification")
        assert (note["source"], note["body"]) == ("osc9", "build done"), note
        assert all(e["name"] == "life" and e["uid"] == host.uid for e in mine), mine
        assert all(isinstance(e["time"], float) for e in mine)
        assert [e["time"] for e in mine] == sorted(e["time"] for e in mine)
    finally:
        stream.close()
    # Without --follow: the recent ones, then exit.
    recent = [json.loads(line) for line in host.ctl("events", "--json", sid).stdout.split(b"\n")
              if line]
    assert _in_order([e["kind"] for e in recent if e["session"] == sid], ORDER), recent
    text = host.ctl("events", sid).stdout.decode()
    assert "session-ended" in text and "exit 7" in text and "[osc9] build done" in text, text

    def journal() -> set:
        out = subprocess.run(["journalctl", "--no-pager", "-o", "json",
                              f"CLOWDER_SESSION={sid}"], capture_output=True, text=True).stdout
        return {json.loads(line).get("MESSAGE_ID") for line in out.splitlines()}
    ids = {events.IDS[k] for k in ORDER}
    wait_for(lambda: ids <= journal(), 15,
             f"every event of the session in the journal with its MESSAGE_ID "
             f"(missing {[k for k in ORDER if events.IDS[k] not in journal()]})")


def test_the_hosts_journal_entries_carry_the_fields_of_a_log_line(host):
    """Each host log line is one journal entry with its message, priority, identifier,
    logger, the code's place and thread, and the line's own UPPERCASE fields (the event's
    MESSAGE_ID, CLOWDER_*), and no lowercase name (clowder_common/log.JournalHandler)."""
    sid = host.spawn("sh", "-c", "exit 7")

    def ended() -> list:
        out = subprocess.run(["journalctl", "--no-pager", "-o", "json",
                              f"CLOWDER_SESSION={sid}",
                              f"MESSAGE_ID={events.IDS['session-ended']}"],
                             capture_output=True, text=True).stdout
        return [json.loads(line) for line in out.splitlines()]
    [entry] = wait_for(ended, 15, "the session's end in the journal")
    assert entry["SYSLOG_IDENTIFIER"] == "ptyhostd" and entry["LOGGER"] == "ptyhostd", entry
    assert entry["PRIORITY"] == "6" and sid in entry["MESSAGE"], entry
    assert entry["CODE_FILE"].endswith(".py") and "/ptyhostd/" in entry["CODE_FILE"], entry
    assert entry["CODE_LINE"].isdigit() and entry["CODE_FUNC"] and entry["THREAD_NAME"], entry
    assert entry["CLOWDER_EVENT"] == "session-ended", entry
    assert not [k for k in entry if not k.isupper()], entry


def test_another_user_sees_none_of_it(system_host):  # noqa: F811
    h = system_host
    bob = Stream(h, user="bob")
    root = Stream(h)
    try:
        sid = h.spawn("sh", "-c", LIFE, name="alices", user="alice", cwd="/home/alice")
        root.wait(lambda e: e.get("session") == sid and e["kind"] == "session-ended",
                  "alice's session's end, seen by root")
        assert _in_order([e["kind"] for e in root.of(sid)], ORDER)
        # Bob's own session ends after alice's: his stream got that far.
        his = h.spawn("sh", "-c", "echo hi; exit 3", user="bob", cwd="/home/bob")
        bob.wait(lambda e: e.get("session") == his and e["kind"] == "session-ended",
                 "bob's own session's end")
        assert bob.of(sid) == [], bob.of(sid)
        assert all(e.get("uid") in (None, 2002) for e in bob.events), bob.events
    finally:
        bob.close()
        root.close()
    out = h.ctl("events", "--json", user="bob").stdout.decode()
    assert sid not in out and "alices" not in out, out
    assert his in out
    proc = h.ctl("events", sid, user="bob", check=False)
    assert proc.returncode == 1 and b"no such session" in proc.stderr, proc.stderr
    proc = h.ctl("events", "--follow", "alices", user="bob", check=False)
    assert proc.returncode == 1 and b"no such session" in proc.stderr, proc.stderr
    assert sid in h.ctl("events", "--json", user="alice").stdout.decode()


def test_follow_goes_on_across_a_restart_and_a_crash(host):
    stream = Stream(host)
    try:
        host.restart()
        stream.wait(lambda e: e["kind"] == "host-started" and e["cause"] == "restart",
                    "host-started (restart)")
        host.kill9()
        stream.wait(lambda e: e["kind"] == "host-started" and e["cause"] == "crash recovery",
                    "host-started (crash recovery)")
        host.systemctl("reload", "clowder-ptyhost.service")
        stream.wait(lambda e: e["kind"] == "host-started" and e["cause"] == "hand-off",
                    "host-started (hand-off)")
        sid = host.spawn("sh", "-c", "exit 4")
        stream.wait(lambda e: e.get("session") == sid and e["kind"] == "session-ended"
                    and e["exit_code"] == 4, "a new session's end after the restarts")
        started = [e for e in stream.events if e["kind"] == "host-started"]
        assert [e["cause"] for e in started] == ["restart", "crash recovery", "hand-off"], \
            started
        assert all(e["session"] is None and e["uid"] is None for e in started)
    finally:
        stream.close()


# --- the scanner, in-process ------------------------------------------------------------

def _scan(*chunks: bytes) -> list:
    a = Alerts()
    return [x for c in chunks for x in a.feed(c)]


def test_bells_outside_strings_only_and_split_anywhere():
    assert _scan(b"a\x07b") == [("bell", {})]
    assert _scan(b"\x1b]0;title\x07") == []  # BEL ends an OSC: no bell
    assert _scan(b"\x1bPq#0;2;0;0;0\x07data\x1b\\") == []  # inside DCS: data
    assert _scan(b"\x1b_Gf=100;\x07\x1b\\") == []  # inside APC
    # tmux's passthrough: ESC doubled inside the DCS; the BEL after it is a bell.
    assert _scan(b"\x1bPtmux;\x1b\x1b]0;x\x07\x1b\x1b\\\x1b\\ok\x07") == [("bell", {})]
    whole = b"x\x1b]9;split me\x1b\\y\x07"
    for cut in range(1, len(whole)):
        assert _scan(whole[:cut], whole[cut:]) == _scan(whole), cut
    assert _scan(b"\x1b", b"]0;t\x07") == []
    assert _scan(b"\x1bP", b"\x07", b"\x1b", b"\\", b"\x07") == [("bell", {})]


def test_notifications_of_each_kind_capped_and_cleaned():
    n = _scan(b"\x1b]9;done\x07")
    assert n == [("notification", {"source": "osc9", "title": "", "body": "done"})]
    assert _scan(b"\x1b]9;4;1;50\x07") == []  # ConEmu's progress, not a notification
    assert _scan(b"\x1b]777;notify;Title;Body; with ;\x1b\\") == [
        ("notification", {"source": "osc777", "title": "Title", "body": "Body; with ;"})]
    assert _scan(b"\x1b]99;i=1:d=0;Hello\x1b\\", b"\x1b]99;i=1:p=body;World\x1b\\") == [
        ("notification", {"source": "osc99", "title": "Hello", "body": "World"})]
    assert _scan(b"\x1b]99;e=1;SGk=\x1b\\")[0][1]["title"] == "Hi"
    (_, f), = _scan(b"\x1b]9;a\x01\x7fb\xe2\x80\xaec\xff" + b"z" * 10000 + b"\x07")
    assert f["body"].startswith("abc\ufffd") and len(f["body"]) == TEXT_CAP, f["body"][:10]


def test_a_flood_of_tiny_strings_is_skipped_to_its_last():
    flood = b"\x1b]0;x\x07" * (MAX_STRINGS * 4) + b"\x1b]9;last"
    a = Alerts()
    assert a.feed(flood) == []
    assert a.feed(b"\x07") == [("notification", {"source": "osc9", "title": "",
                                                  "body": "last"})]
