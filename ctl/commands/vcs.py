"""clowderctl vcs status|diff|log: read-only views of an agent's git worktree.

Answered by clowder-control, which runs fixed git commands in the agent's working
directory (never a command or option of the client's choosing). Works with ``--host``.
"""

from __future__ import annotations

import json
import sys

import clowder_wire as protocol

from ..client import default_control_socket
from ..mux import Mux
from ..text import shown

P = protocol


EPILOG = """\
--json (status) prints one object: {"agent", "branch" (null when detached), "upstream"
  (or null), "ahead", "behind", "oid" (the commit, null before the first), "entries":
  [{"path", "index", "worktree" (git's one-letter states; "?" untracked), "orig" (or
  null: a rename's source)}], "truncated"}.
--json (log) prints one object: {"agent", "commits": [{"commit", "author", "date",
  "subject"}], "truncated"}, newest first.

examples:
  clowderctl vcs status claude
  clowderctl vcs diff claude --staged
  clowderctl vcs log claude -n 5 --json
"""


def add_parser(sub):
    p = sub.add_parser("vcs", help="git status, diff or log of an agent's worktree",
                       epilog=EPILOG)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    agent = "the agent's name in clowder.yaml"
    st = actions.add_parser("status", help="branch and changed files", epilog=EPILOG)
    st.add_argument("agent", metavar="AGENT", help=agent)
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    diff = actions.add_parser("diff", help="the worktree's diff (--staged: the index's)",
                              epilog=EPILOG)
    diff.add_argument("agent", metavar="AGENT", help=agent)
    diff.add_argument("path", nargs="?", default="", metavar="PATH",
                      help="only this path (default: the whole worktree)")
    diff.add_argument("--staged", action="store_true",
                      help="the index against HEAD instead of the worktree against the "
                           "index")
    log = actions.add_parser("log", help="recent commits", epilog=EPILOG)
    log.add_argument("agent", metavar="AGENT", help=agent)
    log.add_argument("-n", "--limit", type=int, default=20, metavar="N",
                     help="at most N commits (default 20)")
    log.add_argument("--json", action="store_true", help="print the commits as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    with Mux(args.control_socket or default_control_socket()) as mux:
        c = mux.request_client("vcs")
        if args.action == "status":
            rep = c.request(P.VcsStatus(agent=args.agent), P.VcsReport)
            info = rep.info
            if args.json:
                print(json.dumps({
                    "agent": args.agent, "branch": info.get("branch"),
                    "upstream": info.get("upstream"), "ahead": info.get("ahead", 0),
                    "behind": info.get("behind", 0), "oid": info.get("oid"),
                    "entries": [{"path": e.get("path"), "index": e.get("index"),
                                 "worktree": e.get("worktree"), "orig": e.get("orig")}
                                for e in rep.entries],
                    "truncated": bool(rep.truncated)}))
                return 0
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
            if args.json:
                print(json.dumps({
                    "agent": args.agent,
                    "commits": [{k: e.get(k) for k in ("commit", "author", "date",
                                                       "subject")} for e in rep.entries],
                    "truncated": bool(rep.truncated)}))
                return 0
            for e in rep.entries:
                print(shown(f"{e.get('commit', '')[:12]} {e.get('date', '')} "
                            f"{e.get('author', '')}: {e.get('subject', '')}"))
        if rep.truncated:
            print("(truncated)", file=sys.stderr)
    return 0
