"""The man pages and shell completions, generated from the parsers (issue 15).

packaging/gendocs.py (the packages' build step) writes them into a temporary directory;
each parser is walked the way the generator does not need to (argparse's own actions,
not ctl/completion.py's tree), so a subcommand or option the generator missed, or an
argument without help, fails here.  The pages are rendered by man-db and groff with
every warning on; the completions run in real bash, zsh and fish.  The packages' copies
are checked by tests/test_packaging.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ("clowderctl.1", "ptyhostd.8", "clowder-control.8", "clowder-web.8", "clowder.yaml.5")

# Arguments allowed to have no help text: none (a new one without help fails).
UNDOCUMENTED: set = set()


def parsers() -> dict[str, argparse.ArgumentParser]:
    from controld.__main__ import parser as control_parser
    from ctl.cli import build_parser
    from ptyhostd.__main__ import parser as host_parser
    from webd.__main__ import parser as web_parser
    return {"clowderctl": build_parser(), "ptyhostd": host_parser(),
            "clowder-control": control_parser(), "clowder-web": web_parser()}


def commands(parser, path=()):
    """(path, parser) of ``parser`` and every subcommand under it, every lazy one built."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                name = choice.dest
                sub = action._name_parser_map[name]
                if not isinstance(sub, argparse.ArgumentParser):  # a lazy placeholder
                    sub = action.load(name)
                yield from commands(sub, path + (name,))


def arguments(parser):
    """Every argument a user can give: (its strings or its metavar, the action)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            yield action.option_strings, action
        else:
            yield [action.metavar or action.dest], action


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("gendocs"))
    subprocess.run([sys.executable, os.path.join(ROOT, "packaging", "gendocs.py"), out],
                   check=True, cwd=ROOT, env={**os.environ, "SOURCE_DATE_EPOCH": "0"})
    return out


def plain(roff: str) -> str:
    """A page's source with its escapes undone, for looking words up."""
    roff = re.sub(r"\\f[BIRP]|\\&|\\ ", lambda m: " " if m[0] == "\\ " else "", roff)
    return roff.replace("\\-", "-").replace("\\e", "\\")


def subsection(page: str, heading: str) -> str:
    """The text of ``.SS "heading"`` up to the next .SS or .SH."""
    match = re.search(rf'^\.SS "{re.escape(heading)}"\n(.*?)(?=^\.S[SH] |\Z)', page,
                      re.M | re.S)
    assert match, f"no section for `{heading}` in the page"
    return match[1]


@pytest.mark.parametrize("program", ["clowderctl", "ptyhostd", "clowder-control"])
def test_the_page_names_every_command_and_option(generated, program):
    section = {"clowderctl": 1}.get(program, 8)
    with open(os.path.join(generated, "man", f"{program}.{section}")) as f:
        page = plain(f.read())
    seen = 0
    for path, parser in commands(parsers()[program]):
        if path:
            text = subsection(page, " ".join(path))
        else:
            text = page[page.index('.SH "OPTIONS"'):]
            text = text[:text.index('.SH', 4)]
        for strings, action in arguments(parser):
            for word in strings:  # in a tagged paragraph's tag, not only the synopsis
                assert re.search(rf"^\.TP\n.*(?<![\w-]){re.escape(word)}(?![\w-])", text,
                                 re.M), \
                    f"{program} {' '.join(path)}: {word} is not in its part of the page"
            if action.help:
                first = " ".join(action.help.split()[:4]).replace("%%", "%")
                assert first in " ".join(text.split()), \
                    f"{program} {' '.join(path)} {strings[0]}: its help is not in the page"
            seen += 1
    assert seen > (60 if program == "clowderctl" else 5)


@pytest.mark.parametrize("program", ["clowderctl", "ptyhostd", "clowder-control"])
def test_every_argument_has_help(program):
    missing = []
    for path, parser in commands(parsers()[program]):
        for strings, action in arguments(parser):
            longs = [s for s in action.option_strings if s.startswith("--")]
            where = (" ".join(path), (longs or strings)[0] if action.option_strings
                     else action.dest)
            if not (action.help or "").strip() and where not in UNDOCUMENTED:
                missing.append(f"{program} {where[0]} {strings[0]}".replace("  ", " "))
    assert not missing, "arguments without help (the man page would say nothing):\n" + \
        "\n".join(missing)


def test_the_config_page_names_every_key(generated):
    from controld import config, schema
    with open(os.path.join(generated, "man", "clowder.yaml.5")) as f:
        page = plain(f.read())
    for prefix, keys in (("", config.TOP_KEYS), ("defaults.", config.DEFAULTS_KEYS),
                         ("agents[].", config.AGENT_KEYS),
                         ("agents[].shells[].", config.SHELL_KEYS)):
        for key in keys:
            assert f"{prefix}{key} (" in page, f"{prefix}{key} is not in clowder.yaml(5)"
    # The validator says "expected KIND" in the page's words.
    assert schema.kind(schema.AGENT, "size") in page
    with pytest.raises(config.ConfigError, match=re.escape(schema.kind(schema.AGENT, "size"))):
        config.parse("agents:\n - {name: a, command: x, cwd: /, size: [1]}\n")


@pytest.mark.parametrize("name", PAGES)
def test_man_renders_the_page_without_warnings(generated, name):
    path = os.path.join(generated, "man", name)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "MANWIDTH": "80"}
    man = subprocess.run(["man", "--warnings", "-l", path], capture_output=True,
                         text=True, env=env)
    assert man.returncode == 0 and man.stderr == "", man.stderr
    man.stdout = re.sub(".\b", "", man.stdout)  # grotty's overstriking (bold)
    title = name.rsplit(".", 1)[0].upper()
    assert man.stdout.startswith(title), man.stdout[:200]
    assert "NAME" in man.stdout and "SEE ALSO" in man.stdout
    groff = subprocess.run(["groff", "-ww", "-z", "-man", "-Tutf8", path],
                           capture_output=True, text=True, env=env)
    assert groff.returncode == 0 and groff.stderr == "", groff.stderr


def test_the_prose_moved_into_the_pages(generated):
    """What the hand-written pages said is still said (packaging/man/*.txt)."""
    def text(name):
        with open(os.path.join(generated, "man", name)) as f:
            return f.read()
    ctl = text("clowderctl.1")
    for heading in ("DESCRIPTION", "SESSION LIFECYCLE", "SESSION ENVIRONMENT",
                    "DETACHING", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES"):
        assert f'.SH "{heading}"' in ctl, heading
    for name in ("ptyhostd.8", "clowder-control.8", "clowder-web.8"):
        for heading in ("DESCRIPTION", "FILES", "EXAMPLES", "SEE ALSO"):
            assert f'.SH "{heading}"' in text(name), (name, heading)


def test_the_web_page_states_the_limits_the_code_has(generated):
    """clowder-web(8)'s limits are the constants webd uses (a change to one fails here
    until the page says it too)."""
    from clowder_common.ratelog import INTERVAL
    from webd.app import MAX_TERMINALS
    from webd.gate import MAX_AHEAD, MAX_PER_UID
    with open(os.path.join(generated, "man", "clowder-web.8")) as f:
        page = " ".join(plain(f.read()).split())
    for said in (f"{MAX_TERMINALS} terminals open at once", f"{MAX_PER_UID} connections",
                 f"at most {MAX_AHEAD} requests ahead", "at most 32 header lines",
                 f"every {INTERVAL:g} seconds"):
        assert said in page, f"clowder-web(8) does not say {said!r}"
    with open(os.path.join(ROOT, "webd", "__main__.py")) as f:
        assert "max_headers=32" in f.read(), "webd/__main__.py's header limit changed"


def test_clowderctl_page_states_the_spawn_limits_the_host_has(generated):
    """clowderctl(1)'s limits on a session's command line and directory are the wire's
    (tests/test_hostile_listing.py checks the host refuses past them)."""
    import clowder_wire as P
    with open(os.path.join(generated, "man", "clowderctl.1")) as f:
        page = " ".join(plain(f.read()).split())
    for said in (f"command line may take at most {P.MAX_ARGV_BYTES // 1024} KiB",
                 f"working directory at most {P.MAX_CWD_BYTES - 1:,} bytes"):
        assert said in page, f"clowderctl(1) does not say {said!r}"


# --- the completions ------------------------------------------------------------------


def ctl_tree():
    return parsers()["clowderctl"]


def test_the_completions_name_every_command_and_option(generated):
    scripts = {}
    for shell, name in (("bash", "clowderctl"), ("zsh", "_clowderctl"),
                        ("fish", "clowderctl.fish")):
        with open(os.path.join(generated, "completions", shell, name)) as f:
            scripts[shell] = f.read()
    for path, parser in commands(ctl_tree()):
        for shell, script in scripts.items():
            if path:
                assert re.search(rf"(?<![\w-]){re.escape(path[-1])}(?![\w-])", script), \
                    f"{shell}: no `{' '.join(path)}`"
            for strings, action in arguments(parser):
                for word in action.option_strings:
                    bare = word.lstrip("-") if shell == "fish" else word
                    assert re.search(rf"(?<![\w-]){re.escape(bare)}(?![\w-])", script), \
                        f"{shell}: `{' '.join(path)}` has no {word}"


def test_clowderctl_completion_prints_the_packaged_scripts(generated):
    for shell, name in (("bash", "clowderctl"), ("zsh", "_clowderctl"),
                        ("fish", "clowderctl.fish")):
        out = subprocess.run([sys.executable, "-m", "ctl", "completion", shell], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        with open(os.path.join(generated, "completions", shell, name)) as f:
            assert out == f.read(), shell
    bad = subprocess.run([sys.executable, "-m", "ctl", "completion", "tcsh"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def bash_complete(script: str, words: list[str]) -> list[str]:
    """What the bash completion offers for ``words`` (the last one being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    code = (f"source {script}\nCOMP_WORDS=({line})\nCOMP_CWORD={len(words) - 1}\n"
            f"complete -p clowderctl >/dev/null || exit 3\n"
            f"_clowderctl\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", code],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completes_commands_options_and_choices(generated, tmp_path):
    script = os.path.join(generated, "completions", "bash", "clowderctl")
    assert bash_complete(script, ["clowderctl", "sp"]) == ["spawn"]
    assert bash_complete(script, ["clowderctl", "comp"]) == ["completion"]
    # Global options and their values are skipped on the way to the command.
    assert set(bash_complete(script, ["clowderctl", "--socket", "/x", "file", ""])) == \
        {"ls", "cat", "put", "watch"}
    assert bash_complete(script, ["clowderctl", "file", "put", "--no"]) == ["--no-create"]
    assert bash_complete(script, ["clowderctl", "completion", ""]) == \
        ["bash", "zsh", "fish"]
    formats = [c for a in commands(ctl_tree()) if a[0] == ("snapshot",)
               for s, act in arguments(a[1]) if "--format" in s for c in act.choices]
    assert bash_complete(script, ["clowderctl", "snapshot", "--format", ""]) == formats
    # An argument without choices: files.
    (tmp_path / "afile").write_text("")
    assert bash_complete(script, ["clowderctl", "send", str(tmp_path / "af")]) == \
        [str(tmp_path / "afile")]


def test_zsh_completes_a_command(generated):
    assert shutil.which("zsh"), "zsh is missing: `make deps` installs it"
    script = os.path.join(generated, "completions", "zsh", "_clowderctl")
    # compsys itself needs a terminal: its entry points are stood in for, the script's
    # own logic runs in real zsh.
    code = ("_describe() { print -rl -- \"${(@P)${@[-1]}}\" }\n"
            "compadd() { print -rl -- \"${(@P)${@[-1]}}\" }\n"
            "_files() { print FILES }\ncompdef() { print compdef $* }\n"
            f"source {script}\n"
            "words=(clowderctl --timeout 5 vcs ''); CURRENT=5; _clowderctl\n")
    proc = subprocess.run(["zsh", "-f", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "compdef _clowderctl clowderctl", lines
    assert [entry.split(":")[0] for entry in lines[1:]] == ["status", "diff", "log"]


def test_fish_completes_a_command(generated):
    assert shutil.which("fish"), "fish is missing: `make deps` installs it"
    script = os.path.join(generated, "completions", "fish", "clowderctl.fish")
    proc = subprocess.run(["fish", "--no-config", "-c",
                           f"source {script}; complete -C 'clowderctl --socket /x file p'; "
                           "complete -C 'clowderctl completion '"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "put\treplace a file with stdin (atomically)", "bash", "fish", "zsh"]
