"""clowderctl vcs status|diff|log: read-only views of an agent's git worktree.

Answered by clowder-control, which runs fixed git commands in the agent's working
directory (never a command or option of the client's choosing). Works with ``--host``.
"""

from __future__ import annotations

import sys

import clowder_wire as protocol

from ..client import default_control_socket
from ..mux import Mux
from ..text import shown

P = protocol


def add_parser(sub):
    p = sub.add_parser("vcs", help="git status, diff or log of an agent's worktree")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    st = actions.add_parser("status", help="branch and changed files")
    st.add_argument("agent")
    diff = actions.add_parser("diff", help="the worktree's diff (--staged: the index's)")
    diff.add_argument("agent")
    diff.add_argument("path", nargs="?", default="")
    diff.add_argument("--staged", action="store_true")
    log = actions.add_parser("log", help="recent commits")
    log.add_argument("agent")
    log.add_argument("-n", "--limit", type=int, default=20)
    p.set_defaults(run=run)


def run(args) -> int:
    with Mux(args.control_socket or default_control_socket()) as mux:
        c = mux.request_client("vcs")
        if args.action == "status":
            rep = c.request(P.VcsStatus(agent=args.agent), P.VcsReport)
            info = rep.info
            line = f"## {info.get('branch') or '(no branch)'}"
            if info.get("upstream"):
                line += f"...{info['upstream']} +{info.get('ahead', 0)} -{info.get('behind', 0)}"
            # Escaped: branch names, paths and subjects come from the repository.
            print(shown(line))
            for e in rep.entries:
                print(shown(f"{e.get('index', ' ')}{e.get('worktree', ' ')} "
                            f"{e.get('path', '')}"))
        elif args.action == "diff":
            rep = c.request(P.VcsDiff(agent=args.agent, path=args.path, staged=args.staged),
                            P.VcsReport)
            sys.stdout.buffer.write(rep.data)
        else:
            rep = c.request(P.VcsLog(agent=args.agent, limit=args.limit), P.VcsReport)
            for e in rep.entries:
                print(shown(f"{e.get('commit', '')[:12]} {e.get('date', '')} "
                            f"{e.get('author', '')}: {e.get('subject', '')}"))
        if rep.truncated:
            print("(truncated)", file=sys.stderr)
    return 0
