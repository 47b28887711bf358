"""ptyhostd's command line: the units' own (--system, --user) are read without argparse
(~4 ms of every start, and so of a restart's blackout), and mean what argparse reads."""

import os
import subprocess
import sys

import pytest

from ptyhostd import __main__ as host_main
from ptyhostd import recordbudget

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVS = [{}, {"CLOWDER_BACKLOG_BYTES": "65536", "CLOWDER_MAX_SESSIONS_PER_USER": "3",
             "CLOWDER_MAX_RECORD_BYTES_PER_USER": "300000",
             "CLOWDER_SHOW_ENDED": "2.5", "CLOWDER_INPUT_QUEUE_BYTES": "8192",
             "CLOWDER_INPUT_DEADLINE": "0.5", "CLOWDER_SCREEN_ENGINE": "pyte",
             "CLOWDER_SCREEN_MEMORY": "99999999", "CLOWDER_LOG_LEVEL": "DEBUG"}]


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("argv", [[], ["--system"], ["--user"]])
def test_the_units_command_lines_mean_what_argparse_reads(monkeypatch, argv, env):
    for name in ENVS[1]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    quick = host_main._quick(argv)
    assert quick is not None
    assert vars(quick) == vars(host_main.parser().parse_args(argv))


@pytest.mark.parametrize("argv", [["--system", "--user"], ["--socket", "/x"], ["--system", "-h"],
                                  ["--version"], ["--hand-off", "1"], ["--check-handoff"],
                                  ["--sys"], ["system"]])
def test_any_other_command_line_goes_to_argparse(argv):
    assert host_main._quick(argv) is None


@pytest.mark.parametrize("name, value, said", [
    ("CLOWDER_LOG_LEVEL", "loud", "unknown log level 'loud'"),
    ("CLOWDER_BACKLOG_BYTES", "100", "--backlog-bytes must be at least 4096"),
    ("CLOWDER_MAX_RECORD_BYTES_PER_USER", "65536",
     f"--max-record-bytes-per-user must be at least {recordbudget.LARGEST} (the longest "
     "record one session can make), not 65536"),
    ("CLOWDER_INPUT_DEADLINE", "0", "--input-deadline positive")])
def test_a_bad_default_is_refused_as_argparse_refuses_it(name, value, said):
    run = subprocess.run([sys.executable, "-m", "ptyhostd", "--system"], cwd=ROOT,
                         env={**os.environ, name: value}, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and said in run.stderr and "usage: ptyhostd" in run.stderr, \
        run.stderr


def test_the_start_reads_its_command_line_without_argparse():
    code = ("import sys; sys.argv = ['ptyhostd', '--system']; import ptyhostd.__main__ as m; "
            "m._parse(None); print('argparse' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("argv0, collecting", [("/usr/bin/ptyhostd", False),
                                               ("/opt/x/ptyhostd/__main__.py", False),
                                               ("/usr/bin/pytest", True)])
def test_the_collector_is_off_only_in_the_host_itself(argv0, collecting):
    """The host starts with garbage collection off (its start keeps every object it
    makes: ptyhostd/__main__.py, docs/design.md "Start: adopt and reconcile"); a process
    that imports the module for its parser (packaging/gendocs.py, these tests) keeps
    its collector."""
    code = ("import sys; sys.argv[0] = %r; import gc, ptyhostd.__main__; "
            "print(gc.isenabled())" % argv0)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == str(collecting)
