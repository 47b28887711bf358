"""Issue 3's acceptance tests: clowder-control can be restarted at any moment.

Run against system and user units (the ``host`` fixture), under a real systemd.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import subprocess

import pytest

from conftest import PYTHON, failed, print_journal, wait_for

# Heavy output: a numbered line every 2 ms, so gaps and duplicates are detectable.
COUNTER = ("import sys, time\n"
           "i = 0\n"
           "while True:\n"
           "    i += 1\n"
           "    sys.stdout.write(f'{TAG}{i}\\n'); sys.stdout.flush()\n"
           "    time.sleep(0.002)\n")


class Control:
    """The control daemon of one scope: its config, registry, status and journal."""

    def __init__(self, host):
        self.host = host
        if host.scope == "system":
            self.config = "/etc/clowder/clowder.yaml"
            self.registry = "/var/lib/clowder/registry.json"
            self.home = "/root"
        else:
            self.home = pwd.getpwnam(host.run_user).pw_dir
            self.config = f"{self.home}/.config/clowder/clowder.yaml"
            self.registry = f"{self.home}/.local/state/clowder/registry.json"
        self.workdir = f"{self.home}/work"
        os.makedirs(self.workdir, exist_ok=True)
        self._own(self.workdir)

    def _own(self, path: str) -> None:
        if self.host.scope == "user":
            subprocess.run(["chown", "-R", f"{self.host.uid}", path], check=True)

    def write_config(self, text: str) -> None:
        os.makedirs(os.path.dirname(self.config), exist_ok=True)
        with open(self.config, "w") as f:
            f.write(text)
        self._own(os.path.dirname(self.config))

    def status(self) -> dict:
        # 3: clowder-control answered but the PTY host did not (the JSON says so too).
        r = self.host.ctl("status", "--json", check=False)
        assert r.returncode in (0, 3), (r.returncode, r.stderr)
        return json.loads(r.stdout)

    def agents(self) -> dict:
        return {a["name"]: a for a in self.status()["agents"]}

    def wait_running(self, names, timeout=30) -> dict:
        def ready():
            agents = self.agents()
            ok = all(agents.get(n, {}).get("state") == "running" and
                     all(s["running"] for s in agents[n]["shells"]) for n in names)
            return agents if ok else None
        return wait_for(ready, timeout, f"agents {sorted(names)} and their shells to run")

    def restart(self) -> None:
        self.host.systemctl("restart", "clowder-control.service")

    def journal(self, agent: str) -> list[dict]:
        unit = ["-u", "clowder-control.service"] if self.host.scope == "system" else \
            ["_SYSTEMD_USER_UNIT=clowder-control.service", f"_UID={self.host.uid}"]
        out = subprocess.run(["journalctl", "--no-pager", "-o", "json", *unit,
                              f"CLOWDER_AGENT={agent}"], capture_output=True, check=True)
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def control(host, request):
    c = Control(host)
    yield c
    if failed(request):
        field = "_SYSTEMD_USER_UNIT" if host.scope == "user" else "_SYSTEMD_UNIT"
        print_journal([f"{field}=clowder-control.service"],
                      f"the {host.scope} clowder-control's journal")
    for path in (c.config, c.registry, c.registry + ".prev"):
        if os.path.exists(path):
            os.unlink(path)


def agent_yaml(name: str, command, workdir: str, resume: str = "",
               shell: str = "sh") -> str:
    lines = [f"  - name: {name}", f"    command: {json.dumps(command)}",
             f"    cwd: {workdir}"]
    if resume:
        lines.append(f"    resume: {json.dumps(resume)}")
    lines += ["    shells:", "      - name: sh", f"        command: {shell}",
              "        split: right", "        percent: 40"]
    return "\n".join(lines) + "\n"


def test_ten_control_restarts_disturb_no_agent(host, control):
    text = "agents:\n"
    for i in range(10):
        cmd = [PYTHON, "-c", COUNTER.replace("{TAG}", f"a{i}-")]
        text += agent_yaml(f"a{i}", cmd, control.workdir)
    control.write_config(text)
    names = [f"a{i}" for i in range(10)]
    before = control.wait_running(names)
    sessions = host.ps()
    for _ in range(10):
        control.restart()
        wait_for(lambda: len(control.agents()) == 10, 20, "the control daemon to answer")
    after = control.wait_running(names)
    for n in names:
        assert after[n]["session"] == before[n]["session"], f"{n} was re-spawned"
        assert after[n]["pid"] == before[n]["pid"] and after[n]["spawns"] == 1
        for s0, s1 in zip(before[n]["shells"], after[n]["shells"]):
            assert (s0["session"], s0["pid"]) == (s1["session"], s1["pid"])
    now = host.ps()
    for sid, info in sessions.items():
        assert now[sid]["pid"] == info["pid"] and now[sid]["state"] == "running"
    for i, n in enumerate(names):
        out = host.backlog(after[n]["session"]).decode()
        numbers = [int(x) for x in re.findall(rf"a{i}-(\d+)\r\n", out)]
        assert numbers and numbers == list(range(numbers[0], numbers[0] + len(numbers))), \
            f"{n}: a gap or duplicate in the backlog"


def test_agent_killed_while_control_stopped_comes_back_resumed(host, control):
    control.write_config("agents:\n" + agent_yaml(
        "api", "sh -c 'echo first-run; exec sleep 100000'", control.workdir,
        resume="sh -c 'echo resumed-in-$(pwd); exec sleep 100000'"))
    before = control.wait_running(["api"])["api"]
    host.systemctl("stop", "clowder-control.service")
    host.ctl("kill", before["session"], "--signal", "KILL")
    assert host.ctl("wait", before["session"], check=False).returncode == 128 + 9
    host.systemctl("start", "clowder-control.service")
    after = control.wait_running(["api"])["api"]
    assert after["session"] != before["session"] and after["spawns"] == 2
    assert "killed by signal 9" in after["cause"], after["cause"]
    assert after["last_exit"]["signal"] == 9
    wait_for(lambda: f"resumed-in-{control.workdir}".encode() in
             host.backlog(after["session"]), 10, "the resume command's output")
    # The layout is kept: the companion shell was not touched, still the same process.
    assert after["shells"][0]["pid"] == before["shells"][0]["pid"]
    assert after["shells"][0]["split"] == "right" and after["shells"][0]["percent"] == 40


def test_a_plain_session_is_listed_apart_not_killed_nor_logged(host, control):
    """Issue 14, point 8: a plain session is listed under SESSIONS, not as a problem,
    and reloads write no journal line about it."""
    control.write_config("agents: []\n")
    stray = host.spawn("sleep", "100000", name="stray")
    control.restart()
    st = wait_for(lambda: (lambda s: s if s["sessions"] else None)(control.status()), 10,
                  "the plain session to be listed")
    assert [u["id"] for u in st["sessions"]] == [stray] and st["unclaimed"] == [], st
    assert host.ps()[stray]["state"] == "running"
    out = host.ctl("status").stdout.decode()
    assert stray in out and "SESSION" in out and "claims" not in out, out
    for _ in range(3):
        host.systemctl("reload", "clowder-control.service")
    control.status()
    unit = ["-u", "clowder-control.service"] if host.scope == "system" else \
        ["_SYSTEMD_USER_UNIT=clowder-control.service", f"_UID={host.uid}"]
    lines = subprocess.run(["journalctl", "--no-pager", "-o", "json", *unit,
                            f"CLOWDER_SESSION={stray}"], capture_output=True,
                           check=True).stdout.splitlines()
    assert lines == [], lines


def test_bad_config_and_half_written_registry(host, control):
    control.write_config("agents:\n" + agent_yaml(
        "web", "sh -c 'echo up; exec sleep 100000'", control.workdir))
    before = control.wait_running(["web"])["web"]
    # A malformed file: reloading reports it, with file and line, and changes nothing.
    control.write_config("agents:\n  - name: web\n    command: [unclosed\n")
    host.systemctl("reload", "clowder-control.service")
    st = wait_for(lambda: (lambda s: s if s["problems"] else None)(control.status()), 10,
                  "the configuration problem to be reported")
    assert any("clowder.yaml:" in p for p in st["problems"]), st["problems"]
    check = host.ctl("config", "check", control.config, check=False)
    assert check.returncode == 1 and b"clowder.yaml:" in check.stderr
    agents = {a["name"]: a for a in st["agents"]}
    assert agents["web"]["pid"] == before["pid"]
    # A half-written registry (with a valid configuration again): reported, and the
    # running agent is still adopted.
    control.write_config("agents:\n" + agent_yaml(
        "web", "sh -c 'echo up; exec sleep 100000'", control.workdir))
    host.systemctl("stop", "clowder-control.service")
    data = open(control.registry, "rb").read()
    with open(control.registry, "wb") as f:
        f.write(data[:len(data) // 2])
    if os.path.exists(control.registry + ".prev"):
        os.unlink(control.registry + ".prev")
    host.systemctl("start", "clowder-control.service")
    st = control.status()
    assert any("registry" in p for p in st["problems"]), st["problems"]
    assert host.ps()[before["session"]]["pid"] == before["pid"]
    assert host.ps()[before["session"]]["state"] == "running"
    # ... adopted by its session name, not started a second time.
    web = control.wait_running(["web"])["web"]
    assert (web["session"], web["pid"]) == (before["session"], before["pid"]), web
    running = [s for s in host.ps().values()
               if s["name"] == "agent:web" and s["state"] == "running"]
    assert len(running) == 1, running


def test_journal_filters_by_agent(host, control):
    control.write_config("agents:\n" + agent_yaml(
        "logme", "sh -c 'exec sleep 100000'", control.workdir) + agent_yaml(
        "other", "sh -c 'exec sleep 100000'", control.workdir))
    control.wait_running(["logme", "other"])
    control.restart()
    control.wait_running(["logme", "other"])
    entries = wait_for(lambda: [e for e in control.journal("logme")
                                if e.get("CLOWDER_CAUSE") == "adopt"], 10,
                       "an adopt event for logme in the journal")
    events = control.journal("logme")
    assert {e["CLOWDER_AGENT"] for e in events} == {"logme"}
    causes = {e.get("CLOWDER_CAUSE") for e in events}
    assert {"spawn", "adopt"} <= causes, causes
    assert all("MESSAGE" in e and e.get("CLOWDER_SESSION") for e in entries)
    # clowderctl logs is the same filter, for people.
    out = host.ctl("logs", "logme").stdout.decode()
    assert "agent logme: spawned" in out and "agent logme:" in out
    assert "agent other:" not in out


def test_attach_through_control_survives_its_restart(host, control):
    """Attached through clowder-control, a restart of that daemon is a reconnect and a
    repaint (the backlog replayed), and typing carries on."""
    from test_attach import DETACH, Attach
    control.write_config("agents:\n" + agent_yaml(
        "tty", ["sh", "-c", "echo agent-up; PS1='tty$ ' exec sh -i"], control.workdir))
    info = control.wait_running(["tty"])["tty"]
    a = Attach(host, "tty", "--agent")
    try:
        a.wait_raw()
        a.expect(b"agent-up", what="the agent's backlog through clowder-control")
        a.type(b"echo one-$((1+1))\r")
        a.expect(b"one-2", what="typing through clowder-control")
        control.restart()
        a.expect(b"\x1bc", timeout=30, what="the client to reattach after the restart")
        a.expect(b"one-2", what="the repaint after reattaching")
        a.type(b"echo two-$((2+2))\r")
        a.expect(b"two-4", what="typing after clowder-control restarted")
        a.type(DETACH)
        assert a.finish() == 0
    finally:
        a.close()
    assert control.agents()["tty"]["pid"] == info["pid"]


def test_attach_to_an_agent_puts_its_history_in_the_scrollback(host, control):
    """`attach --agent` asks for the scrollback with its Attach, as a session's attach
    does, and clowder-control passes it on: lines long scrolled off come before the
    repaint (GetHistory was never relayed: an agent's attach had none)."""
    from test_attach import Attach, history_then_repaint
    control.write_config("agents:\n" + agent_yaml(
        "hist", ["sh", "-c", "for i in $(seq 1 80); do echo agent-line-$i; done; "
                 "echo agent-done; exec sleep 100000"], control.workdir))
    control.wait_running(["hist"])
    sid = control.agents()["hist"]["session"]
    wait_for(lambda: b"agent-done" in host.backlog(sid), 15, "the agent's output")
    a = Attach(host, "hist", "--agent", cols=80, rows=24)
    try:
        history_then_repaint(a, b"agent-line-1", b"agent-done")
    finally:
        a.close()


def test_attach_to_an_agent_follows_it_through_restart_and_crash(host, control):
    """Issue 14 point 4: `attach --agent A` stays attached through `restart A` and a crash
    of A: a notice line, then the new session's repaint, and typing goes to it."""
    from test_attach import DETACH, Attach
    control.write_config("agents:\n" + agent_yaml(
        "tty", ["sh", "-c", "echo agent-up-$$; PS1='tty$ ' exec sh -i"], control.workdir))
    first = control.wait_running(["tty"])["tty"]
    a = Attach(host, "tty", "--agent")
    try:
        a.wait_raw()
        a.expect(b"agent-up", what="the agent's backlog through clowder-control")
        host.ctl("restart", "tty", timeout=40)
        a.expect(b"waiting for the agent's next session", timeout=30,
                 what="the notice that the agent's session ended")
        a.expect(b"\x1bc", timeout=30, what="the repaint of the agent's new session")
        second = control.wait_running(["tty"])["tty"]
        assert second["session"] != first["session"]
        a.type(b"echo after-restart-$((3+4))\r")
        a.expect(b"after-restart-7", what="typing into the agent's new session")
        os.kill(second["pid"], 9)  # a crash: on-failure brings it back
        a.expect(b"(signal 9); waiting for the agent's next session", timeout=30,
                 what="the notice of the crash")
        a.expect(b"\x1bc", timeout=30, what="the repaint of the session after the crash")
        a.expect(re.compile(rb"agent-up-\d+"), timeout=30,
                 what="the new session's output after the crash")
        a.type(b"echo after-crash-$((4+5))\r")
        a.expect(b"after-crash-9", what="typing after the crash")
        a.type(DETACH)
        assert a.finish() == 0
    finally:
        a.close()


def test_attach_to_an_agent_that_is_brought_down_ends(host, control):
    """`down` (or a policy that keeps it ended) is the end of `attach --agent`."""
    from test_attach import Attach
    control.write_config("agents:\n" + agent_yaml(
        "tty", ["sh", "-c", "echo agent-up; exec sleep 100000"], control.workdir))
    control.wait_running(["tty"])
    a = Attach(host, "tty", "--agent")
    try:
        a.wait_raw()
        a.expect(b"agent-up", what="the agent's backlog")
        host.ctl("down", "tty", timeout=40)
        assert a.finish() != 0, "attach --agent did not end when its agent went down"
    finally:
        a.close()


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_open_lays_the_agent_out_in_tmux_which_is_only_a_view(host, control, tmp_path):
    """Issue 14 point 10: `clowderctl open AGENT` inside tmux makes a window of panes as
    the YAML says (the shell `split: right`, `percent: 40`), each attached to its
    session; killing that tmux server leaves every session running."""
    control.write_config("agents:\n" + agent_yaml(
        "lay", ["sh", "-c", "echo AGENT-PANE; exec sleep 100000"], control.workdir,
        shell='["sh", "-c", "echo SHELL-PANE; exec sleep 100000"]'))
    before = control.wait_running(["lay"])["lay"]
    tmux = ["tmux", "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
    opener = shlex.join([PYTHON, "-m", "ctl", "--socket", host.socket, "open", "lay"])
    subprocess.run(tmux + ["new-session", "-d", "-s", "t", "-x", "200", "-y", "50",
                           f"{opener} > {tmp_path}/open.out 2>&1; sleep 100000"],
                   check=True, env={**host.env, "TERM": "xterm-256color"})
    try:
        def panes():
            out = subprocess.run(tmux + ["list-panes", "-t", "t:lay", "-F",
                                         "#{pane_id} #{pane_left} #{pane_width}"],
                                 capture_output=True, text=True).stdout.split("\n")
            return [line.split() for line in out if line]
        got = wait_for(lambda: len(panes()) == 2 and panes(), 20,
                       "open to make the agent's window of two panes")
        (agent_pane, agent_left, agent_width), (shell_pane, shell_left, shell_width) = got
        assert int(agent_left) == 0 and int(shell_left) > int(agent_width), got
        assert abs(int(shell_width) - 0.4 * 200) <= 2, f"not 40% of the width: {got}"

        def shows(pane, text):
            return text in subprocess.run(tmux + ["capture-pane", "-p", "-t", pane],
                                          capture_output=True, text=True).stdout
        wait_for(lambda: shows(agent_pane, "AGENT-PANE"), 20, "the agent's pane to show it")
        wait_for(lambda: shows(shell_pane, "SHELL-PANE"), 20, "the shell's pane to show it")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
    after = control.wait_running(["lay"])["lay"]
    assert after["session"] == before["session"], "killing tmux touched the agent"
    assert all(s["running"] for s in after["shells"]), after["shells"]
    assert host.ps()[after["session"]]["state"] == "running"


def test_open_without_tmux_says_what_to_run(host, control):
    control.write_config("agents:\n" + agent_yaml("lay", "sleep 100000", control.workdir))
    control.wait_running(["lay"])
    r = host.run([PYTHON, "-m", "ctl", "--socket", host.socket, "open", "lay"], check=False,
                 env={**host.env, "PATH": "/usr/sbin:/sbin"})  # runuser, no tmux
    # 1: what was asked could not be done (ctl/exits.py; 2 is for usage errors)
    assert r.returncode == 1 and b"tmux is not installed" in r.stderr, r
    assert b"clowderctl attach --agent lay/sh" in r.stderr, r.stderr
    r = host.ctl("open", "nope", check=False)
    assert r.returncode == 1 and b"no agent 'nope'" in r.stderr, r


# --- issue 14, point 8: true causes, restart policies, restart leaves the shells -------

def test_causes_name_the_right_agent_and_the_true_reason(host, control):
    control.write_config("agents:\n" + agent_yaml(
        "alpha", "sleep 100000", control.workdir) + agent_yaml(
        "beta", "sleep 100000", control.workdir))
    before = control.wait_running(["alpha", "beta"])
    host.ctl("down", "beta", timeout=40)
    host.ctl("up", "beta", timeout=40)
    after = control.wait_running(["alpha", "beta"])
    assert "gone" not in after["beta"]["cause"], after["beta"]["cause"]
    assert "up requested for beta" in after["beta"]["cause"], after["beta"]["cause"]
    assert after["alpha"]["cause"] == before["alpha"]["cause"]
    host.ctl("restart", "beta", timeout=40)
    control.wait_running(["beta"])
    alpha = control.journal("alpha")
    assert not [e["MESSAGE"] for e in alpha if "beta" in e["MESSAGE"]], \
        "up/down/restart of beta wrote into alpha's history"
    assert {e["CLOWDER_CAUSE"] for e in alpha} == {"spawn"}, alpha


def policy_yaml(name: str, command: str, workdir: str, policy: str = "") -> str:
    text = agent_yaml(name, command, workdir)
    return text.replace("    shells:", f"    restart: {policy}\n    shells:") if policy \
        else text


def test_the_back_off_grows_and_decays():
    """The numbers README.md documents: 0.5, 1, 2, 5, 10, then 30 s; each 30 s run
    forgives one failure."""
    from controld.supervisor import backoff, restarts
    failures, delays = 0, []
    for _ in range(8):  # a crash loop: each run shorter than 30 s
        delay, failures = backoff(failures, 1.0)
        delays.append(delay)
    assert delays == [0.5, 1, 2, 5, 10, 30, 30, 30]
    assert backoff(failures, 29.9) == (30, failures + 1)
    assert backoff(5, 60) == (5, 4)  # two failures forgiven
    assert backoff(8, 86400) == (0.5, 1)  # a day's run: as the first crash
    assert [restarts(p, 0, None) for p in ("on-failure", "always", "never")] == \
        [False, True, False]
    assert [restarts(p, 3, None) for p in ("on-failure", "always", "never")] == \
        [True, True, False]
    assert restarts("on-failure", None, 9)


def test_restart_policies(host, control):
    """on-failure (the default) leaves an exit 0 ended and brings back a failure;
    always brings back an exit 0; never leaves a failure ended; up brings them back."""
    once = "sh -c 'sleep 1; exit {code}'"
    control.write_config("agents:\n" + policy_yaml(
        "zero", once.format(code=0), control.workdir) + policy_yaml(
        "fails", once.format(code=3), control.workdir) + policy_yaml(
        "again", once.format(code=0), control.workdir, "always") + policy_yaml(
        "never", once.format(code=3), control.workdir, "never"))

    def spawns(name, n):
        return wait_for(lambda: (lambda a: a if a["spawns"] >= n else None)(
            control.agents()[name]), 60, f"{name} to be spawned {n} times")
    assert "restart: always" in spawns("again", 2)["cause"]
    assert "restart: on-failure" in spawns("fails", 2)["cause"]
    for name, code in (("zero", 0), ("never", 3)):
        a = wait_for(lambda: (lambda a: a if a["state"] == "exited" else None)(
            control.agents()[name]), 30, f"{name} to stay exited")
        assert a["spawns"] == 1 and a["last_exit"]["exit_code"] == code, a
        assert "not restarted" in a["cause"], a["cause"]
    control.restart()  # a restart of clowder-control does not bring them back
    wait_for(lambda: len(control.agents()) == 4, 20, "the control daemon to answer")
    assert control.agents()["zero"]["state"] == "exited"
    assert control.agents()["zero"]["spawns"] == 1
    host.ctl("up", "zero", timeout=40)
    assert control.agents()["zero"]["spawns"] == 2


def test_restart_leaves_the_shells_unless_asked(host, control):
    control.write_config("agents:\n" + agent_yaml("api", "sleep 100000", control.workdir))
    before = control.wait_running(["api"])["api"]
    host.ctl("restart", "api", timeout=40)
    after = control.wait_running(["api"])["api"]
    assert after["session"] != before["session"]
    assert after["shells"][0]["session"] == before["shells"][0]["session"]
    assert after["shells"][0]["pid"] == before["shells"][0]["pid"]
    assert host.ps()[before["shells"][0]["session"]]["state"] == "running"
    host.ctl("restart", "api", "--shells", timeout=40)
    again = control.wait_running(["api"])["api"]
    assert again["shells"][0]["session"] != before["shells"][0]["session"]
