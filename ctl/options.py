"""clowderctl's global options, taken before the subcommand or anywhere after it.

`clowderctl --socket X ps` and `clowderctl ps --socket X` mean the same: every
subcommand's parser (CommandParser, nested ones too) carries the global options again,
with no defaults of their own, so one given before the verb is kept unless it is given
again after it (then the later one wins, as with any repeated option).  A subcommand's
own option of the same name wins after its verb: `wait --timeout` is how long to wait
for the session, `relay --socket` the socket it relays to.
"""

from __future__ import annotations

import argparse

from . import deadline, exits


def _seconds(text: str) -> float:
    try:
        return deadline.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_seconds.__name__ = "seconds"  # argparse names the type in its error message

# (flags, keyword arguments): dest, metavar, help.
GLOBAL = (
    (("--timeout",), dict(
        dest="request_timeout", type=_seconds, metavar="SECONDS",
        help=f"give up on a daemon that does not answer within SECONDS (default: "
             f"${deadline.ENV}, else {deadline.DEFAULT:g}; exit status {exits.TIMEOUT})")),
    (("--socket",), dict(
        metavar="PATH",
        help="the PTY host's socket (default: $CLOWDER_SOCKET, "
             "$XDG_RUNTIME_DIR/clowder/ptyhost.sock, /run/clowder/ptyhost.sock)")),
    (("--control-socket",), dict(
        metavar="PATH",
        help="clowder-control's socket (default: $CLOWDER_CONTROL_SOCKET, "
             "$XDG_RUNTIME_DIR/clowder/control.sock, /run/clowder/control.sock); with "
             "--host, the socket on that host")),
    (("--host",), dict(
        metavar="[USER@]HOST", action="append",
        help="run the command on HOST, through `ssh HOST clowderctl relay` ($CLOWDER_SSH: "
             "the ssh command and its options, default ssh; $CLOWDER_REMOTE_RELAY: the "
             "command run there, default `clowderctl relay`; $CLOWDER_REMOTE_CTL: how to "
             "run clowderctl there); logs, config, install-units and web run there whole; "
             "\"local\" is this machine. Repeated (ps, status, events, wait): every HOST "
             "at once, as one fleet (given after the command, they replace those before)")),
)
# The attribute each global option sets, and its flag (to hand them on: `open`'s panes).
FLAGS = {kw["dest"] if "dest" in kw else flags[0][2:].replace("-", "_"): flags[0]
         for flags, kw in GLOBAL}


def add(parser: argparse.ArgumentParser, anywhere: bool = False) -> None:
    """Add the global options to ``parser``; ``anywhere``: to a subcommand's, where an
    option not given must leave the value given before the verb alone."""
    group = parser.add_argument_group("global options (also before the command)") \
        if anywhere else parser
    for flags, kwargs in GLOBAL:
        if anywhere:
            kwargs = dict(kwargs, default=argparse.SUPPRESS)
        group.add_argument(*flags, **kwargs)


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: takes the global options too, keeps its epilog's lines (the
    examples), and lets the subcommand's own option of a global's name win."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("conflict_handler", "resolve")
        super().__init__(*args, **kwargs)
        add(self, anywhere=True)


def as_argv(args) -> list[str]:
    """The global options ``args`` holds, as a command line (for a clowderctl run again
    with the same ones, e.g. in `open`'s tmux panes)."""
    out: list[str] = []
    for dest, flag in FLAGS.items():
        value = getattr(args, dest, None)
        for one in value if isinstance(value, list) else [value]:  # --host: repeated
            if one is not None:
                out += [flag, format(one, "g") if isinstance(one, float) else str(one)]
    return out
