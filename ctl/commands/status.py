"""clowderctl status: agents, their sessions, busy/idle, attention, uptime, last exit,
shells; then the plain sessions (no agent's), then sessions named like an agent's that
are not one."""

import json

import clowder_wire as protocol

from .. import exits
from ..client import Client, default_control_socket
from ..text import shown


def add_parser(sub):
    p = sub.add_parser("status", help="show agents (from clowder-control)", epilog=f"""\
It exits {exits.UNREACHABLE} (unreachable) when clowder-control answered but the PTY host did
not: the agents are then shown as clowder-control last knew them.

--json prints one object: {{"agents": [...], "sessions": [...], "unclaimed": [...],
  "problems": [...], "host": {{"answering": true|false, "error": why not, ...}},
  "omitted": sessions left out of the two lists (past 512 KiB of them; ps lists all)}}

Over several hosts (--host A --host B, or the client configuration's hosts:), one agents
  table and one sessions table with a HOST column (when more than one), each host asked
  at once; a host that does not answer within --timeout (default 5 s there) is a line
  "HOST unreachable: why", and the exit status is 4 (3 when none answered).  --json then
  prints {{"hosts": [{{"host", "answered", "error", "seconds", "status": that host's
  object as above, or null}}], "agents": [each agent with its "host"]}}.

examples:
  clowderctl status
  clowderctl --host build1 --host build2 status
  clowderctl --host box status --json | jq '.agents[] | {{name, state}}'
""")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def _uptime(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}d{h}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _exit(last) -> str:
    if not last:
        return "-"
    if last.get("signal") is not None:
        return f"sig{last['signal']}"
    return str(last.get("exit_code", "?"))


def _shell_state(shell: dict) -> str:
    if shell["running"]:
        return ""
    return "(exited)" if shell.get("exited") else "(down)"


def _attention(agent: dict) -> str:
    """The attention state; "-" for none (and from a clowder-control without it)."""
    state = agent.get("attention") or "none"
    return "-" if state == "none" else state


def _table(rows: list[tuple]) -> None:
    """Columns padded to the widest cell; the last one is not padded."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[-1])


AGENT_COLUMNS = ("AGENT", "STATE", "ACTIVITY", "ATTENTION", "PID", "SESSION", "UPTIME",
                 "LAST EXIT", "SHELLS", "CAUSE")


def report(target) -> protocol.StatusReport:
    """clowder-control's status at ``target``."""
    # peer: messages name clowder-control and its socket unit, not the PTY host's.
    with Client(target, peer="clowder-control") as c:
        return c.request(protocol.GetStatus(), protocol.StatusReport)


def code_of(rep: protocol.StatusReport) -> int:
    # The host's own answer, not only clowder-control's: a script must not read
    # agents clowder-control only remembers as a healthy status.
    return exits.OK if rep.host.get("answering", rep.host.get("reachable", True)) \
        else exits.UNREACHABLE


def as_json(rep: protocol.StatusReport) -> dict:
    return {"agents": rep.agents, "sessions": rep.sessions, "unclaimed": rep.unclaimed,
            "problems": rep.problems, "host": rep.host, "omitted": rep.omitted}


def agent_row(a: dict) -> tuple:
    shells = ",".join(f"{s['name']}{_shell_state(s)}" for s in a["shells"]) or "-"
    # Escaped: names and causes come from configuration and the host.
    return tuple(shown(v) for v in (
        a["name"], a["state"], a["activity"], _attention(a), str(a["pid"] or "-"),
        a["session"] or "-", _uptime(a["uptime"]), _exit(a["last_exit"]), shells,
        (a.get("stopped") if a["state"] == "down" else None) or a["cause"] or "-"))


def session_row(s: dict) -> tuple:
    return (shown(s["id"]), shown(s["pid"] or "-"), shown(s["name"] or "-"))


def run(args) -> int:
    if args.fleet:
        return run_fleet(args)
    rep = report(args.control_socket or default_control_socket())
    code = code_of(rep)
    if args.json:
        print(json.dumps(as_json(rep)))
        return code
    _table([AGENT_COLUMNS] + [agent_row(a) for a in rep.agents])
    if rep.sessions:
        print()
        _table([("SESSION", "PID", "NAME")] + [session_row(s) for s in rep.sessions])
    for s in rep.unclaimed:
        print(f"unclaimed session {shown(s['id'])} ({shown(s['name'])}, pid "
              f"{shown(s['pid'])}): named like an agent's but not one; left alone")
    if rep.omitted:
        print(f"and {rep.omitted} more sessions, not listed here: `clowderctl ps` lists "
              f"every one")
    for p in rep.problems:
        print(f"problem: {shown(p)}")
    if code != exits.OK:
        print(f"problem: PTY host not answering (agents as clowder-control last knew "
              f"them): {shown(rep.host.get('error'))}")
    return code


def run_fleet(args) -> int:
    """status over several hosts: one agents table and one sessions table (HOST first)."""
    from .. import fleet
    answers = fleet.ask(args.fleet, lambda h: report(fleet.target(h, args, "control")))
    for a in answers:
        if a.answered and code_of(a.value) != exits.OK:
            a.code = exits.UNREACHABLE  # its PTY host did not answer clowder-control
    if args.json:
        print(json.dumps({
            "hosts": [{**a.as_json(), "status": as_json(a.value) if a.value else None}
                      for a in answers],
            "agents": [{**ag, "host": a.host} for a in answers if a.value
                       for ag in a.value.agents]}))
        return fleet.exit_code(answers)
    several = len(answers) > 1

    def first(a) -> tuple:
        return (shown(a.host),) if several else ()
    head = ("HOST",) if several else ()
    _table([head + AGENT_COLUMNS] + [first(a) + agent_row(ag) for a in answers if a.value
                                     for ag in a.value.agents])
    sessions = [first(a) + session_row(s) for a in answers if a.value
                for s in a.value.sessions]
    if sessions:
        print()
        _table([head + ("SESSION", "PID", "NAME")] + sessions)
    for a in answers:
        prefix = f"{a.host}: " if several else ""
        if not a.answered:
            print(shown(f"{a.host} unreachable: {a.error}"))
            continue
        for s in a.value.unclaimed:
            print(shown(f"{prefix}unclaimed session {s['id']} ({s['name']}, pid "
                        f"{s['pid']}): named like an agent's but not one; left alone"))
        if a.value.omitted:
            print(shown(f"{prefix}and {a.value.omitted} more sessions, not listed here: "
                        f"`clowderctl ps` lists every one"))
        for p in a.value.problems:
            print(shown(f"{prefix}problem: {p}"))
        if code_of(a.value) != exits.OK:
            print(shown(f"{prefix}problem: PTY host not answering (agents as "
                        f"clowder-control last knew them): {a.value.host.get('error')}"))
    return fleet.exit_code(answers)
