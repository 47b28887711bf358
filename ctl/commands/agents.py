"""clowderctl up / down / restart AGENT: drive agents through clowder-control."""

import json

from ptyhostd import protocol

from ..client import Client, default_control_socket


def add_parser(sub):
    for name, helptext in (("up", "start an agent and its shells"),
                           ("down", "stop an agent and its shells, and keep it down"),
                           ("restart", "restart an agent with its normal command")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("agent", metavar="AGENT")
        p.add_argument("--json", action="store_true", help="print the agent as JSON")
        p.set_defaults(run=run, verb=name)


def run(args) -> int:
    msg = {"up": protocol.AgentUp, "down": protocol.AgentDown,
           "restart": protocol.AgentRestart}[args.verb](agent=args.agent)
    expect = protocol.Ok if args.verb == "down" else protocol.AgentInfo
    with Client(args.control_socket or default_control_socket()) as c:
        reply = c.request(msg, expect)
    if isinstance(reply, protocol.AgentInfo):
        a = reply.agent
        if args.json:
            print(json.dumps(a))
        else:
            print(f"{a['name']}: {a['state']} (session {a['session']}, pid {a['pid']})")
    else:
        print(f"{args.agent}: down")
    return 0
