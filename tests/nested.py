"""clowder in a nested systemd instance whose state directories outlive its poweroff.

For the tests that reboot a machine (test_reboot.py's acceptance test, test_soak.py's
"reboot" event): tools/sysinstance.py's Instance booted inside the test instance, with
KEPT - the host's and clowder-control's state directories and /etc/clowder - bound from
a directory under /var/tmp, so that a poweroff (``inst.stop``) and a second boot
(``inst.start``) find them as a real reboot would.  Everything else inside is an overlay
on a tmpfs and is gone with the poweroff: the units are installed again at each boot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from conftest import PYTHON, ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from sysinstance import Instance, InstanceError, sane_env  # noqa: E402,F401

# (name of the directory kept here, path inside): what a reboot keeps.
KEPT = (("ptyhost", "/var/lib/clowder-ptyhost"), ("control", "/var/lib/clowder"),
        ("etc", "/etc/clowder"))


def kept_dirs(prefix: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A new directory under /var/tmp holding one empty directory per KEPT entry; it and
    the (here, inside) pairs for ``Instance(kept=...)``."""
    kept = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    binds = []
    for sub, inside in KEPT:
        os.mkdir(os.path.join(kept, sub))
        binds.append((os.path.join(kept, sub), inside))
    return kept, tuple(binds)


def remove_kept(kept: str) -> None:
    """Remove ``kept`` (from kept_dirs) file by file: never a recursive delete as root
    of a path that could be a mount point (the instance must be stopped first)."""
    for dirpath, _dirnames, filenames in os.walk(kept, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        os.rmdir(dirpath)


class Nested:
    """clowder inside a nested instance, for Attach (test_attach.py) and commands."""

    def __init__(self, inst: Instance):
        self.inst = inst
        self.socket = "/run/clowder/ptyhost.sock"
        self.env = sane_env()

    def _as(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.inst.pid), "-a", "-r", "-w", "--",
                "env", "--chdir=/", "--", *argv]

    def run(self, *argv, check=True) -> subprocess.CompletedProcess:
        r = self.inst.exec(list(argv), capture_output=True, cwd="/", timeout=60)
        if check and r.returncode != 0:
            pytest.fail(f"{argv} in the nested instance exited {r.returncode}: "
                        f"{r.stderr.decode(errors='replace')}")
        return r

    def ctl(self, *args, check=True) -> subprocess.CompletedProcess:
        return self.run(PYTHON, "-m", "ctl", *args, check=check)

    def ps(self) -> dict:
        return {s["id"]: s for s in json.loads(self.ctl("ps", "--all", "--json").stdout)}

    def install(self) -> None:
        self.ctl("install-units", "--system", "--exec-start", f"{PYTHON} -m ptyhostd")
