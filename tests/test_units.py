"""units/ is the rendering of ctl/units.py for a packaged install; keep them equal.
systemd-analyze verify checks that systemd accepts them."""

import os
import re
import shutil
import subprocess

import pytest

from ctl import units

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("scope,folder", [("system", "units"), ("user", "units/user")])
def test_units_folder_matches_renderer(scope, folder):
    files = units.render(scope, "/usr/bin/ptyhostd", "/usr/bin/clowder-control")
    if scope == "system":
        files.update(units.render_web("/usr/bin/clowder-web"))
    for name, text in files.items():
        with open(os.path.join(ROOT, folder, name)) as f:
            assert f.read() == text, f"{folder}/{name} is stale: run `make units`"
    on_disk = {n for n in os.listdir(os.path.join(ROOT, folder)) if "." in n}
    assert on_disk == set(files), f"{folder} holds units the renderer does not make"


def test_systemd_accepts_the_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is needed (Debian package systemd)"
    files = units.render("system", "/bin/true")
    files.update(units.render_web("/bin/true"))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # --man=no: the man: pages of Documentation= are installed by the packages, not here
    # (tests/test_packaging.py checks the .deb has every page a unit names).
    proc = subprocess.run([analyze, "verify", "--man=no", *[str(tmp_path / n) for n in files]],
                          capture_output=True, text=True)
    problems = [line for line in proc.stderr.splitlines()
                if "clowder" in line and "SocketGroup" not in line]
    assert not problems, proc.stderr


def test_every_unit_names_its_documentation():
    """Documentation= in every unit (system and user): the manual pages the packages
    install, and the project's page as debian/copyright and the spec name it."""
    pages = {"clowder-ptyhost": ("man:ptyhostd(8)", "man:clowderctl(1)"),
             "clowder-control": ("man:clowder-control(8)", "man:clowder.yaml(5)",
                                 "man:clowderctl(1)"),
             "clowder-web": ("man:clowder-web(8)", "man:clowderctl(1)")}
    for scope in ("system", "user"):
        files = units.render(scope, "/usr/bin/ptyhostd")
        if scope == "system":
            files.update(units.render_web("/usr/bin/clowder-web"))
        for name, text in files.items():
            docs = [line.split("=", 1)[1].split() for line in text.splitlines()
                    if line.startswith("Documentation=")]
            assert len(docs) == 1, f"{scope} {name}: want one Documentation= line"
            want = pages[name.rsplit(".", 1)[0]]
            assert docs[0] == [*want, units.DOCS_URL], (scope, name, docs)
    with open(os.path.join(ROOT, "packaging", "debian", "copyright")) as f:
        assert f"Source: {units.DOCS_URL}\n" in f.read()
    with open(os.path.join(ROOT, "packaging", "rpm", "clowder.spec")) as f:
        assert re.search(rf"^URL:\s+{re.escape(units.DOCS_URL)}$", f.read(), re.M)
