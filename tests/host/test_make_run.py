"""Issue 15, acceptance 4: `make run` / `make stop` from a fresh clone, on this machine.

Runs on the machine's side, outside any instance (`make test-run`, and `make test` after
the instance suite): where systemd is not PID 1, `make run` boots its own private
instance.  The outer terminal is tmux 3.3a on a socket of the test's own, so the make
runs on a real pty, as a newcomer's would.  The clone is of the source tree's HEAD
(committed code: that is what a fresh clone has).

Environment (set by the Makefile): CLOWDER_RUN_SOURCE (the repository to clone),
CLOWDER_RUN_VENV, CLOWDER_RUN_STAGE, CLOWDER_RUN_INSTANCE (a name of this run's own).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tools"))
import sysinstance  # noqa: E402

import conftest  # noqa: E402  (tests/, the rootdir's conftest: pytest puts it on the path)

MAKE_DEADLINE = 900  # the first `make run` installs the venv (pip, a build): slow when shared


def wait_for(predicate, timeout: float, what: str):
    """conftest's wait, polling at a tenth of a second: each poll runs tmux."""
    return conftest.wait_for(predicate, timeout, what, interval=0.1)


class Tmux:
    """tmux as the outer terminal, on a socket nobody else uses."""

    def __init__(self, socket: Path, cwd: Path):
        self.base = ["tmux", "-S", str(socket), "-f", "/dev/null"]
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
               "TERM": "xterm-256color", "LANG": "C.UTF-8"}
        subprocess.run(self.base + ["new-session", "-d", "-s", "t", "-x", "160", "-y", "50",
                                    "-c", str(cwd), "bash --norc --noprofile"],
                       env=env, check=True)
        self.server_pid = int(self.tmux("display", "-p", "#{pid}").strip())

    def tmux(self, *args: str) -> str:
        return subprocess.run(self.base + list(args), capture_output=True, text=True,
                              check=True).stdout

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", text)

    def enter(self, text: str) -> None:
        self.type(text)
        self.tmux("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "t", "-S", "-200")

    def clear(self) -> None:
        self.enter("clear")
        self.tmux("clear-history", "-t", "t")

    def kill(self) -> None:
        try:
            os.kill(self.server_pid, 9)  # ours: started by this test, ended by its pid
        except ProcessLookupError:
            pass


def leftovers(name: str) -> list[str]:
    """What of instance ``name`` is still there: state, cgroup, mounts, processes."""
    inst = sysinstance.Instance(name)
    found = []
    if inst.state.exists():
        found.append(f"state directory {inst.state}")
    if inst.cgroup.exists():
        found.append(f"cgroup {inst.cgroup}")
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f"clowder-sysinstance/{name}" in line]
    found += [f"mount {m}" for m in mounts]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cgroup = (proc / "cgroup").read_text()
                state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            # A zombie has ended (the launcher, reparented when `make run` exited, waits
            # there for this machine's PID 1 to reap it).
            if f"clowder-sysinstance-{name}" in cgroup and state != "Z":
                found.append(f"process {proc.name} in its cgroup: {cmd!r}")
    return found


@pytest.fixture
def run_env(tmp_path):
    source = os.environ.get("CLOWDER_RUN_SOURCE")
    if not source:
        pytest.fail("run this through `make test-run` (it names the venv, stage and instance)")
    name = f"{os.environ.get('CLOWDER_RUN_INSTANCE', 'clowder-run')}-{secrets.token_hex(2)}"
    clone = tmp_path / "clone"
    head = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--no-checkout", source, str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", head], check=True)
    make_vars = (f"VENV={shlex.quote(os.environ['CLOWDER_RUN_VENV'])} "
                 f"STAGE={shlex.quote(os.environ['CLOWDER_RUN_STAGE'])} RUN_INSTANCE={name}")
    term = Tmux(tmp_path / "tmux.sock", clone)
    try:
        yield term, make_vars, name, clone
    finally:
        term.kill()
        if sysinstance.Instance(name).state.exists():
            subprocess.run([sys.executable, str(clone / "tools" / "run.py"), "stop",
                            "--name", name, "--python", sys.executable])
        shutil.rmtree(os.environ["CLOWDER_RUN_STAGE"], ignore_errors=True)


def _in_session(term: Tmux, tag: str) -> tuple[str, str]:
    """Type a line in the attached shell; its answer: (session id, shell pid)."""
    term.enter(f'echo {tag}-$((6*7)) "<$CLOWDER_SESSION>" "[$$]"')
    m = wait_for(lambda: re.search(tag + r"-42 <(\w+)> \[(\d+)\]", term.screen()), 60,
                 f"the shell inside clowder to answer {tag}")
    return m[1], m[2]


@pytest.mark.skipif(Path("/proc/1/comm").read_text().strip() == "systemd",
                    reason="this machine's PID 1 is systemd: make run uses it, not an instance")
def test_make_run_attaches_reattaches_the_same_session_and_make_stop_cleans_up(run_env):
    term, make_vars, name, clone = run_env
    term.enter(f"make run {make_vars}; echo make-run-1-exit-$?")
    def attached_or_ended():
        s = term.screen()
        return s if ("[clowder: attached to" in s or
                     re.search(r"^make-run-1-exit-\d", s, re.M)) else None
    screen = wait_for(attached_or_ended, MAKE_DEADLINE, "make run to attach (its banner) or end")
    assert "[clowder: attached to" in screen, f"make run ended without attaching:\n{screen}"
    sid, pid = _in_session(term, "first")
    assert sid, term.screen()

    term.tmux("send-keys", "-t", "t", "C-\\")
    wait_for(lambda: "make-run-1-exit-0" in term.screen(), 30, "make run to end at the detach")
    inst = sysinstance.Instance(name)
    assert inst._owns(inst.pid), "the instance must outlive the detach"

    term.clear()
    wait_for(lambda: "first-42" not in term.screen(), 10, "the outer terminal to be cleared")
    term.enter(f"make run {make_vars}; echo make-run-2-exit-$?")
    # The same screen comes back: what was typed before is on it.
    wait_for(lambda: "first-42" in term.screen(), 120,
             "the reattach to repaint what was typed before")
    sid2, pid2 = _in_session(term, "second")
    assert (sid2, pid2) == (sid, pid), term.screen()
    term.tmux("send-keys", "-t", "t", "C-\\")
    wait_for(lambda: "make-run-2-exit-0" in term.screen(), 30, "the second make run to end")

    term.enter(f"make stop {make_vars}; echo make-stop-exit-$?")
    wait_for(lambda: "make-stop-exit-0" in term.screen(), 60, "make stop to end")
    assert leftovers(name) == []
