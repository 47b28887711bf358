"""One module per clowderctl subcommand; each has add_parser(sub) and run(args)."""

from . import (agents, attach, backlog, config, file, forward, install_units, kill, logs, ps,
               relay, rm, send, snapshot, spawn, status, upgrade, vcs, wait)

COMMANDS = (spawn, ps, send, backlog, snapshot, wait, kill, attach, rm, agents, status, logs,
            file, vcs, forward, config, upgrade, install_units, relay)
