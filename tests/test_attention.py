"""Issue 16, "Attention" (acceptance 2): agents' attention, their events, `wait --idle`
and `--attention`, and the `notify:` command.

The first tests run the pure modules (controld/attention.py, controld/agentevents.py,
the config checker); the rest run clowder-control under a real systemd with agents
that print, go quiet, ring the bell, send an OSC 9 notification and exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time

import pytest

from conftest import PYTHON, ensure_user, wait_for
from controld import agentevents
from controld.attention import Attention, Notices
from controld.config import ConfigError, parse
from test_control import agent_yaml, control  # noqa: F401 - the fixture
from test_ending import control_socket

# --- the rule, without a daemon ------------------------------------------------------------


def test_notices_split_across_reads_and_escape_strings():
    n = Notices()
    # An ESC inside an OSC ends it (a DEC parser's osc_end) and starts what follows.
    stream = (b"a\x07b\x1b]0;a title\x07x\x1b]9;hello \x1b]9;4;1;50\x07"
              b"\x1b]9;done\x1b\\\x1b]777;notify;Title;Body\x07\x1b]99;i=1;kitty\x07"
              b"\x1bPq\x07\x1b_apc\x1b\\\x1b\x07")
    whole = n.feed(stream)
    assert whole == ["bell", "notification: hello ", "notification: done", "notification: Title: Body",
                     "notification: kitty", "bell"], whole
    pieces = Notices()
    found = []
    for i in range(len(stream)):  # one byte at a time: every split point
        found += pieces.feed(stream[i:i + 1])
    assert found == whole


def test_the_attention_rule():
    a = Attention()
    assert a.idle("$ ", at_prompt=True) == ("asking", "idle at a prompt: '$'")
    assert a.busy() == ("none", "output again")
    assert a.output(b"working\x07") == ("notified", "bell")
    assert a.busy() is None  # the busy period that carried it does not clear it
    assert a.idle("$ ", True) is None and a.state == "notified"
    assert a.busy() == ("none", "output again")  # a new busy period after it does
    assert a.output(b"\x07", replayed=True) is None  # replayed to a new watch
    assert a.ended(3, None, "exited with code 3") == ("failed", "exited with code 3")
    assert a.output(b"\x07") is None and a.busy() is None  # left only by a new session
    assert a.clear("a new session") == ("none", "a new session")
    assert a.ended(0, None, "exited with code 0")[0] == "exited"
    p = Attention([r"\(y/n\)\s*$"])
    assert p.idle("$ ", True) is None, "patterns replace the prompt heuristic"
    assert p.idle("Proceed? (y/n) ", False)[0] == "asking"


def test_a_subscriber_that_never_reads_holds_a_bounded_queue():
    async def run():
        hub = agentevents.AgentEvents()
        sub = hub.subscribe(lambda agent: agent == "a", uid=1000, privileged=False)
        for i in range(agentevents.QUEUE_MAX * 10):
            hub.publish(agentevents.make("busy", "a", n=i))
            hub.publish(agentevents.make("busy", "b", n=i))  # not its agent
        assert len(sub.queue) == agentevents.QUEUE_MAX
        got = [await sub.get() for _ in range(agentevents.QUEUE_MAX + 1)]
        assert [e["fields"]["n"] for e in got[:-1]] == list(range(agentevents.QUEUE_MAX))
        assert got[-1]["kind"] == "lost" and \
            got[-1]["fields"]["lost"] == agentevents.QUEUE_MAX * 9
        hub.publish(agentevents.make("idle", "a"))
        assert (await sub.get())["kind"] == "idle"  # queued again after the gap
        for _ in range(agentevents.MAX_PER_UID - 1):
            assert not isinstance(hub.subscribe(lambda a: True, 1000, False), str)
        assert "already follows" in hub.subscribe(lambda a: True, 1000, False)
    asyncio.run(run())


def test_attention_patterns_are_checked_with_their_line():
    text = ("agents:\n  - name: a\n    command: sh\n    cwd: /tmp\n"
            "    attention: ['ok$', '(unclosed', 3]\n    notify: ''\n")
    with pytest.raises(ConfigError) as err:
        parse(text, "c.yaml")
    said = "\n".join(err.value.errors)
    assert "c.yaml:5: agents[0].attention[1]: invalid regular expression '(unclosed'" \
        in said, said
    assert "agents[0].attention[2]: expected a string, got integer '3'" in said
    assert "agents[0].notify: must name a program" in said
    ok = parse("defaults:\n  notify: [notify-send, clowder]\n" + text.split(
        "    attention")[0] + "    attention: ['ok$']\n")
    assert ok.agents[0].attention == ("ok$",)
    assert ok.agents[0].notify == ("notify-send", "clowder")


# --- clowder-control under systemd ---------------------------------------------------------

def with_keys(text: str, **keys) -> str:
    extra = "".join(f"    {k}: {json.dumps(v)}\n" for k, v in keys.items())
    return text.replace("    shells:", extra + "    shells:")


def wait_cmd(host, *args, user=None, timeout=60):
    return host.ctl("wait", *args, check=False, user=user, timeout=timeout)


def test_wait_idle_returns_when_the_agent_goes_quiet(host, control):
    ticks = "sh -c 'for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done; exec sleep 100000'"
    chatty = "sh -c 'while :; do echo chatter; sleep 0.3; done'"
    control.write_config("agents:\n" + agent_yaml("ticks", ticks, control.workdir)
                         + agent_yaml("chatty", chatty, control.workdir))
    control.wait_running(["ticks", "chatty"])
    t0 = time.monotonic()
    r = wait_cmd(host, "--idle", "--json", "ticks")
    took = time.monotonic() - t0
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["activity"] == "idle" and out["cause"] == "quiet", out
    assert out["event"]["kind"] in ("idle", "state"), out
    # It returned after the last tick, once quiet: not at once while it printed.
    assert control.agents()["ticks"]["activity"] == "idle"
    assert b"tick 6" in host.ctl("history", "agent:ticks").stdout
    print(f"wait --idle returned after {took:.1f} s")
    again = wait_cmd(host, "--idle", "ticks")  # already idle: at once
    assert again.returncode == 0 and again.stdout.decode() == "ticks: idle (quiet)\n", again
    t0 = time.monotonic()
    busy = wait_cmd(host, "--idle", "--timeout", "4", "chatty")
    assert busy.returncode == 124, busy
    assert b"was not idle within 4 s" in busy.stderr, busy.stderr
    assert 3.5 < time.monotonic() - t0 < 30


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_wait_attention_on_a_bell_a_notification_and_an_exit(host, control):
    bell = "sh -c 'sleep 2; printf \"ding\\007\"; exec sleep 100000'"
    osc = "sh -c 'sleep 2; printf \"\\033]9;build done\\033\\\\\\\\\"; exec sleep 100000'"
    fails = "sh -c 'sleep 2; exit 3'"
    ends = "sh -c 'sleep 2; exit 0'"
    control.write_config("agents:\n" + agent_yaml("bell", bell, control.workdir)
                         + agent_yaml("osc", osc, control.workdir)
                         + with_keys(agent_yaml("fails", fails, control.workdir),
                                     restart="never")
                         + with_keys(agent_yaml("ends", ends, control.workdir),
                                     restart="never"))
    control.wait_running(["bell", "osc"])
    expect = {"bell": ("notified", "bell"), "osc": ("notified", "notification: build done"),
              "fails": ("failed", "exited with code 3"), "ends": ("exited", "exited with code 0")}
    for name, (state, cause) in expect.items():
        r = wait_cmd(host, "--attention", "--json", "--timeout", "30", name)
        assert r.returncode == 0, (name, r)
        out = json.loads(r.stdout)
        assert (out["attention"], out["cause"]) == (state, cause), (name, out)
        assert control.agents()[name]["attention"] == state
    # The journal has each change with its MESSAGE_ID.
    from clowder_common import events
    entries = control.journal("osc")
    said = [e for e in entries if e.get("MESSAGE_ID") == events.IDS["agent-attention"]]
    assert any(e.get("CLOWDER_ATTENTION") == "notified" for e in said), said


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_notify_runs_once_within_its_interval_with_the_event_on_stdin(host, control):
    """As the agent's user (alice), never a shell string of ours: its argv."""
    alice = ensure_user("alice", 2001, "clowder")
    workdir = "/home/alice/notify-work"
    os.makedirs(workdir, exist_ok=True)
    os.chown(workdir, alice, alice)
    out = os.path.join(workdir, "notified.jsonl")
    for path in (out, out + ".who"):
        if os.path.exists(path):
            os.unlink(path)
    # A bell; quiet (idle); output again (clears it); an OSC 9: two attention events
    # inside notify's 30 s interval.
    twice = ("sh -c 'printf \"\\007\"; sleep 3; echo more; sleep 3; "
             "printf \"\\033]9;second\\007\"; exec sleep 100000'")
    notify = ["sh", "-c", f"id -un >> {out}.who; cat >> {out}"]
    control.write_config("agents:\n" + with_keys(
        agent_yaml("twice", twice, workdir), notify=notify, user="alice"))
    control.wait_running(["twice"])
    wait_for(lambda: control.agents()["twice"]["attention_cause"] == "notification: second",
             30, "the second notification")
    wait_for(lambda: os.path.exists(out) and open(out).read().endswith("\n"), 20,
             "the notify command to run")
    # The second event is skipped, and said so, when it happens: no run can follow.
    wait_for(lambda: any("rate limit" in e.get("MESSAGE", "")
                         for e in control.journal("twice")), 20,
             "the journal to say the second notify was not run (rate limit)")
    lines = open(out).read().splitlines()
    assert len(lines) == 1, lines
    event = json.loads(lines[0])
    assert event["kind"] == "attention" and event["agent"] == "twice"
    assert event["fields"]["attention"] == "notified" and event["fields"]["cause"] == "bell"
    assert open(out + ".who").read().split() == ["alice"]
    assert os.stat(out).st_uid == alice
    from clowder_common import events
    wait_for(lambda: events.IDS["agent-notified"] in
             [e.get("MESSAGE_ID") for e in control.journal("twice")], 10,
             "the journal to say the notify command ran")


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_a_failing_notify_is_logged_with_its_cause(host, control):
    bell = "sh -c 'printf \"\\007\"; exec sleep 100000'"
    control.write_config(
        "agents:\n"
        + with_keys(agent_yaml("missing", bell, control.workdir),
                    notify=["/nonexistent/notify-me"])
        + with_keys(agent_yaml("nonzero", bell, control.workdir),
                    notify=["sh", "-c", "echo cannot reach the phone >&2; exit 7"]))
    control.wait_running(["missing", "nonzero"])
    from clowder_common import events

    def failed(name):
        return [e["MESSAGE"] for e in control.journal(name)
                if e.get("MESSAGE_ID") == events.IDS["agent-notify-failed"]] or None
    said = wait_for(lambda: failed("missing"), 20, "the missing command's failure")
    assert "'/nonexistent/notify-me' could not be started: No such file" in said[0], said
    said = wait_for(lambda: failed("nonzero"), 20, "the failing command's failure")
    assert "exited with 7: cannot reach the phone" in said[0], said
    assert control.agents()["nonzero"]["state"] == "running"


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_asking_at_a_prompt_or_a_pattern_and_cleared_by_the_answer(host, control):
    asks = ("sh -c 'echo working; sleep 1; printf \"Proceed? (y/n) \"; read x; "
            "echo \"got $x\"; sleep 1; printf \"Again? (y/n) \"; exec sleep 100000'")
    prompt = "sh -c 'echo working; sleep 1; printf \"$ \"; exec sleep 100000'"
    control.write_config("agents:\n" + with_keys(
        agent_yaml("asks", asks, control.workdir), attention=[r"\(y/n\)\s*$"])
        + agent_yaml("prompt", prompt, control.workdir))
    control.wait_running(["asks", "prompt"])
    r = wait_cmd(host, "--attention", "--json", "--timeout", "30", "prompt")
    out = json.loads(r.stdout)
    assert (out["attention"], out["cause"]) == ("asking", "idle at a prompt: '$'"), out
    r = wait_cmd(host, "--attention", "--json", "--timeout", "30", "asks")
    out = json.loads(r.stdout)
    assert out["attention"] == "asking" and "Proceed? (y/n)" in out["cause"] and \
        "matches '\\\\(y/n\\\\)" in out["cause"], out
    host.ctl("send", "agent:asks", "y\r")  # echoed, then "got y": a new busy period
    again = wait_for(lambda: (lambda a: a if "Again?" in a["attention_cause"] else None)(
        control.agents()["asks"]), 30, "the agent to ask again")
    assert again["attention"] == "asking", again
    from clowder_common import events

    def said():
        got = [(e.get("CLOWDER_ATTENTION"), e.get("CLOWDER_CAUSE"))
               for e in control.journal("asks")
               if e.get("MESSAGE_ID") == events.IDS["agent-attention"]]
        return got if got and "Again?" in got[-1][1] else None
    changes = wait_for(said, 10, "the journal to have the attention changes")
    assert [state for state, _ in changes[-3:]] == ["asking", "none", "asking"], changes
    assert "Proceed?" in changes[-3][1] and changes[-2][1] == "output again", changes


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_a_restart_of_control_does_not_ring_again(host, control):
    """The bell is in the 4 KiB replayed to the new clowder-control's watch: read for
    the prompt, not a new notification."""
    ringer = "sh -c 'echo before; printf \"\\007\"; echo rang; exec sleep 100000'"
    control.write_config("agents:\n" + agent_yaml("ringer", ringer, control.workdir))
    control.wait_running(["ringer"])
    r = wait_cmd(host, "--attention", "--json", "--timeout", "30", "ringer")
    assert json.loads(r.stdout)["attention"] == "notified", r
    control.restart()
    # The replay makes it busy for 2 s, then idle: by then any bell in it was read.
    wait_for(lambda: control.agents().get("ringer", {}).get("activity") == "busy", 30,
             "the new clowder-control to read the replayed output")
    a = wait_for(lambda: (lambda a: a if a["activity"] == "idle" else None)(
        control.agents()["ringer"]), 30, "the agent to be idle again")
    assert (a["attention"], a["attention_cause"]) == ("none", "not seen yet"), a


WATCH = ("import sys, time, json, clowder_wire as P\n"
         "from ctl.client import Client, RequestFailed, TimedOut\n"
         "agent = sys.argv[2] or None\n"
         "with Client(sys.argv[1], timeout=10, peer='clowder-control') as c:\n"
         "    try:\n"
         "        c.request(P.WatchAgentEvents(agent=agent), P.Ok)\n"
         "    except RequestFailed as exc:\n"
         "        print('Error', exc); sys.exit(0)\n"
         "    c.sock.settimeout(float(sys.argv[3]))\n"
         "    end = time.monotonic() + float(sys.argv[3])\n"
         "    while time.monotonic() < end:\n"
         "        try:\n"
         "            m = c.recv()\n"
         "        except TimedOut:\n"
         "            break\n"
         "        print(json.dumps([m.kind, m.agent]), flush=True)\n")


def watch_as(host, user, agent: str = "", seconds: float = 4.0) -> str:
    return host.run([PYTHON, "-c", WATCH, control_socket(host), agent, str(seconds)],
                    user=user, timeout=60).stdout.decode()


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_a_second_user_cannot_wait_on_or_watch_roots_agent(host, control):
    ensure_user("bob", 2002, "clowder")
    busy = "sh -c 'while :; do printf \"x\\007\"; sleep 2.5; done'"
    control.write_config("agents:\n" + agent_yaml("roots", busy, control.workdir))
    control.wait_running(["roots"])
    for flag in ("--idle", "--attention"):
        r = wait_cmd(host, flag, "--timeout", "10", "roots", user="bob")
        assert r.returncode == 125 and b"may not watch agent 'roots'" in r.stderr, r
        r = wait_cmd(host, flag, "--timeout", "10", "no-such", user="bob")
        assert r.returncode == 125 and b"may not watch agent 'no-such'" in r.stderr, r
    assert "may not watch agent 'roots'" in watch_as(host, "bob", "roots", 1)
    # Bob following every agent sees none of root's, while root's sees them come.
    assert watch_as(host, "bob", "", 6) == ""
    mine = [json.loads(line) for line in watch_as(host, None, "", 6).splitlines()]
    assert ["state", "roots"] in mine and ["busy", "roots"] in mine, mine


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_subscribers_that_never_read_are_bounded(host, control):
    """A member's subscribers that never read: at most MAX_PER_UID at once (one more is
    refused), the daemon's memory stays within the bound design.md gives, and root's
    status and events go on meanwhile."""
    import clowder_wire as P
    from ctl.client import Client
    from hostile import MiB, rss_kib
    ensure_user("bob", 2002, "clowder")
    noisy = "sh -c 'while :; do seq 1 2000; printf \"\\007\"; sleep 2.2; done'"
    control.write_config("agents:\n" + agent_yaml("noisy", noisy, control.workdir))
    control.wait_running(["noisy"])
    pid = int(host.show("clowder-control.service", "MainPID")["MainPID"])
    before = rss_kib(pid)
    code = ("import socket, sys, time, clowder_wire as P\n"
            "socks = []\n"
            "for i in range(int(sys.argv[2])):\n"
            "    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "    s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client='hoard'))\n"
            "              + P.encode(P.WatchAgentEvents()))\n"
            "    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n"
            "    socks.append(s)\n"
            "print('ready', flush=True)\n"
            "time.sleep(float(sys.argv[3]))\n")
    n = agentevents.MAX_PER_UID
    hoard = subprocess.Popen(["runuser", "-u", "bob", "--", PYTHON, "-c", code,
                              control_socket(host), str(n), "60"], stdout=subprocess.PIPE,
                             env=host.env)
    try:
        assert hoard.stdout.readline() == b"ready\n"
        # Once the daemon has read the hoard's requests, one more of bob's is refused.
        wait_for(lambda: "already follows agents' events" in watch_as(host, "bob", "", 1),
                 30, f"bob's subscriber number {n + 1} to be refused")
        # Root's status answers (each within its 5 s timeout) while the noisy agent goes
        # busy, idle and busy again: events fanned out to the hoard meanwhile.
        seen: list[str] = []

        def next_activity():
            with Client(control_socket(host), timeout=5, peer="clowder-control") as c:
                report = c.request(P.GetStatus(), P.StatusReport)
            now = {a["name"]: a["activity"] for a in report.agents}["noisy"]
            if not seen or seen[-1] != now:
                seen.append(now)
            return seen[-3:] == ["busy", "idle", "busy"]
        wait_for(next_activity, 30, f"the noisy agent to go busy, idle, busy ({seen})",
                 interval=0.1)
        seen = [json.loads(line) for line in watch_as(host, None, "noisy", 5).splitlines()]
        assert ["busy", "noisy"] in seen or ["idle", "noisy"] in seen, seen
        grown = (rss_kib(pid) - before) * 1024
        assert grown < 16 * MiB, f"grew by {grown / MiB:.1f} MiB"
        print(f"{n} never-read subscribers: rss +{grown / MiB:.1f} MiB")
    finally:
        hoard.kill()
        hoard.wait()


@pytest.mark.parametrize("host", ["system"], indirect=True)
def test_events_follow_merges_the_agents_attention_with_the_sessions_events(host, control):
    """`clowderctl events --follow` shows clowder-control's agent events beside the
    host's: the bell an agent rings is a session-bell (host) and an agent-attention
    (control, notified) in one stream, which follows clowder-control across its restart."""
    from test_events import Stream
    bell = "sh -c 'sleep 3; printf \"ding\\007\"; exec sleep 100000'"
    control.write_config("agents:\n" + agent_yaml("ringer", bell, control.workdir))
    stream = Stream(host)
    try:
        control.wait_running(["ringer"])
        sid = control.agents()["ringer"]["session"]
        got = stream.wait(lambda e: e.get("agent") == "ringer"
                          and e["kind"] == "agent-attention", "the agent's attention", 30)
        assert got[0]["attention"] == "notified" and got[0]["cause"] == "bell", got
        stream.wait(lambda e: e.get("session") == sid and e["kind"] == "session-bell",
                    "the session's bell")
        # clowder-control restarts: the stream follows it again, and a new agent's
        # attention comes through as before.
        late = "sh -c 'sleep 3; printf \"late\\007\"; exec sleep 100000'"
        control.write_config("agents:\n" + agent_yaml("ringer", bell, control.workdir)
                             + agent_yaml("later", late, control.workdir))
        control.restart()
        control.wait_running(["ringer", "later"])
        stream.wait(lambda e: e.get("agent") == "later" and e["kind"] == "agent-attention",
                    "the attention of an agent started after clowder-control's restart", 30)
    finally:
        stream.close()
