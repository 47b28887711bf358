"""One module per clowderctl subcommand; each has add_parser(sub) and run(args).

A subcommand's module is imported only when that subcommand runs: `clowderctl ps` must
not pay for attach's terminal handling or config's YAML.  COMMANDS lists each name
with its module and the one-line help that `clowderctl --help` shows without importing
it (tests/test_layering.py checks each module adds its names with that same help).
Each subcommand's parser is a ``ctl.options.CommandParser``: it takes the global options
after the verb too, and its epilog (the examples) keeps its lines.
"""

from __future__ import annotations

import argparse
import importlib

from ..options import CommandParser  # each subcommand's: it takes the global options too

# (name, module under ctl.commands, help), in the order --help lists them.
COMMANDS = (
    ("spawn", "spawn", "start a program in a new session"),
    ("ps", "ps", "list sessions"),
    ("send", "send", "send input to a session"),
    ("backlog", "backlog", "print the retained raw output"),
    ("snapshot", "snapshot", "print the session's current screen"),
    ("history", "snapshot", "print the session's recent output as text"),
    ("export", "export", "write the retained output as an asciinema cast, text or ansi"),
    ("wait", "wait", "wait for a session to end and exit with its code"),
    ("kill", "kill", "end a session (SIGHUP, then SIGTERM, then SIGKILL), or send it one "
                     "signal"),
    ("attach", "attach", "attach this terminal to a session"),
    ("open", "open", "lay an agent and its shells out in tmux"),
    ("rm", "rm", "forget ended sessions"),
    ("rename", "rename", "give a session a new name"),
    ("up", "agents", "start an agent and its shells"),
    ("down", "agents", "stop an agent and its shells (SIGHUP, then SIGTERM, then SIGKILL) "
                       "and keep it down"),
    ("restart", "agents", "restart an agent with its normal command (its shells are left "
                          "running unless --shells)"),
    ("status", "status", "show agents (from clowder-control)"),
    ("events", "events", "show session and host events (--follow: as they happen)"),
    ("logs", "logs", "an agent's lifecycle events (journal)"),
    ("file", "file", "list, read, write or watch an agent's files"),
    ("vcs", "vcs", "git status, diff or log of an agent's worktree"),
    ("forward", "forward", "forward a local TCP port to a port on the daemon's machine "
                           "(its loopback)"),
    ("config", "config", "check the agents configuration"),
    ("upgrade", "upgrade", "check an upgrade of the running host"),
    ("web", "web", "print a login URL for the web view"),
    ("install-units", "install_units", "install and start the systemd units"),
    ("relay", "relay", "copy stdin/stdout to clowder-control's socket (what `clowderctl "
                       "--host` runs through ssh)"),
    ("completion", "completion", "print a shell completion script (bash, zsh or fish)"),
)


class LazySubcommands(argparse._SubParsersAction):
    """Subparsers whose parsers are built only for the subcommand given.

    Each name starts as a placeholder that --help lists and the choice check accepts;
    when argparse hands a name to this action, its module is imported and its
    add_parser(sub) replaces the placeholders of that module's names.  (argparse's
    private _SubParsersAction, _name_parser_map and _ChoicesPseudoAction: stable since
    Python 3.2, and tests/test_layering.py would see them change.)
    """

    def add_lazy(self, name: str, module: str, help: str) -> None:
        self._name_parser_map[name] = _Placeholder(module)
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))

    def add_parser(self, name, **kwargs):
        if isinstance(self._name_parser_map.get(name), _Placeholder):
            # The placeholder's help line stays (it was listed first, in order).
            kwargs.pop("help", None)
            del self._name_parser_map[name]
        return super().add_parser(name, **kwargs)

    def load(self, name: str) -> argparse.ArgumentParser:
        """The parser of ``name``, importing its module first if need be."""
        parser = self._name_parser_map[name]
        if isinstance(parser, _Placeholder):
            importlib.import_module(f"{__name__}.{parser.module}").add_parser(self)
            parser = self._name_parser_map[name]
        return parser

    def load_all(self) -> None:
        """Build every subcommand's parser: for what walks the whole tree (the man
        pages and shell completions, ctl/completion.py), never for a command line."""
        for name in list(self._name_parser_map):
            self.load(name)

    def __call__(self, parser, namespace, values, option_string=None):
        if values and values[0] in self._name_parser_map:
            self.load(values[0])
        super().__call__(parser, namespace, values, option_string)


class _Placeholder:
    """The parser of a subcommand whose module is not imported yet."""

    def __init__(self, module: str):
        self.module = module


def add_all(parser: argparse.ArgumentParser) -> LazySubcommands:
    """Add every subcommand to ``parser`` without importing any of their modules."""
    parser.register("action", "lazy_parsers", LazySubcommands)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                action="lazy_parsers", parser_class=CommandParser)
    for name, module, helptext in COMMANDS:
        sub.add_lazy(name, module, helptext)
    return sub
