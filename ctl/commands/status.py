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
  "problems": [...], "host": {{"answering": true|false, "error": why not, ...}}}}

examples:
  clowderctl status
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


def run(args) -> int:
    # peer: messages name clowder-control and its socket unit, not the PTY host's.
    with Client(args.control_socket or default_control_socket(),
                peer="clowder-control") as c:
        rep = c.request(protocol.GetStatus(), protocol.StatusReport)
    # The host's own answer, not only clowder-control's: a script must not read
    # agents clowder-control only remembers as a healthy status.
    code = exits.OK if rep.host.get("answering", rep.host.get("reachable", True)) \
        else exits.UNREACHABLE
    if args.json:
        print(json.dumps({"agents": rep.agents, "sessions": rep.sessions,
                          "unclaimed": rep.unclaimed, "problems": rep.problems,
                          "host": rep.host}))
        return code
    rows = [("AGENT", "STATE", "ACTIVITY", "ATTENTION", "PID", "SESSION", "UPTIME", "LAST EXIT", "SHELLS",
             "CAUSE")]
    for a in rep.agents:
        shells = ",".join(f"{s['name']}{_shell_state(s)}" for s in a["shells"]) or "-"
        # Escaped: names and causes come from configuration and the host.
        rows.append(tuple(shown(v) for v in (
            a["name"], a["state"], a["activity"], _attention(a), str(a["pid"] or "-"), a["session"] or "-",
            _uptime(a["uptime"]), _exit(a["last_exit"]), shells,
            (a.get("stopped") if a["state"] == "down" else None) or a["cause"] or "-")))
    _table(rows)
    if rep.sessions:
        print()
        _table([("SESSION", "PID", "NAME")] + [
            (shown(s["id"]), shown(s["pid"] or "-"), shown(s["name"] or "-"))
            for s in rep.sessions])
    for s in rep.unclaimed:
        print(f"unclaimed session {shown(s['id'])} ({shown(s['name'])}, pid "
              f"{shown(s['pid'])}): named like an agent's but not one; left alone")
    for p in rep.problems:
        print(f"problem: {shown(p)}")
    if code != exits.OK:
        print(f"problem: PTY host not answering (agents as clowder-control last knew "
              f"them): {shown(rep.host.get('error'))}")
    return code
