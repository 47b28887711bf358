"""The fds systemd hands a service at start, read as sd_listen_fds_with_names(3) reads
them (clowder_common/sdnotify.py, without systemd-python): held to systemd-python's
own reading of the same environment, in a process of its own (fds 3.. and its pid)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys
from systemd import daemon
from clowder_common import sdnotify
fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(3)]
assert fds == [3, 4, 5], fds
for fd in fds:
    os.set_inheritable(fd, True)
if os.environ.get("WRONG_PID"):
    os.environ["LISTEN_PID"] = str(os.getpid() + 1)
saved = dict(os.environ)
try:
    ours = sdnotify.inherited()
except ValueError as exc:
    ours = "refused: " + str(exc)
left = sorted(k for k in os.environ if k.startswith("LISTEN_"))
inheritable = [os.get_inheritable(fd) for fd in fds]
os.environ.clear(); os.environ.update(saved)
try:
    theirs = {}
    for fd, name in daemon.listen_fds_with_names(unset_environment=True).items():
        theirs.setdefault(name, []).append(fd)
except (OSError, ValueError) as exc:
    theirs = "refused"
print(json.dumps({"ours": ours, "theirs": theirs, "left": left, "inheritable": inheritable}))
"""


def _run(env: dict) -> dict:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}, **env}
    out = subprocess.run(["sh", "-c", f'LISTEN_PID=$$ exec "{sys.executable}" -c "$0"', CHILD],
                         cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("env", [
    {"LISTEN_FDS": "3", "LISTEN_FDNAMES": "ptyhost.sock:m.abc:m.abc"},
    {"LISTEN_FDS": "3"},
    {"LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b"},
    {"LISTEN_FDS": "3", "LISTEN_FDNAMES": "a:b:c", "WRONG_PID": "1"},
    {"LISTEN_FDS": "0", "LISTEN_FDNAMES": ""},
])
def test_the_fds_are_what_systemd_python_reads(env):
    got = _run(env)
    ours = got["ours"] if isinstance(got["ours"], dict) else "refused"
    assert ours == got["theirs"], got
    assert got["left"] == []  # the variables are never passed on
    n = len(sum(got["ours"].values(), [])) if isinstance(got["ours"], dict) else 0
    assert got["inheritable"] == [False] * n + [True] * (3 - n)


def test_names_that_do_not_match_the_count_are_refused():
    got = _run({"LISTEN_FDS": "3", "LISTEN_FDNAMES": "a:b"})
    assert got["ours"].startswith("refused: LISTEN_FDNAMES names 2 fds, LISTEN_FDS says 3")
    assert got["theirs"] == "refused" and got["left"] == []
