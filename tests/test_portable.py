"""The client (clowderctl) uses no Linux-only name, so that it runs on macOS.

`clowderctl --host box attach` from a laptop is the remote use case; the daemons are
Linux-only.  The check walks the syntax of every module of ctl/, of clowder_wire/, and
of the clowder_common modules those import, and fails on a Linux-only name of the
standard library (tests/portable/clowder_test_linux_only.py lists them) or a path under
/proc or /sys.  Feature detection is allowed: ``getattr(os, "memfd_create", None)``
with a fallback, and ``hasattr``; ctl/portable.py holds those.

`make test CLOWDER_TEST_NO_LINUX_ONLY=1 TESTS=...` runs the client tests themselves with
those names deleted from each clowderctl process (tests/conftest.py).
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "portable"))
from clowder_test_linux_only import LINUX_ONLY, LINUX_PATHS  # noqa: E402

CLIENT_PACKAGES = ("ctl", "clowder_wire")


def _module_file(name: str) -> str | None:
    """The file of module ``name`` of this tree (a package's __init__.py), if any."""
    base = os.path.join(ROOT, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _imports(tree: ast.AST, package: str) -> set[str]:
    """The modules of this tree that ``tree`` (a module of ``package``) imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # submodules
    return {m for m in found if m.split(".")[0] == "clowder_common"}


def client_files() -> list[str]:
    """ctl/ and clowder_wire/ whole, and the clowder_common modules they import (and
    those import, and so on)."""
    files = []
    for pkg in CLIENT_PACKAGES:
        for dirpath, _, names in os.walk(os.path.join(ROOT, pkg)):
            files += [os.path.join(dirpath, n) for n in names if n.endswith(".py")]
    todo, seen = list(files), set(files)
    while todo:
        path = todo.pop()
        rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        package = rel[:-len(".__init__")] if rel.endswith(".__init__") else \
            rel.rpartition(".")[0]
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for mod in _imports(tree, package if not rel.endswith("__init__") else package):
            # "from clowder_common import __version__": the package's __init__ only.
            found = _module_file(mod)
            if found and found not in seen:
                seen.add(found)
                files.append(found)
                todo.append(found)
    return sorted(files)


def linux_only_uses(source: str, filename: str = "<source>") -> list[str]:
    """Each Linux-only name ``source`` uses, as "file:line: module.name"."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}  # local name -> module, for the modules of LINUX_ONLY
    found = []

    def hit(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in LINUX_ONLY:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in LINUX_ONLY and \
                not node.level:
            for a in node.names:
                if a.name in LINUX_ONLY[node.module]:
                    hit(node, f"from {node.module} import {a.name}")
    # A getattr with a default, or a hasattr, is feature detection: allowed.
    detected = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                (node.func.id == "hasattr" or
                 (node.func.id == "getattr" and len(node.args) == 3)):
            detected.add(id(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in aliases and \
                node.attr in LINUX_ONLY[aliases[node.value.id]]:
            hit(node, f"{aliases[node.value.id]}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "getattr" and id(node) not in detected and \
                len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and \
                node.args[0].id in aliases and isinstance(node.args[1], ast.Constant) and \
                node.args[1].value in LINUX_ONLY[aliases[node.args[0].id]]:
            hit(node, f"getattr({aliases[node.args[0].id]}, {node.args[1].value!r}) "
                      f"without a default")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith(LINUX_PATHS):
            hit(node, f"the Linux path {node.value[:40]!r}")
        elif isinstance(node, ast.JoinedStr) and node.values and \
                isinstance(node.values[0], ast.Constant) and \
                str(node.values[0].value).startswith(LINUX_PATHS):
            hit(node, f"the Linux path {node.values[0].value[:40]!r}...")
    return found


def test_the_client_uses_no_linux_only_name():
    files = client_files()
    assert os.path.join(ROOT, "ctl", "commands", "attach.py") in files
    assert os.path.join(ROOT, "clowder_common", "__init__.py") in files
    found = []
    for path in files:
        with open(path) as f:
            found += linux_only_uses(f.read(), os.path.relpath(path, ROOT))
    assert not found, ("Linux-only names on the client's paths (clowderctl runs on "
                       "macOS; ctl/portable.py has the portable ways):\n  "
                       + "\n  ".join(found))


def test_daemon_modules_are_not_on_the_clients_paths():
    # The check covers what the client imports: a clowder_common module the daemons use
    # (sdnotify, listener) is outside it until ctl imports it.
    names = {os.path.relpath(p, ROOT) for p in client_files()}
    assert not {n for n in names if n.startswith(("ptyhostd", "controld"))}
    assert "clowder_common/listener.py" not in names


@pytest.mark.parametrize("source, expected", [
    ("import os\nos.pipe2(0)", "os.pipe2"),
    ("import socket\nsocket.socket(1, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)",
     "socket.SOCK_CLOEXEC"),
    ("import socket as s\ns.SOCK_NONBLOCK", "socket.SOCK_NONBLOCK"),
    ("from os import memfd_create", "from os import memfd_create"),
    ("import select\nselect.epoll()", "select.epoll"),
    ("import selectors\nselectors.EpollSelector()", "selectors.EpollSelector"),
    ("import signal\nsignal.pidfd_send_signal(3, 1)", "signal.pidfd_send_signal"),
    ("import os\ngetattr(os, 'pipe2')(0)", "getattr(os, 'pipe2') without a default"),
    ("open('/proc/self/status')", "the Linux path '/proc/self/status'"),
    ("pid = 1\nopen(f'/proc/{pid}/cgroup')", "the Linux path '/proc/'..."),
])
def test_the_check_finds_each_kind_of_use(source, expected):
    found = linux_only_uses(source)
    assert found and expected in found[0], found


@pytest.mark.parametrize("source", [
    "import os\nos.pipe()",
    "import os\nf = getattr(os, 'memfd_create', None)",
    "import os\nhasattr(os, 'pipe2')",
    "import selectors\ngetattr(selectors, 'EpollSelector', selectors.SelectSelector)()",
    "import socket\nsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
    "pipe2 = 1\nx = pipe2",
])
def test_the_check_allows_portable_code(source):
    assert linux_only_uses(source) == []


def test_the_switch_takes_the_names_away_from_clowderctl_only():
    import clowder_test_linux_only as switch
    assert switch.is_client(["/v/bin/python", "-m", "ctl", "ps"])
    assert switch.is_client(["/v/bin/python", "/usr/bin/clowderctl", "attach", "x"])
    assert not switch.is_client(["/v/bin/python", "-m", "ptyhostd"])
    assert not switch.is_client(["/v/bin/python", "-m", "controld"])
    assert not switch.is_client(["/v/bin/python", "-m", "pytest", "tests"])


def test_the_portable_ways_work_without_the_linux_names():
    # What a clowderctl on macOS gets from ctl/portable.py: a pipe, a scratch file that
    # keeps what is written, a selector that takes a pipe -- with the names deleted.
    import subprocess
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import clowder_test_linux_only as m; assert 'os.pipe2' in m.strip();"
        "import os, selectors; from ctl.portable import *;"
        "r, w = nonblocking_pipe(); assert not os.get_blocking(r);"
        "assert not os.get_inheritable(w); os.write(w, b'x');"
        "sel = terminal_selector(); assert type(sel) is selectors.SelectSelector, sel;"
        "sel.register(r, selectors.EVENT_READ); assert sel.select(5);"
        "fd = scratch_fd('t'); os.write(fd, b'said'); assert os.pread(fd, 4, 0) == b'said';"
        "assert not os.get_inheritable(fd); print('ok')")
    out = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "tests", "portable")],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
