"""One module per clowderctl subcommand; each has add_parser(sub) and run(args)."""

from . import attach, backlog, install_units, kill, ps, rm, send, spawn, wait

COMMANDS = (spawn, ps, send, backlog, wait, kill, attach, rm, install_units)
