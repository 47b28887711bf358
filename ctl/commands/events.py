"""clowderctl events: what happened to your sessions, and (--follow) what happens next.

Events come from sources, each a function of the parsed arguments returning an iterator
of event dicts (each with "kind" and "time", wall clock): SOURCES lists them.  The PTY
host is the one source today (``host_events``); clowder-control's agent events can be
one more entry, merged in by ``merged`` (a thread per source when there are several).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import Callable, Iterator

import clowder_wire as protocol

from ..client import Client, ClientError, NotConnected, RequestFailed
from ..text import shown

EPILOG = """\
Without --follow: the recent events the PTY host keeps (its last 256, of the sessions
  you may see), then exit.  With --follow: the events from now on, until ^C; across a
  restart of the host it reconnects and goes on (a host-started event says so); with no
  SESSION, clowder-control's agent events too, when it runs (agent-busy, agent-idle,
  agent-attention, agent-spawned, agent-restarted, agent-ended).

kinds: session-started, session-ended (status, exit_code, signal), session-busy,
  session-idle (no output for 2 s), session-bell, session-notification (source osc9,
  osc777 or osc99; title, body), host-started (cause: start, restart, crash recovery,
  hand-off), events-lost (count: this watcher read too slowly and missed that many).

--json prints one object per line: {"kind", "time" (seconds since the epoch), "session",
  "name", "uid" (null for the host's own events), and the kind's fields}.

Over several hosts (--host A --host B, or the client configuration's hosts:), every
  host's events in one stream, each with its "host" (a HOST column when more than one);
  a host that does not answer within --timeout (default 5 s there) is a line "HOST
  unreachable: why" (--json: {"kind": "host-unreachable", "host", "time", "error"}) and
  the exit status is 4 (3 when none answered).  With --follow the others go on, and the
  one that dropped is asked again, as one host is after a restart (agents' events are
  not followed over several hosts).

examples:
  clowderctl events
  clowderctl --host build1 --host build2 events --follow --json
  clowderctl events --follow build
  clowderctl events --follow --json | jq -r 'select(.kind == "session-idle") | .name'
"""

RETRY_MAX = 1.0  # seconds between reconnects, at most, while the host is away


def add_parser(sub):
    p = sub.add_parser("events", help="show session and host events (--follow: as they "
                       "happen)", epilog=EPILOG)
    p.add_argument("session", nargs="?", metavar="SESSION",
                   help="only this session's events (an id or name), and the host's own")
    p.add_argument("--follow", "-f", action="store_true",
                   help="print events as they happen, until ^C")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=run)


def host_events(args) -> Iterator[dict]:
    """The PTY host's events; with --follow, reconnecting whenever the host goes away
    (a restart drops every connection) and asking for what it has since the last one."""
    since = None
    connected = False
    pause = 0.05
    while True:
        try:
            with Client(args.socket) as c:
                c.send(protocol.WatchEvents(session=args.session, since=since,
                                            follow=args.follow))
                backlog = True  # the recent ones, until Ok
                while True:
                    msg = c.recv()
                    if isinstance(msg, protocol.Ok):
                        if not args.follow:
                            return
                        if not connected:  # scripts wait for this line to spawn
                            print("clowderctl events: following (^C to stop)",
                                  file=sys.stderr, flush=True)
                        backlog, connected, pause = False, True, 0.05
                        continue
                    if not isinstance(msg, protocol.Event):
                        raise ClientError(f"unexpected answer {type(msg).__name__} to "
                                          f"WatchEvents")
                    event = msg.event
                    if isinstance(event.get("time"), (int, float)):
                        since = event["time"]
                    # Following, the first connection's backlog is history: not shown.
                    # After a reconnect it is what happened while away: shown.
                    if not (backlog and args.follow and not connected):
                        yield event
        except RequestFailed:
            raise
        except NotConnected:
            if not connected:
                raise  # nothing listens at all: not a host restarting
        except ClientError:
            if not connected:
                raise
        time.sleep(pause)  # the host restarting: ask again
        pause = min(RETRY_MAX, pause * 2)


# clowder-control's kinds as `events` shows them (ctl/agentevents.py has the rest).
_AGENT_KINDS = {"busy": "agent-busy", "idle": "agent-idle", "attention": "agent-attention",
                "lost": "agent-events-lost"}


def agent_events(args) -> Iterator[dict]:
    """clowder-control's agent events (busy, idle, attention, spawned, restarted, ended),
    following only: it keeps no recent ones (`clowderctl status` shows the state now).
    Nothing when it does not run, when a SESSION is named, or with --host."""
    if not args.follow or args.session is not None or getattr(args, "host", None):
        return
    from ..agentevents import follow
    connected, pause = False, 0.05
    while True:
        try:
            for event in follow(args):
                connected, pause = True, 0.05
                if event["kind"] == "state":  # each agent as it is now: not an event
                    continue
                yield {**event.pop("fields", {}), **event,
                       "kind": _AGENT_KINDS.get(event["kind"], event["kind"])}
        except (NotConnected, ClientError):
            if not connected:
                return  # no clowder-control: the host's events alone
        # clowder-control restarted (its connections end): follow it again.
        time.sleep(pause)
        pause = min(RETRY_MAX, pause * 2)


# Every source of events, in the order their events are shown when they tie.
SOURCES: list[Callable[..., Iterator[dict]]] = [host_events, agent_events]


def merged(sources: list[Iterator[dict]], follow: bool) -> Iterator[dict]:
    """One stream of several: without follow, all of them in time order; with it, as
    they come (a thread per source; the first failure ends the stream with it)."""
    if len(sources) == 1:
        yield from sources[0]
        return
    if not follow:
        everything = [e for source in sources for e in source]
        yield from sorted(everything, key=lambda e: e.get("time") or 0)
        return
    q: queue.Queue = queue.Queue(maxsize=1000)
    done = object()

    def pump(source):
        try:
            for event in source:
                q.put(event)
        except BaseException as exc:  # handed to the reader, raised there
            q.put(exc)
        q.put(done)
    for source in sources:
        threading.Thread(target=pump, args=(source,), daemon=True).start()
    left = len(sources)
    while left:
        item = q.get()
        if item is done:
            left -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            yield item


def line(event: dict) -> str:
    """One event as a line for people: time, kind, session (name), what happened."""
    when = event.get("time")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) + \
        f".{int(when * 1000) % 1000:03d}" if isinstance(when, (int, float)) else "?"
    kind = str(event.get("kind"))
    who = "-"
    if event.get("agent") is not None:
        who = f"agent {event['agent']}"
    elif event.get("session") is not None:
        who = str(event["session"])
        if event.get("name") not in (None, event["session"]):
            who += f" ({event['name']})"
    return shown(f"{stamp}  {kind:<20}  {who}  {_what(kind, event)}".rstrip())


def _what(kind: str, e: dict) -> str:
    if kind == "session-ended":
        if e.get("signal") is not None:
            return f"{e.get('status')}: signal {e['signal']}"
        if e.get("exit_code") is not None:
            return f"exit {e['exit_code']}"
        return str(e.get("status", ""))
    if kind == "session-notification":
        text = ": ".join(str(t) for t in (e.get("title"), e.get("body")) if t)
        return f"[{e.get('source')}] {text}"
    if kind == "host-started":
        return f"{e.get('cause')} (ptyhostd {e.get('version')}, {e.get('sessions')} sessions)"
    if kind == "agent-attention":
        return " ".join(str(e[k]) for k in ("attention", "cause") if e.get(k))
    if kind == "events-lost":
        return f"{e.get('count')} events lost: read too slowly"
    return ""


def _on(args, host: str):
    """``args`` pointed at ``host``'s PTY host (a fleet's)."""
    import argparse
    from .. import fleet
    return argparse.Namespace(**{**vars(args), "socket": fleet.target(host, args, "host"),
                                 "host": host, "fleet": None})


def _unreachable(host: str, error: str) -> dict:
    return {"kind": "host-unreachable", "time": time.time(), "host": host, "error": error}


def fleet_follow(args, host: str) -> Iterator[dict]:
    """One host's events for a fleet's --follow, each with its "host": one that cannot
    be reached (or drops and cannot be reached again) is said so once, and asked again."""
    from .. import fleet
    name, hargs = fleet.shown_name(host), _on(args, host)
    down, pause = False, 0.05
    while True:
        try:
            for event in host_events(hargs):
                down, pause = False, 0.05
                yield {**event, "host": name}
        except RequestFailed as exc:
            if exc.code != "no-session":  # a SESSION on another host: nothing here
                yield _unreachable(name, str(exc))
            return
        except ClientError as exc:
            if not down:
                yield _unreachable(name, str(exc))
            down = True
        time.sleep(pause)
        pause = min(RETRY_MAX, pause * 2)


def run_fleet(args) -> int:
    from .. import fleet
    several = len(args.fleet) > 1

    def show(event: dict) -> None:
        if args.json:
            print(json.dumps(event), flush=True)
        elif event["kind"] == "host-unreachable":
            print(shown(f"{event['host']} unreachable: {event['error']}"), flush=True)
        else:
            print((shown(event["host"]) + "  " if several else "") + line(event),
                  flush=True)
    if args.follow:
        for event in merged([fleet_follow(args, h) for h in args.fleet], True):
            show(event)
        return 0
    def recent(host: str) -> list[dict] | None:
        try:
            return list(host_events(_on(args, host)))
        except RequestFailed as exc:
            if exc.code == "no-session":  # a SESSION named is on another host
                return None
            raise
    answers = fleet.ask(args.fleet, recent)
    if args.session and all(a.answered and a.value is None for a in answers):
        raise RequestFailed(protocol.Error(message=f"no such session on any host: "
                                           f"{args.session}", code="no-session"))
    events = sorted(({**e, "host": a.host} for a in answers for e in a.value or ()),
                    key=lambda e: e.get("time") or 0)
    for event in events:
        show(event)
    for a in answers:
        if not a.answered:
            show(_unreachable(a.host, a.error))
    return fleet.exit_code(answers)


def run(args) -> int:
    if args.fleet:
        return run_fleet(args)
    events = merged([source(args) for source in SOURCES], args.follow)
    for event in events:
        print(json.dumps(event) if args.json else line(event), flush=True)
    return 0
