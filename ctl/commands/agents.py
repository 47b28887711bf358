"""clowderctl up / down / restart AGENT: drive agents through clowder-control."""

import json

import clowder_wire as protocol

from ..client import Client, default_control_socket
from ..text import shown


EXAMPLES = {verb: f"""\
--json prints the agent as `clowderctl status --json` lists it (name, state, session,
  pid, shells, ...).

examples:
  clowderctl {verb} claude{extra}
""" for verb, extra in (("up", "\n  clowderctl up claude --json"),
                        ("down", "\n  clowderctl --host box down claude"),
                        ("restart", "\n  clowderctl restart claude --shells"))}


def add_parser(sub):
    for name, helptext in (("up", "start an agent and its shells"),
                           ("down", "stop an agent and its shells (SIGHUP, then SIGTERM, "
                                    "then SIGKILL) and keep it down"),
                           ("restart", "restart an agent with its normal command (its "
                                       "shells are left running unless --shells)")):
        p = sub.add_parser(name, help=helptext, epilog=EXAMPLES[name])
        p.add_argument("agent", metavar="AGENT", help="the agent's name in clowder.yaml")
        if name == "restart":
            p.add_argument("--shells", action="store_true",
                           help="restart its companion shells too")
        p.add_argument("--json", action="store_true", help="print the agent as JSON")
        p.set_defaults(run=run, verb=name)


def run(args) -> int:
    if args.verb == "restart":
        msg = protocol.AgentRestart(agent=args.agent, shells=args.shells)
    else:
        msg = {"up": protocol.AgentUp, "down": protocol.AgentDown}[args.verb](agent=args.agent)
    expect = protocol.Ok if args.verb == "down" else protocol.AgentInfo
    # peer: messages name clowder-control and its socket unit, not the PTY host's.
    with Client(args.control_socket or default_control_socket(),
                peer="clowder-control") as c:
        reply = c.request(msg, expect)
        if args.verb == "down":
            # How its sessions ended (SIGHUP, or escalated to SIGTERM / SIGKILL).
            status = c.request(protocol.GetStatus(), protocol.StatusReport)
            agent = next((a for a in status.agents if a["name"] == args.agent), {})
    if isinstance(reply, protocol.AgentInfo):
        a = reply.agent
        if args.json:
            print(json.dumps(a))
        else:
            print(shown(f"{a['name']}: {a['state']} (session {a['session']}, "
                        f"pid {a['pid']})"))
    elif args.json:
        print(json.dumps(agent))
    else:
        how = agent.get("stopped")
        print(shown(f"{args.agent}: down" + (f" ({how})" if how else "")))
    return 0
