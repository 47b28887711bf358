"""Load and validate the agents configuration (``clowder.yaml``).

Files: ``/etc/clowder/clowder.yaml`` (system) and ``$XDG_CONFIG_HOME/clowder/clowder.yaml``
(user; ``~/.config`` when unset), see ``default_paths``.  An empty file means no agents.

The keys, what each value must be and what it does: ``controld/schema.py``, the one
source of clowder.yaml(5) (an example file is in that page, from
``packaging/man/clowder.yaml.txt``).

An optional key set to null (``env:`` with nothing after it) counts as absent.  Numbers
are accepted where strings are expected in env values and command lists, as written
(``0755`` stays ``0755``); booleans never are (``yes`` is a YAML 1.1 boolean: quote it).
YAML merge keys (``<<: *base``) work as in ``yaml.safe_load``; tags other than YAML's
plain ones are rejected, so nothing but strings, numbers and nulls is ever constructed.

Errors name the file, the 1-based line and the key path, and all of them are collected::

    clowder.yaml:14: agents[2].cwd: must be an absolute path, got 'src/x'

Limits, so that no file costs more than a moment to check: nesting at most MAX_DEPTH
levels, merge keys expanding to at most MAX_MERGED keys in all, at most MAX_AGENTS
agents, MAX_SHELLS shells an agent and MAX_ENV environment variables an agent.  Reading
the file (a size cap, regular files only) and parsing it in a separate process with a
time cap are ``controld/configfile.py``'s.
"""

from __future__ import annotations

import difflib
import os
import pwd
import re
import shlex
import stat
from dataclasses import dataclass

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clowder_wire.host import HOST_SET_ENV, MAX_CELLS, MAX_COLS

from . import schema

SYSTEM_PATH = "/etc/clowder/clowder.yaml"
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SIZE_RE = re.compile(r"(\d{1,5})x(\d{1,5})")
MAX_SIZE = MAX_COLS  # a side; the host refuses any size past the wire's limits
SPLITS = ("right", "below")
RESTART_POLICIES = ("on-failure", "always", "never")
# A login name as useradd takes it (its default NAME_REGEX, plus a machine account's $).
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,30}\$?")
MAX_DEPTH = 64
MAX_MERGED = 100_000
MAX_AGENTS = schema.MAX_AGENTS
MAX_SHELLS = schema.MAX_SHELLS
MAX_ENV = schema.MAX_ENV
MAX_PATTERNS = schema.MAX_PATTERNS
MAX_PATTERN = schema.MAX_PATTERN
MAX_ERRORS = 50  # messages reported for one file
_PY_MESSAGES = 64 * 1024  # a file this small that libyaml refuses is parsed again by
# PyYAML's own parser, whose messages are the ones documented and tested

_T = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, MAP, SEQ, MERGE = (
    _T + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge"))
# The keys, and what "expected ..." says of each value: controld/schema.py, which
# clowder.yaml(5) is generated from.
TOP_KEYS = schema.names(schema.TOP)
DEFAULTS_KEYS = schema.names(schema.DEFAULTS)
AGENT_KEYS = schema.names(schema.AGENT)
SHELL_KEYS = schema.names(schema.SHELL)


class ConfigError(Exception):
    """A configuration that cannot be used; ``errors`` holds one message per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class Shell:
    """A companion shell shown beside its agent."""
    name: str
    command: tuple[str, ...]
    split: str
    percent: int
    cwd: str


@dataclass(frozen=True)
class Agent:
    """One agent: a program kept running in a session, with its companion shells."""
    name: str
    command: tuple[str, ...]
    resume: tuple[str, ...] | None
    cwd: str
    env: dict[str, str]
    size: tuple[int, int] | None
    shells: tuple[Shell, ...]
    restart: str = "on-failure"  # one of RESTART_POLICIES
    user: str | None = None  # None: clowder-control's own user
    attention: tuple[str, ...] = ()  # regexes: "waiting for input" (controld/attention.py)
    notify: tuple[str, ...] | None = None  # argv run on attention (controld/notify.py)


@dataclass(frozen=True)
class Config:
    """A whole validated configuration file."""
    version: int
    agents: tuple[Agent, ...]


def default_paths(scope: str) -> tuple[str, ...]:
    """The configuration files a daemon of this scope ("system" or "user") reads."""
    if scope == "system":
        return (SYSTEM_PATH,)
    if scope == "user":
        base = os.environ.get("XDG_CONFIG_HOME", "")
        if not os.path.isabs(base):  # the XDG spec says to ignore relative values
            base = os.path.join(os.path.expanduser("~"), ".config")
        return (os.path.join(base, "clowder", "clowder.yaml"),)
    raise ValueError(f"unknown scope {scope!r}: expected 'system' or 'user'")


def parse_bytes(data: bytes, path: str = "<string>") -> Config:
    """Validate a file's bytes (UTF-8 YAML); raise ConfigError listing every problem."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError([f"{path}:{line}: not valid UTF-8 ({exc.reason})"]) from None
    return parse(text, path)


class _TooDeep(Exception):
    def __init__(self, mark):
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """SafeLoader's composer with a nesting limit: PyYAML composes recursively, and a
    file nested thousands deep would otherwise end in a RecursionError."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _compose(text: str) -> Node | None:
    """The document's node tree (compose() stops before construction: nodes keep their
    marks, no object is built).  libyaml's parser when PyYAML has it: it is 7-10 times
    faster (1 MiB: 4 s against 30 s, measured on a loaded machine), after a pass over
    its events for the nesting limit, as its composer recurses in C."""
    if getattr(yaml, "CSafeLoader", None) is None:
        return yaml.compose(text, Loader=_Loader)
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _TooDeep(event.start_mark)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        return yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        if len(text) > _PY_MESSAGES:
            raise
        return yaml.compose(text, Loader=_Loader)


def parse(text: str, path: str = "<string>") -> Config:
    """Validate YAML text; raise ConfigError listing every problem found."""
    try:
        root = _compose(text)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_syntax_error(path, exc)]) from None
    except yaml.YAMLError as exc:  # ReaderError: a character YAML forbids
        line = text.count("\n", 0, getattr(exc, "position", 0)) + 1
        raise ConfigError([f"{path}:{line}: {str(exc).splitlines()[0]}"]) from None
    except _TooDeep as exc:
        raise ConfigError([f"{path}:{exc.mark.line + 1}:{exc.mark.column + 1}: nested "
                           f"more than {MAX_DEPTH} levels deep"]) from None
    except RecursionError:  # not expected below MAX_DEPTH; still a file's problem
        raise ConfigError([f"{path}: nested too deeply to parse"]) from None
    checker = _Checker(path)
    config = checker.config(root)
    if checker.errors:
        lines = sorted(checker.errors.items(), key=lambda item: item[1])  # stable: by line
        messages = [message for message, _ in lines[:MAX_ERRORS]]
        if len(lines) > MAX_ERRORS:  # status and the journal carry them: keep it short
            messages.append(f"{path}: ... and {len(lines) - MAX_ERRORS} more problems")
        raise ConfigError(messages)
    return config


def from_dict(d: dict) -> Config:
    """The inverse of to_dict."""
    def argv(v):
        return None if v is None else tuple(v)
    return Config(d["version"], tuple(
        Agent(a["name"], argv(a["command"]), argv(a["resume"]), a["cwd"], dict(a["env"]),
              argv(a["size"]), tuple(Shell(s["name"], argv(s["command"]), s["split"],
                                           s["percent"], s["cwd"]) for s in a["shells"]),
              a.get("restart") or "on-failure", a.get("user"),
              tuple(a.get("attention") or ()), argv(a.get("notify")))
        for a in d["agents"]))


def _syntax_error(path: str, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
    message = exc.problem or exc.context
    if exc.problem and exc.context:
        at = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        message += f" ({exc.context}{at})"
    return f"{where}: {message}"


def check_paths(config: Config) -> list[str]:
    """Warnings for working directories that are missing or not directories."""
    warnings = []
    for agent in config.agents:
        dirs = [(f"agent {agent.name!r}", agent.cwd)]
        dirs += [(f"agent {agent.name!r} shell {s.name!r}", s.cwd)
                 for s in agent.shells if s.cwd != agent.cwd]
        for who, path in dirs:
            try:
                if not stat.S_ISDIR(os.stat(path).st_mode):
                    warnings.append(f"{who}: cwd {path!r} is not a directory")
            except (FileNotFoundError, NotADirectoryError):
                warnings.append(f"{who}: cwd {path!r} does not exist")
            except OSError as exc:
                warnings.append(f"{who}: cwd {path!r} cannot be checked: {exc.strerror}")
    return warnings


def check_users(config: Config) -> list[str]:
    """Warnings for agents whose ``user:`` has no passwd entry here."""
    warnings = []
    for agent in config.agents:
        if agent.user is not None:
            try:
                pwd.getpwnam(agent.user)
            except KeyError:
                warnings.append(f"agent {agent.name!r}: user {agent.user!r} does not "
                                "exist on this machine: the agent cannot start")
    return warnings


def to_dict(config: Config) -> dict:
    """The configuration in plain JSON types, mirroring the classes (tuples become lists).
    Spelled out: dataclasses.asdict's deep copy took 12 s for 1000 agents sharing one
    env of 1000 variables."""
    def argv(v):
        return None if v is None else list(v)
    return {"version": config.version, "agents": [
        {"name": a.name, "command": argv(a.command), "resume": argv(a.resume), "cwd": a.cwd,
         "env": dict(a.env), "size": argv(a.size), "restart": a.restart, "user": a.user,
         "attention": list(a.attention), "notify": argv(a.notify),
         "shells": [{"name": s.name, "command": argv(s.command), "split": s.split,
                     "percent": s.percent, "cwd": s.cwd} for s in a.shells]}
        for a in config.agents]}


def _join(keypath: str, key: str) -> str:
    return f"{keypath}.{key}" if keypath else key


def _kind(node: Node) -> str:
    """What a node is, for "expected X, got Y" messages."""
    tag = node.tag.replace(_T, "!!")
    if isinstance(node, (MappingNode, SequenceNode)):
        kind = "a mapping" if isinstance(node, MappingNode) else "a list"
        return kind if node.tag in (MAP, SEQ) else f"{kind} tagged {tag}"
    if node.tag == NULL:
        return "null"
    names = {STR: "string", INT: "integer", FLOAT: "number", BOOL: "boolean"}
    return f"{names.get(node.tag, tag)} {node.value!r}"


class _Checker:
    """Walks the composed node tree, building the Config and collecting errors.

    The checking methods return the value, or None after recording an error (which is
    why they can ``return self.error(...)``); the caller carries on to find more.
    """

    def __init__(self, path: str):
        self.path = path
        self.errors: dict[str, int] = {}  # message -> line; a dict drops repeats
        self.loader = yaml.SafeLoader("")  # only used to construct integers
        self.merge_budget = MAX_MERGED  # keys merges may still add, in the whole file
        self.envs: dict[int, dict] = {}  # id(env node) -> its checked variables

    def error(self, node: Node, keypath: str, message: str) -> None:
        where = f"{keypath}: " if keypath else ""
        line = node.start_mark.line + 1
        self.errors.setdefault(f"{self.path}:{line}: {where}{message}", line)

    def expected(self, node: Node, keypath: str, what: str) -> None:
        quote = node.tag == BOOL and "string" in what  # yes/no/on/off are YAML 1.1 booleans
        hint = " (quote it to make it a string)" if quote else ""
        self.error(node, keypath, f"expected {what}, got {_kind(node)}{hint}")

    def pairs(self, node: MappingNode, keypath: str, depth: int = 0) -> list:
        """A mapping's (key, key node, value node) triples, merges expanded, keys checked."""
        merged, own, seen = [], [], {}
        for knode, vnode in node.value:
            if knode.tag == MERGE:
                sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for src in reversed(sources):  # as in PyYAML: earlier sources win
                    if not (isinstance(src, MappingNode) and src.tag == MAP):
                        self.expected(src, keypath, "a mapping to merge ('<<')")
                    elif depth > 20:  # only a mapping that merges itself gets here
                        self.error(src, keypath, "merge keys ('<<') nest too deeply")
                    elif self.merge_budget <= 0:
                        self.error(src, keypath, f"merge keys ('<<') add more than "
                                   f"{MAX_MERGED} keys in all")
                    else:
                        more = self.pairs(src, keypath, depth + 1)
                        self.merge_budget -= len(more)  # an upper bound on the work
                        merged += more
            elif not isinstance(knode, ScalarNode):
                self.expected(knode, keypath, "a string key")
            elif knode.value in seen:  # PyYAML would silently keep the last one
                self.error(knode, keypath, f"duplicate key {knode.value!r} "
                           f"(first at line {seen[knode.value]})")
            else:
                seen[knode.value] = knode.start_mark.line + 1
                own.append((knode.value, knode, vnode))
        return merged + own

    def mapping(self, node: Node, keypath: str, allowed=None) -> dict | None:
        """key -> value node; unknown keys are reported and dropped."""
        if not (isinstance(node, MappingNode) and node.tag == MAP):
            return self.expected(node, keypath, "a mapping")
        result = {}
        for key, knode, vnode in self.pairs(node, keypath):
            if allowed is not None and key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.error(knode, keypath, f"unknown key {key!r}{hint}")
            else:
                result.pop(key, None)  # an own key overrides a merged one
                result[key] = vnode
        return result

    def field(self, m: dict, node: Node, keypath: str, key: str, check,
              default=None, required=False):
        """Check one key of mapping ``m`` (from ``node``); null or absent gives ``default``."""
        if key not in m:
            if required:
                self.error(node, keypath, f"missing required key {key!r}")
            return default
        if m[key].tag == NULL and not required:  # a required null is a type error
            return default
        return check(m[key], _join(keypath, key))

    def sequence(self, node: Node, keypath: str, most: int = 0) -> list:
        if isinstance(node, SequenceNode) and node.tag == SEQ:
            if most and len(node.value) > most:
                self.error(node, keypath, f"more than {most} items; the first {most} "
                           "are checked")
                return node.value[:most]
            return node.value
        self.expected(node, keypath, "a list")
        return []

    def text(self, node: Node, keypath: str, what="a string", numbers=False) -> str | None:
        ok = (STR, INT, FLOAT) if numbers else (STR,)
        if not (isinstance(node, ScalarNode) and node.tag in ok):
            return self.expected(node, keypath, what)
        if "\0" in node.value:
            return self.error(node, keypath, "must not contain NUL characters")
        return node.value

    def integer(self, node: Node, keypath: str, low: int, high: int) -> int | None:
        if not (isinstance(node, ScalarNode) and node.tag == INT):
            return self.expected(node, keypath, "an integer")
        value = self.loader.construct_object(node)
        if not low <= value <= high:
            span = f"between {low} and {high}" if low < high else str(low)
            return self.error(node, keypath, f"must be {span}, got {value}")
        return value

    def name(self, node: Node, keypath: str) -> str | None:
        name = self.text(node, keypath)
        if name is not None and not NAME_RE.fullmatch(name):
            return self.error(node, keypath, f"invalid name {name!r}: use {schema.NAME_RULE}")
        return name

    def argv(self, node: Node, keypath: str) -> tuple[str, ...] | None:
        """A command: a string split by shlex, or a list of strings (or numbers)."""
        if isinstance(node, SequenceNode) and node.tag == SEQ:
            words = [self.text(item, f"{keypath}[{i}]", "a string", True)
                     for i, item in enumerate(node.value)]
            if None in words:
                return None
        elif isinstance(node, ScalarNode) and node.tag == STR:
            if self.text(node, keypath) is None:
                return None
            try:
                words = shlex.split(node.value)
            except ValueError as exc:  # e.g. "No closing quotation"
                return self.error(node, keypath, f"cannot split {node.value!r}: {exc}")
        else:
            return self.expected(node, keypath, schema.COMMAND)
        if not words or not words[0]:
            return self.error(node, keypath, "must name a program, got an empty command")
        return tuple(words)

    def abspath(self, node: Node, keypath: str) -> str | None:
        path = self.text(node, keypath, schema.kind(schema.AGENT, "cwd"))
        if path is not None and not os.path.isabs(path):
            return self.error(node, keypath, f"must be an absolute path, got {path!r}")
        return path

    def env(self, node: Node, keypath: str) -> dict[str, str]:
        # One check per node: an anchored env given to every agent by alias is one node.
        if id(node) in self.envs:
            return dict(self.envs[id(node)])
        env = self.envs[id(node)] = {}
        m = self.mapping(node, keypath) or {}
        if len(m) > MAX_ENV:
            self.error(node, keypath, f"more than {MAX_ENV} variables")
            return {}
        for key, vnode in m.items():
            if not ENV_NAME_RE.fullmatch(key):
                self.error(vnode, keypath, f"invalid environment variable name {key!r}")
            elif key in HOST_SET_ENV:
                self.error(vnode, keypath, f"{key} is set in every session by clowder "
                           f"(from the passwd entry of its user, or the session itself) "
                           f"and cannot be given")
            env[key] = self.text(vnode, _join(keypath, key), "a string or a number", True)
        return env

    def size(self, node: Node, keypath: str) -> tuple[int, int] | None:
        text = self.text(node, keypath, schema.kind(schema.AGENT, "size"))
        if text is None:
            return None
        match = SIZE_RE.fullmatch(text)
        if not match or not all(1 <= int(n) <= MAX_SIZE for n in match.groups()) \
                or int(match[1]) * int(match[2]) > MAX_CELLS:
            return self.error(node, keypath, f"must be COLSxROWS, each 1..{MAX_SIZE} and "
                              f"at most {MAX_CELLS} cells (e.g. 120x40), got {text!r}")
        return int(match[1]), int(match[2])

    def split(self, node: Node, keypath: str) -> str | None:
        split = self.text(node, keypath, schema.kind(schema.SHELL, "split"))
        if split is not None and split not in SPLITS:
            return self.error(node, keypath, f"must be 'right' or 'below', got {split!r}")
        return split

    def restart(self, node: Node, keypath: str) -> str | None:
        policy = self.text(node, keypath, schema.kind(schema.AGENT, "restart"))
        if policy is not None and policy not in RESTART_POLICIES:
            return self.error(node, keypath, "must be 'on-failure', 'always' or 'never', "
                              f"got {policy!r}")
        return policy

    def user(self, node: Node, keypath: str) -> str | None:
        """A login name; whether it exists is check_users' (the file may be checked
        on another machine)."""
        user = self.text(node, keypath, schema.kind(schema.AGENT, "user"))
        if user is not None and not USER_RE.fullmatch(user):
            return self.error(node, keypath, f"invalid user name {user!r}: use a login "
                              "name (lowercase letters, digits, '-' or '_', starting "
                              "with a letter or '_', at most 32 characters)")
        return user

    def patterns(self, node: Node, keypath: str) -> tuple[str, ...]:
        """Regular expressions (Python's re), each compiled here so that a bad one is
        an error with its line, not a surprise in the daemon."""
        out = []
        for i, item in enumerate(self.sequence(node, keypath, MAX_PATTERNS)):
            kp = f"{keypath}[{i}]"
            text = self.text(item, kp)
            if text is None:
                continue
            if len(text) > MAX_PATTERN:
                self.error(item, kp, f"longer than {MAX_PATTERN} characters")
                continue
            try:
                re.compile(text)
            except re.error as exc:
                self.error(item, kp, f"invalid regular expression {text!r}: {exc}")
                continue
            out.append(text)
        return tuple(out)

    def unique(self, items: list, kind: str) -> None:
        """Report (name, name node, keypath) items whose name was already used."""
        first = {}
        for name, node, keypath in items:
            line = node.start_mark.line + 1
            if name in first:
                self.error(node, keypath, f"duplicate {kind} name {name!r} "
                           f"(first at line {first[name]})")
            first.setdefault(name, line)

    def config(self, root: Node | None) -> Config:
        if root is None or root.tag == NULL:  # an empty file, or only comments
            return Config(1, ())
        top = self.mapping(root, "", TOP_KEYS) or {}
        version = self.field(top, root, "", "version",
                             lambda n, kp: self.integer(n, kp, 1, 1), default=1)
        defaults = self.field(top, root, "", "defaults",
                              lambda n, kp: self.mapping(n, kp, DEFAULTS_KEYS)) or {}
        env = self.field(defaults, root, "defaults", "env", self.env, default={})
        shell = self.field(defaults, root, "defaults", "shell", self.argv)
        shell = shell or (os.environ.get("SHELL") or "/bin/sh",)
        notify = self.field(defaults, root, "defaults", "notify", self.argv)
        items = self.field(top, root, "", "agents",
                           lambda n, kp: self.sequence(n, kp, MAX_AGENTS), default=[])
        agents = [self.agent(item, f"agents[{i}]", env, shell, notify) for i, item in enumerate(items)]
        self.unique([(a.name, m["name"], f"agents[{i}].name")
                     for i, (a, m) in enumerate(agents) if a.name is not None], "agent")
        return Config(version, tuple(a for a, _ in agents))

    def agent(self, node: Node, kp: str, env: dict, shell: tuple,
              notify: tuple | None = None) -> tuple[Agent, dict]:
        """An Agent (its fields None where invalid) and its mapping of value nodes."""
        m = self.mapping(node, kp, AGENT_KEYS)
        req, m = m is not None, m or {}  # not a mapping: that error is enough
        name = self.field(m, node, kp, "name", self.name, required=req)
        command = self.field(m, node, kp, "command", self.argv, required=req)
        cwd = self.field(m, node, kp, "cwd", self.abspath, required=req)
        resume = self.field(m, node, kp, "resume", self.argv)
        env = {**env, **self.field(m, node, kp, "env", self.env, default={})}
        if len(env) > MAX_ENV:
            self.error(node, kp, f"more than {MAX_ENV} environment variables with "
                       "the defaults'")
            env = {}
        size = self.field(m, node, kp, "size", self.size)
        restart = self.field(m, node, kp, "restart", self.restart, default="on-failure")
        user = self.field(m, node, kp, "user", self.user)
        attention = self.field(m, node, kp, "attention", self.patterns, default=())
        notify = self.field(m, node, kp, "notify", self.argv, default=notify)
        shells = []
        for j, item in enumerate(self.field(m, node, kp, "shells",
                                            lambda n, k: self.sequence(n, k, MAX_SHELLS),
                                            default=[])):
            shells.append(self.shell(item, f"{kp}.shells[{j}]", shell, cwd))
        self.unique([(s.name, sm["name"], f"{kp}.shells[{j}].name")
                     for j, (s, sm) in enumerate(shells) if s.name is not None], "shell")
        shells = tuple(s for s, _ in shells)
        return Agent(name, command, resume, cwd, env, size, shells, restart, user,
                     attention or (), notify), m

    def shell(self, node: Node, kp: str, default: tuple, cwd: str | None):
        """A Shell (its fields None where invalid) and its mapping of value nodes."""
        m = self.mapping(node, kp, SHELL_KEYS)
        req, m = m is not None, m or {}
        return Shell(
            self.field(m, node, kp, "name", self.name, required=req),
            self.field(m, node, kp, "command", self.argv, default=default),
            self.field(m, node, kp, "split", self.split, required=req),
            self.field(m, node, kp, "percent", lambda n, k: self.integer(n, k, 10, 90), 50),
            self.field(m, node, kp, "cwd", self.abspath, default=cwd)), m

