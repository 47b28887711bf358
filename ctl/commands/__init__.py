"""One module per clowderctl subcommand; each has add_parser(sub) and run(args)."""

from . import (agents, attach, backlog, config, install_units, kill, logs, ps, rm, send,
               snapshot, spawn, status, upgrade, wait)
from . import relay

COMMANDS = (spawn, ps, send, backlog, snapshot, wait, kill, attach, rm, agents, status, logs,
            config, upgrade, install_units, relay)
