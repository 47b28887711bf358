"""units/ is the rendering of ctl/units.py for a packaged install; keep them equal.
systemd-analyze verify checks that systemd accepts them."""

import os
import shutil
import subprocess

import pytest

from ctl import units

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("scope,folder", [("system", "units"), ("user", "units/user")])
def test_units_folder_matches_renderer(scope, folder):
    for name, text in units.render(scope, "/usr/bin/ptyhostd", "/usr/bin/clowder-control").items():
        with open(os.path.join(ROOT, folder, name)) as f:
            assert f.read() == text, f"{folder}/{name} is stale: run `make units`"


def test_systemd_accepts_the_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is needed (Debian package systemd)"
    files = units.render("system", "/bin/true")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run([analyze, "verify", *[str(tmp_path / n) for n in files]],
                          capture_output=True, text=True)
    problems = [line for line in proc.stderr.splitlines()
                if "clowder" in line and "SocketGroup" not in line]
    assert not problems, proc.stderr
