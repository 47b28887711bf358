"""Unit tests of the agents configuration (controld/config.py) and ``clowderctl config
check``.  No systemd needed: everything runs on text, tmp_path files and subprocesses."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from controld import config, configfile
from controld.config import Agent, Config, ConfigError, Shell

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FULL = """\
version: 1
defaults:
  env: {LANG: C.UTF-8, EDITOR: vi}
  shell: /bin/bash
agents:
  - name: api
    command: claude
    resume: claude --continue
    cwd: /home/me/src/api
    env: {PORT: 8080, EDITOR: nano}
    size: 120x40
    shells:
      - name: build
        command: make watch
        split: right
        percent: 40
        cwd: /home/me/src/api/web
      - name: sh
        split: below
  - name: web_2
    command: [npm, run, dev]
    cwd: /srv/web
"""


def parse(text: str) -> Config:
    return config.parse(textwrap.dedent(text), "clowder.yaml")


def errors(text: str) -> list[str]:
    """The messages of the ConfigError that parsing ``text`` must raise."""
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


def agent(extra: str = "", head: str = "name: a\n    command: x\n    cwd: /w") -> str:
    """A one-agent file, the agent's keys starting at line 2."""
    return "agents:\n  - " + head + ("\n    " + extra if extra else "") + "\n"


# --- valid files ----------------------------------------------------------------------

def test_full_example_loads():
    cfg = parse(FULL)
    assert cfg.version == 1
    api, web = cfg.agents
    assert api == Agent(
        name="api", command=("claude",), resume=("claude", "--continue"),
        cwd="/home/me/src/api", env={"LANG": "C.UTF-8", "EDITOR": "nano", "PORT": "8080"},
        size=(120, 40),
        shells=(Shell("build", ("make", "watch"), "right", 40, "/home/me/src/api/web"),
                Shell("sh", ("/bin/bash",), "below", 50, "/home/me/src/api")))
    assert web == Agent("web_2", ("npm", "run", "dev"), None, "/srv/web",
                        {"LANG": "C.UTF-8", "EDITOR": "vi"}, None, ())


def test_the_manual_example_is_valid():
    """The example file of clowder.yaml(5) (packaging/man/clowder.yaml.txt) loads."""
    with open(os.path.join(os.path.dirname(__file__), "..", "packaging", "man",
                           "clowder.yaml.txt"), encoding="utf-8") as f:
        text = f.read()
    block = text[text.index("# EXAMPLES\n") + 11:text.index("\n# SEE ALSO")]
    cfg = config.parse(textwrap.dedent(block))
    assert [a.name for a in cfg.agents] == ["api"]
    assert cfg.agents[0].shells[0].percent == 40
    assert cfg.agents[0].shells[1].cwd == "/home/me/src/api/web"


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n",
                                  "agents:\n", "agents: []\n", "version: 1\n"])
def test_empty_means_no_agents(text):
    assert config.parse(text) == Config(1, ())


def test_load_reads_a_file(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text(FULL)
    assert configfile.load(str(path)) == config.parse(FULL)


def test_dataclasses_are_frozen():
    cfg = parse(FULL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.agents[0].name = "other"


@pytest.mark.parametrize("command, argv", [
    ("claude", ("claude",)),
    ("claude --model 'opus 4' --flag", ("claude", "--model", "opus 4", "--flag")),
    (r"""'"sh" -c "echo \"hi there\""'""", ("sh", "-c", 'echo "hi there"')),
    ("sh -c 'echo $HOME; ls'", ("sh", "-c", "echo $HOME; ls")),
    ("[sleep, 10]", ("sleep", "10")),                     # numbers kept as written
    ("[sh, -c, 'echo a  b']", ("sh", "-c", "echo a  b")),  # a list is never split
    ("[prog, '']", ("prog", "")),                          # empty arguments are fine
    ("[chmod, 0755, f]", ("chmod", "0755", "f")),          # not octal 493
])
def test_string_and_list_commands(command, argv):
    cfg = parse(agent(head=f"name: a\n    cwd: /w\n    command: {command}"))
    assert cfg.agents[0].command == argv


def test_resume_takes_the_same_forms():
    cfg = parse(agent("resume: [claude, --continue]"))
    assert cfg.agents[0].resume == ("claude", "--continue")
    assert parse(agent("resume: claude -c")).agents[0].resume == ("claude", "-c")


def test_defaults_env_is_merged_under_agent_env():
    cfg = parse("""\
        defaults:
          env: {A: "1", B: "2"}
        agents:
          - {name: a, command: x, cwd: /w, env: {B: three, C: 4.5}}
          - {name: b, command: x, cwd: /w}
        """)
    assert cfg.agents[0].env == {"A": "1", "B": "three", "C": "4.5"}
    assert cfg.agents[1].env == {"A": "1", "B": "2"}


def test_shell_command_defaults(monkeypatch):
    shells = "shells: [{name: s, split: right}]"
    cfg = parse("defaults: {shell: zsh -l}\n" + agent(shells))
    assert cfg.agents[0].shells[0].command == ("zsh", "-l")
    monkeypatch.setenv("SHELL", "/usr/bin/fish")
    assert parse(agent(shells)).agents[0].shells[0].command == ("/usr/bin/fish",)
    monkeypatch.delenv("SHELL")
    assert parse(agent(shells)).agents[0].shells[0].command == ("/bin/sh",)


def test_shell_defaults_percent_and_cwd():
    cfg = parse(agent("shells: [{name: s, split: below, command: top}]"))
    assert cfg.agents[0].shells == (Shell("s", ("top",), "below", 50, "/w"),)


def test_null_optional_keys_count_as_absent():
    cfg = parse(agent("env:\n    resume:\n    size:\n    shells:") + "defaults:\n")
    assert cfg.agents[0] == Agent("a", ("x",), None, "/w", {}, None, ())


def test_env_values_keep_numbers_as_written():
    cfg = parse(agent("env: {MODE: 0755, HEX: 0x1F, F: 1e3, S: '007', _OK: ok}"))
    assert cfg.agents[0].env == {"MODE": "0755", "HEX": "0x1F", "F": "1e3", "S": "007",
                                 "_OK": "ok"}


def test_yaml_merge_keys_work():
    cfg = parse("""\
        agents:
          - &base
            name: a
            command: claude
            cwd: /w
            env: {A: "1"}
          - <<: *base
            name: b
          - <<: [{command: first, cwd: /1}, {command: second, cwd: /2, size: 80x24}]
            name: c
        """)
    a, b, c = cfg.agents
    assert (b.name, b.command, b.cwd, b.env) == ("b", ("claude",), "/w", {"A": "1"})
    assert (c.command, c.cwd, c.size) == (("first",), "/1", (80, 24))  # the first one wins


def test_aliases_are_not_expanded():
    """An alias bomb is no cost: nodes are shared, and unknown keys are not walked."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
        for i in range(8))
    errs = errors(bomb)
    assert errs[0] == "clowder.yaml:1: unknown key 'a'"
    assert len(errs) == 9


def test_to_dict_is_plain_json():
    cfg = parse(FULL)
    d = config.to_dict(cfg)
    assert json.loads(json.dumps(d)) == d
    assert d["agents"][0]["command"] == ["claude"]
    assert d["agents"][0]["size"] == [120, 40]
    assert d["agents"][0]["shells"][1] == {"name": "sh", "command": ["/bin/bash"],
                                           "split": "below", "percent": 50,
                                           "cwd": "/home/me/src/api"}
    assert d["agents"][1]["resume"] is None and d["version"] == 1


# --- errors: file, line, key path -----------------------------------------------------

@pytest.mark.parametrize("text, message", [
    # the brief's own example
    (agent(head="name: a\n    command: x\n    cwd: src/x"),
     "clowder.yaml:4: agents[0].cwd: must be an absolute path, got 'src/x'"),
    (agent("comand: claude"),
     "clowder.yaml:5: agents[0]: unknown key 'comand' (did you mean 'command'?)"),
    (agent("zzz: 1"), "clowder.yaml:5: agents[0]: unknown key 'zzz'"),
    ("agent: []\n", "clowder.yaml:1: unknown key 'agent' (did you mean 'agents'?)"),
    ("defaults: {shel: sh}\n",
     "clowder.yaml:1: defaults: unknown key 'shel' (did you mean 'shell'?)"),
    (agent(head="command: x\n    cwd: /w"),
     "clowder.yaml:2: agents[0]: missing required key 'name'"),
    (agent(head="name: a\n    cwd: /w"),
     "clowder.yaml:2: agents[0]: missing required key 'command'"),
    (agent(head="name: a\n    command: x"),
     "clowder.yaml:2: agents[0]: missing required key 'cwd'"),
    (agent(head="name:\n    command: x\n    cwd: /w"),
     "clowder.yaml:2: agents[0].name: expected a string, got null"),
    (agent(head="name: API\n    command: x\n    cwd: /w"),
     "clowder.yaml:2: agents[0].name: invalid name 'API': use 1-63 lowercase letters, "
     "digits, '-' or '_', starting with a letter or digit"),
    (agent(head="name: " + "a" * 64 + "\n    command: x\n    cwd: /w"),
     f"clowder.yaml:2: agents[0].name: invalid name '{'a' * 64}': use 1-63 lowercase "
     "letters, digits, '-' or '_', starting with a letter or digit"),
    (agent(head="name: 007\n    command: x\n    cwd: /w"),
     "clowder.yaml:2: agents[0].name: expected a string, got integer '007'"),
    (agent(head="name: a\n    command: 42\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: expected a string or a list of strings, "
     "got integer '42'"),
    (agent(head="name: a\n    command: {prog: x}\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: expected a string or a list of strings, "
     "got a mapping"),
    (agent(head="name: a\n    command: [ls, true]\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command[1]: expected a string, got boolean 'true' "
     "(quote it to make it a string)"),
    (agent(head="name: a\n    command: \"ls 'x\"\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: cannot split \"ls 'x\": No closing quotation"),
    (agent(head="name: a\n    command: []\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: must name a program, got an empty command"),
    (agent(head="name: a\n    command: '  '\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: must name a program, got an empty command"),
    (agent(head="name: a\n    command: \"a\\0b\"\n    cwd: /w"),
     "clowder.yaml:3: agents[0].command: must not contain NUL characters"),
    (agent(head="name: a\n    command: x\n    cwd: [/w]"),
     "clowder.yaml:4: agents[0].cwd: expected an absolute path, got a list"),
    (agent("resume: ''"),
     "clowder.yaml:5: agents[0].resume: must name a program, got an empty command"),
    (agent("env: [A]"), "clowder.yaml:5: agents[0].env: expected a mapping, got a list"),
    (agent("env: {1A: x}"),
     "clowder.yaml:5: agents[0].env: invalid environment variable name '1A'"),
    (agent("env: {HOME: /tmp}"),
     "clowder.yaml:5: agents[0].env: HOME is set in every session by clowder (from the "
     "passwd entry of its user, or the session itself) and cannot be given"),
    (agent("env: {A: yes}"),
     "clowder.yaml:5: agents[0].env.A: expected a string or a number, got boolean 'yes' "
     "(quote it to make it a string)"),
    (agent("env: {A: [1]}"),
     "clowder.yaml:5: agents[0].env.A: expected a string or a number, got a list"),
    (agent("env: {A: }"),
     "clowder.yaml:5: agents[0].env.A: expected a string or a number, got null"),
    (agent("size: 120*40"), "clowder.yaml:5: agents[0].size: must be COLSxROWS, "
     "each 1..1000 and at most 250000 cells (e.g. 120x40), got '120*40'"),
    (agent("size: 0x40"),  # YAML reads this as hexadecimal 64
     "clowder.yaml:5: agents[0].size: expected COLSxROWS, e.g. 120x40, got integer '0x40'"),
    (agent("size: 20000x40"), "clowder.yaml:5: agents[0].size: must be COLSxROWS, "
     "each 1..1000 and at most 250000 cells (e.g. 120x40), got '20000x40'"),
    (agent("shells: {name: s}"),
     "clowder.yaml:5: agents[0].shells: expected a list, got a mapping"),
    (agent("shells:\n      - split: right"),
     "clowder.yaml:6: agents[0].shells[0]: missing required key 'name'"),
    (agent("shells:\n      - name: s"),
     "clowder.yaml:6: agents[0].shells[0]: missing required key 'split'"),
    (agent("shells:\n      - name: s\n        split: left"),
     "clowder.yaml:7: agents[0].shells[0].split: must be 'right' or 'below', got 'left'"),
    (agent("shells:\n      - {name: s, split: right, percent: 95}"),
     "clowder.yaml:6: agents[0].shells[0].percent: must be between 10 and 90, got 95"),
    (agent("shells:\n      - {name: s, split: right, percent: 9}"),
     "clowder.yaml:6: agents[0].shells[0].percent: must be between 10 and 90, got 9"),
    (agent("shells:\n      - {name: s, split: right, percent: '40'}"),
     "clowder.yaml:6: agents[0].shells[0].percent: expected an integer, got string '40'"),
    (agent("shells:\n      - {name: s, split: right, percent: 40.5}"),
     "clowder.yaml:6: agents[0].shells[0].percent: expected an integer, got number '40.5'"),
    (agent("shells:\n      - {name: s, split: right, cwd: rel}"),
     "clowder.yaml:6: agents[0].shells[0].cwd: must be an absolute path, got 'rel'"),
    (agent("shells:\n      - {name: s, split: right, comand: x}"),
     "clowder.yaml:6: agents[0].shells[0]: unknown key 'comand' (did you mean 'command'?)"),
    (agent("shells: [s]"),
     "clowder.yaml:5: agents[0].shells[0]: expected a mapping, got string 's'"),
    ("version: 2\n", "clowder.yaml:1: version: must be 1, got 2"),
    ("version: '1'\n", "clowder.yaml:1: version: expected an integer, got string '1'"),
    ("version: true\n", "clowder.yaml:1: version: expected an integer, got boolean 'true'"),
    ("defaults: [a]\n", "clowder.yaml:1: defaults: expected a mapping, got a list"),
    ("defaults:\n  shell: []\n",
     "clowder.yaml:2: defaults.shell: must name a program, got an empty command"),
    ("defaults:\n  env: {A: {}}\n",
     "clowder.yaml:2: defaults.env.A: expected a string or a number, got a mapping"),
    ("agents: {a: 1}\n", "clowder.yaml:1: agents: expected a list, got a mapping"),
    ("agents:\n  - 42\n", "clowder.yaml:2: agents[0]: expected a mapping, got integer '42'"),
    ("- a\n", "clowder.yaml:1: expected a mapping, got a list"),
    ("hello\n", "clowder.yaml:1: expected a mapping, got string 'hello'"),
    ("? [a]\n: 1\n", "clowder.yaml:1: expected a string key, got a list"),
    ("agents:\n  - <<: [1]\n", "clowder.yaml:2: agents[0]: expected a mapping to merge "
     "('<<'), got integer '1'"),
])
def test_each_error_names_file_line_and_key_path(text, message):
    assert message in errors(text)


def test_the_second_agent_is_agents_1():
    errs = errors(FULL + "  - {name: c, command: x, cwd: rel}\n")
    assert errs == ["clowder.yaml:23: agents[2].cwd: must be an absolute path, got 'rel'"]


def test_unsafe_tags_are_rejected_not_constructed(tmp_path):
    marker = tmp_path / "pwned"
    errs = errors(f"""\
        agents:
          - name: a
            command: !!python/object/apply:os.system ["touch {marker}"]
            cwd: !!python/name:os.system
            env: !!python/object:collections.OrderedDict {{}}
        """)
    assert errs == [
        "clowder.yaml:3: agents[0].command: expected a string or a list of strings, "
        "got a list tagged !!python/object/apply:os.system",
        "clowder.yaml:4: agents[0].cwd: expected an absolute path, "
        "got !!python/name:os.system ''",
        "clowder.yaml:5: agents[0].env: expected a mapping, "
        "got a mapping tagged !!python/object:collections.OrderedDict"]
    assert not marker.exists()


def test_all_errors_are_reported_in_line_order():
    errs = errors("""\
        version: 3
        agents:
          - name: Bad
            comand: x
            cwd: rel
          - name: ok
            command: x
            cwd: /w
            shells: [{name: s, split: up}]
          - name: ok
            command: ""
            cwd: /w
        """)
    assert errs == [
        "clowder.yaml:1: version: must be 1, got 3",
        "clowder.yaml:3: agents[0].name: invalid name 'Bad': use 1-63 lowercase letters, "
        "digits, '-' or '_', starting with a letter or digit",
        "clowder.yaml:3: agents[0]: missing required key 'command'",
        "clowder.yaml:4: agents[0]: unknown key 'comand' (did you mean 'command'?)",
        "clowder.yaml:5: agents[0].cwd: must be an absolute path, got 'rel'",
        "clowder.yaml:9: agents[1].shells[0].split: must be 'right' or 'below', got 'up'",
        "clowder.yaml:10: agents[2].name: duplicate agent name 'ok' (first at line 6)",
        "clowder.yaml:11: agents[2].command: must name a program, got an empty command",
    ]


# --- duplicates -----------------------------------------------------------------------

def test_duplicate_agent_names_name_both_lines():
    errs = errors(FULL + "  - name: api\n    command: x\n    cwd: /w\n")
    assert errs == ["clowder.yaml:23: agents[2].name: duplicate agent name 'api' "
                    "(first at line 6)"]


def test_duplicate_shell_names_within_an_agent():
    errs = errors(agent("shells:\n      - {name: s, split: right}\n"
                        "      - {name: s, split: below}"))
    assert errs == ["clowder.yaml:7: agents[0].shells[1].name: duplicate shell name 's' "
                    "(first at line 6)"]
    # the same shell name in two agents is fine
    parse("agents:\n" + "".join(f"  - {{name: {n}, command: x, cwd: /w, shells: "
                                "[{name: s, split: right}]}\n" for n in "ab"))


@pytest.mark.parametrize("text, message", [
    ("agents: []\nagents: []\n", "clowder.yaml:2: duplicate key 'agents' (first at line 1)"),
    (agent("cwd: /other"), "clowder.yaml:5: agents[0]: duplicate key 'cwd' (first at line 4)"),
    (agent("env:\n      A: x\n      B: y\n      A: z"),
     "clowder.yaml:8: agents[0].env: duplicate key 'A' (first at line 6)"),
    (agent("env: {A: x, 'A': z}"),
     "clowder.yaml:5: agents[0].env: duplicate key 'A' (first at line 5)"),
    ("defaults:\n  shell: a\n  shell: b\n",
     "clowder.yaml:3: defaults: duplicate key 'shell' (first at line 2)"),
    (agent("shells:\n      - name: s\n        split: right\n        split: below"),
     "clowder.yaml:8: agents[0].shells[0]: duplicate key 'split' (first at line 7)"),
])
def test_duplicate_mapping_keys_are_errors(text, message):
    assert errors(text) == [message]


def test_merge_keys_are_not_duplicates():
    cfg = parse("agents:\n  - &a {name: a, command: x, cwd: /w}\n"
                "  - <<: *a\n    name: b\n    cwd: /v\n")
    assert [(a.name, a.cwd) for a in cfg.agents] == [("a", "/w"), ("b", "/v")]


# --- syntax errors --------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("agents: [a\n",
     "clowder.yaml:2:1: expected ',' or ']', but got '<stream end>' "
     "(while parsing a flow sequence at line 1)"),
    ("agents:\n  - name: a\n   command: x\n",
     "clowder.yaml:3:4: expected <block end>, but found '<block mapping start>' "
     "(while parsing a block collection at line 2)"),
    ("a: b: c\n", "clowder.yaml:1:5: mapping values are not allowed here"),
    ("agents:\n\t- x\n",
     "clowder.yaml:2:1: found character '\\t' that cannot start any token "
     "(while scanning for the next token)"),
    ('agents:\n  - name: "a\n',
     "clowder.yaml:3:1: found unexpected end of stream "
     "(while scanning a quoted scalar at line 2)"),
    ("agents: []\n---\nagents: []\n",
     "clowder.yaml:2:1: but found another document "
     "(expected a single document in the stream at line 1)"),
    ("agents: *nope\n",
     "clowder.yaml:1:9: found undefined alias 'nope'"),
    ("version: 1\nx: \x07\n",
     "clowder.yaml:2: unacceptable character #x0007: special characters are not allowed"),
])
def test_syntax_errors_give_line_and_column(text, message):
    assert errors(text) == [message]


def test_invalid_utf8(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_bytes(b"version: 1\nagents: []\n# caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        configfile.load(str(path))
    assert info.value.errors == [f"{path}:3: not valid UTF-8 (invalid continuation byte)"]


def test_load_names_the_file_and_lets_a_missing_one_raise(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("agents:\n  - {name: a, command: x, cwd: rel}\n")
    with pytest.raises(ConfigError) as info:
        configfile.load(str(path))
    assert info.value.errors == [f"{path}:2: agents[0].cwd: must be an absolute path, "
                                 "got 'rel'"]
    with pytest.raises(FileNotFoundError):
        configfile.load(str(tmp_path / "missing.yaml"))


# --- paths ----------------------------------------------------------------------------

def test_default_paths(monkeypatch, tmp_path):
    assert config.default_paths("system") == ("/etc/clowder/clowder.yaml",)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config.default_paths("user") == (str(tmp_path / "clowder" / "clowder.yaml"),)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for value in ("", "relative/dir"):  # the XDG spec says to ignore relative values
        monkeypatch.setenv("XDG_CONFIG_HOME", value)
        assert config.default_paths("user") == (
            str(tmp_path / "home" / ".config" / "clowder" / "clowder.yaml"),)
    with pytest.raises(ValueError):
        config.default_paths("global")


def test_check_paths(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    d, f, m = (str(tmp_path / n) for n in ("dir", "file", "missing"))
    cfg = parse(f"""\
        agents:
          - name: good
            command: x
            cwd: {d}
            shells: [{{name: same, split: right}}, {{name: gone, split: below, cwd: {m}}}]
          - {{name: notdir, command: x, cwd: {f}}}
          - {{name: missing, command: x, cwd: {m}, shells: [{{name: s, split: right}}]}}
          - {{name: under-file, command: x, cwd: {f}/sub}}
        """)
    assert config.check_paths(cfg) == [
        f"agent 'good' shell 'gone': cwd '{m}' does not exist",
        f"agent 'notdir': cwd '{f}' is not a directory",
        f"agent 'missing': cwd '{m}' does not exist",  # once, not again for its shell
        f"agent 'under-file': cwd '{f}/sub' does not exist",
    ]
    assert config.check_paths(Config(1, ())) == []


# --- clowderctl config check ----------------------------------------------------------

def ctl(*args: str, **env: str) -> subprocess.CompletedProcess:
    """Run this tree's clowderctl (python -m ctl from the project root)."""
    return subprocess.run([sys.executable, "-m", "ctl", *args], cwd=ROOT, text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=60)


def test_check_ok(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text(agent(head=f"name: a\n    command: x\n    cwd: {tmp_path}"))
    r = ctl("config", "check", str(path))
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{path}: OK (1 agent)\n", "")
    path.write_text(FULL)
    r = ctl("config", "check", str(path))
    assert r.returncode == 0
    assert r.stdout == f"{path}: OK (2 agents)\n"
    # the example's directories do not exist here: warnings, still OK
    assert r.stderr.splitlines() == [
        f"{path}: warning: agent 'api': cwd '/home/me/src/api' does not exist",
        f"{path}: warning: agent 'api' shell 'build': cwd '/home/me/src/api/web' "
        "does not exist",
        f"{path}: warning: agent 'web_2': cwd '/srv/web' does not exist"]


def test_check_empty_file(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text("")
    r = ctl("config", "check", str(path))
    assert (r.returncode, r.stdout) == (0, f"{path}: OK (0 agents)\n")


def test_check_errors(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text("agents:\n  - name: a\n    comand: x\n    cwd: rel\n")
    r = ctl("config", "check", str(path))
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"{path}:2: agents[0]: missing required key 'command'",
        f"{path}:3: agents[0]: unknown key 'comand' (did you mean 'command'?)",
        f"{path}:4: agents[0].cwd: must be an absolute path, got 'rel'"]


def test_check_syntax_error(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text("agents: [a\n")
    r = ctl("config", "check", str(path))
    assert r.returncode == 1
    assert r.stderr.startswith(f"{path}:2:1: expected ',' or ']'")


def test_check_missing_file(tmp_path):
    r = ctl("config", "check", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr == f"clowderctl config check: {tmp_path / 'nope.yaml'}: no such file\n"
    r = ctl("config", "check", str(tmp_path))
    assert r.returncode == 2
    assert "cannot read" in r.stderr and "Is a directory" in r.stderr


def test_check_json(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text(FULL)
    r = ctl("config", "check", "--json", str(path))
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["file"] == str(path)
    assert out["config"] == config.to_dict(config.parse(FULL))
    assert len(out["warnings"]) == 3
    path.write_text("version: 2\n")
    r = ctl("config", "check", "--json", str(path))
    assert r.returncode == 1
    assert json.loads(r.stdout) == {"file": str(path), "ok": False,
                                    "errors": [f"{path}:1: version: must be 1, got 2"]}


def test_check_needs_an_action():
    r = ctl("config")
    assert r.returncode == 2
    assert "the following arguments are required: ACTION" in r.stderr


def test_check_default_file(monkeypatch, tmp_path):
    """Not root: the user's file if it exists, else the system's; root: the system's."""
    from controld import check as command  # what `clowderctl config check` runs
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user = tmp_path / "clowder" / "clowder.yaml"
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    assert command.default_file() == ("/etc/clowder/clowder.yaml",
                                      [str(user), "/etc/clowder/clowder.yaml"])
    user.parent.mkdir()
    user.write_text("")
    assert command.default_file()[0] == str(user)
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert command.default_file() == ("/etc/clowder/clowder.yaml",
                                      ["/etc/clowder/clowder.yaml"])


def test_check_default_file_subprocess():
    """A non-root user's default is their own file (as root, run it as nobody)."""
    import pathlib
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        _check_default_file(pathlib.Path(d))


def _check_default_file(tmp_path):
    user = tmp_path / "clowder" / "clowder.yaml"
    user.parent.mkdir()
    user.write_text("agents: []\n")
    as_nobody = []
    if os.getuid() == 0:
        for p in (tmp_path, user.parent, user):
            p.chmod(0o755)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    r = subprocess.run([*as_nobody, sys.executable, "-m", "ctl", "config", "check"],
                       cwd=ROOT, text=True, capture_output=True, timeout=60,
                       env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "HOME": "/"})
    assert (r.returncode, r.stdout) == (0, f"{user}: OK (0 agents)\n"), r.stderr


def test_config_is_a_clowderctl_command():
    r = ctl("--help")
    assert r.returncode == 0
    assert re.search(r"^\s+config\s", r.stdout, re.M)


# --- restart policy and user (issue 14, points 8 and 9) --------------------------------

def test_restart_and_user_load_with_their_defaults():
    a, b = parse(agent("restart: never\n    user: alice") +
                 "  - {name: b, command: x, cwd: /w}\n").agents
    assert (a.restart, a.user) == ("never", "alice")
    assert (b.restart, b.user) == ("on-failure", None)
    assert config.from_dict(config.to_dict(Config(1, (a, b)))).agents == (a, b)


@pytest.mark.parametrize("extra, message", [
    ("restart: sometimes", "clowder.yaml:5: agents[0].restart: must be 'on-failure', "
     "'always' or 'never', got 'sometimes'"),
    ("restart: no", "clowder.yaml:5: agents[0].restart: expected the string 'on-failure', "
     "'always' or 'never', got boolean 'no' (quote it to make it a string)"),
    ("restart: [always]", "clowder.yaml:5: agents[0].restart: expected the string "
     "'on-failure', 'always' or 'never', got a list"),
    ("user: Alice", "clowder.yaml:5: agents[0].user: invalid user name 'Alice': use a "
     "login name"),
    ("user: 1000", "clowder.yaml:5: agents[0].user: expected a user name, got integer "
     "'1000'"),
    ("user: ../root", "clowder.yaml:5: agents[0].user: invalid user name '../root'"),
    ("rstart: never", "clowder.yaml:5: agents[0]: unknown key 'rstart' (did you mean "
     "'restart'?)"),
])
def test_bad_restart_and_user_are_clear_errors(extra, message, tmp_path):
    assert any(m.startswith(message) for m in errors(agent(extra))), errors(agent(extra))
    path = tmp_path / "clowder.yaml"
    path.write_text(agent(extra))
    r = ctl("config", "check", str(path))
    assert r.returncode == 1 and message.replace("clowder.yaml", str(path)) in r.stderr, r


def test_check_warns_of_a_user_that_does_not_exist(tmp_path):
    path = tmp_path / "clowder.yaml"
    path.write_text(agent("user: no-such-user-here", head=f"name: a\n    command: x\n"
                                                            f"    cwd: {tmp_path}"))
    r = ctl("config", "check", str(path))
    assert r.returncode == 0, r
    assert r.stderr == (f"{path}: warning: agent 'a': user 'no-such-user-here' does not "
                        "exist on this machine: the agent cannot start\n")
