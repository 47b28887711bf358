"""clowderctl ps: list sessions: the running ones, and the ended ones until their end is
seen (this listing, `wait` or an attach shows it); --all: every ended one kept too."""

import json

from ..client import Client
from ..pstable import COLUMNS, oldest_first, print_table, row
from ..text import shown


EPILOG = """\
--json prints one array of sessions, oldest first, each an object with id, name, pid,
  uid, unit, state ("running", "exited", "killed", ...), exit_code, signal, cols, rows,
  created (seconds since the epoch), cwd, argv, agent and ended_by ("reboot": a session
  of a previous boot, its last screen kept; else null), as the PTY host reports them.

Over several hosts (--host A --host B, or the client configuration's hosts:), one table
  with a HOST column (when more than one), each host asked at once; a host that does not
  answer within --timeout (default 5 s there) is a line "HOST unreachable: why", and the
  exit status is 4 (3 when none answered).  --json then prints {"hosts": [{"host",
  "answered", "error", "seconds"}], "sessions": [each session with its "host"]}.

examples:
  clowderctl ps
  clowderctl --host local --host build1 --host build2 ps
  clowderctl ps --all --json | jq -r '.[] | select(.state == "running") | .id'
"""


def add_parser(sub):
    p = sub.add_parser("ps", help="list sessions", epilog=EPILOG)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", "-a", action="store_true",
                   help="also the ended sessions whose end was already seen")
    p.set_defaults(run=run)


def sessions_of(target, all_: bool) -> list[dict]:
    """The sessions the PTY host at ``target`` lists, oldest first."""
    with Client(target) as c:
        sessions = c.sessions(all=all_)
    return oldest_first(sessions)


def run(args) -> int:
    if args.fleet:
        return run_fleet(args)
    sessions = sessions_of(args.socket, args.all)
    if args.json:
        print(json.dumps(sessions, indent=None))
        return 0
    print_table([COLUMNS] + [row(s) for s in sessions])
    return 0


def run_fleet(args) -> int:
    """ps over several hosts: one table (HOST first), the unreachable ones named."""
    from .. import fleet
    answers = fleet.ask(args.fleet, lambda h: sessions_of(fleet.target(h, args, "host"),
                                                           args.all))
    if args.json:
        print(json.dumps({"hosts": [a.as_json() for a in answers],
                          "sessions": [{**s, "host": a.host} for a in answers
                                       for s in a.value or ()]}))
        return fleet.exit_code(answers)
    several = len(answers) > 1
    rows = [(("host",) if several else ()) + COLUMNS]
    for a in answers:
        rows += [((shown(a.host),) if several else ()) + row(s) for s in a.value or ()]
    print_table(rows)
    for a in answers:
        if not a.answered:
            print(shown(f"{a.host} unreachable: {a.error}"))
    return fleet.exit_code(answers)
