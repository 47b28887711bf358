"""The three programs share only clowder_wire and clowder_common (issue 13).

Read from the source with ast, so no import runs and no daemon is needed: a change
inside one program cannot break another.  ctl never imports controld or ptyhostd,
controld never ptyhostd or ctl, ptyhostd never controld or ctl; clowder_common imports
none of the three, and clowder_wire nothing of clowder at all (it is self-contained,
so a later move under one namespace, issue 15, takes it whole).

Also here, because each is about what a start-up imports: clowderctl's argument parsing
imports no subcommand's module, and the wire package stays free of dataclasses.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ("ptyhostd", "controld", "ctl")
SHARED = ("clowder_wire", "clowder_common")
# Package -> the packages of this tree it must never import.
FORBIDDEN = {
    "ctl": {"controld", "ptyhostd"},
    "controld": {"ptyhostd", "ctl"},
    "ptyhostd": {"controld", "ctl"},
    "clowder_common": {"ptyhostd", "controld", "ctl"},
    "clowder_wire": {"ptyhostd", "controld", "ctl", "clowder_common"},
}


def imported(path: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file, wherever it is
    (a function's lazy import counts as much as one at the top)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def sources(package: str) -> list[str]:
    found = []
    for folder, _dirs, files in os.walk(os.path.join(ROOT, package)):
        found += [os.path.join(folder, name) for name in files if name.endswith(".py")]
    assert found, f"no sources under {package}/"
    return sorted(found)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_only_what_it_may(package):
    bad = [f"{os.path.relpath(path, ROOT)}:{line} imports {top}"
           for path in sources(package) for line, top in imported(path)
           if top in FORBIDDEN[package]]
    assert not bad, f"{package} reaches into another program:\n" + "\n".join(bad)


def test_the_rule_sees_a_lazy_import(tmp_path):
    """The check itself: an import inside a function is found, a relative one is not."""
    path = tmp_path / "m.py"
    path.write_text("from . import x\n\ndef f():\n    from ptyhostd.pty import fit_size\n")
    assert imported(str(path)) == [(4, "ptyhostd")]


def test_the_wire_package_lists_every_name_once():
    import clowder_wire
    from clowder_wire import control, files, frame, handshake, host, streams, vcs
    union = []
    for module in (frame, handshake, host, control, streams, files, vcs):
        union += module.__all__
        assert all(hasattr(module, name) for name in module.__all__), module.__name__
    assert clowder_wire.__all__ == union
    assert len(set(union)) == len(union), "a name exported by two files"


def python(code: str) -> str:
    """Run ``code`` in a fresh interpreter on this tree; its stdout."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_parsing_a_command_line_imports_only_that_subcommand():
    code = ("import sys; from ctl.cli import build_parser; p = build_parser(); "
            "p.format_help(); {}; "
            "print(sorted(m for m in sys.modules if m.startswith('ctl.commands.')))")
    assert python(code.format("pass")) == "[]"
    assert python(code.format("p.parse_args(['ps'])")) == "['ctl.commands.ps']"
    # history lives in snapshot's module with snapshot.
    assert python(code.format("p.parse_args(['history', 'x'])")) == \
        "['ctl.commands.snapshot']"


def test_each_subcommand_is_listed_with_its_modules_own_help():
    import argparse

    from ctl.commands import COMMANDS

    modules = {}
    for name, module, helptext in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        __import__(f"ctl.commands.{module}", fromlist=["add_parser"]).add_parser(sub)
        modules[name] = {a.dest: a.help for a in sub._choices_actions}
        assert modules[name].get(name) == helptext, \
            f"{name}: the table says {helptext!r}, ctl/commands/{module}.py says " \
            f"{modules[name].get(name)!r}"
    listed = {name for names in modules.values() for name in names}
    assert listed == {name for name, _, _ in COMMANDS}, "a subcommand missing from COMMANDS"


def test_clowderctl_starts_without_dataclasses_or_typing():
    """What the start-up measurements rest on (docs/design.md, "the wire package")."""
    code = ("import sys; import ctl.cli, ctl.client, clowder_wire; "
            "print(sorted(m for m in ('dataclasses', 'typing', 'yaml', 'pyte') "
            "if m in sys.modules))")
    assert python(code) == "[]"


def test_attach_draws_before_importing_the_command_line():
    """What attach's first paint rests on (ctl/firstpaint.py, docs/bench.md 7): the entry
    point and everything it imports before drawing stay clear of the modules whose
    import cost the start-up (re and json, socket's and signal's enums, argparse, the
    command line and the commands)."""
    code = ("import sys; import ctl.__main__; "
            "print(sorted(m for m in ('re', 'json', 'enum', 'socket', 'signal', 'argparse', "
            "'selectors', 'ctl.cli', 'ctl.client', 'ctl.commands', 'dataclasses', 'typing', "
            "'clowder_wire.control', 'clowder_wire.streams', 'clowder_wire.files', "
            "'clowder_wire.vcs') if m in sys.modules))")
    assert python(code) == "[]"


def test_ps_is_answered_before_importing_the_command_line():
    """What `clowderctl ps` rests on (ctl/quickps.py): the entry point and what it
    imports to answer stay clear of the command line's costly modules, json's re too."""
    code = ("import sys; import ctl.__main__, ctl.quickps; "
            "print(sorted(m for m in ('re', 'json', 'enum', 'socket', 'signal', 'argparse', "
            "'selectors', 'ctl.cli', 'ctl.client', 'ctl.commands', 'ctl.firstpaint', "
            "'dataclasses', 'typing', 'clowder_wire.control') if m in sys.modules))")
    assert python(code) == "[]"


LAZY_WIRE = ["clowder_wire.control", "clowder_wire.files", "clowder_wire.streams",
             "clowder_wire.vcs"]


@pytest.mark.parametrize("first_use", ["frame", "name", "KINDS", "import"])
def test_the_other_services_messages_load_at_first_use(first_use):
    """The wire package loads the control plane's, streams', files' and VCS's messages
    when first needed (clowder_wire/__init__.py): a frame of one of their kinds decodes
    in a program that never named them, and any of their names, or KINDS, is there."""
    import clowder_wire as P
    frame = P.encode(P.GetStatus()) + P.encode(P.VcsStatus(agent="a"))
    use = {"frame": f"print([type(m).__name__ for m in "
                    f"P.FrameReader().feed(bytes.fromhex('{frame.hex()}'))])",
           "name": "print(P.GetStatus.KIND, P.VcsReport.KIND)",
           "KINDS": "print(len(P.KINDS))",
           "import": "from clowder_wire import StreamOpened, MAX_LOG_LINES; "
                     "print(StreamOpened.KIND, MAX_LOG_LINES)"}[first_use]
    code = ("import sys, clowder_wire as P\n"
            "loaded = lambda: sorted(m for m in sys.modules if m in {lazy})\n"
            "print(loaded())\n{use}\nprint(loaded())").format(lazy=LAZY_WIRE, use=use)
    before, answer, after = python(code).splitlines()
    assert before == "[]"
    assert answer == {"frame": "['GetStatus', 'VcsStatus']",
                      "name": f"{P.GetStatus.KIND} {P.VcsReport.KIND}",
                      "KINDS": str(len(P.KINDS)),
                      "import": f"{P.StreamOpened.KIND} {P.MAX_LOG_LINES}"}[first_use]
    assert after == str(LAZY_WIRE if first_use != "frame" else
                        ["clowder_wire.control", "clowder_wire.vcs"])
    with pytest.raises(AttributeError, match="no attribute 'NoSuchMessage'"):
        P.NoSuchMessage


def test_the_host_starts_without_a_screen_model():
    """pyte and the screen are imported at first use, not before the host serves."""
    code = ("import sys; sys.argv = ['ptyhostd']; import ptyhostd.__main__; "
            "print(sorted(m for m in ('pyte', 'ptyhostd.screen', 'ptyhostd.history', "
            "'clowder_common.lines', 'yaml', 'secrets') if m in sys.modules))")
    assert python(code) == "[]"


def test_a_ghostty_model_loads_without_pyte():
    """The ghostty engine's model, its repaint, snapshots and a client's smaller view
    import neither pyte nor wcwidth (screen_render loads them at first use): they were
    ~26 ms of the first model's load, which a client reattaching after a restart waits
    for.  wcwidth comes when a width past U+10FF is first asked, pyte with its engine."""
    code = ("import sys\nfrom ptyhostd import engine\nengine.choose('ghostty')\n"
            "s = engine.new_screen(80, 24)\ns.feed(b'\\x1b[1mhi\\x1b[0m there')\n"
            "s.repaint(); [s.snapshot(f) for f in ('text', 'ansi', 'html')]\n"
            "from ptyhostd import screen_view\nscreen_view.view(s, 40, 10)\n"
            "mods = lambda: sorted(m for m in ('pyte', 'wcwidth') if m in sys.modules)\n"
            "print(mods())\ns.feed('\\u4e2d'.encode()); screen_view.view(s, 40, 10)\n"
            "print(mods())")
    assert python(code).splitlines() == ["[]", "['wcwidth']"]
