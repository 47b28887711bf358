"""The command line that runs one of clowder's modules as ``__main__`` in a new
interpreter (what ``python -m MODULE`` does), wherever clowder is installed.

In a venv or with pip the packages are on the interpreter's own path, and ``-m`` would
find them; the .deb and .rpm keep them in a private directory (/usr/share/clowder,
docs/design.md "Where the packages install"), which only the /usr/bin wrappers put on
``sys.path``: a new ``/usr/bin/python3 -m ptyhostd`` would not find it.  So the new
interpreter is told the directory these packages were imported from, and puts it first
on its path when its own path lacks it (tests/test_packaging.py runs the hand-off and
the configuration check from the installed .deb).  The current directory is never on
that path (-P).
"""

from __future__ import annotations

import os
import shlex
import site
import sys

# The directory holding clowder_common and its sibling packages.
HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_BOOT = ('import runpy, sys; d, m = sys.argv.pop(1), sys.argv.pop(1); '
         'd in sys.path or sys.path.insert(0, d); '
         'runpy.run_module(m, run_name="__main__", alter_sys=True)')


def on_default_path() -> bool:
    """Whether a new interpreter finds these packages by itself (venv, pip, dist-packages)."""
    found = [*site.getsitepackages(), site.getusersitepackages()]
    return os.path.realpath(HOME) in {os.path.realpath(p) for p in found}


def module_argv(module: str, *args: str) -> list[str]:
    """argv for this interpreter running ``module`` (e.g. "ptyhostd") with ``args``."""
    if on_default_path():
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-P", "-c", _BOOT, HOME, module, *args]


def module_command(module: str) -> str:
    """module_argv() as one command line, quoted for a shell or a unit's ExecStart=."""
    return shlex.join(module_argv(module))
