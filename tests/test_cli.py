"""clowderctl's command-line surface, as a script sees it (issue 15, point 2).

Each exit status of ctl/py, `--json` on the commands a script reads (keys checked
exactly: they are documented, so they are a contract), global options after the verb,
`--version` on the three programs, and help text and an example on every subcommand.
Against system and user units (the ``host`` fixture), under a real systemd.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from conftest import PYTHON, ROOT, poll, wait_for
from test_control import agent_yaml, control  # noqa: F401 - the fixture

# The statuses scripts rely on, spelled out: a change to ctl/py must fail here.
OK, REFUSED, USAGE, UNREACHABLE, TIMEOUT, WAIT_FAILED = 0, 1, 2, 3, 124, 125
NOWHERE = "/run/clowder-no-such-dir/ptyhost.sock"


def control_socket(host) -> str:
    return "/run/clowder/control.sock" if host.scope == "system" else \
        f"/run/user/{host.uid}/clowder/control.sock"


def bare(host, *args, **kw) -> subprocess.CompletedProcess:
    """clowderctl as the scope's user with no option before the verb but what is given."""
    return host.run([PYTHON, "-m", "ctl", *args], check=False, **kw)


def ended_with(host, code: int) -> str:
    sid = host.spawn("sh", "-c", f"exit {code}")
    wait_for(lambda: host.ps()[sid]["state"] != "running", 15, f"session {sid} to end")
    return sid


# --- exit statuses ------------------------------------------------------------------------

def test_each_failure_has_its_own_exit_status(host):
    # usage
    r = host.ctl("ps", "--no-such-option", check=False)
    assert r.returncode == USAGE and b"unrecognized" in r.stderr, r
    # refused: the host answered no
    for args in (["kill", "no-such-session"], ["rm", "no-such-session"],
                 ["send", "no-such-session", "x"]):
        r = host.ctl(*args, check=False)
        assert r.returncode == REFUSED and b"no such session" in r.stderr, r
    # unreachable: nothing listens there (was 2, the usage errors' status)
    r = bare(host, "--socket", NOWHERE, "ps")
    assert r.returncode == UNREACHABLE, r
    assert b"nothing listens at" in r.stderr and b"Traceback" not in r.stderr, r.stderr
    # ... and the same option after the verb (was a usage error)
    r = bare(host, "ps", "--socket", NOWHERE)
    assert r.returncode == UNREACHABLE and b"nothing listens at" in r.stderr, r
    r = bare(host, "status", "--control-socket", NOWHERE.replace("ptyhost", "control"))
    assert r.returncode == UNREACHABLE and b"nothing listens at" in r.stderr, r
    assert b"clowder-control.socket started?" in r.stderr, r.stderr  # its own daemon's


def test_wait_passes_the_programs_status_and_keeps_its_own_apart(host):
    sid = ended_with(host, 3)
    r = host.ctl("wait", sid, check=False)
    assert r.returncode == 3 and r.stdout.strip() == b"3", r  # the program's own status
    # clowderctl's own failures, as timeout(1)'s: never a status a program could mean
    # by accident (before: 1 refused, 2 unreachable, 2 usage, 2 for --timeout).
    r = host.ctl("wait", "no-such-session", check=False)
    assert r.returncode == WAIT_FAILED and b"no such session" in r.stderr, r
    r = bare(host, "--socket", NOWHERE, "wait", sid, timeout=30)
    assert r.returncode == WAIT_FAILED and b"nothing listens" in r.stderr, r
    r = host.ctl("wait", check=False)  # no ID
    assert r.returncode == WAIT_FAILED and b"required" in r.stderr, r
    running = host.spawn("sleep", "100000")
    t0 = time.monotonic()
    r = host.ctl("wait", running, "--timeout", "1", check=False, timeout=30)
    assert r.returncode == TIMEOUT and b"did not end within" in r.stderr, r
    assert time.monotonic() - t0 < 15
    host.ctl("kill", running, timeout=30)
    # --json: the status is in the output; the exit status is every command's.
    r = host.ctl("wait", "--json", "no-such-session", check=False)
    assert r.returncode == REFUSED, r
    r = bare(host, "--socket", NOWHERE, "wait", "--json", sid, timeout=30)
    assert r.returncode == UNREACHABLE, r


def test_a_daemon_not_answering_and_status_without_the_host(host, control):
    control.status()  # clowder-control up before the host is frozen
    pid = host.main_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        # Within a few seconds of freezing: the watchdog replaces a frozen host later.
        r = host.ctl("status", check=False, timeout=30)
        # It was 0: the agents shown are only what clowder-control last knew.
        assert r.returncode == UNREACHABLE and b"not answering" in r.stdout, r
        r = host.ctl("ps", "--timeout", "1", check=False, timeout=30)  # after the verb
        assert r.returncode == TIMEOUT and b"not answering" in r.stderr, r
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # a watchdog replaced the frozen host meanwhile
    wait_for(lambda: host.ctl("status", check=False).returncode == OK, 30,
             "status to exit 0 once the host answers again")


# --- --json ---------------------------------------------------------------------------

def test_wait_and_history_json(host):
    sid = ended_with(host, 7)
    r = host.ctl("wait", sid, "--json")
    assert json.loads(r.stdout) == {"session": sid, "status": "exited", "exit_code": 7,
                                    "signal": None}, r.stdout
    sid = host.spawn("sh", "-c", "echo first-line; echo second-line; exec sleep 100000")
    wait_for(lambda: b"second-line" in host.backlog(sid), 15, "the session's output")
    out = json.loads(host.ctl("history", sid, "--json").stdout)
    assert set(out) == {"session", "format", "lines"} and out["format"] == "text", out
    lines = [line.strip() for line in out["lines"]]
    assert lines.index("first-line") + 1 == lines.index("second-line"), out
    host.ctl("kill", "--signal", "KILL", sid)
    r = host.ctl("wait", sid, "--json")
    assert json.loads(r.stdout) == {"session": sid, "status": "killed", "exit_code": None,
                                    "signal": 9}, r.stdout


def test_upgrade_check_json(host):
    r = host.ctl("upgrade", "--check", "--json")
    out = json.loads(r.stdout)
    assert set(out) == {"ok", "message", "version", "new_version"}, out
    assert out["ok"] is True and out["version"] and out["new_version"], out


@pytest.fixture
def workdir(host, control):  # noqa: F811 - the imported fixture
    """An agent's working directory of its own, owned by the scope's user."""
    path = f"{control.workdir}/cli-{uuid.uuid4().hex[:8]}"
    host.run(["mkdir", "-p", path])
    yield path
    host.run(["rm", "-rf", path])


def _agent(control, workdir) -> str:  # noqa: F811 - a Control, not the fixture
    name = "cli" + uuid.uuid4().hex[:6]
    control.write_config("agents:\n" + agent_yaml(name, "sleep 100000", workdir))
    control.wait_running([name])
    return name


def test_file_ls_json_with_options_after_the_verb(host, control, workdir):  # noqa: F811
    agent = _agent(control, workdir)
    host.run(["sh", "-c", f"printf hello > {workdir}/hello.txt && mkdir {workdir}/sub"])
    r = bare(host, "file", "ls", agent, "--json", "--control-socket", control_socket(host))
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert set(out) == {"agent", "path", "entries", "truncated"}, out
    assert out["agent"] == agent and out["truncated"] is False, out
    entries = {e["name"]: e for e in out["entries"]}
    assert all(set(e) == {"name", "type", "size", "mtime"} for e in out["entries"]), out
    assert entries["hello.txt"]["type"] == "file" and entries["hello.txt"]["size"] == 5
    assert entries["sub"]["type"] == "dir", entries
    assert abs(entries["hello.txt"]["mtime"] - time.time()) < 600, entries


def test_file_watch_json_one_object_per_line(host, control, workdir):  # noqa: F811
    agent = _agent(control, workdir)
    proc = subprocess.Popen(host._as([PYTHON, "-m", "ctl", "file", "watch", agent,
                                      "--json"]),
                            env=host.env, cwd="/", stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout],
                              daemon=True)
    reader.start()
    got: list[dict] = []

    def seen(pred) -> bool:
        while not lines.empty():
            got.append(json.loads(lines.get()))  # every line is one JSON object
        return any(pred(e) for e in got)
    try:
        wait_for(lambda: seen(lambda e: e["kind"] == "watching"), 20,
                 "the watch to say it is set")
        host.run(["sh", "-c", f"printf x > {workdir}/new.txt"])
        wait_for(lambda: seen(lambda e: e["path"] == "new.txt" and
                              e["kind"] in ("created", "modified")), 20,
                 "the new file's event")
        assert all(set(e) == {"kind", "path"} for e in got), got
        assert got[0] == {"kind": "watching", "path": "."}, got
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # runuser and the watch: our own group
        proc.wait(10)
        proc.stdout.close()


def test_vcs_status_and_log_json(host, control, workdir):  # noqa: F811
    git = ["git", "-C", workdir, "-c", "user.name=T", "-c", "user.email=t@example.org"]
    host.run(git + ["init", "-q", "-b", "main"])
    host.run(["sh", "-c", f"echo one > {workdir}/a.txt"])
    host.run(git + ["add", "a.txt"])
    host.run(git + ["commit", "-q", "-m", "first commit"])
    host.run(["sh", "-c", f"echo two >> {workdir}/a.txt; echo new > {workdir}/b.txt"])
    agent = _agent(control, workdir)
    out = json.loads(host.ctl("vcs", "status", agent, "--json").stdout)
    assert set(out) == {"agent", "branch", "upstream", "ahead", "behind", "oid", "entries",
                        "truncated"}, out
    assert out["branch"] == "main" and out["upstream"] is None and len(out["oid"]) == 40
    entries = {e["path"]: e for e in out["entries"]}
    assert all(set(e) == {"path", "index", "worktree", "orig"} for e in out["entries"])
    assert entries["a.txt"]["worktree"] == "M" and entries["b.txt"]["index"] == "?", out
    out = json.loads(host.ctl("vcs", "log", agent, "-n", "5", "--json").stdout)
    assert set(out) == {"agent", "commits", "truncated"}, out
    [commit] = out["commits"]
    assert set(commit) == {"commit", "author", "date", "subject"}, commit
    assert commit["subject"] == "first commit" and commit["author"] == "T", commit


# --- ps before the imports (ctl/quickps.py) --------------------------------------------

# Runs clowderctl's entry point with the arguments after -c and, as it exits (the full
# path ends in sys.exit), names the command-line modules that were imported: none when
# ps was answered before them.
QUICK_PROBE = ("import atexit, sys\n"
               "atexit.register(lambda: print('IMPORTED', sorted(x for x in ('argparse', 're', "
               "'json', 'socket', 'ctl.cli', 'ctl.client', 'ctl.commands') "
               "if x in sys.modules), flush=True))\n"
               "import ctl.__main__ as m\n"
               "sys.exit(m.main(sys.argv[1:]))")


def quick_ps(host, *args) -> tuple[str, str]:
    """(what `clowderctl --socket S ps ARGS` printed, the modules it imported)."""
    out = host.run([PYTHON, "-c", QUICK_PROBE, "--socket", host.socket, "ps", *args]
                   ).stdout.decode()
    table, _, imported = out.rpartition("IMPORTED ")
    return table, imported.strip()


def test_plain_ps_is_answered_before_the_command_line_as_the_full_path_answers(host):
    """`ps`, `ps -a`, `ps --all`, with --json too, are answered before argparse, json,
    socket and the command line are imported, and print what the full path prints
    (taken here by giving --timeout, which the quick path leaves to it): running, exited
    and killed sessions alike."""
    running = host.spawn("cat")
    exited = ended_with(host, 3)
    killed = host.spawn("cat")
    host.ctl("kill", killed)
    wait_for(lambda: host.ps()[killed]["state"] != "running", 15, "the killed session to end")
    for opts in (["-a"], ["--all"], ["--json", "--all"], ["-a", "--json"], [], ["--json"]):
        def same() -> bool:
            table, imported = quick_ps(host, *opts)
            assert imported == "[]", f"ps {opts} imported {imported}"
            full = host.ctl("--timeout", "20", "ps", *opts).stdout.decode()
            same.last = (table, full)
            return table == full
        # Another test's session may end between the two listings: they agree once it did.
        assert poll(same, 15, 0.05), \
            "the quick and the full `ps {}` disagree:\n{}\n{}".format(" ".join(opts), *same.last)
        if opts in (["-a"], ["--all"]):
            rows = {line.split()[0]: line.split() for line in same.last[0].splitlines()[1:]}
            assert rows[running][4] == "running" and rows[exited][4:6] == ["exited", "3"], rows
            assert rows[killed][4] != "running", rows


def test_quick_ps_needs_no_site(host):
    """The packages' clowderctl starts Python with -S (ctl/sitepath.py): `ps` is answered
    as the full path answers, before site is imported; a command line that goes on to
    the full path runs site first."""
    sid = host.spawn("cat")
    probe = ("import sys; sys.path.insert(0, sys.argv.pop(1))\n"
             + QUICK_PROBE.replace("'ctl.commands')", "'ctl.commands', 'site')"))
    for args, quick in ((["ps", "--all"], True), (["--timeout", "20", "ps", "--all"], False)):
        def same() -> bool:
            proc = host.run([PYTHON, "-S", "-c", probe, ROOT, "--socket", host.socket, *args])
            table, _, names = proc.stdout.decode().rpartition("IMPORTED ")
            assert names.strip() == "[]" if quick else "'site'" in names, (args, names)
            full = host.ctl("--timeout", "20", "ps", "--all").stdout.decode()
            same.last = (table, full)
            return table == full and sid in table
        # Another test's session may end between the two listings: they agree once it did.
        assert poll(same, 15, 0.05), "ps {} with -S:\n{}\n{}".format(args, *same.last)


def test_quick_ps_leaves_a_fleet_and_its_errors_to_the_full_path(host):
    """With a client configuration (its hosts: make ps a fleet; named by
    $CLOWDER_CLIENT_CONFIG or found at its default place), a socket where nothing
    listens, or a bad $CLOWDER_TIMEOUT, the quick path prints nothing and the full path
    answers as before, with its own messages and exit statuses."""
    home = tempfile.mkdtemp(prefix="clowder-quickps-", dir="/var/tmp")  # the user's too
    try:
        os.makedirs(f"{home}/clowder")
        with open(f"{home}/clowder/client.yaml", "w") as f:
            f.write("hosts: [local]\n")
        for path in (home, f"{home}/clowder", f"{home}/clowder/client.yaml"):
            os.chmod(path, 0o755)
        for config in ({"CLOWDER_CLIENT_CONFIG": f"{home}/clowder/client.yaml"},
                       {"XDG_CONFIG_HOME": home}):
            fleet = host.run([PYTHON, "-c", QUICK_PROBE, "ps"], check=False,
                             env={**host.env, **config, "CLOWDER_SOCKET": host.socket})
            assert fleet.returncode == OK, fleet
            assert b"'argparse'" in fleet.stdout, fleet.stdout  # the full path ran
            assert fleet.stdout.startswith(b"id "), fleet.stdout
    finally:
        shutil.rmtree(home)
    nowhere = host.run([PYTHON, "-c", QUICK_PROBE, "--socket", NOWHERE, "ps"], check=False)
    assert nowhere.returncode == UNREACHABLE and b"nothing listens at" in nowhere.stderr
    bad = host.run([PYTHON, "-c", QUICK_PROBE, "--socket", host.socket, "ps"], check=False,
                   env={**host.env, "CLOWDER_TIMEOUT": "soon"})
    assert bad.returncode == USAGE and b"CLOWDER_TIMEOUT" in bad.stderr, bad


# --- no daemon needed ------------------------------------------------------------------

@pytest.mark.parametrize("program,name", [("ctl", "clowderctl"), ("ptyhostd", "ptyhostd"),
                                          ("controld", "clowder-control")])
def test_version_of_each_program(program, name):
    from clowder_common import __version__
    r = subprocess.run([PYTHON, "-m", program, "--version"], capture_output=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0 and r.stdout.decode().strip() == f"{name} {__version__}", r


def _parsers(parser, path):
    """(command words, parser) of every parser below ``parser``, itself included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action._name_parser_map.items():
                yield from _parsers(sub, path + [name])


def test_every_argument_has_help_and_every_subcommand_an_example():
    from ctl.cli import build_parser
    everything = list(_parsers(build_parser(load_all=True), ["clowderctl"]))
    assert len(everything) > 25, "not every subcommand was built"
    missing, no_example = [], []
    for path, parser in everything:
        missing += [f"{' '.join(path)} {a.option_strings or a.dest}" for a in parser._actions
                    if not isinstance(a, argparse._SubParsersAction)
                    and (not a.help or a.help == argparse.SUPPRESS)]
        if not re.search(r"^examples:\n  .*(clowderctl|ssh) ", parser.epilog or "", re.M):
            no_example.append(" ".join(path))
    assert not missing, "arguments without help:\n" + "\n".join(missing)
    assert not no_example, "commands without an example:\n" + "\n".join(no_example)


def test_the_exit_statuses_are_documented_where_people_look():
    from ctl import exits
    from ctl.cli import build_parser
    assert (exits.OK, exits.REFUSED, exits.USAGE, exits.UNREACHABLE, exits.TIMEOUT,
            exits.WAIT_FAILED) == (OK, REFUSED, USAGE, UNREACHABLE, TIMEOUT, WAIT_FAILED)
    epilog = build_parser().epilog
    assert exits.PARTIAL == 4  # a fleet: some hosts answered, some did not
    for code in (REFUSED, USAGE, UNREACHABLE, exits.PARTIAL, TIMEOUT, WAIT_FAILED):
        assert f"\n  {code} " in epilog, f"--help has no exit-status row {code}"
    for doc in ("README.md", "docs/design.md"):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for code in ("| 1 ", "| 2 ", "| 3 ", "| 4 ", "| 124 ", "| 125 "):
            assert code in text, f"{doc} has no exit-status row {code!r}"
