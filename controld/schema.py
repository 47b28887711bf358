"""The keys of ``clowder.yaml``, each with what its value must be and what it does.

The one source of the file's documentation: the validator (controld/config.py) accepts
exactly these keys, suggests among them for a misspelt one, and says "expected KIND"
with each key's ``kind``; clowder.yaml(5) lists them with ``kind``, default and ``doc``
(packaging/gendocs.py).  A key added to the validator without an entry here is
rejected as unknown, so it cannot go undocumented.
"""

from __future__ import annotations

from clowder_wire.host import MAX_CELLS, MAX_COLS


class Key:
    """One key: its name, the kind of value (as the validator's messages say it), its
    default (None: required, or absent means none), and what it does."""

    __slots__ = ("name", "kind", "doc", "required", "default")

    def __init__(self, name: str, kind: str, doc: str, required: bool = False,
                 default: str | None = None):
        self.name, self.kind, self.doc = name, kind, doc
        self.required, self.default = required, default


MAX_AGENTS = 1000
MAX_SHELLS = 32
MAX_ENV = 1000  # variables an agent, its own and the defaults' together
MAX_PATTERNS = 32  # attention: patterns of one agent
MAX_PATTERN = 1000  # characters in one
NAME_RULE = "1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit"
COMMAND = "a string or a list of strings"

TOP = (
    Key("version", "an integer", "The format's version; only 1 is accepted.", default="1"),
    Key("defaults", "a mapping", "Settings applied to every agent (the keys below)."),
    Key("agents", "a list", "The agents, each a mapping (the keys below); at "
        f"most {MAX_AGENTS}."),
)
DEFAULTS = (
    Key("env", "a mapping", "Environment variables merged under each agent's env "
        "(the agent's own keys win)."),
    Key("shell", COMMAND, "The command of companion shells that give none; default "
        "$SHELL, else /bin/sh."),
    Key("notify", COMMAND, "The notify command of agents that give none (see "
        "agents[].notify)."),
)
AGENT = (
    Key("name", "a string", f"The agent's name: {NAME_RULE}; unique among agents. Its "
        "session is named agent:NAME.", required=True),
    Key("command", COMMAND, "The program and its arguments: a string (split as a shell "
        "would, by shlex) or a list. Looked up on env's PATH, else the service's.",
        required=True),
    Key("resume", COMMAND, "Used instead of command when clowder-control brings the "
        "agent back (e.g. claude --continue), after a reboot too, where the new session "
        "opens on the old one's last screen; same forms as command."),
    Key("cwd", "an absolute path", "The working directory (whether it exists is "
        "checked by clowderctl config check and on start, not by the parser).",
        required=True),
    Key("env", "a mapping", "Environment variables: names [A-Za-z_][A-Za-z0-9_]*, values "
        "strings or numbers (kept as written: 0755 stays 0755; quote yes/no, YAML 1.1 "
        f"booleans); at most {MAX_ENV}. Not HOME, USER, LOGNAME, SHELL or CLOWDER_*: the host "
        "sets those."),
    Key("size", "COLSxROWS, e.g. 120x40", f"The terminal's size: each side 1..{MAX_COLS}, "
        f"at most {MAX_CELLS} cells.", default="120x40"),
    Key("restart", "the string 'on-failure', 'always' or 'never'", "When the program (or "
        "a shell) ends by itself: on-failure brings it back unless it exited 0, always "
        "always does, never never does.", default="on-failure"),
    Key("user", "a user name", "Who the agent runs as, and who (besides root) may up, "
        "down, restart and attach to it: a login name.",
        default="clowder-control's own user"),
    Key("attention", "a list of regular expressions", "What \"waiting for input\" looks "
        "like: when the agent goes quiet after printing, its attention becomes 'asking' "
        "if the last line of its output matches one of these (Python re, searched in "
        "the line), instead of the built-in prompt heuristic. Each is compiled by the "
        f"checker; at most {MAX_PATTERNS}, each at most {MAX_PATTERN} characters.",
        default="the prompt heuristic (controld/activity.py)"),
    Key("notify", COMMAND, "Run when the agent's attention changes to asking, notified, "
        "exited or failed: as the agent's user, never through a shell, with the event "
        "as one JSON object on stdin (e.g. [notify-send, clowder]). At most one run per "
        "agent per 30 s (the events between are not run), 16 at once over all agents, "
        "each killed after 20 s; a failure is logged with its cause, never retried.",
        default="defaults.notify, else none"),
    Key("shells", "a list", "Companion shells shown beside the agent (clowderctl open), "
        f"each a mapping (the keys below); at most {MAX_SHELLS}."),
)
SHELL = (
    Key("name", "a string", f"The shell's name: {NAME_RULE}; unique within the agent.",
        required=True),
    Key("command", COMMAND, "What it runs.", default="defaults.shell"),
    Key("split", "'right' or 'below'", "Where it sits beside the agent.", required=True),
    Key("percent", "an integer", "Its share of the split, 10..90.", default="50"),
    Key("cwd", "an absolute path", "Its working directory.", default="the agent's cwd"),
)

# (key path prefix, title, keys): the sections of clowder.yaml(5), outermost first.
SECTIONS = (
    ("", "Top level", TOP),
    ("defaults.", "defaults", DEFAULTS),
    ("agents[].", "agents", AGENT),
    ("agents[].shells[].", "shells", SHELL),
)


def names(keys: tuple[Key, ...]) -> tuple[str, ...]:
    return tuple(key.name for key in keys)


def kind(keys: tuple[Key, ...], name: str) -> str:
    """What the value of ``name`` must be, as "expected ..." says it."""
    for key in keys:
        if key.name == name:
            return key.kind
    raise KeyError(name)
