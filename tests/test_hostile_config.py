"""Issue 12 item 8, acceptance 7: clowder.yaml is read safely, under a real systemd.

Each bad configuration is tried at reload (the agent keeps running, same pid; the problem
is in ``status`` and the journal) and at start (clowder-control restarted with the file in
place: active, ``status`` answers with the problem, never restarted by systemd).  A file
that takes seconds to check does not hold up ``status``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import wait_for
from hostile import Memory
from test_control import agent_yaml, control  # noqa: F401 (control is a fixture)
from test_ending import timed_status

MiB = 1 << 20
UNIT = "clowder-control.service"


def _merge_bomb() -> str:
    """Each level merges the one before three times: 3^20 keys if expanded naively."""
    levels = [f"  - name: n{i}\n    command: c\n    cwd: /w\n    env: &b{i}\n"
              f"      <<: [{', '.join([f'*b{i - 1}'] * 3)}]\n      K{i}: v\n"
              for i in range(1, 21)]
    return "defaults:\n  env: &b0 {A: '1'}\nagents:\n" + "".join(levels)


def _write(control, case: str) -> str:  # noqa: F811
    """Put the bad configuration ``case`` in place; return what its problem must say."""
    path = control.config
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    if case == "directory":
        os.makedirs(path)
        control._own(path)
        return "Is a directory"
    if case == "unreadable":
        control.write_config("agents: []\n")
        os.chown(path, 0, 0)
        os.chmod(path, 0o600)
        return "Permission denied"
    if case == "fifo":
        os.mkfifo(path)
        control._own(path)
        return "not a regular file"
    text = {"deep": "agents: " + "[" * 5000 + "]" * 5000 + "\n",
            "deep-block": "".join("  " * i + f"k{i}:\n" for i in range(200)),
            "huge": "# " + "x" * (50 * MiB) + "\n",
            "merge-bomb": _merge_bomb(),
            "not-utf8": "agents: []\n# \xff\n"}[case]
    control.write_config("")
    with open(path, "wb") as f:
        f.write(text.encode("latin-1") if case == "not-utf8" else text.encode())
    return {"deep": "nested more than 64 levels deep",
            "deep-block": "nested more than 64 levels deep",
            "huge": "larger than 1 MiB", "merge-bomb": "merge keys",
            "not-utf8": "not valid UTF-8"}[case]


def _problem(control, what: str) -> dict:  # noqa: F811
    def reported():
        st = control.status()
        return st if any(what in p and "configuration not applied" in p
                         for p in st["problems"]) else None
    return wait_for(reported, 30, f"status to report {what!r}")


def _restarts(host) -> int:
    return int(host.show(UNIT, "NRestarts")["NRestarts"])


def _journal_has(host, what: str) -> bool:
    unit = ["-u", UNIT] if host.scope == "system" else \
        [f"_SYSTEMD_USER_UNIT={UNIT}", f"_UID={host.uid}"]
    out = subprocess.run(["journalctl", "--no-pager", "-o", "json", *unit,
                          "CLOWDER_CAUSE=config-error"], capture_output=True, check=True)
    return any(what in json.loads(line).get("MESSAGE", "")
               for line in out.stdout.splitlines() if line.strip())


@pytest.fixture
def tidy(control):  # noqa: F811
    """The control fixture's clean-up unlinks files: a directory or FIFO goes first."""
    yield control
    if os.path.isdir(control.config):
        shutil.rmtree(control.config)


CASES = ["deep", "deep-block", "directory", "fifo", "huge", "merge-bomb", "not-utf8"]


@pytest.mark.parametrize("case", CASES)
def test_bad_configuration_at_reload_and_at_start(host, tidy, case):
    bad_configuration(host, tidy, case)


@pytest.mark.parametrize("host", ["user"], indirect=True)
def test_unreadable_configuration_at_reload_and_at_start(host, tidy):
    """Only the user scope: the system scope's clowder-control is root, which reads any file."""
    bad_configuration(host, tidy, "unreadable")


def bad_configuration(host, control, case: str) -> None:
    control.write_config("agents:\n" + agent_yaml(
        "keep", "sh -c 'exec sleep 100000'", control.workdir))
    before = control.wait_running(["keep"])["keep"]
    restarts = _restarts(host)
    main = host.show(UNIT, "MainPID")["MainPID"]
    # At reload: refused, reported, nothing changed.
    what = _write(control, case)
    host.systemctl("reload", UNIT)
    st = _problem(control, what)
    agents = {a["name"]: a for a in st["agents"]}
    assert agents["keep"]["pid"] == before["pid"], agents
    assert host.show(UNIT, "MainPID")["MainPID"] == main, "clowder-control restarted"
    wait_for(lambda: _journal_has(host, what), 10, f"a journal line saying {what!r}")
    # At start, with the file still in place: serves, reports, keeps the agent.
    control.restart()
    st = _problem(control, what)
    assert {a["name"]: a for a in st["agents"]}["keep"]["pid"] == before["pid"]
    assert host.ps()[before["session"]]["state"] == "running"
    assert host.show(UNIT, "ActiveState")["ActiveState"] == "active"
    # Given a moment to crash, it has not: the same main process, no automatic restart.
    main = host.show(UNIT, "MainPID")["MainPID"]
    control.status()
    assert host.show(UNIT, "MainPID")["MainPID"] == main
    assert _restarts(host) == restarts, "systemd restarted clowder-control"
    # A good file again is applied at the next reload, and the problem goes.
    _write(control, "not-utf8")
    control.write_config("agents:\n" + agent_yaml(
        "keep", "sh -c 'exec sleep 100000'", control.workdir))
    host.systemctl("reload", UNIT)
    wait_for(lambda: not control.status()["problems"], 30, "the problem to clear")
    assert control.agents()["keep"]["pid"] == before["pid"]


def test_status_answers_while_a_slow_file_is_parsed(host, tidy):
    """A 1 MiB file of many agents takes seconds to check; status answers meanwhile."""
    control = tidy
    control.write_config("agents:\n" + agent_yaml(
        "keep", "sh -c 'exec sleep 100000'", control.workdir))
    before = control.wait_running(["keep"])["keep"]
    agent = "  - name: a{i}\n    command: [x, y, z]\n    cwd: /w\n    env: {{A: b, C: d}}\n"
    with open(control.config, "w") as f:
        f.write("agents:\n" + "".join(agent.format(i=i % 1000) for i in range(MiB // 72)))
    memory = Memory(int(host.show(UNIT, "MainPID")["MainPID"]))
    host.systemctl("reload", UNIT)
    slowest, answers = 0.0, 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        took, rep = timed_status(host)
        slowest = max(slowest, took)
        answers += 1
        # Refused by its count, or (on a machine loaded enough) by the time cap.
        if any("more than 1000 items" in p or "took longer" in p for p in rep.problems):
            break
    else:
        pytest.fail("the slow file's problem was never reported")
    assert answers >= 5, f"only {answers} status answers while the file was parsed"
    assert slowest < 1.0, f"a status took {slowest:.2f} s during the parse"
    growth = memory.stop()
    print(f"clowder-control peak RSS growth parsing 1 MiB: {growth >> 10} KiB")
    assert growth < 16 * MiB, f"clowder-control grew {growth >> 20} MiB for a 1 MiB file"
    assert control.agents()["keep"]["pid"] == before["pid"]


# --- the same files, checked without systemd (configfile.load_isolated) ---------------

def _isolated(path: str, **kw) -> str:
    """The one problem load_isolated reports for ``path``."""
    import asyncio
    from controld import config, configfile
    with pytest.raises(config.ConfigError) as info:
        asyncio.run(configfile.load_isolated(path, **kw))
    return "\n".join(info.value.errors)


class _Fake:
    """What _write needs of the control fixture, on tmp_path."""

    def __init__(self, tmp_path):
        self.config = str(tmp_path / "clowder.yaml")

    def _own(self, path):
        pass

    def write_config(self, text):
        with open(self.config, "w") as f:
            f.write(text)


@pytest.mark.parametrize("case", CASES)
def test_each_bad_file_is_one_clear_problem(tmp_path, case):
    fake = _Fake(tmp_path)
    what = _write(fake, case)
    t0 = time.monotonic()
    problem = _isolated(fake.config)
    assert what in problem and fake.config in problem, problem
    assert time.monotonic() - t0 < 10


def test_the_parse_is_stopped_at_its_time_cap(tmp_path):
    path = tmp_path / "clowder.yaml"
    agent = "  - name: a{i}\n    command: [x, y, z]\n    cwd: /w\n    env: {{A: b}}\n"
    path.write_text("agents:\n" + "".join(agent.format(i=i % 1000) for i in range(MiB // 80)))
    t0 = time.monotonic()
    assert "took longer than 0.3 s" in _isolated(str(path), timeout=0.3)
    assert time.monotonic() - t0 < 2


def test_counts_are_limited(tmp_path):
    from controld import config
    path = tmp_path / "clowder.yaml"
    env = "defaults:\n  env: &e {" + ", ".join(f"K{i}: v" for i in range(999)) + "}\n"
    path.write_text(env + "agents:\n" + "".join(
        f"  - {{name: a{i}, command: x, cwd: /w, env: *e}}\n" for i in range(1001)))
    problem = _isolated(str(path))
    assert f"more than {config.MAX_AGENTS} items" in problem, problem
    path.write_text("agents:\n  - name: a\n    command: x\n    cwd: /w\n    shells:\n" + "".join(
        f"      - {{name: s{i}, split: right}}\n" for i in range(config.MAX_SHELLS + 1)))
    assert f"more than {config.MAX_SHELLS} items" in _isolated(str(path))


def test_a_file_of_many_errors_is_reported_in_a_few_lines(tmp_path):
    from controld import config
    path = tmp_path / "clowder.yaml"
    path.write_text("agents:\n" + "".join(f"  - {{name: a{i}, cwd: rel}}\n" for i in range(900)))
    problem = _isolated(str(path)).splitlines()
    assert len(problem) == config.MAX_ERRORS + 1, problem[-3:]
    assert problem[-1].endswith("more problems"), problem[-1]
