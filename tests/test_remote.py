"""Issue 6, first slice: `clowderctl relay` and `clowderctl --host` over real ssh.

The remote is a real second machine as far as clowderctl can tell: a systemd instance of
its own (tools/sshhost.py, booted here, inside the test instance: instances nest) with
its own network namespace, Debian's sshd, a pinned host key and key-only login; the
units are installed there as on any server, and clowderctl reaches them only through
`ssh root@169.254.77.2 clowderctl relay`. The test side runs ssh in a network namespace
of its own (part of $CLOWDER_SSH), so no address is added where the tests run.

Needs the openssh-server debs fetched on the host first (`python3 tools/sshhost.py
fetch`): the instances have no network.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import PYTHON, ROOT, failed, print_journal, wait_for
import clowder_wire as protocol

sys.path.insert(0, os.path.join(ROOT, "tools"))
from sshhost import SshHost, SshHostError  # noqa: E402
from sysinstance import InstanceError  # noqa: E402

CONFIG = "/etc/clowder/clowder.yaml"
REGISTRY = "/var/lib/clowder/registry.json"
WORKDIR = "/root/work"
UNITS = ("clowder-control.service", "clowder-control.socket", "clowder-ptyhost.service",
         "clowder-ptyhost.socket")


def boot_box(name: str = "clowder-remote", index: int = 0,
             client: SshHost | None = None) -> SshHost:
    """An ssh box (tools/sshhost.py) booted, with clowder's units installed and WORKDIR
    made; stopped again if that fails.  ``index``/``client``: see SshHost."""
    try:
        b = SshHost(name, index=index, client=client).start()
    except (SshHostError, InstanceError) as exc:
        pytest.fail(f"the ssh box {name} did not start: {exc}")
    try:
        r = b.exec([PYTHON, "-m", "ctl", "install-units", "--system",
                    "--exec-start", f"{PYTHON} -m ptyhostd"], capture_output=True)
        assert r.returncode == 0, f"install-units on {name}: {r.stderr.decode()}"
        b.exec(["mkdir", "-p", WORKDIR], check=True)
    except BaseException:
        b.stop()
        raise
    return b


@pytest.fixture(scope="module")
def box():
    """The remote machine: booted once for this module, with clowder's units installed."""
    b = boot_box()
    try:
        yield b
    finally:
        b.stop()


class Remote:
    """clowderctl --host against the box, and the box's own view for checking."""

    def __init__(self, box: SshHost):
        self.box = box
        self.target = box.target
        self.env = {**os.environ, **box.env(),
                    # The project is installed in a venv, not on the box's PATH.
                    "CLOWDER_REMOTE_CTL": f"{PYTHON} -m ctl"}

    def ctl(self, *args, check=True, timeout=60) -> subprocess.CompletedProcess:
        """clowderctl --host BOX ARGS..., run here."""
        proc = subprocess.run([PYTHON, "-m", "ctl", "--host", self.target, *args],
                              env=self.env, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, cwd="/")
        if check and proc.returncode != 0:
            pytest.fail(f"clowderctl --host {' '.join(args)} exited {proc.returncode}: "
                        f"{proc.stderr.decode(errors='replace')}")
        return proc

    def agents(self) -> dict:
        status = json.loads(self.ctl("status", "--json").stdout)
        return {a["name"]: a for a in status["agents"]}

    def wait_running(self, name: str, timeout: float = 30) -> dict:
        return wait_for(lambda: (lambda a: a if a and a["state"] == "running" and a["pid"]
                                 else None)(self.agents().get(name)),
                        timeout, f"agent {name} to run on the remote")

    def write_config(self, text: str) -> None:
        self.box.put(CONFIG, text.encode())

    def main_pid(self, unit: str) -> int:
        out = self.box.exec(["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", unit],
                            capture_output=True, check=True).stdout.decode()
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return int(props["MainPID"]) if props["ActiveState"] == "active" else 0

    def kill9_and_wait(self, unit: str) -> int:
        """kill -9 a remote daemon; wait (asking systemd only) until it runs again."""
        old = self.main_pid(unit)
        assert old, f"{unit} is not running on the remote"
        self.box.exec(["kill", "-9", str(old)], check=True)
        # Nothing connects meanwhile: the new process is systemd's Restart=, not a
        # socket activation by one of our requests.
        return wait_for(lambda: (lambda p: p if p and p != old else 0)(self.main_pid(unit)),
                        30, f"systemd to restart {unit} on the remote after kill -9")

    def box_agents(self) -> dict:
        """Agents as the box itself sees them (no ssh)."""
        out = self.box.exec([PYTHON, "-m", "ctl", "status", "--json"], capture_output=True)
        if out.returncode != 0:
            return {}
        return {a["name"]: a for a in json.loads(out.stdout)["agents"]}

    def backlog(self, sid: str) -> bytes:
        """The session's output, read on the box itself (no client of ours attached)."""
        return self.box.exec([PYTHON, "-m", "ctl", "backlog", sid], capture_output=True,
                             check=True).stdout


@pytest.fixture
def remote(box, request):
    """The box with both sockets listening and no agents; everything stopped after (the
    box's journal printed first if the test failed)."""
    # Each test starts the sockets again (and stops them after): a few quick tests in a
    # row passed systemd's default start limit of a unit (5 starts in 10 s), and the
    # sockets failed with start-limit-hit (ci53, ci59).  reset-failed resets that count.
    box.exec(["systemctl", "reset-failed", *UNITS], capture_output=True)
    started = box.exec(["systemctl", "start", "clowder-ptyhost.socket",
                        "clowder-control.socket"], capture_output=True)
    if started.returncode != 0:
        # ci53: both failed once ("Job failed"), and the box's journal went with the run.
        print_journal(["-u", "clowder-ptyhost.socket", "-u", "clowder-control.socket",
                       "-u", "clowder-ptyhost.service", "-u", "clowder-control.service"],
                      "the box's journal",
                      run=lambda argv, **kw: box.exec(argv, **kw))
        results = box.exec(["systemctl", "show", "-p", "Id", "-p", "Result",
                            "clowder-ptyhost.socket", "clowder-control.socket"],
                           capture_output=True).stdout.decode(errors="replace").split()
        pytest.fail(f"the box's sockets did not start (exit {started.returncode}): "
                    f"{started.stderr.decode(errors='replace').strip()}; {results}")
    r = Remote(box)
    yield r
    if failed(request):
        print_journal(["-u", "clowder-control.service", "-u", "clowder-ptyhost.service",
                       "-u", "ssh.service", "-u", "clowder-session-*"], "the box's journal",
                      run=lambda argv, **kw: box.exec(argv, **kw))
    box.link(True)  # in case a test failed during its outage
    # The control daemon first: it would bring agents back as the host ends them.
    box.exec(["systemctl", "stop", *UNITS])
    box.exec(["rm", "-f", CONFIG, REGISTRY, REGISTRY + ".prev"])
    left = box.exec(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                     "clowder-session-*"], capture_output=True).stdout.decode().split()
    assert not left, f"session units left on the remote: {left}"


def agent_yaml(name: str, command: str) -> str:
    return (f"  - name: {name}\n    command: {json.dumps(command)}\n"
            f"    cwd: {WORKDIR}\n")


def frames(data: bytes) -> list[protocol.Message]:
    return protocol.FrameReader().feed(data)


# --- the relay, locally -------------------------------------------------------------------


def test_relay_with_nothing_listening_fails_at_once(tmp_path):
    """Acceptance 3: no socket file, or a socket nobody listens on: a clear error, now."""
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))  # bound, never listening: what a stopped socket unit leaves
    s.close()
    for path, why in ((tmp_path / "missing.sock", "no such socket"),
                      (stale, "connection refused")):
        start = time.monotonic()
        # stdin stays open: a relay that waited for anything would hang here.
        proc = subprocess.Popen([PYTHON, "-m", "ctl", "relay", "--socket", str(path)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd="/")
        try:
            out, err = proc.communicate(timeout=10)
        finally:
            proc.kill()
            proc.stdin.close()
        assert proc.returncode == 3, (proc.returncode, err)  # unreachable (ctl/exits.py)
        assert time.monotonic() - start < 5
        assert out == b""
        assert f"clowderctl relay: nothing listens at {path}: {why}".encode() in err, err


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_relay_copies_both_ways_and_half_closes(host):
    """Frames through the relay reach the control daemon; after our EOF its answers still
    come back (stdin EOF is a half-close), then the relay exits by itself."""
    request = protocol.encode(protocol.Hello(version=protocol.PROTOCOL_VERSION)) + \
        protocol.encode(protocol.GetStatus())
    proc = subprocess.run([PYTHON, "-m", "ctl", "relay"], input=request, capture_output=True,
                          timeout=30, cwd="/")
    assert proc.returncode == 0, proc.stderr
    kinds = [type(m) for m in frames(proc.stdout)]
    assert kinds == [protocol.Welcome, protocol.StatusReport], kinds


# --- through ssh ----------------------------------------------------------------------------


def test_control_commands_through_host(remote):
    remote.write_config("agents:\n" + agent_yaml("web", "sh -c 'echo up; exec sleep 100000'"))
    first = remote.wait_running("web")
    table = remote.ctl("status").stdout.decode()
    assert re.search(rf"^web\s+running\s+\S+\s+\S+\s+{first['pid']}\s", table, re.M), table
    # down says how the agent's program ended (sh ends at the hang-up).
    assert re.fullmatch(rb"web: down \(.*SIGHUP.*\)\n", remote.ctl("down", "web").stdout)
    assert remote.agents()["web"]["state"] != "running"
    up = json.loads(remote.ctl("up", "web", "--json").stdout)
    assert up["state"] == "running" and up["pid"] != first["pid"]
    again = json.loads(remote.ctl("restart", "web", "--json").stdout)
    assert again["state"] == "running" and again["pid"] != up["pid"]
    # A refused request is the daemon's error, passed through unchanged.
    nope = remote.ctl("up", "nope", check=False)
    assert nope.returncode == 1 and b"no such agent: 'nope'" in nope.stderr, nope.stderr
    # Session commands go through `relay --to host`, to the remote PTY host.
    ps = json.loads(remote.ctl("ps", "--json").stdout)
    assert [s["pid"] for s in ps if s["id"] == again["session"]] == [again["pid"]], ps
    sid = remote.ctl("spawn", "--cwd", WORKDIR, "--", "sh", "-c",
                     "pwd; echo spawned-$((6*7))").stdout.decode().strip()
    assert remote.ctl("wait", sid, check=False).returncode == 0
    assert remote.ctl("backlog", sid).stdout.replace(b"\r", b"") == \
        f"{WORKDIR}\nspawned-42\n".encode()
    remote.ctl("rm", sid)
    # Commands that read that machine's journal or files run there, whole.
    logs = remote.ctl("logs", "web").stdout.decode()
    assert re.search(r"agent web: .*restart", logs), logs
    check = remote.ctl("config", "check")
    assert CONFIG.encode() in check.stdout + check.stderr, check
    remote.box.put(CONFIG, b"agents:\n  - name: 7\n")
    bad = remote.ctl("config", "check", check=False)
    assert bad.returncode == 1 and f"{CONFIG}:2".encode() in bad.stderr, bad


def test_web_through_host_is_that_machines_login(remote):
    """`clowderctl --host BOX web` runs there whole: the URL is the box's clowder-web's,
    for the ssh user's uid there (root), and lists the box's sessions."""
    r = remote.box.exec([PYTHON, "-m", "ctl", "install-units", "--system", "--web",
                         "--exec-start", f"{PYTHON} -m ptyhostd"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    try:
        sid = remote.ctl("spawn", "--", "sleep", "100000").stdout.decode().strip()
        url = json.loads(remote.ctl("web", "--json").stdout)["url"]
        assert url.startswith("http://127.0.0.1:7380/login?token="), url
        script = ("import http.client, json, sys, urllib.parse\n"
                  "u = urllib.parse.urlsplit(sys.argv[1])\n"
                  "c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)\n"
                  "c.request('GET', u.path + '?' + u.query); r = c.getresponse(); r.read()\n"
                  "cookie = r.headers['Set-Cookie'].split(';')[0]\n"
                  "c.request('GET', '/api/sessions', headers={'Cookie': cookie})\n"
                  "print(c.getresponse().read().decode())\n")
        listed = json.loads(remote.box.exec([PYTHON, "-c", script, url], capture_output=True,
                                            check=True).stdout)
        assert listed["uid"] == 0 and sid in [s["id"] for s in listed["sessions"]], listed
        remote.ctl("kill", sid)
    finally:
        remote.box.exec(["systemctl", "stop", "clowder-web.service", "clowder-web.socket"])


def test_host_with_nothing_listening_there_fails_clearly(remote):
    remote.box.exec(["systemctl", "stop", "clowder-control.service", "clowder-control.socket"],
                    check=True)
    start = time.monotonic()
    proc = remote.ctl("status", check=False, timeout=30)
    assert proc.returncode == 3  # unreachable (ctl/exits.py): the relay's, passed on
    assert time.monotonic() - start < 10
    err = proc.stderr.decode()
    assert "nothing listens at /run/clowder/control.sock" in err, err
    assert "ssh exited with status 3" in err, err


def test_attach_survives_killed_ssh_and_a_network_outage(remote):
    """Acceptance 1: kill -9 the ssh client with the network down, leave the agent with
    no client for a while, bring the network back: attach reconnects by itself through a
    new ssh, the same processes run, and the terminal is repainted with what was missed."""
    from test_attach import DETACH, Attach
    remote.write_config("agents:\n" + agent_yaml(
        "job", "sh -c 'echo agent-up; PS1=\"job$ \" exec sh -i'"))
    before = remote.wait_running("job")
    a = Attach(_ViaSsh(remote), "job", "--agent")
    try:
        a.wait_raw()
        a.expect(b"agent-up", what="the agent's backlog, through ssh")
        a.type(b"sh -c 'echo job-pid=$$; i=0; while :; do i=$((i+1)); echo tick-$i; "
               b"sleep 0.2; done'\r")
        # The pty echoes the command with "$$" and "$i": digits come from the job only.
        job_pid = int(a.expect(re.compile(rb"job-pid=(\d+)"), what="the job's pid")[1])
        a.expect(re.compile(rb"tick-5\r\n"), what="the job's output, live through ssh")
        ssh_pid = _ssh_child(a.client_pid())

        remote.box.link(False)
        os.kill(ssh_pid, signal.SIGKILL)
        # With the network down every ssh attach starts fails; meanwhile the job goes on
        # with no client at all, as on a laptop that slept.
        seen = _last_tick(a.out)
        wait_for(lambda: _last_tick(remote.backlog(before["session"])) >= seen + 20, 30,
                 "the job to print 20 more lines on the remote with no client attached")
        assert a.proc.poll() is None, "attach gave up while the network was down"
        away = _last_tick(remote.backlog(before["session"]))
        remote.box.link(True)

        a.expect(b"\x1bc", timeout=60, what="attach to reconnect through a new ssh")
        # Whether the repaint replays the raw backlog or draws the screen, it shows the
        # last line the job printed while nobody was attached.
        a.expect(re.compile(rb"tick-%d(?!\d)" % away),
                 what=f"the repaint showing tick-{away}, printed while no client was there")
        a.expect(re.compile(rb"tick-" + str(away + 10).encode() + rb"\r\n"), timeout=30,
                 what="the job's output going on, live through the new connection")
        assert _ssh_child(a.client_pid()) != ssh_pid
        assert remote.box.ssh(["kill", "-0", str(job_pid)]).returncode == 0, \
            "the job's process is gone"
        assert remote.agents()["job"]["pid"] == before["pid"]
        assert remote.agents()["job"]["session"] == before["session"]
        a.type(b"\x03")  # Ctrl-C ends the job; the agent's shell carries on
        a.expect(b"job$ ", what="the agent's prompt after the job")
        a.type(DETACH)
        assert a.finish() == 0
    finally:
        a.close()


def test_attach_to_a_session_through_host(remote):
    """`--host BOX attach SID` (no agent): through `relay --to host`, typed input reaches
    the session, and a killed ssh is reconnected and repainted."""
    from test_attach import DETACH, Attach
    sid = remote.ctl("spawn", "--cwd", WORKDIR, "--", "sh", "-c",
                     "echo plain-up; PS1='plain$ ' exec sh -i").stdout.decode().strip()
    a = Attach(_ViaSsh(remote), sid)
    try:
        a.wait_raw()
        a.expect(b"plain-up", what="the session's screen, through ssh")
        a.type(b"echo typed-$((6*7))\r")
        a.expect(b"typed-42", what="typed input run by the session's shell")
        os.kill(_ssh_child(a.client_pid()), signal.SIGKILL)
        a.expect(b"\x1bc", timeout=60, what="attach to reconnect through a new ssh")
        a.expect(b"typed-42", what="the repaint after the reconnect")
        a.type(DETACH)
        assert a.finish() == 0
    finally:
        a.close()
    remote.ctl("kill", "--signal", "HUP", sid)  # an interactive sh ignores TERM
    assert remote.ctl("wait", sid, check=False).returncode != 0
    remote.ctl("rm", sid)


def test_remote_daemons_killed_are_restarted_and_keep_sessions(remote):
    """Acceptance 4: kill -9 of the remote control daemon, then of the remote host, then
    of both: systemd restarts them, and the agents' sessions and processes are the same."""
    remote.write_config("agents:\n" + agent_yaml(
        "keep", "sh -c 'echo keep-up; exec sleep 100000'") + agent_yaml(
        "also", "sh -c 'echo also-up; exec sleep 100000'"))
    remote.wait_running("keep")
    remote.wait_running("also")
    before = {n: (a["session"], a["pid"]) for n, a in remote.agents().items()}
    assert set(before) == {"keep", "also"}
    for units in (["clowder-control.service"], ["clowder-ptyhost.service"],
                  ["clowder-ptyhost.service", "clowder-control.service"]):
        for unit in units:
            remote.kill9_and_wait(unit)

        def same():
            agents = remote.agents()
            now = {n: (a["session"], a["pid"]) for n, a in agents.items()
                   if a["state"] == "running"}
            return now == before
        wait_for(same, 30, f"the same agents, sessions and pids after kill -9 of {units}")
        ps = json.loads(remote.box.exec([PYTHON, "-m", "ctl", "ps", "--json"],
                                        capture_output=True, check=True).stdout)
        running = {s["id"]: s["pid"] for s in ps if s["state"] == "running"}
        for sid, pid in before.values():
            assert running.get(sid) == pid, f"session {sid} lost after kill -9 of {units}"


def test_units_start_at_boot_and_bring_agents_up(remote):
    """The units install enabled: what a boot starts (multi-user.target and
    sockets.target pull them in) brings the control daemon, the host and the agents up
    with no client connecting first."""
    remote.write_config("agents:\n" + agent_yaml(
        "boot", "sh -c 'echo boot-up; exec sleep 100000'"))
    remote.box.exec(["systemctl", "stop", *UNITS], check=True)
    for unit in ("clowder-control.service", "clowder-control.socket",
                 "clowder-ptyhost.socket"):
        enabled = remote.box.exec(["systemctl", "is-enabled", unit], capture_output=True)
        assert enabled.stdout.decode().strip() == "enabled", (unit, enabled)
    # What a boot does: start the targets; their Wants= (the enabled units) come along.
    remote.box.exec(["systemctl", "start", "sockets.target", "multi-user.target"], check=True)
    wait_for(lambda: remote.main_pid("clowder-control.service"), 30,
             "clowder-control to be started by multi-user.target")
    agent = wait_for(lambda: (lambda a: a if a.get("state") == "running" else None)(
        remote.box_agents().get("boot", {})), 30, "agent boot to be started at boot")
    assert remote.main_pid("clowder-ptyhost.service"), "the host is not running"
    assert b"boot-up" in remote.backlog(agent["session"])


ECHO_PORT = 7777
ECHO = ("import socket, threading\n"
        "def echo(c):\n"
        "    while d := c.recv(65536): c.sendall(d)\n"
        "    c.close()\n"
        f"s = socket.create_server(('127.0.0.1', {ECHO_PORT}))\n"
        "while True: threading.Thread(target=echo, args=(s.accept()[0],)).start()\n")


def test_every_service_through_ssh_before_and_after_a_drop(remote, monkeypatch):
    """Acceptance 2: one ssh connection carries a session, Status, File, VCS and Forward
    (to a port on the remote's loopback); kill -9 the ssh client: a new connection finds
    the same agent (same pid, repainted) and every service answers again."""
    from ctl.mux import Mux
    from ctl.transport import Remote as Target
    from test_streams import check_every_service
    for key in ("CLOWDER_SSH", "CLOWDER_REMOTE_CTL"):
        monkeypatch.setenv(key, remote.env[key])
    box = remote.box
    git = ["git", "-C", WORKDIR, "-c", "user.name=t", "-c", "user.email=t@example.org"]
    box.exec(["sh", "-c", f"rm -rf {WORKDIR} && mkdir -p {WORKDIR} && "
              f"echo 'first line' > {WORKDIR}/README"], check=True)
    for args in (["init", "-q", "-b", "main"], ["add", "README"],
                 ["commit", "-q", "-m", "the first commit"]):
        box.exec(git + args, check=True, capture_output=True)
    box.exec(["systemd-run", "--unit=clowder-test-echo", "--collect", PYTHON, "-c", ECHO],
             check=True, capture_output=True)
    try:
        remote.write_config("agents:\n  - name: svc\n"
                            "    command: [sh, -c, 'echo svc-up; PS1=\"svc$ \" exec sh -i']\n"
                            f"    cwd: {WORKDIR}\n")
        before = remote.wait_running("svc")

        def append_readme(text: str) -> None:
            box.exec(["sh", "-c", f"printf '%s' '{text}' >> {WORKDIR}/README"], check=True)

        target = Target(remote.target)
        mux = Mux(target)
        try:
            check_every_service(mux, append_readme, ECHO_PORT, "before")
            ssh = mux.client.transport.proc
            os.kill(ssh.pid, signal.SIGKILL)
            wait_for(lambda: mux.dead, 15, "the client to notice that ssh was killed")
            with pytest.raises(Exception, match="connection to .* is closed"):
                mux.open("status")
        finally:
            mux.close()
        with Mux(target) as again:
            check_every_service(again, append_readme, ECHO_PORT, "after")
        after = remote.agents()["svc"]
        assert (after["session"], after["pid"]) == (before["session"], before["pid"])
    finally:
        box.exec(["systemctl", "stop", "clowder-test-echo.service"])


# --- helpers ---------------------------------------------------------------------------------


class _ViaSsh:
    """What test_attach.Attach needs of a host, for `clowderctl --host BOX attach`."""

    def __init__(self, remote: Remote):
        self.env = remote.env
        self.target = remote.target
        self.socket = "-"

    def _as(self, argv: list[str]) -> list[str]:
        # Attach runs [PYTHON, -m, ctl, --socket, S, attach, ...]: --host BOX instead.
        i = argv.index("--socket")
        return argv[:i] + ["--host", self.target] + argv[i + 2:]


def _ssh_child(pid: int) -> int:
    """The ssh process clowderctl runs (its one child named ssh)."""
    def find():
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        for child in children:
            try:
                if open(f"/proc/{child}/comm").read().strip() == "ssh":
                    return int(child)
            except FileNotFoundError:
                pass
        return 0
    return wait_for(find, 15, f"clowderctl (pid {pid}) to run ssh")


def _last_tick(data: bytes) -> int:
    ticks = re.findall(rb"tick-(\d+)\r\n", bytes(data))
    return int(ticks[-1]) if ticks else 0


def test_frozen_remote_host_gives_up_at_the_deadline(remote):
    # Through ssh and the relay, the same deadline and message as on the local socket.
    remote.ctl("ps")
    pid = remote.main_pid("clowder-ptyhost.service")
    remote.box.exec(["kill", "-STOP", str(pid)], check=True)
    try:
        start = time.monotonic()
        proc = remote.ctl("--timeout", "3", "ps", check=False)
        took = time.monotonic() - start
    finally:
        remote.box.exec(["kill", "-CONT", str(pid)], check=True)
    err = proc.stderr.decode()
    assert proc.returncode == 124, (proc.returncode, err)
    assert f"clowder-ptyhost is not answering on {remote.target} (through ssh " \
        f"{remote.target}): no reply within 3 s" in err, err
    assert took < 3 + 4, f"gave up after {took:.1f} s"  # + ssh's login and our start
