"""clowderctl wait: block until a session ends; print and exit with its code.

With --idle or --attention it waits for an agent instead (clowder-control's agent
events, ctl/agentevents.py): until it is idle, or needs attention (controld/attention.py
says when), at once if it already is; then it prints the state and its cause and exits 0.

Its exit status is the session's (ctl/exits.py), so its own failures take timeout(1)'s
convention: 124 timed out, 125 anything else (main() maps them, _usage_error its usage
errors).  With --json it prints the end as JSON and exits as every other command does.
"""

import json
import sys
import time

import clowder_wire as protocol

from .. import agentevents, exits
from ..client import Client, ClientError, NotAnswering, NotConnected, RequestFailed, TimedOut
from ..text import shown

EPILOG = f"""\
exit status:
  the session's exit code, or 128+N if signal N ended it (255 if unknown); clowderctl's
  own failures: {exits.TIMEOUT} timed out (--timeout, or a daemon not answering), \
{exits.WAIT_FAILED} anything else.
  With --json: {exits.OK} once the session has ended (its status is in the output), else
  as every other command ({exits.REFUSED} refused, {exits.USAGE} usage, \
{exits.UNREACHABLE} unreachable, {exits.TIMEOUT} timeout).

--json prints one object: {{"session": ID, "status": "exited"|"killed"|"dumped"|"lost",
  "exit_code": N or null, "signal": N or null}}

--idle / --attention: {exits.OK} once the agent is idle (or down) / needs attention,
  {exits.TIMEOUT} if --timeout ran out first, else as above ({exits.WAIT_FAILED} without
  --json: e.g. no such agent, or not yours).  It prints `AGENT: STATE (CAUSE)`; with
  --json {{"agent": NAME, "activity": "busy"|"idle"|"down", "attention": "none"|"asking"|
  "notified"|"exited"|"failed", "cause": TEXT, "event": the agent event that ended it}}.

Over several hosts (--host A --host B, or the client configuration's hosts:), the hosts
  are first asked at once which has the session (or, with --idle/--attention, the agent),
  and that one is waited on; none or several having it is a failure ({exits.WAIT_FAILED}; name it
  HOST:ID).  HOST:ID waits on that host alone ("local": this machine).

examples:
  clowderctl wait "$id" && echo "it succeeded"
  clowderctl wait build1:"$id"
  clowderctl wait --timeout 60 --json "$id"
  clowderctl wait --idle claude && clowderctl snapshot agent:claude
  clowderctl wait --attention --timeout 3600 claude || echo "still busy after an hour"
"""


def _usage_error(parser, message):
    """wait's usage errors are clowderctl's own failures: told apart from the session's
    status as the others are (argparse's own would be 2, a status a program may have)."""
    parser.print_usage(sys.stderr)
    parser.exit(exits.WAIT_FAILED, f"{parser.prog}: error: {message}\n")


def add_parser(sub):
    p = sub.add_parser("wait", help="wait for a session to end and exit with its code",
                       epilog=EPILOG)
    p.error = lambda message: _usage_error(p, message)
    p.add_argument("session", metavar="ID", help="a session id or name (an agent's name "
                   "with --idle or --attention)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--idle", action="store_true",
                       help="wait until the agent ID is idle (quiet), not for a session's "
                            "end")
    which.add_argument("--attention", action="store_true",
                       help="wait until the agent ID needs attention: asking (idle at a "
                            "prompt after working), notified (a bell or notification), "
                            "exited or failed")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help=f"give up after SECONDS (exit status {exits.TIMEOUT}); after `wait` "
                        f"this is wait's own, not the per-request deadline")
    p.add_argument("--json", action="store_true",
                   help="print the end as JSON and exit 0 (see below)")
    p.set_defaults(run=run)


def ended(msg: protocol.Exited) -> dict:
    """The end of a session as --json prints it: these keys, always."""
    return {"session": msg.session, "status": msg.status, "exit_code": msg.exit_code,
            "signal": msg.signal}


def _find(args) -> None:
    """Point ``args`` at the one host of its fleet that has the session (or agent)."""
    from .. import fleet
    from .ps import sessions_of
    from .status import report
    if args.idle or args.attention:
        answers = fleet.ask(args.fleet, lambda h: [
            a["name"] for a in report(fleet.target(h, args, "control")).agents])
        what = f"agent {args.session}"
    else:
        answers = fleet.ask(args.fleet, lambda h: [
            v for s in sessions_of(fleet.target(h, args, "host"), True)
            for v in (s["id"], s["name"])])
        what = f"session {args.session}"
    have = [h for h, a in zip(args.fleet, answers) if a.value and args.session in a.value]
    if len(have) != 1:
        silent = "; ".join(f"{a.host} unreachable: {a.error}" for a in answers
                           if not a.answered)
        found = f"on {', '.join(map(fleet.shown_name, have))}: name it HOST:ID" if have \
            else "on none of the hosts that answered"
        raise ClientError(f"{what} is {found}" + (f" ({silent})" if silent else ""))
    args.socket = fleet.target(have[0], args, "host")
    args.control_socket = fleet.target(have[0], args, "control")


def run(args) -> int:
    if args.fleet:
        _find(args)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    if args.idle or args.attention:
        return _agent(args, deadline)
    connected = False
    while True:
        try:
            with Client(args.socket) as c:
                connected = True
                if deadline is not None:
                    c.sock.settimeout(max(0.01, deadline - time.monotonic()))
                msg = c.request(protocol.Wait(session=args.session), protocol.Exited)
            break
        except (RequestFailed, NotAnswering):
            raise  # NotAnswering: connecting or the handshake outlived the deadline
        except NotConnected:
            if not connected:
                raise  # nothing listens at all: not a host restarting (its socket stays)
            _retry(args, deadline)
        except ClientError:
            connected = True  # something listened: a host restarting drops connections
            _retry(args, deadline)
    if args.json:
        print(json.dumps(ended(msg)))
        return exits.OK
    if msg.signal is not None:
        print(f"signal {msg.signal}")
        return 128 + msg.signal
    if msg.exit_code is None:
        print(f"unknown ({msg.status})")
        return 255
    print(msg.exit_code)
    return msg.exit_code


def _retry(args, deadline) -> None:
    """The host restarting drops the connection; the session lives on: ask again."""
    if deadline is not None and time.monotonic() > deadline:
        raise TimedOut(f"session {args.session} did not end within {args.timeout:g} s")
    time.sleep(0.05)


def _agent(args, deadline) -> int:
    """wait --idle / --attention: follow the agent's events until it is so."""
    what = "idle" if args.idle else "in need of attention"
    activity = attention = cause = None
    try:
        for ev in agentevents.follow(args, args.session, deadline):
            f = ev["fields"]
            if ev["kind"] == "state":
                activity, attention = f.get("activity"), f.get("attention")
                cause = f.get("activity_reason") if args.idle else f.get("attention_cause")
                if activity == "down":
                    cause = f"it is {f.get('state')}"
            elif ev["kind"] in ("busy", "idle"):
                activity, cause = ev["kind"], f.get("reason") if args.idle else cause
            elif ev["kind"] == "attention":
                attention = f.get("attention")
                cause = f.get("cause") if args.attention else cause
            else:
                continue
            done = activity in ("idle", "down") if args.idle else \
                attention not in (None, "none")
            if done:
                break
    except NotAnswering:
        raise
    except TimedOut:
        raise TimedOut(f"agent {args.session} was not {what} within "
                       f"{args.timeout:g} s") from None
    state = activity if args.idle else attention
    if args.json:
        print(json.dumps({"agent": args.session, "activity": activity,
                          "attention": attention, "cause": cause, "event": ev}))
    else:
        print(shown(f"{args.session}: {state} ({cause})"))
    return exits.OK
