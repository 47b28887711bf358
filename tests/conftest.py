"""Fixtures that drive real daemons under a real systemd.

The acceptance tests run inside a private systemd system instance (booted by
``tools/sysinstance.py``, see the README's test command), as root.  The ``host``
fixture installs the units for one scope, starts the socket, and hands the test an
``Env`` that speaks to that host; at the end it stops both units and checks that no
session unit or process is left.  Parametrised over the system and user scopes, the
same tests run against both kinds of units.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
TEST_USER = "clowdertest"


# Lines a test wants shown after the run whatever its outcome (the chaos run's counts):
# pytest captures a passing test's output.
SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter):
    for line in SUMMARY:
        terminalreporter.write_line(line)
    if _NO_LINUX_ONLY:
        with open(_NO_LINUX_ONLY[1]) as f:
            runs = f.read().splitlines()
        terminalreporter.write_line(f"CLOWDER_TEST_NO_LINUX_ONLY: {len(runs)} clowderctl "
                                    f"processes ran without Linux-only names")


# CLOWDER_TEST_NO_LINUX_ONLY=1: every clowderctl the tests run (not the daemons, not
# this process) goes without os.pipe2, socket.SOCK_CLOEXEC and the rest of
# tests/portable/clowder_test_linux_only.py, as on macOS.
_NO_LINUX_ONLY: list[str] = []  # the .pth installed, the log of stripped processes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item: a fixture's teardown reads whether the
    test failed (``failed``) to keep the daemons' journals with the failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"clowder_report_{report.when}", report)


def failed(request) -> bool:
    """Whether the test that ``request`` (a fixture's) belongs to failed or errored."""
    return any(getattr(getattr(request.node, f"clowder_report_{when}", None), "failed", False)
               for when in ("setup", "call"))


def print_journal(matches: list[str], what: str, lines: int = 300, run=subprocess.run) -> None:
    """Print the last journal lines that ``matches`` (journalctl's arguments) select;
    pytest shows them with the failure, under "Captured stdout teardown": a flake in CI
    is otherwise gone with its instance."""
    argv = ["journalctl", "--no-pager", "-o", "short-monotonic", "-n", str(lines), *matches]
    proc = run(argv, capture_output=True)
    print(f"--- {what}: {' '.join(argv)} (exit {proc.returncode}) ---")
    print(proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace"))


def pytest_configure(config):
    if os.environ.get("CLOWDER_TEST_NO_LINUX_ONLY") != "1":
        return
    import site
    sys.path.insert(0, os.path.join(ROOT, "tests", "portable"))
    import clowder_test_linux_only
    log = "/run/clowder-test-no-linux-only/clients.log"
    _NO_LINUX_ONLY[:] = [clowder_test_linux_only.install(site.getsitepackages()[0], log),
                         log]


def pytest_unconfigure(config):
    if _NO_LINUX_ONLY:
        pth, log = _NO_LINUX_ONLY
        os.unlink(pth)
        os.unlink(log)
        os.rmdir(os.path.dirname(log))


def under_systemd() -> bool:
    return os.path.isdir("/run/systemd/system") and \
        open("/proc/1/comm").read().strip() == "systemd"


def poll(predicate, timeout: float, interval: float = 0.01):
    """Poll ``predicate`` until it returns a truthy value, which is returned; after
    ``timeout`` seconds its last (falsy) value, for a caller that counts rather than fails."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.01):
    """Poll ``predicate`` until it returns a truthy value; fail saying ``what`` did not happen."""
    value = poll(predicate, timeout, interval)
    if not value:
        pytest.fail(f"timed out after {timeout} s waiting for: {what}")
    return value


@contextlib.contextmanager
def socket_sampler(path: str):
    """Check that ``path`` exists every 2 ms while the block runs; yields the list of
    moments it was missing (the socket file must never disappear)."""
    missing: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            if not os.path.exists(path):
                missing.append(time.monotonic())
            stop.wait(0.002)
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield missing
    finally:
        stop.set()
        sampler.join()


def ensure_user(name: str, uid: int, groups: str = "") -> int:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        cmd = ["useradd", "-m", "-u", str(uid), "-s", "/bin/sh"]
        if groups:
            cmd += ["-G", groups]
        subprocess.run(cmd + [name], check=True)
        return uid


class Env:
    """One installed host (system or user scope) and the ways to drive it."""

    def __init__(self, scope: str):
        self.scope = scope
        self.drop_ins: list[str] = []
        if scope == "system":
            self.run_user = None
            self.uid = 0
            self.socket = "/run/clowder/ptyhost.sock"
            self.env = dict(os.environ)
        else:
            # systemd-journal: the instance's journal is volatile, so not split per user;
            # on a real machine a user reads their own units' logs without it.
            self.uid = ensure_user(TEST_USER, 1500, "systemd-journal")
            self.run_user = TEST_USER
            runtime = f"/run/user/{self.uid}"
            subprocess.run(["systemctl", "start", f"user@{self.uid}.service"], check=True)
            wait_for(lambda: os.path.exists(f"{runtime}/systemd/private"), 20,
                     f"the user manager of uid {self.uid} to listen")
            self.socket = f"{runtime}/clowder/ptyhost.sock"
            home = pwd.getpwnam(TEST_USER).pw_dir
            self.env = {"PATH": os.environ["PATH"], "HOME": home, "USER": TEST_USER,
                        "XDG_RUNTIME_DIR": runtime, "LANG": "C.UTF-8"}

    # --- running things ------------------------------------------------------------------

    def _as(self, argv: list[str], user: str | None = None) -> list[str]:
        user = user or self.run_user
        return ["runuser", "-u", user, "--"] + argv if user else argv

    def run(self, argv, check=True, user=None, env=None, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        proc = subprocess.run(self._as(argv, user), env=env or self.env, cwd=kw.pop("cwd", "/"),
                              **kw)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {proc.returncode}: "
                        f"{proc.stderr.decode(errors='replace') if proc.stderr else ''}")
        return proc

    def ctl(self, *args, check=True, user=None, **kw) -> subprocess.CompletedProcess:
        """Run clowderctl (as the scope's user, or ``user``) against this host."""
        env = dict(self.env)
        if user:
            env.update(HOME=pwd.getpwnam(user).pw_dir, USER=user)
        return self.run([PYTHON, "-m", "ctl", "--socket", self.socket, *args], check=check,
                        user=user, env=env, **kw)

    def systemctl(self, *args, check=True) -> subprocess.CompletedProcess:
        scope = ["--user"] if self.scope == "user" else []
        return self.run(["systemctl", *scope, *args], check=check)

    def show(self, unit: str, *props) -> dict:
        out = self.systemctl("show", unit, *[f"-p{p}" for p in props]).stdout.decode()
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    # --- the host ------------------------------------------------------------------------

    def install(self) -> None:
        self.run([PYTHON, "-m", "ctl", "install-units", f"--{self.scope}",
                  "--exec-start", f"{PYTHON} -m ptyhostd"])

    def main_pid(self) -> int:
        return int(self.show("clowder-ptyhost.service", "MainPID")["MainPID"])

    def wait_ready(self, old_pid: int = 0, timeout: float = 20) -> int:
        """Wait until the host is active with a main PID other than ``old_pid``."""
        def ready():
            p = self.show("clowder-ptyhost.service", "ActiveState", "SubState", "MainPID")
            pid = int(p["MainPID"])
            return pid if p["ActiveState"] == "active" and pid and pid != old_pid else 0
        return wait_for(ready, timeout, f"clowder-ptyhost ({self.scope}) to be ready again "
                        f"with a new main PID (old {old_pid})")

    def restart(self) -> int:
        old = self.main_pid()
        self.systemctl("restart", "clowder-ptyhost.service")
        return self.wait_ready(old)

    def kill9(self, wait: bool = True) -> int:
        old = self.main_pid()
        assert old, "the host is not running"
        os.kill(old, 9)
        return self.wait_ready(old) if wait else 0

    def start(self) -> int:
        """Start the host (as a connection would) and return its main PID."""
        self.ctl("ps")
        return self.wait_ready()

    def session_units(self) -> list[str]:
        out = self.systemctl("list-units", "--all", "--plain", "--no-legend",
                             "clowder-session-*").stdout.decode()
        return [line.split()[0] for line in out.splitlines()
                if line.startswith("clowder-session-")]

    def ps(self, user=None) -> dict:
        """Every session kept, ended ones whose end was seen too (``ps --all``)."""
        return {s["id"]: s for s in json.loads(self.ctl("ps", "--all", "--json",
                                                        user=user).stdout)}

    def spawn(self, *argv, user=None, **opts) -> str:
        extra = []
        for k, v in opts.items():
            extra += [f"--{k}", v]
        return self.ctl("spawn", *extra, "--", *argv, user=user).stdout.decode().strip()

    def backlog(self, sid: str, user=None) -> bytes:
        return self.ctl("backlog", sid, user=user).stdout

    def drop_in(self, body: str) -> None:
        """Add a drop-in to the host's service and reload (a reload keeps the FD store)."""
        base = "/run/systemd/system" if self.scope == "system" \
            else f"/run/user/{self.uid}/systemd/user"
        path = f"{base}/clowder-ptyhost.service.d/test.conf"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o644)
        if path not in self.drop_ins:  # a second drop_in rewrites the same file
            self.drop_ins.append(path)
        self.systemctl("daemon-reload")

    def remove_drop_ins(self) -> None:
        for path in self.drop_ins:
            os.unlink(path)
        if self.drop_ins:
            self.systemctl("daemon-reload")
        self.drop_ins.clear()

    def stop_all(self) -> None:
        # The control daemon first: it would bring agents back as the host ends them.
        self.systemctl("stop", "clowder-control.service", "clowder-control.socket",
                       check=False)
        self.systemctl("stop", "clowder-ptyhost.service", "clowder-ptyhost.socket",
                       check=False)


@pytest.fixture(scope="session")
def systemd_required():
    if not under_systemd():
        pytest.fail("these tests need a real systemd as PID 1: run them through the "
                    "README's test command (make test), which boots a private instance")


@pytest.fixture(params=["system", "user"])
def host(request, systemd_required):
    env = Env(request.param)
    env.stop_all()
    env.install()
    env.start()
    yield env
    # The instance's journal is not split per user: a user unit's lines are matched.
    field = "_SYSTEMD_USER_UNIT" if env.scope == "user" else "_SYSTEMD_UNIT"
    if failed(request):
        print_journal([f"{field}=clowder-ptyhost.service"], f"the {env.scope} host's journal")
    env.stop_all()
    env.remove_drop_ins()
    left = env.session_units()
    if left:  # what the host said as it stopped tells why (once seen in CI, ci74)
        print_journal([f"{field}=clowder-ptyhost.service"],
                      f"the {env.scope} host's journal, units left: {left}")
        for unit in left:
            print(env.systemctl("status", "--no-pager", unit, check=False).stdout.decode())
    assert not left, f"session units left behind after stop: {left}"


# The terminal engines a host can run its sessions' screens on (--screen-engine).
ENGINES = ["ghostty", "pyte"]


def use_engine(host, engine: str) -> None:
    """Restart the host with ``engine`` as its sessions' terminal model."""
    host.drop_in(f"[Service]\nEnvironment=CLOWDER_SCREEN_ENGINE={engine}\n")
    pid = host.restart()

    def said() -> bool:
        return f"screen engine: {engine} (asked for)" in host.run(
            ["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=screen-engine",
             f"_PID={pid}"]).stdout.decode(errors="replace")
    wait_for(said, 15, f"the host to log that it runs the {engine} engine")
