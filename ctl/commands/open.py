"""clowderctl open AGENT: lay the agent and its shells out as clowder.yaml says, in tmux.

tmux is only the view: each pane runs `clowderctl attach --agent AGENT[/SHELL]`, so the
tmux server can be killed or upgraded and every session keeps running (they live on the
PTY host).  Inside tmux ($TMUX) the layout is a new window of that server; outside it a
new tmux session, which this terminal then attaches to.  Without tmux it says what to
run instead.  The layout: the agent's pane first, then each shell split off the agent's
pane, `split: right` beside it, `below` under it, taking `percent` of it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import clowder_wire as protocol
from clowder_common.interpreter import module_argv

from ..client import Client, ClientError, default_control_socket


def add_parser(sub):
    p = sub.add_parser("open", help="lay an agent and its shells out in tmux", epilog="""\
Each pane runs `clowderctl attach --agent`: tmux is only the view, the sessions live on
the PTY host.  Inside tmux it opens a new window; outside, a new tmux session.

examples:
  clowderctl open claude
  clowderctl --host box open claude --no-attach
""")
    p.add_argument("agent", metavar="AGENT", help="the agent's name in clowder.yaml")
    p.add_argument("--no-attach", action="store_true",
                   help="outside tmux: make the tmux session but do not attach to it")
    p.set_defaults(run=run)


def _agent(args) -> dict:
    # peer: messages name clowder-control and its socket unit, not the PTY host's.
    with Client(args.control_socket or default_control_socket(),
                peer="clowder-control") as c:
        report = c.request(protocol.GetStatus(), protocol.StatusReport)
    for agent in report.agents:
        if agent.get("name") == args.agent:
            return agent
    raise ClientError(f"no agent {args.agent!r} you may drive (see `clowderctl status`)")


def _attach(args, target: str) -> str:
    """The shell command a pane runs: this clowderctl, with the global options it was
    given (--socket, --host, ..., before or after `open`)."""
    return shlex.join([*module_argv("ctl"), *args.global_argv, "attach",
                       "--agent", target])


def _tmux(*args: str) -> str:
    proc = subprocess.run(["tmux", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClientError(f"tmux {args[0]} failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout.strip()


def run(args) -> int:
    agent = _agent(args)
    name = agent["name"]
    shells = agent.get("shells", [])
    if shutil.which("tmux") is None:
        lines = [f"  clowderctl attach --agent {name}"] + \
            [f"  clowderctl attach --agent {name}/{s['name']}" for s in shells]
        raise ClientError("tmux is not installed, and `open` lays panes out in it; attach "
                          "in terminals of your own instead:\n" + "\n".join(lines))
    inside = bool(os.environ.get("TMUX"))
    if inside:
        first = _tmux("new-window", "-P", "-F", "#{pane_id}", "-n", name, _attach(args, name))
        session = None
    else:
        session = f"clowder-{name}"
        first = _tmux("new-session", "-d", "-P", "-F", "#{pane_id}", "-s", session,
                      "-n", name, _attach(args, name))
    for shell in shells:
        side = "-h" if shell.get("split") == "right" else "-v"
        _tmux("split-window", "-t", first, side, "-l", f"{shell.get('percent') or 50}%",
              _attach(args, f"{name}/{shell['name']}"))
    _tmux("select-pane", "-t", first)
    if session is not None and not args.no_attach and os.isatty(sys.stdin.fileno()):
        return subprocess.run(["tmux", "attach-session", "-t", session]).returncode
    if session is not None:
        print(f"tmux session {session}: `tmux attach -t {session}` shows it")
    return 0
