"""Issue 17, "Reboot": sessions' records and last screens on disk, across a reboot.

The host saves each session's record and last screen in its state directory
(ptyhostd/statedir.py).  The acceptance test boots a nested systemd instance inside the
test instance (tools/sysinstance.py; instances nest) twice, with /var/lib/clowder*,
/etc/clowder kept across the two boots: agents and plain sessions run, the instance is
powered off and booted again, and the old sessions are listed as ended by the reboot
with their last screens while the agents run again through their resume commands.
The other tests run against the test instance's own host: a file made to look like one
of a previous boot (its record's boot changed) is restored as the reboot restores it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import PYTHON, ROOT, Env, ensure_user, wait_for
from dirwatch import Renames
from nested import Instance, InstanceError, Nested, kept_dirs, remove_kept, sane_env
from test_attach import Attach

sys.path.insert(0, ROOT)
from ptyhostd import statedir  # noqa: E402


def state_dir(host) -> str:
    """The host's $STATE_DIRECTORY, as systemd gave it (system or user scope)."""
    pid = host.main_pid()
    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    given = [e[len(b"STATE_DIRECTORY="):].decode() for e in env
             if e.startswith(b"STATE_DIRECTORY=")]
    assert given, "the host runs without a state directory (StateDirectory= in its unit)"
    return given[0]


def saved_file(host, sid: str) -> str:
    return os.path.join(state_dir(host), statedir.SUBDIR, sid + statedir.SUFFIX)


def read_saved(path: str) -> tuple[dict, bytes]:
    data = open(path, "rb").read()
    assert data.startswith(statedir.MAGIC), data[:100]
    head, _, body = data[len(statedir.MAGIC):].partition(b"\n")
    return json.loads(head), body


def journal_problem(host, cause: str, since: float) -> str:
    out = host.run(["journalctl", "--no-pager", "-o", "cat", f"--since=@{since:.0f}",
                    f"MESSAGE_ID={statedir.events.IDS['state-dir-problem']}",
                    f"CLOWDER_CAUSE={cause}"]).stdout.decode(errors="replace")
    return out.strip()


def as_previous_boot(host, sid: str, new_id: str) -> None:
    """Copy ``sid``'s saved file as session ``new_id`` of another boot, as the host
    would find it after a reboot (the FD store does not have it)."""
    rec, body = read_saved(wait_for(lambda: os.path.exists(saved_file(host, sid))
                                    and saved_file(host, sid), 20,
                                    f"session {sid}'s file in the state directory"))
    rec.update(id=new_id, boot="an-earlier-boot", state="running")
    path = saved_file(host, new_id)
    with open(path, "wb") as f:
        f.write(statedir.MAGIC + json.dumps(rec).encode() + b"\n" + body)
    os.chown(path, host.uid, -1)
    os.chmod(path, 0o600)


# --- against the test instance's own host ------------------------------------------------


def test_a_session_of_an_earlier_boot_is_listed_with_its_last_screen(host):
    """ps (and --json) lists it as ended by the reboot; snapshot and history give its
    last screen and scrollback; rm removes it and its file."""
    sid = host.spawn("sh", "-c", "i=0; while [ $i -lt 60 ]; do echo line-$i; i=$((i+1)); "
                     "done; printf '\\033[31mRED-LAST-SCREEN\\033[0m'; exec sleep 100000")
    wait_for(lambda: b"RED-LAST-SCREEN" in host.backlog(sid), 10, "the session's output")
    wait_for(lambda: os.path.exists(saved_file(host, sid))
             and b"RED-LAST-SCREEN" in open(saved_file(host, sid), "rb").read(), 20,
             "the session's last screen to be saved")
    old = "0123abcd"
    as_previous_boot(host, sid, old)
    host.restart()
    # A plain ps first: listing it to its owner counts as seeing its end.
    table = host.ctl("ps").stdout.decode()
    assert re.search(rf"^{old}\s.*\sreboot\s", table, re.M), table
    info = host.ps()[old]
    assert info["ended_by"] == "reboot" and info["state"] == "lost", info
    assert info["pid"] == 0
    text = host.ctl("snapshot", old).stdout.decode()
    assert "RED-LAST-SCREEN" in text and "line-59" in text, text
    ansi = host.ctl("snapshot", "--format", "ansi", old).stdout.decode()
    assert re.search(r"\x1b\[(31|38;5;1)mRED-LAST-SCREEN", ansi), ansi  # its colour too
    hist = host.ctl("history", "--lines", "100", old).stdout.decode()
    assert "line-0\n" in hist and "line-59" in hist, hist
    # No line twice, none missing: the saved scrollback ends where the screen begins.
    assert hist == host.ctl("history", "--lines", "100", sid).stdout.decode(), hist
    # The running session was adopted from the FD store as ever, not restored.
    assert host.ps()[sid]["state"] == "running" and host.ps()[sid]["ended_by"] is None
    host.ctl("rm", old)
    assert old not in host.ps()
    assert not os.path.exists(saved_file(host, old))
    host.ctl("kill", sid)


def test_another_user_sees_nothing_of_a_saved_session(systemd_required):
    """A session of an earlier boot keeps its owner: another user can neither list,
    snapshot, read the history of, nor remove it."""
    h = Env("system")
    h.stop_all()
    h.install()
    subprocess.run(["getent", "group", "clowder"], check=True, capture_output=True)
    ensure_user("alice", 2001, "clowder")
    ensure_user("bob", 2002, "clowder")
    h.start()
    try:
        sid = h.spawn("sh", "-c", "echo ALICE-SECRET; exec sleep 100000", user="alice",
                      cwd="/home/alice")
        wait_for(lambda: b"ALICE-SECRET" in h.backlog(sid, user="alice"), 10, "output")
        old = "0a1ce000"
        as_previous_boot(h, sid, old)
        h.restart()
        assert h.ps(user="alice")[old]["ended_by"] == "reboot"
        assert old not in h.ps(user="bob")
        for args in (["snapshot", old], ["history", old], ["backlog", old], ["rm", old]):
            proc = h.ctl(*args, user="bob", check=False, stdin=subprocess.DEVNULL)
            assert proc.returncode != 0 and b"no such session" in proc.stderr, (args, proc)
        assert b"ALICE-SECRET" in h.ctl("snapshot", old, user="alice").stdout
        # A Spawn naming her session as the one it resumes opens on nothing of it.
        spawn = ("import sys; from ctl.client import Client; import clowder_wire as P\n"
                 "with Client(sys.argv[1]) as c:\n"
                 "    r = c.request(P.Spawn(argv=['sh', '-c', 'echo BOB; exec sleep 1000'],"
                 " cwd='/', resumes=sys.argv[2]), P.SessionInfo)\n"
                 "print(r.session['id'])\n")
        bobs = h.run([PYTHON, "-c", spawn, h.socket, old], user="bob",
                     cwd=ROOT).stdout.decode().strip()
        wait_for(lambda: b"BOB" in h.backlog(bobs, user="bob"), 10, "bob's session's output")
        assert b"ALICE-SECRET" not in h.backlog(bobs, user="bob")
        assert b"last screen before the reboot" not in h.backlog(bobs, user="bob")
        h.ctl("kill", bobs, user="bob")
        assert os.path.exists(saved_file(h, old))
        h.ctl("rm", old, user="alice")
        assert not os.path.exists(saved_file(h, old))
    finally:
        h.stop_all()
    assert h.session_units() == []


def test_a_line_longer_than_the_files_room_is_saved_by_its_end(host):
    """A program that printed more than a file's scrollback room (FILE_MAX / 2) without
    a newline: its one line did not fit and nothing of its scrollback was saved
    (history.fit), only the screen; now the end of the line, as much as fits."""
    sid = host.spawn("sh", "-c", "head -c 400000 /dev/zero | tr '\\0' x; "
                     "printf 'TAIL-MARK'; exec sleep 100000", size="80x24")
    wait_for(lambda: b"TAIL-MARK" in host.backlog(sid), 30, "the program's output")
    path = wait_for(lambda: os.path.exists(saved_file(host, sid)) and saved_file(host, sid),
                    20, "the session's file in the state directory")
    _rec, body = read_saved(path)
    screen = 80 * 24
    assert body.count(b"x") > statedir.FILE_MAX // 4, \
        f"{body.count(b'x')} x saved: only the screen's ({screen}), no scrollback"
    host.ctl("kill", sid)


def test_a_corrupt_state_directory_is_reported_and_the_host_serves(host):
    """Garbage, a truncated record, a half-written file and someone else's file: each
    is reported (MESSAGE_ID state-dir-problem) and left out; the host serves."""
    sid = host.spawn("sh", "-c", "echo KEPT; exec sleep 100000")
    wait_for(lambda: os.path.exists(saved_file(host, sid)), 20, "the session's file")
    where = os.path.join(state_dir(host), statedir.SUBDIR)
    files = {"garbage.saved": os.urandom(3000),
             "0badf00d.saved": statedir.MAGIC + b'{"id": "0badf00d", "na',
             "0badf00e.saved.tmp": statedir.MAGIC + b"{}\n",
             "0badf00f.saved": b"\x00" * 100}
    for name, data in files.items():
        with open(os.path.join(where, name), "wb") as f:
            f.write(data)
        os.chown(os.path.join(where, name), host.uid, -1)
    foreign = os.path.join(where, "0badf010.saved")
    with open(foreign, "wb") as f:
        f.write(open(saved_file(host, sid), "rb").read().replace(sid.encode(), b"0badf010"))
    os.chown(foreign, 4242, -1)
    since = time.time() - 1
    host.restart()
    said = wait_for(lambda: journal_problem(host, "state-corrupt", since), 15,
                    "the journal to report the corrupt state directory")
    assert "state directory" in said, said
    ps = host.ps()
    assert ps[sid]["state"] == "running"
    assert not {"0badf00d", "0badf00e", "0badf00f", "0badf010"} & ps.keys(), ps
    assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == "active"
    new = host.spawn("sh", "-c", "echo STILL-SERVING; exec sleep 100000")
    wait_for(lambda: b"STILL-SERVING" in host.backlog(new), 10, "a new session's output")
    for sess in (sid, new):
        host.ctl("kill", sess)
    os.unlink(foreign)


def test_a_full_state_directory_is_reported_and_the_host_serves(systemd_required):
    """ENOSPC on every write (a tiny tmpfs over the state directory): reported, and
    sessions, snapshots and new spawns go on."""
    h = Env("system")
    h.stop_all()
    h.install()
    where = "/var/lib/clowder-ptyhost"
    os.makedirs(where, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k,mode=0700", "tmpfs", where],
                   check=True)
    try:
        since = time.time() - 1
        h.start()
        sid = h.spawn("sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo filler-line-$i; "
                      "i=$((i+1)); done; exec sleep 100000")
        wait_for(lambda: b"filler-line-1999" in h.backlog(sid), 15, "the session's output")
        said = wait_for(lambda: journal_problem(h, "state-full", since), 20,
                        "the journal to report the full state directory")
        assert "No space left" in said, said
        assert "filler-line-1999" in h.ctl("snapshot", sid).stdout.decode()
        new = h.spawn("sh", "-c", "echo STILL-SERVING; exec sleep 100000")
        wait_for(lambda: b"STILL-SERVING" in h.backlog(new), 10, "a new session's output")
        assert not [n for n in os.listdir(os.path.join(where, statedir.SUBDIR))
                    if n.endswith(".tmp")], "a failed write left its temporary file"
    finally:
        h.stop_all()
        subprocess.run(["umount", where], check=True)
    assert h.session_units() == []


def test_a_flooding_session_does_not_make_the_host_write_more_than_its_bound(host):
    """Hostile: three sessions flood for ~12 s; every write of every file is seen (inotify
    reports each rename of a finished temporary file) and counted: at most one write per
    session and INTERVAL, each at most FILE_MAX, at most ROUND_BUDGET a round."""
    flood = "while :; do echo \"$(date +%N) flooding the terminal with text\"; done"
    where = os.path.join(state_dir(host), statedir.SUBDIR)
    seconds = 12.0
    with Renames(where) as renames:
        sids = [host.spawn("sh", "-c", flood) for _ in range(3)]
        written = renames.collect(seconds)
    for sid in sids:
        host.ctl("kill", sid)
    mine = [(name, size) for name, size in written
            if name.endswith(statedir.SUFFIX) and name[:-len(statedir.SUFFIX)] in sids]
    assert mine, "nothing of the flooding sessions was saved"
    rounds = seconds / statedir.INTERVAL + 1
    for sid in sids:
        writes = [size for name, size in mine if name.startswith(sid)]
        assert len(writes) <= rounds + 1, (sid, len(writes), rounds)
        assert max(writes or [0]) <= statedir.FILE_MAX, (sid, writes)
    total = sum(size for _, size in mine)
    assert total <= statedir.ROUND_BUDGET * (rounds + 1), total
    from conftest import SUMMARY
    SUMMARY.append(f"test_reboot flood: {len(mine)} files written, {total} bytes in "
                   f"{seconds:g} s by 3 flooding sessions")


def test_past_the_cap_the_files_of_the_oldest_ended_sessions_go(host):
    """$CLOWDER_STATE_BYTES caps the directory: the file of the session that ended
    first goes (the session itself stays, for ps, until removed).  The host restarts
    after the first two: the files it found are measured when the cap is first needed
    (StateDir._measure), not at its start, and still count."""
    host.drop_in("[Service]\nEnvironment=CLOWDER_STATE_BYTES=40000\n")
    host.restart()
    sids = []
    for i in range(3):
        if i == 2:
            host.restart()
        sid = host.spawn("seq", "100000", "104000")
        wait_for(lambda: host.ps()[sid]["state"] == "exited", 10, "the session to end")
        wait_for(lambda: os.path.exists(saved_file(host, sid))
                 and read_saved(saved_file(host, sid))[0]["state"] == "exited", 20,
                 f"session {sid}'s file, ended")
        sids.append(sid)
        if len(sids) < 3:  # two fit under the cap
            assert 12000 < os.path.getsize(saved_file(host, sid)) < 20000
    first, second, third = sids
    wait_for(lambda: not os.path.exists(saved_file(host, first)), 15,
             "the first ended session's file to go for the cap")
    assert os.path.exists(saved_file(host, third))
    assert first in host.ps()
    for sid in sids:
        host.ctl("rm", sid)


# --- a nested instance, powered off and booted again -------------------------------------


def plain_and_agent(box, plain_mark: str, agent_mark: str) -> tuple[str, dict]:
    """Spawn a plain session printing ``plain_mark``; wait for it and for agent "bot"
    (which prints ``agent_mark``) to run and print.  The plain session's id, the agent's
    session as ps has it."""
    plain = box.ctl("spawn", "--name", "plain", "--", "sh", "-c",
                    f"printf '{plain_mark}\\n'; exec sleep 100000").stdout.decode().strip()
    agent = wait_for(lambda: [s for s in box.ps().values() if s["name"] == "agent:bot"
                              and s["state"] == "running"], 60, "the agent to run")[0]
    wait_for(lambda: agent_mark.encode() in box.ctl("backlog", agent["id"]).stdout, 15,
             "the agent's first output")
    wait_for(lambda: plain_mark.encode() in box.ctl("backlog", plain).stdout, 15,
             "the plain session's output")
    return plain, agent


def frozen_then_resumed(box, last: bytes, resumed: bytes, go) -> None:
    """`attach --agent bot` shows the frozen last screen (holding ``last``) and the
    notice, and nothing of the resumed program until ``go()`` lets it print
    ``resumed``, which then comes."""
    client = Attach(box, "bot", "--agent", cols=100, rows=30)
    try:
        client.expect(last, 20, "the frozen last screen")
        client.expect(b"clowder: last screen before the reboot at", 10, "the notice")
        client.expect(b"the agent was resumed", 10, "the notice's end")
        assert resumed not in client.out
        go()
        client.expect(resumed, 20, "the resumed program's output")
    finally:
        client.close()


CONFIG = """\
agents:
  - name: bot
    command: "sh -c 'printf \\"BOT-FIRST-RUN %s\\\\n\\" $$; exec sleep 100000'"
    resume: "sh -c 'while [ ! -e /run/clowder-go ]; do sleep 0.1; done; printf \\"BOT-RESUMED\\\\n\\"; exec sleep 100000'"
    cwd: /
"""


def test_sessions_and_agents_across_a_reboot(systemd_required):
    """Acceptance 1: an agent and a plain session run; the instance is powered off and
    booted again with its state directories kept; ps lists both old sessions as ended
    by the reboot with their last screens; the agent runs again through its resume
    command; `attach --agent` shows the frozen last screen and the notice, then the
    resumed program's output."""
    kept, binds = kept_dirs("clowder-reboot-")
    inst = Instance("clowder-reboot", boot_timeout=90, kept=binds)
    try:
        inst.start()
        box = Nested(inst)
        box.install()
        with open(os.path.join(kept, "etc", "clowder.yaml"), "w") as f:
            f.write(CONFIG)
        box.run("systemctl", "start", "clowder-control.service")
        plain, agent = plain_and_agent(box, "PLAIN-LAST-SCREEN", "BOT-FIRST-RUN")
        inst.stop(timeout=60)  # a poweroff: systemd stops every unit, the host too
        files = os.listdir(os.path.join(kept, "ptyhost", statedir.SUBDIR))
        assert f"{plain}.saved" in files and f"{agent['id']}.saved" in files, files

        inst.start()
        box.install()
        box.run("systemctl", "start", "clowder-control.service")
        table = box.ctl("ps").stdout.decode()  # before ps --all, which counts as seeing
        assert re.search(rf"^{plain}\s.*\sreboot\s", table, re.M), table
        ps = box.ps()
        for sid, mark in ((plain, "PLAIN-LAST-SCREEN"), (agent["id"], "BOT-FIRST-RUN")):
            assert ps[sid]["ended_by"] == "reboot" and ps[sid]["state"] == "lost", ps[sid]
            assert mark in box.ctl("snapshot", sid).stdout.decode()
        new = wait_for(lambda: [s for s in box.ps().values() if s["name"] == "agent:bot"
                                and s["state"] == "running"], 60,
                       "the agent to run again after the reboot")[0]
        assert new["id"] != agent["id"]
        assert "clowder-go" in " ".join(new["argv"]), new  # the resume command
        frozen_then_resumed(box, b"BOT-FIRST-RUN", b"BOT-RESUMED",
                            lambda: box.run("touch", "/run/clowder-go"))
        box.ctl("rm", plain)
        assert not os.path.exists(os.path.join(kept, "ptyhost", statedir.SUBDIR,
                                               f"{plain}.saved"))
    except InstanceError as exc:
        pytest.fail(f"the nested instance failed: {exc}")
    finally:
        inst.stop(timeout=60)
        remove_kept(kept)


# --- the user scope: a lingering user's units, across the same reboot --------------------

import pwd  # noqa: E402
import shutil  # noqa: E402

REBOOT_USER, REBOOT_UID = "rebooter", 2207
USER_GO = "/tmp/clowder-user-go"  # /tmp is a fresh tmpfs at each boot: the go file goes
USER_CONFIG = f"""\
agents:
  - name: bot
    command: "sh -c 'printf \\"USERBOT-FIRST-RUN %s\\\\n\\" $$; exec sleep 100000'"
    resume: "sh -c 'while [ ! -e {USER_GO} ]; do sleep 0.1; done; printf \\"USERBOT-RESUMED\\\\n\\"; exec sleep 100000'"
    cwd: /home/{REBOOT_USER}
"""


class NestedUser(Nested):
    """clowder of an unprivileged user inside a nested instance: commands run as that user
    (runuser) against their user manager's host."""

    def __init__(self, inst: Instance, user: str, uid: int):
        super().__init__(inst)
        self.user, self.uid = user, uid
        self.home = f"/home/{user}"
        runtime = f"/run/user/{uid}"
        self.socket = f"{runtime}/clowder/ptyhost.sock"
        self.user_env = [f"HOME={self.home}", f"USER={user}", f"LOGNAME={user}",
                         f"XDG_RUNTIME_DIR={runtime}"]
        self.env = sane_env(dict(e.split("=", 1) for e in self.user_env))

    def _as(self, argv: list[str]) -> list[str]:  # for Attach
        return super()._as(["runuser", "-u", self.user, "--", "env", *self.user_env, *argv])

    def as_user(self, *argv, check=True) -> subprocess.CompletedProcess:
        return self.run("runuser", "-u", self.user, "--", "env", *self.user_env, *argv,
                        check=check)

    def ctl(self, *args, check=True) -> subprocess.CompletedProcess:
        return self.as_user(PYTHON, "-m", "ctl", "--socket", self.socket, *args, check=check)

    def start_logind(self) -> None:
        """The test instance masks logind (tools/sysinstance.py), anew at each boot; a
        real boot starts it, and it starts the user managers of the lingering users."""
        self.run("systemctl", "unmask", "systemd-logind.service")
        self.run("systemctl", "start", "systemd-logind.service")

    def wait_user_manager(self, why: str) -> None:
        wait_for(lambda: self.run("test", "-S", f"/run/user/{self.uid}/systemd/private",
                                  check=False).returncode == 0, 30, why)

    def state_directory(self) -> str:
        """The user host's $STATE_DIRECTORY, as its user manager gave it."""
        pid = self.as_user("systemctl", "--user", "show", "-p", "MainPID", "--value",
                           "clowder-ptyhost.service").stdout.decode().strip()
        assert pid and pid != "0", "the user's host is not running"
        env = self.run("cat", f"/proc/{pid}/environ").stdout.split(b"\0")
        given = [e[len(b"STATE_DIRECTORY="):].decode() for e in env
                 if e.startswith(b"STATE_DIRECTORY=")]
        assert given, "the user's host runs without a state directory"
        return given[0]


def test_a_lingering_users_sessions_and_agents_across_a_reboot(systemd_required):
    """Acceptance 1 in the user scope: a user with lingering enabled runs an agent and a
    plain session on their own units; the instance is powered off and booted again with
    the user's home and logind's linger records kept; the user manager comes back by
    lingering (nothing is installed or started for it again), the old sessions are
    listed as ended by the reboot with their last screens, the agent runs again through
    its resume command, and `attach --agent` shows the frozen last screen first."""
    uid = ensure_user(REBOOT_USER, REBOOT_UID)
    gid = pwd.getpwnam(REBOOT_USER).pw_gid
    kept = tempfile.mkdtemp(prefix="clowder-userboot-", dir="/var/tmp")
    home, linger = os.path.join(kept, "home"), os.path.join(kept, "linger")
    os.mkdir(home, 0o700)
    os.chown(home, uid, gid)  # the kept home belongs to the user's uid inside too
    os.mkdir(linger, 0o755)
    inst = Instance("clowder-userboot", boot_timeout=90,
                    kept=((home, f"/home/{REBOOT_USER}"), (linger, "/var/lib/systemd/linger")))
    try:
        inst.start()
        box = NestedUser(inst, REBOOT_USER, uid)
        box.start_logind()
        box.run("loginctl", "enable-linger", REBOOT_USER)  # logind starts user@UID for it
        box.wait_user_manager("the lingering user's manager to listen")
        box.ctl("install-units", "--user", "--exec-start", f"{PYTHON} -m ptyhostd")
        assert os.path.exists(os.path.join(linger, REBOOT_USER)), os.listdir(linger)
        config = os.path.join(home, ".config", "clowder")
        os.makedirs(config, exist_ok=True)
        with open(os.path.join(config, "clowder.yaml"), "w") as f:
            f.write(USER_CONFIG)
        for path in (config, os.path.join(config, "clowder.yaml")):
            os.chown(path, uid, gid)
        box.as_user("systemctl", "--user", "start", "clowder-control.service")
        plain, agent = plain_and_agent(box, "USER-PLAIN-LAST-SCREEN", "USERBOT-FIRST-RUN")
        where = box.state_directory()
        assert where.startswith(box.home + "/"), where  # in the kept home
        saved = os.path.join(home, where[len(box.home) + 1:], statedir.SUBDIR)
        inst.stop(timeout=60)  # a poweroff: the user manager and its units stop too
        files = os.listdir(saved)
        assert f"{plain}.saved" in files and f"{agent['id']}.saved" in files, files
        for name in files:
            assert os.stat(os.path.join(saved, name)).st_uid == uid, name

        inst.start()
        box.start_logind()  # and nothing else: lingering brings the user manager back
        box.wait_user_manager("the user manager to come back by lingering")
        table = box.ctl("ps").stdout.decode()  # before ps --all, which counts as seeing
        assert re.search(rf"^{plain}\s.*\sreboot\s", table, re.M), table
        new = wait_for(lambda: [s for s in box.ps().values() if s["name"] == "agent:bot"
                                and s["state"] == "running"], 60,
                       "the user's agent to run again after the reboot")[0]
        ps = box.ps()
        for sid, mark in ((plain, "USER-PLAIN-LAST-SCREEN"), (agent["id"], "USERBOT-FIRST-RUN")):
            assert ps[sid]["ended_by"] == "reboot" and ps[sid]["state"] == "lost", ps[sid]
            assert mark in box.ctl("snapshot", sid).stdout.decode()
        assert new["id"] != agent["id"]
        assert USER_GO in " ".join(new["argv"]), new  # the resume command
        frozen_then_resumed(box, b"USERBOT-FIRST-RUN", b"USERBOT-RESUMED",
                            lambda: box.as_user("touch", USER_GO))
        box.ctl("rm", plain)
        assert not os.path.exists(os.path.join(saved, f"{plain}.saved"))
    except InstanceError as exc:
        pytest.fail(f"the nested instance failed: {exc}")
    finally:
        inst.stop(timeout=60)
        shutil.rmtree(kept)


def test_with_the_saves_off_nothing_is_saved_nor_restored(host):
    """CLOWDER_STATE_SAVES=0 (bench/statedir.py measures the saves' cost with it): the
    host runs as without a state directory: a file of an earlier boot is neither
    restored nor removed; with the saves on again, it is restored."""
    sid = host.spawn("sh", "-c", "echo SAVED-BEFORE; exec sleep 100000")
    wait_for(lambda: b"SAVED-BEFORE" in host.backlog(sid), 10, "the session's output")
    old = "05a7e500"
    as_previous_boot(host, sid, old)
    host.drop_in("[Service]\nEnvironment=CLOWDER_STATE_SAVES=0\n")
    host.restart()
    assert old not in host.ps()
    assert os.path.exists(saved_file(host, old))  # left as it was
    new = host.spawn("sh", "-c", "echo NOT-SAVED; exec sleep 100000")
    wait_for(lambda: b"NOT-SAVED" in host.backlog(new), 10, "the new session's output")
    host.remove_drop_ins()
    host.restart()
    assert host.ps()[old]["ended_by"] == "reboot"
    host.ctl("rm", old)
    for s in (sid, new):
        host.ctl("kill", s)
