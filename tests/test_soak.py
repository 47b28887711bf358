"""Issue 11's chaos run: random real-machine events at random moments against live
sessions, and at the end nothing may be lost.

Against ten sessions printing numbered lines, an agent of clowder-control doing the
same, a client typing numbered lines through the real ``clowderctl attach``, short
sessions that exit with known codes, and two clients that never read, for
CLOWDER_SOAK_SECONDS (default 75 per scope; ``make test-soak`` runs longer) it throws,
at random moments: host restart, ``kill -9`` of the host (also in the middle of a burst
of typed lines, while their bytes flow through it), SIGSTOP/SIGCONT of it (and,
where the unit has a watchdog, a freeze long enough for systemd to replace it),
``daemon-reexec``, ``daemon-reload``, a reload hand-off (typed through: the bridge), a
``kill -9`` of the host while a hand-off's bridge serves the typist, restart and ``kill -9`` of
clowder-control, for user units the re-exec of the user manager that a systemd upgrade
triggers (SIGRTMIN+25 to ``user@UID.service``, what Debian's systemd postinst sends),
big pastes into a reading program, and issue 12's hostile neighbours: a client flooding
backlog requests it never reads, one flooding clowder-control's file service the same
way, a session printing escape-sequence bombs at the largest size, and one user's
sessions with the longest names and command lines a spawn takes, enough for a session
list longer than a frame (ps must list every one whole, in pages), renamed at once by
several clients and the host killed right after (every rename answered is kept), and
for system units another user's 300 sessions that end at once, past the 256 ended ones
the host keeps (the run's own ends must stay); spawns whose connection the host closes
mid-way on a bad frame (none may stay starting); and a reboot
(issue 17): a nested box (tests/rebootbox.py), booted once with its state directories
kept, powered off under its own live sessions and booted again (at most every REST
seconds), and a power cut of the same box (its PID 1 killed: only the periodic saves
are there at the next boot); journald stopped for a while (a line typed meanwhile
must come back before it reads again); and a watcher's window closed while the host
writes its terminal (the host must let the terminal go).  For system units (the web view has no others),
clowder-web too, run on Debian's aiohttp as the .deb runs it: a connection pipelining one
kind of request it never reads (test_web.py's HTTP_FLOODS; up to four held), its
``kill -9`` and its restart, after each of which it must serve a fresh login and list
every counter with its pid within WEB_BACK seconds.

At the end: 0 sessions lost (same pid, still running), 0 gaps or duplicates in any
backlog, every typed line echoed exactly once, every paste whole (sha256), every exit
code delivered, every kind of event thrown at least once, the daemons' memory (the
host's, clowder-control's, clowder-web's) within a bound, and after each reboot: every
session of the previous boot listed as ended by it, its saved history holding the last
line noted before the poweroff without gap or duplicate, the redrawn screen saved whole
and coloured, nothing crossed, the agent running again through its resume command,
earlier boots' saved sessions still listed.
The counts of each scope are one ``soak-report`` JSON line in pytest's closing summary
(of ``make test`` too); docs/bench.md keeps a long run's.

A new failure mode found elsewhere becomes one more entry in EVENTS.
"""

from __future__ import annotations

import collections
import concurrent.futures
import fcntl
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import time

import pytest

import clowder_wire as P
from conftest import PYTHON, SUMMARY, ensure_user, poll, wait_for
from ctl.client import Client
from rebootbox import KEYS as REBOOT_KEYS, RebootBox
from test_attach import _catches, _descendant, _holds, attach  # noqa: F401  (the fixture)
from test_control import COUNTER, Control, agent_yaml
from test_hostile_gone import spawn_then_bad_frame
from test_hostile_screen_memory import coloured
from test_standby import current_standby, is_standby, ready_standby
from test_watchdog import timespan
from test_web import (HTTP_FLOODS, _Connections, _on_debians_aiohttp, _remove_web_drop_in,
                      get, login)

SECONDS = float(os.environ.get("CLOWDER_SOAK_SECONDS", "75"))
SEED = int(os.environ.get("CLOWDER_SOAK_SEED", str(int(time.time()))))
ONLY = {e for e in os.environ.get("CLOWDER_SOAK_EVENTS", "").split(",") if e}
COUNTERS = 10
PASTE_BYTES = int(os.environ.get("CLOWDER_SOAK_PASTE_BYTES", 1 << 20))
# The terminal models' scrollback budget of the run's host (ptyhostd --screen-memory).
# At its default, MemTotal/16 (1.5 GiB on a 24 GiB machine), the counters' models each
# grow to the 16 MiB ceiling: 600 s runs peaked at 196-264 MiB, 178 of 196 anonymous
# (2026-12-08), so the bound below held only by luck; with this budget, 98 MiB.
SCREEN_MEMORY = 64 << 20
# Peak resident memory each daemon may reach during the run.  The host's: its base
# (~40 MiB: the standby's imports and engine, 24-26, and its threads and sessions), the
# scrollback budget and at most 2 MiB more a model past it (a share never goes under
# screenmemory.FLOOR: ~20 models here), each model's screen (~1 MiB; 5 at the bomb's
# 500x500), the ring pages it has mapped (<= 6 MiB seen) and four clients that never
# read (a few MiB each: test_hostile_hoard.py).
HOST_RSS_BOUND = 192 << 20
CONTROL_RSS_BOUND = 192 << 20
# The host's standby (ptyhostd/standby.py): the host's imports, the screen engine
# loaded (24-26 MiB measured) and a copy of its fds, no session's model or ring mapped.
STANDBY_RSS_BOUND = 96 << 20
# clowder-web's (system scope, on Debian's aiohttp 3.8): its base and the floods held
# (WEB_FLOODS, each held by webd/gate.py to 4 requests ahead and one read).  Measured
# 31.4-44.6 MiB, 50.3 with four of the largest requests' floods (login-big) held; with
# the Gate's MAX_AHEAD lifted, 401.5 MiB after eight floods.
WEB_RSS_BOUND = 128 << 20
# Seconds an event kind rests after it was thrown before it is thrown again: a reboot
# takes seconds (a poweroff, a boot, the checks), and a run of them would be the run.
REST = {"reboot": 20.0, "power-cut": 20.0, "long-listing": 10.0, "many-ends": 10.0,
        "crowd": 10.0}
# The web view's events (clowder-web exists for the system scope only); after each,
# clowder-web must serve a fresh login and list every counter within WEB_BACK seconds.
WEB_EVENTS = frozenset({"web-flood", "web-kill-9", "web-restart"})
WEB_BACK = 30.0
WEB_FLOODS = 4  # connections flooding clowder-web held at once, the oldest leaving
WEB_FLOOD_LIMIT = 32 << 20  # what one sends at most (as the host's floods)
WEB_FLOOD_SECONDS = 5.0  # and for how long (a flood of 401s is read as it is answered)

# "long-listing": one user's sessions with the longest names (200 characters, 12 bytes
# of JSON an emoji) and command lines (MAX_ARGV_BYTES) a spawn takes, so many that the
# list of sessions is longer than a frame (test_hostile_listing.py); they are renamed
# at once over several clients (the manifest's rewrites coalesced, off the loop:
# test_hostile_manifest.py), then the host is killed: every rename answered is kept.
LONG_NAME = "\U0001f600" * 190
LONG_ARGS = ["y" * 8000] * 4
LONG_SESSIONS = 32  # ~35 KB each as listed: ~1.1 MB, past a frame's 1 MiB
LONG_RENAMERS = 4  # clients renaming them at once

# "many-ends" (system scope): another user's sessions that end at once, more than the
# 256 ended sessions the host keeps for all users: they push out only that user's own
# ends, never the run's (the exit events' statuses, checked at the end of the run:
# test_hostile_capacity.py).
MANY_ENDS = 300
ENDS_USER, ENDS_UID = "soak-ends", 2050

# "crowd" (system scope): another user's sessions all printing coloured text as fast as
# their models follow, for a few seconds, while the run types and snapshots its own: the
# screen pool serves requests first and users in turn, and the scrollback budget is
# split by user (test_hostile_screen_pool.py, test_hostile_screen_memory.py).
CROWD = 8  # each may hold an 8 MB model and a 4 MiB ring: within HOST_RSS_BOUND
CROWD_SECONDS = 3.0
CROWD_USER, CROWD_UID = "soak-crowd", 2051
CROWD_FILE = f"/tmp/soak-crowd-{os.getpid()}.bin"  # what they print, made once a run

# "spawn-cut": spawns whose connection the host closes mid-way, on a bad frame sent once
# the spawn is in the host's table: none may stay `starting` (test_hostile_gone.py).
SPAWN_CUTS = 10

# Typed lines come back once each: the tty's echo is off, the program prints them.
ECHO = ("stty -echo; exec " + PYTHON + " -c 'import sys\n"
        "for line in sys.stdin: print(\"got\", line.strip(), flush=True)'")


def counter(tag: str) -> list[str]:
    return [PYTHON, "-c", COUNTER.replace("{TAG}", tag)]


def contiguous(data: str, tag: str) -> tuple[int, int]:
    """(lines held, gaps or duplicates) of ``tag``'s numbered lines in a backlog."""
    numbers = [int(n) for n in re.findall(rf"^{re.escape(tag)}(\d+)\r$", data, re.M)]
    bad = sum(1 for a, b in zip(numbers, numbers[1:]) if b != a + 1)
    return len(numbers), bad


def rss_parts(pid: int) -> dict[str, float]:
    """``pid``'s resident memory by kind, MiB: anonymous (the heap, the terminal models)
    and shared memory (the backlog rings it has mapped, memfds)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: round(int(v.split()[0]) / 1024, 1) for k, v in
                    (line.split(":", 1) for line in f) if k in ("RssAnon", "RssShmem")}
    except (FileNotFoundError, ProcessLookupError):
        return {}


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * 4096
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0


def never_reading_client(host, sid: str) -> socket.socket:
    """A client that attaches (raw bytes from the oldest held), asks for the backlog and
    never reads a byte of what it is sent."""
    import clowder_wire as P
    sock = greeted_client(host, "soak never-reads")
    for _ in range(50):
        sock.sendall(P.encode(P.GetBacklog(session=sid)))
    sock.sendall(P.encode(P.Attach(session=sid, replay=1 << 30)))
    return sock


def flooding_client(host, sid: str, limit: int = 32 << 20) -> socket.socket:
    """Issue 12's hoarder: GetBacklog after GetBacklog of a busy session, never reading,
    until the host stops reading it (or ``limit`` bytes of requests)."""
    import clowder_wire as P
    sock = greeted_client(host, "soak flood")
    sock.setblocking(False)
    frame, sent = P.encode(P.GetBacklog(session=sid)) * 256, 0
    view = memoryview(frame)
    while sent < limit:
        try:
            n = sock.send(view)
        except BlockingIOError:
            break  # the host stopped reading us: the bound holds
        sent += n
        view = view[n:] or memoryview(frame)
    return sock


def service_flooding_client(host, agent: str, limit: int = 32 << 20) -> socket.socket:
    """Issue 12's hoarder on clowder-control's services: every stream (64) asks the file
    service for ``agent``'s listing over and over and nothing is ever read or
    acknowledged, until clowder-control stops reading it (or ``limit`` bytes)."""
    import clowder_wire as P
    from test_ending import control_socket
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(control_socket(host))
    sock.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client="soak service flood")))
    asks = P.encode(P.FileList(agent=agent)) * 500
    frame = b"".join(P.encode(P.OpenStream(stream=n, service="file")) +
                     P.encode(P.StreamData(stream=n, data=asks))
                     for n in range(1, P.MAX_STREAMS + 1))
    sock.setblocking(False)
    view, sent = memoryview(frame), 0
    while sent < limit:
        try:
            n = sock.send(view)
        except BlockingIOError:
            break  # clowder-control stopped reading us: the bound holds
        except (BrokenPipeError, ConnectionResetError):
            break  # it ended the connection (or restarted, another event): also fine
        sent += n
        view = view[n:] or memoryview(frame)
    return sock


def greeted_client(host, name: str) -> socket.socket:
    import clowder_wire as P
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if host.scope == "user":
        # The user host takes only its own user's connections: connect as that user.
        os.seteuid(host.uid)  # SO_PEERCRED records the effective uid at connect()
        try:
            sock.connect(host.socket)
        finally:
            os.seteuid(0)
    else:
        sock.connect(host.socket)
    sock.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION, client=name)))
    return sock


def web_flooding_client(kind: str, cookie: str, sid: str) -> _Connections:
    """A connection to clowder-web pipelining one request kind of test_web.py's
    HTTP_FLOODS over and over, never reading, until clowder-web stops reading it (no
    progress for a second: its answers fill the socket and the Gate holds the rest),
    closes it, or it has sent WEB_FLOOD_LIMIT bytes or for WEB_FLOOD_SECONDS.  Refusals
    are short answers: clowder-web may parse many before they fill the socket."""
    conns = _Connections(1, HTTP_FLOODS[kind](cookie, sid))
    try:
        conns.run(WEB_FLOOD_LIMIT, stall=1.0, seconds=WEB_FLOOD_SECONDS)
    except BaseException:
        conns.close()
        raise
    return conns


def typed_trace(got: list[str], trace: list[tuple[str, int]]) -> dict:
    """What to look at when typed lines came back twice or out of order: the lines
    repeated, the echo around the first line that came back out of order, and the
    events thrown within 10 lines of typing of it."""
    nums = [int(t[1:]) for t in got]
    repeated = sorted(n for n, k in collections.Counter(nums).items() if k > 1)
    first = next((i for i in range(1, len(nums)) if nums[i] <= nums[i - 1]), None)
    at = nums[first] if first is not None else (repeated[0] if repeated else 0)
    return {"repeated": repeated[:20],
            "echoed_around": nums[max(0, (first or 0) - 6):(first or 0) + 6],
            "events_near": [(name, typed) for name, typed in trace if abs(typed - at) <= 10]}


class Soak:
    """The workload, the events, and what is counted."""

    def __init__(self, host, control: Control, attach):
        self.host = host
        self.control = control
        self.attach = attach
        self.rng = random.Random(SEED)
        self.counts: dict[str, int] = {}
        self.failed_events: list[str] = []
        self.pastes: list[tuple[str, str, str]] = []  # (sid, file, sha256)
        self.exits: dict[str, int] = {}  # sid -> the code it exits with
        self.long_locks: list[tuple[int, str]] = []  # the long-listing events' locks
        self.typed = 0
        # (event, lines typed before it): where in the typing each event fell, for a
        # verdict that finds typed lines repeated or out of order (which lines, beside
        # which events).
        self.trace: list[tuple[str, int]] = []
        self.stalled: list[socket.socket] = []  # the client that never reads (start)
        self.floods: list[socket.socket] = []  # hoarders that never read (issue 12)
        self.service_floods: list[socket.socket] = []  # the same, on clowder-control
        self.web_floods: list[_Connections] = []  # the same, on clowder-web
        self.web = False  # clowder-web installed (the web events are thrown)
        self.web_cookie = ""  # root's login from clowder-web's last check
        self.peak = {"host": 0, "control": 0}
        self.peak_after: dict[str, list] = {}  # daemon -> [the event before its peak, s]
        self.peak_parts: dict[str, float] = {}  # the host's peak: RssAnon, RssShmem (MiB)
        self.started = time.monotonic()  # the run's, reset when run() begins
        self.box: RebootBox | None = None  # the machine the reboot event powers off
        self.watchdog = timespan(host.show("clowder-ptyhost.service",
                                           "WatchdogUSec")["WatchdogUSec"])

    # --- the workload -----------------------------------------------------------------

    def start(self) -> None:
        h = self.host
        if {"reboot", "power-cut"} & set(self.events()):
            self.box = RebootBox()  # set first: stop() cleans up a box that failed to boot
            self.box.start()
        if WEB_EVENTS & set(self.events()):
            self.web = True  # set first: stop() stops what was installed
            h.run([PYTHON, "-m", "ctl", "install-units", "--system", "--web",
                   "--exec-start", f"{PYTHON} -m ptyhostd"])  # as test_web.py's fixture
            # As the .deb runs it: on aiohttp 3.8 only webd/gate.py bounds a pipelining
            # connection (the venv's 3.14 stops at 32 requests by itself).
            _on_debians_aiohttp(h)
            self.peak["web"] = 0
        self.counters = {h.spawn(*counter(f"c{i}-"), name=f"soak-c{i}"): f"c{i}-"
                         for i in range(COUNTERS)}
        self.pids = {sid: h.ps()[sid]["pid"] for sid in self.counters}
        self.control.write_config("agents:\n" + agent_yaml(
            "soak", counter("agent-"), self.control.workdir))
        agent = self.control.wait_running(["soak"])["soak"]
        self.agent = (agent["session"], agent["pid"])
        self.echo = h.spawn("sh", "-c", ECHO, name="soak-echo")
        self.typist = self.attach(self.echo)
        self.typist.wait_raw()
        self.stalled = [never_reading_client(h, next(iter(self.counters)))]
        if self.web:
            self.web_serves("its installation")

    def type_lines(self, n: int) -> None:
        for _ in range(n):
            self.typed += 1
            try:
                self.typist.type(f"t{self.typed}\r".encode())
            except OSError:
                pytest.fail("the typing client's terminal is gone (clowderctl attach "
                            f"exited {self.typist.proc.poll()}): "
                            f"{bytes(self.typist.out[-500:])!r}")
        self.typist._read(0)

    def sample(self, after: str) -> None:
        """Each daemon's resident memory now, right after the event ``after``; a new
        peak notes that event and when (the report's ``peak_after``: a peak over its
        bound names what preceded it)."""
        units = [("host", "clowder-ptyhost.service"), ("control", "clowder-control.service")]
        if self.web:
            units.append(("web", "clowder-web.service"))
        pids = {name: int(self.host.show(unit, "MainPID")["MainPID"]) for name, unit in units}
        pids["standby"] = current_standby(self.host)  # 0 if it took over or was killed
        for name, pid in pids.items():
            value = rss(pid) if pid else 0
            if value > self.peak.get(name, 0):
                self.peak[name] = value
                self.peak_after[name] = [after, round(time.monotonic() - self.started)]
                if name == "host":  # what it was: the heap and models, or mapped rings
                    self.peak_parts = rss_parts(pid)

    # --- the events -------------------------------------------------------------------

    def _ctl_unit(self, *args) -> None:
        self.host.systemctl(*args)

    def restart(self) -> None:
        self.host.restart()

    def kill9(self) -> None:
        standby = current_standby(self.host)
        self._taken_over(standby, self.host.kill9())

    def _taken_over(self, standby: int, new: int) -> None:
        """Count a kill -9 taken over by the standby (ptyhostd/standby.py) or, with none
        ready at that moment, served by a restart of the unit: nothing may be lost
        either way."""
        kind = "standby-took-over" if standby and new == standby else "unit-restarted"
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def standby_kill9(self) -> None:
        """kill -9 of the host's standby: the host starts another, which must hold the
        whole copy again (a later kill -9 of the host is taken over by it)."""
        standby = ready_standby(self.host)
        os.kill(standby, signal.SIGKILL)
        ready_standby(self.host, other_than=standby)

    def typing_kill9(self) -> None:
        """kill -9 of the host while a burst of typed lines flows through it (the other
        events type, rest, then act): a line's bytes and their record must not part
        (ptyhostd/inputseq.py), or the line is typed twice after the restart (ci82)."""
        pid = self.host.main_pid()
        standby = current_standby(self.host)
        self.type_lines(self.rng.randrange(10, 40))
        self.typist._read(self.rng.uniform(0.0, 0.01))  # the random moment in the flow
        os.kill(pid, signal.SIGKILL)
        self._taken_over(standby, self.host.wait_ready(pid))

    def freeze(self) -> None:
        pid = self.host.main_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            if self.watchdog and self.rng.random() < 0.3:
                # Frozen until systemd's watchdog replaces it, as a wedged host would be.
                self.type_lines(3)
                self.host.wait_ready(pid, timeout=self.watchdog + 30)
                self.counts["watchdog-replaced"] = self.counts.get("watchdog-replaced", 0) + 1
                return
            self.type_lines(3)
            time.sleep(self.rng.uniform(0.05, 1.5))  # the random length of the freeze
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def journal_stall(self) -> None:
        """journald stops reading for a while (busy on a slow disk, restarting in a
        systemd upgrade): a line typed through clowderctl attach must come back before it
        reads again (the daemons' log lines wait in their writer threads, not in the
        event loop: tests/test_hostile_journal.py).  Nothing here starts a process while
        it is stopped: runuser's PAM would wait on syslog."""
        stall = ["systemctl", "kill", "-s", "SIGSTOP", "systemd-journald.service"]
        subprocess.run(stall, check=True)
        try:
            # The stall lasts as long as a random number of lines take to come back, one
            # after another: each must, while journald does not read.
            for _ in range(self.rng.randrange(1, 6)):
                self.type_lines(1)
                self.typist.expect(re.compile(rb"(?<![0-9])t%d(?![0-9])" % self.typed),
                                   timeout=10, what=f"line t{self.typed}, typed while "
                                   f"journald did not read")
        finally:
            subprocess.run(["systemctl", "kill", "-s", "SIGCONT", "systemd-journald.service"],
                           check=True)

    def _manager_image(self) -> bytes:
        """The manager's auxiliary vector: ASLR makes it differ after every exec, so a
        re-exec has happened once it changed (the pid and the unit timestamps do not)."""
        pid = 1 if self.host.scope == "system" else int(subprocess.run(
            ["systemctl", "show", "-p", "MainPID", "--value", f"user@{self.host.uid}.service"],
            capture_output=True, check=True).stdout)
        with open(f"/proc/{pid}/auxv", "rb") as f:
            return f.read()

    def _reexecuted(self, before: bytes) -> None:
        wait_for(lambda: self._manager_image() != before and self.host.systemctl(
            "show", "-p", "Version", check=False).returncode == 0, 30,
            "the service manager to re-execute and answer again")

    def reexec(self) -> None:
        before = self._manager_image()
        self.host.systemctl("daemon-reexec")
        self._reexecuted(before)

    def reload_units(self) -> None:
        self.host.systemctl("daemon-reload")

    def user_manager_reexec(self) -> None:
        # What Debian's systemd postinst does to every user manager on an upgrade; it
        # returns at once, the re-exec follows.
        before = self._manager_image()
        subprocess.run(["systemctl", "kill", "--kill-who=main", "--signal=SIGRTMIN+25",
                        f"user@{self.host.uid}.service"], check=True)
        self._reexecuted(before)

    def _reload(self) -> subprocess.Popen:
        scope = ["--user"] if self.host.scope == "user" else []
        return subprocess.Popen(self.host._as(["systemctl", *scope, "reload",
                                               "clowder-ptyhost.service"]),
                                env=self.host.env, cwd="/", stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def handoff(self) -> None:
        pid = self.host.main_pid()
        reload = self._reload()
        # Typed while the new code is checked, while the bridge serves (ptyhostd/bridge.py)
        # and after: every line echoed exactly once, as always.
        while reload.poll() is None:
            self.type_lines(1)
            self.typist._read(self.rng.uniform(0.0, 0.05))
        # It returns once the new code serves (ptyhostd --hand-off); the wait is a check.
        assert reload.returncode == 0, f"the reload failed ({reload.returncode})"
        wait_for(lambda: self.host.show("clowder-ptyhost.service", "ActiveState",
                                        "MainPID") == {"ActiveState": "active",
                                                       "MainPID": str(pid)},
                 30, "the host to be active again after the hand-off")

    def _bridge(self, pid: int) -> bool:
        """Whether the host's hand-off bridge is there (a child that is not the check
        nor the standby)."""
        try:
            children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        except OSError:
            return False
        for child in children:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"--check-handoff" not in f.read() and not is_standby(int(child)):
                        return True
            except OSError:
                pass
        return False

    def handoff_kill9(self) -> None:
        """kill -9 of the host while its hand-off's bridge serves the typing client (the
        new code starting): systemd ends the bridge too and restarts the host from the FD
        store; the typed lines are echoed once, nothing is lost."""
        pid = self.host.main_pid()
        reload = self._reload()
        seen = poll(lambda: self._bridge(pid) or reload.poll() is not None, 30, 0.001)
        if seen and self._bridge(pid):
            self.counts["bridge-killed"] = self.counts.get("bridge-killed", 0) + 1
            self.type_lines(self.rng.randrange(1, 4))
            time.sleep(self.rng.uniform(0.0, 0.1))  # the random moment in the new code's start
        os.kill(pid, signal.SIGKILL)
        reload.wait(60)  # it fails: the host it waited for died
        self.host.wait_ready(pid)

    def control_restart(self) -> None:
        self.host.systemctl("restart", "clowder-control.service")

    def control_kill9(self) -> None:
        pid = int(self.host.show("clowder-control.service", "MainPID")["MainPID"])
        if pid:
            os.kill(pid, signal.SIGKILL)

    def paste(self) -> None:
        n = len(self.pastes)
        path = f"/tmp/soak-paste-{os.getpid()}-{n}"
        data = self.rng.randbytes(PASTE_BYTES)
        sid = self.host.spawn("sh", "-c", f"stty raw -echo; echo paste-ready; "
                              f"exec head -c {len(data)} > {path}", name=f"soak-paste{n}")
        # Bytes sent before stty has made the terminal raw would be line-edited.
        wait_for(lambda: b"paste-ready" in self.host.backlog(sid), 30,
                 f"paste sink {sid} to make its terminal raw")
        # The real client, as a user pipes a file in; the ring and the pty carry it.
        self.host.ctl("send", sid, input=data)
        self.pastes.append((sid, path, hashlib.sha256(data).hexdigest()))

    def flood(self) -> None:
        """A client floods backlog requests and never reads; the oldest of five leaves
        (its memory must come back for the peak bound to hold)."""
        sid = self.rng.choice(sorted(self.counters))
        self.floods.append(flooding_client(self.host, sid))
        if len(self.floods) > 4:
            self.floods.pop(0).close()

    def service_flood(self) -> None:
        """A client floods clowder-control's file service and never reads (the hoard of
        file and vcs answers found in stop 22); the older of two leaves."""
        self.service_floods.append(service_flooding_client(self.host, "soak"))
        if len(self.service_floods) > 2:
            self.service_floods.pop(0).close()

    def web_pid(self) -> int:
        return int(self.host.show("clowder-web.service", "MainPID")["MainPID"])

    def web_serves(self, after: str, old_pid: int = 0) -> None:
        """clowder-web serves again within WEB_BACK: (as a process other than
        ``old_pid``) a fresh token from `clowderctl web` logs root in, and /api/sessions
        lists every counter session with its pid.  Root's new cookie is kept."""
        last = ["nothing tried"]

        def serves() -> bool:
            r = self.host.ctl("web", "--json", check=False, timeout=15)
            if r.returncode:
                last[0] = f"clowderctl web exited {r.returncode}: {r.stderr.decode()[-300:]}"
                return False
            pid = self.web_pid()
            if old_pid and pid in (0, old_pid):
                last[0] = f"clowder-web's main pid is {pid} (before: {old_pid})"
                return False
            try:
                cookie = login(json.loads(r.stdout)["url"])
                answer, body = get("/api/sessions", cookie)
                listed = {s["id"]: s["pid"] for s in json.loads(body)["sessions"]} \
                    if answer.status == 200 else {}
            except (OSError, http.client.HTTPException, AssertionError, ValueError,
                    KeyError) as exc:
                last[0] = f"{type(exc).__name__}: {exc}"
                return False
            missing = {sid: pid for sid, pid in self.pids.items() if listed.get(sid) != pid}
            if answer.status != 200 or missing:
                last[0] = (f"/api/sessions answered {answer.status}, the counters not "
                           f"listed with their pids: {sorted(missing)} {body[:300]!r}")
                return False
            self.web_cookie = cookie
            return True

        if not poll(serves, WEB_BACK, 0.2):
            units = {u: self.host.show(u, "ActiveState", "Result") for u in
                     ("clowder-web.socket", "clowder-web.service")}
            pytest.fail(f"clowder-web did not serve a login and every counter within "
                        f"{WEB_BACK:g} s after {after}: {last[0]} (units: {units})")

    def web_flood(self) -> None:
        """A connection pipelines one kind of request at clowder-web and never reads
        (what grew it without bound on aiohttp 3.8 before webd/gate.py), held to the end;
        the oldest of five leaves.  clowder-web must serve others meanwhile, and its
        peak memory stay under WEB_RSS_BOUND."""
        kind = self.rng.choice(sorted(HTTP_FLOODS))
        conns = web_flooding_client(kind, self.web_cookie,
                                    self.rng.choice(sorted(self.counters)))
        self.web_floods.append(conns)
        if len(self.web_floods) > WEB_FLOODS:
            self.web_floods.pop(0).close()
        self.web_serves(f"a {kind} flood ({conns.sent >> 10} KiB taken)")

    def web_kill9(self) -> None:
        pid = self.web_pid()
        assert pid, "clowder-web is not running"
        os.kill(pid, signal.SIGKILL)
        self.web_serves("its kill -9", pid)  # socket-activated: the next one starts it

    def web_restart(self) -> None:
        pid = self.web_pid()
        self.host.systemctl("restart", "clowder-web.service")
        self.web_serves("its restart", pid)

    def bomb(self) -> None:
        """A session at the largest square size prints escape-sequence bombs (a huge
        cursor move, a coloured erase, a huge scroll); its snapshot answers, it exits
        with its code."""
        code = self.rng.randrange(1, 120)
        out = ("\x1b[41m\x1b[2J" + "\x1b[20000000C x" * 5 + "\x1b[99999999999999999999S"
               + "\x1b[1;500r\x1b[9999L" + "bomb-done\n")
        # It runs until its snapshot is answered, then is told to exit (a line typed).
        sid = self.host.spawn(PYTHON, "-c", f"import sys; sys.stdout.write({out!r}); "
                              f"sys.stdout.flush(); sys.stdin.readline(); sys.exit({code})",
                              name=f"soak-bomb{len(self.exits)}", size="500x500")
        self.exits[sid] = code
        wait_for(lambda: b"bomb-done" in self.host.backlog(sid), 30, f"bomb {sid} printed")
        r = self.host.ctl("snapshot", sid, check=False, timeout=60)
        assert r.returncode == 0, f"the snapshot of bomb {sid}: {r.stderr!r}"
        self.host.ctl("send", sid, "\r")

    def exiter(self) -> None:
        code = self.rng.randrange(1, 120)
        delay = self.rng.uniform(0.0, 2.0)
        sid = self.host.spawn("sh", "-c", f"sleep {delay:.2f}; exit {code}",
                              name=f"soak-exit{len(self.exits)}")
        self.exits[sid] = code

    def long_listing(self) -> None:
        """Sessions with the longest names and command lines a spawn takes, enough for
        a list longer than a frame: ps lists every one, whole (in pages), and
        clowder-control's status answers; then they end and are removed."""
        # Each session's program waits for a lock held here (flock(1)): they all end
        # when it is let go.
        path = f"/tmp/soak-long-{os.getpid()}-{len(self.long_locks)}"
        lock = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        os.fchmod(lock, 0o644)  # a user unit's sessions open it too
        fcntl.flock(lock, fcntl.LOCK_EX)
        self.long_locks.append((lock, path))
        argv = ["flock", "--shared", path, "true", *LONG_ARGS]
        sids = [self.host.spawn(*argv, name=f"{i:02d}{LONG_NAME}")
                for i in range(LONG_SESSIONS)]
        listed = self.host.ps()
        missing = [sid for sid in sids if listed.get(sid, {}).get("argv") != argv]
        assert not missing, f"ps left out (or cut) {len(missing)} of {len(sids)} sessions"
        status = json.loads(self.host.ctl("status", "--json", check=False).stdout or "{}")
        assert status.get("host", {}).get("answering"), f"status: {status.get('host')}"
        renamed = {sid: f"{i:02d}r{LONG_NAME}" for i, sid in enumerate(sids)}
        with concurrent.futures.ThreadPoolExecutor(LONG_RENAMERS) as pool:
            done = list(pool.map(lambda sid: self.host.ctl("rename", sid, renamed[sid],
                                                           check=False), sids))
        failed = [r.stderr[-200:] for r in done if r.returncode != 0]
        assert not failed, f"{len(failed)} renames failed: {failed[:2]}"
        self.host.kill9()  # right after the last answer: each is in the manifest
        listed = self.host.ps()
        lost = [sid for sid in sids if listed.get(sid, {}).get("name") != renamed[sid]]
        assert not lost, f"{len(lost)} of {len(sids)} answered renames lost by a kill -9"
        fcntl.flock(lock, fcntl.LOCK_UN)
        wait_for(lambda: all(self.host.ps()[sid]["state"] == "exited" for sid in sids), 30,
                 "the long-listing sessions to end")
        self.host.ctl("rm", *sids)

    def many_ends(self) -> None:
        # One of the run's own ends first, older than every one of the flood's and
        # unseen: its status is asked for at the end of the run, like the exit events'.
        code = self.rng.randrange(1, 120)
        mine = self.host.spawn("sh", "-c", f"exit {code}", name=f"soak-ends{len(self.exits)}")
        self.exits[mine] = code
        wait_for(lambda: self.host.ps()[mine]["state"] == "exited", 20,
                 "the run's own session to end before the flood of ends")
        ensure_user(ENDS_USER, ENDS_UID)
        with Client(self.host.socket, timeout=120) as c:
            sids = {c.request(P.Spawn(argv=["true"], user=ENDS_USER, cwd="/"),
                              P.SessionInfo).session["id"] for _ in range(MANY_ENDS)}

        def ended():
            ps = self.host.ps()  # root's: it marks nobody's end seen
            kept = [s for s in ps.values() if s["id"] in sids]
            return kept if all(s["state"] != "running" for s in kept) else None
        kept = wait_for(ended, 60, f"{ENDS_USER}'s {MANY_ENDS} sessions to end")
        assert len(kept) < MANY_ENDS, "no ended session was let go: the cap was not passed"
        self.host.ctl("rm", *[s["id"] for s in kept])

    def crowd(self) -> None:
        ensure_user(CROWD_USER, CROWD_UID)
        path = CROWD_FILE
        if not os.path.exists(path):
            with open(path + ".tmp", "wb") as f:
                f.write(coloured(3000))
            os.chmod(path + ".tmp", 0o644)
            os.rename(path + ".tmp", path)
        with Client(self.host.socket, timeout=60) as c:
            sids = [c.request(P.Spawn(argv=["sh", "-c", f"while :; do cat {path}; done"],
                                      user=CROWD_USER, cwd="/"), P.SessionInfo).session["id"]
                    for _ in range(CROWD)]
        try:
            end = time.monotonic() + CROWD_SECONDS
            while time.monotonic() < end:
                self.type_lines(1)
                shown = self.host.ctl("snapshot", self.echo, check=False)
                assert shown.returncode == 0, \
                    f"the run's snapshot beside {CROWD} floods: {shown.stderr[-200:]!r}"
        finally:
            for sid in sids:
                self.host.ctl("kill", sid, check=False)
        wait_for(lambda: all(self.host.ps()[sid]["state"] not in ("starting", "running") for sid in sids),
                 30, f"{CROWD_USER}'s floods to end")
        self.host.ctl("rm", *sids)

    def terminal_hangup(self) -> None:
        """A watcher's window closes while the host writes its terminal (its pty's
        master, ptyhostd/terminal.py): the watcher ends, the host lets the terminal go,
        and nothing of the sessions is lost (the verdict)."""
        sid = self.rng.choice(sorted(self.counters))
        w = self.attach(sid, "--read-only", separate_stderr=True)
        w.expect(re.compile(self.counters[sid].encode() + rb"\d+"),
                 what="the watcher's first output")
        pid = self.host.main_pid()
        wait_for(lambda: _holds(pid, w.tty), 15, f"the host to write the watcher's {w.tty}")
        os.close(w.master)
        w.master = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)  # closed by w.close()
        wait_for(lambda: w.proc.poll() is not None, 15, "the watcher to end with its window")
        wait_for(lambda: not _holds(pid, w.tty), 15, f"the host to let {w.tty} go")

    def client_suspend(self) -> None:
        """A watcher run by a shell with job control gets SIGTSTP: it stops with its
        terminal let go (nothing of the session lands there while it is stopped), and
        `fg` attaches it again to the newer output (ctl/commands/attach.py)."""
        sid = self.rng.choice(sorted(self.counters))
        line = re.compile(self.counters[sid].encode() + rb"\d+")
        w = self.attach(sid, "--read-only", separate_stderr=True,
                        job='"$@"; echo "stopped-with-$?"; read line; fg')
        w.expect(line, what="the watcher's first output")
        pid = self.host.main_pid()
        wait_for(lambda: _holds(pid, w.tty), 15, f"the host to write the watcher's {w.tty}")
        client = wait_for(lambda: _descendant(w.proc.pid, PYTHON), 15, "the watcher's pid")
        wait_for(lambda: _catches(client, signal.SIGTSTP), 15, "the watcher to catch SIGTSTP")
        os.kill(client, signal.SIGTSTP)
        w.expect(b"stopped-with-148", what="the watcher's shell to see it stopped")
        wait_for(lambda: not _holds(pid, w.tty), 15, f"the host to let {w.tty} go")
        tail = self.host.backlog(sid)[-256:]  # (the ring may be full: its end moves on)
        wait_for(lambda: self.host.backlog(sid)[-256:] != tail, 15,
                 f"session {sid}'s output while its watcher is stopped")
        w._read(0)
        assert not line.search(w.out, w.pos), "output reached a stopped watcher's terminal"
        w.type(b"\n")  # `read line`, then `fg`
        w.expect(b"\x1bc", what="the watcher's reattach after `fg`")
        w.expect(line, what="the watcher's output after `fg`")
        os.close(w.master)  # its window closes: the watcher and its shell end
        w.master = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)  # closed by w.close()
        wait_for(lambda: w.proc.poll() is not None, 15, "the watcher's shell to end")

    def spawn_cut(self) -> None:
        before = set(self.host.ps())
        throw = self.counts.get("spawn-cut", 0)
        for i in range(SPAWN_CUTS):
            spawn_then_bad_frame(self.host.socket, f"soak-cut{throw}-{i}")

        def settled():
            new = [s for sid, s in self.host.ps().items() if sid not in before]
            return [new] if all(s["state"] not in ("starting", "running") for s in new) \
                else None
        new = wait_for(settled, 30, "the cut spawns to end, none left starting")[0]
        if new:
            self.host.ctl("rm", *[s["id"] for s in new])

    def reboot(self) -> None:
        self.box.reboot()

    def power_cut(self) -> None:
        self.box.reboot(cut=True)

    def events(self) -> dict:
        ev = {"restart": self.restart, "kill-9": self.kill9, "sigstop": self.freeze,
              "typing-kill-9": self.typing_kill9, "standby-kill-9": self.standby_kill9,
              "daemon-reexec": self.reexec, "daemon-reload": self.reload_units,
              "handoff": self.handoff, "handoff-kill-9": self.handoff_kill9,
              "control-restart": self.control_restart,
              "control-kill-9": self.control_kill9, "paste": self.paste,
              "exit": self.exiter, "flood": self.flood, "bomb": self.bomb,
              "service-flood": self.service_flood, "reboot": self.reboot,
              "power-cut": self.power_cut, "journal-stall": self.journal_stall,
              "long-listing": self.long_listing, "spawn-cut": self.spawn_cut,
              "terminal-hangup": self.terminal_hangup,
              "client-suspend": self.client_suspend}
        if self.host.scope == "user":
            ev["user-manager-reexec"] = self.user_manager_reexec
        else:  # the web view has system units only
            ev.update({"web-flood": self.web_flood, "web-kill-9": self.web_kill9,
                       "web-restart": self.web_restart})
            # A user manager's host runs every session as its own user: one uid.
            ev["many-ends"] = self.many_ends
            ev["crowd"] = self.crowd
        if ONLY:  # to replay one failure mode; the default run throws every kind
            ev = {k: v for k, v in ev.items() if k in ONLY}
        return ev

    # --- the run ----------------------------------------------------------------------

    def run(self) -> None:
        events = self.events()
        names = sorted(events)
        self.started = time.monotonic()
        deadline = self.started + SECONDS
        order: list[str] = []
        thrown: dict[str, float] = {}  # kind -> when it was last over
        while time.monotonic() < deadline or len(set(order)) < len(names):
            # Every kind at least once (first a shuffled round), then at random among
            # those not resting (REST).
            pending = [n for n in names if n not in order]
            now = time.monotonic()
            ready = [n for n in names if now - thrown.get(n, -1e9) >= REST.get(n, 0)]
            if not (len(order) < len(names) and pending) and not ready:
                # Every kind is resting (a replay of one kind): type, and wait up to
                # 0.5 s for the echo.
                self.type_lines(1)
                self.typist._read(0.5)
                continue
            name = self.rng.choice(pending) if len(order) < len(names) and pending \
                else self.rng.choice(ready)
            order.append(name)
            self.trace.append((name, self.typed))
            self.type_lines(self.rng.randrange(1, 6))
            time.sleep(self.rng.uniform(0.0, 0.4))  # the random moment
            try:
                events[name]()
            except BaseException as exc:  # pytest.fail too: counted, then re-raised
                self.failed_events.append(f"{name}: {exc}")
                raise
            self.counts[name] = self.counts.get(name, 0) + 1
            thrown[name] = time.monotonic()
            self.type_lines(self.rng.randrange(1, 4))  # typed right after the event
            self.sample(name)

    # --- the verdict ------------------------------------------------------------------

    def verdict(self) -> dict:
        h = self.host
        h.wait_ready()
        self.control.wait_running(["soak"], timeout=60)
        report = {"scope": h.scope, "seed": SEED, "seconds": SECONDS, "events": self.counts,
                  "typed": self.typed, "pastes": len(self.pastes), "exits": len(self.exits),
                  "peak_rss_mib": {k: round(v / (1 << 20), 1) for k, v in self.peak.items()},
                  "peak_after": self.peak_after, "host_peak_parts_mib": self.peak_parts}
        ps = h.ps()
        report["sessions_lost"] = sum(
            1 for sid, pid in self.pids.items()
            if ps.get(sid, {}).get("pid") != pid or ps[sid]["state"] != "running")
        agent = self.control.agents()["soak"]
        report["agent_respawned"] = int((agent["session"], agent["pid"]) != self.agent)
        gaps, held = 0, 0
        for sid, tag in list(self.counters.items()) + [(self.agent[0], "agent-")]:
            n, bad = contiguous(h.backlog(sid).decode(errors="replace"), tag)
            held += n
            gaps += bad
        report["lines_checked"], report["gaps_or_duplicates"] = held, gaps
        # Every typed line, once, in order.
        want = [f"t{i}" for i in range(1, self.typed + 1)]
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = re.findall(r"got (t\d+)\r\n", h.backlog(self.echo).decode(errors="replace"))
            if len(got) >= len(want):
                break
            self.typist._read(0.2)
        report["typed_missing"] = len(set(want) - set(got))
        report["typed_duplicated"] = len(got) - len(set(got))
        report["typed_out_of_order"] = int(got != sorted(got, key=lambda t: int(t[1:])))
        if report["typed_duplicated"] or report["typed_out_of_order"]:
            report["typed_trace"] = typed_trace(got, self.trace)
        bad_pastes = 0
        for sid, path, digest in self.pastes:
            h.ctl("wait", sid, check=False, timeout=60)
            try:
                with open(path, "rb") as f:
                    bad_pastes += hashlib.sha256(f.read()).hexdigest() != digest
            except FileNotFoundError:
                bad_pastes += 1
        report["pastes_not_whole"] = bad_pastes
        wrong = 0
        for sid, code in self.exits.items():
            r = h.ctl("wait", sid, check=False, timeout=60)
            wrong += r.returncode != code
        report["exit_codes_wrong"] = wrong
        if self.box is not None:
            report.update(self.box.report())
        return report

    def stop(self) -> None:
        for sock in self.stalled + self.floods + self.service_floods + self.web_floods:
            sock.close()
        if self.web:
            self.host.systemctl("stop", "clowder-web.service", "clowder-web.socket",
                                check=False)
            _remove_web_drop_in(self.host)
        for _sid, path, _digest in self.pastes:
            if os.path.exists(path):
                os.unlink(path)
        for lock, path in self.long_locks:  # a failed long-listing's sessions end too
            os.close(lock)
            os.unlink(path)
        if os.path.exists(CROWD_FILE):
            os.unlink(CROWD_FILE)
        if self.box is not None:
            self.box.close()


def test_chaos_run_loses_nothing(host, attach):
    control = Control(host)
    host.drop_in(f"[Service]\nEnvironment=CLOWDER_BACKLOG_BYTES=67108864\n"
                 f"Environment=CLOWDER_SCREEN_MEMORY={SCREEN_MEMORY}\n")
    host.restart()
    soak = Soak(host, control, attach)
    try:
        soak.start()
        soak.run()
        report = soak.verdict()
    finally:
        soak.stop()
        for path in (control.config, control.registry, control.registry + ".prev"):
            if os.path.exists(path):
                os.unlink(path)
    SUMMARY.append("soak-report " + json.dumps(report, sort_keys=True))
    assert set(soak.counts) >= set(soak.events()), "an event kind was never thrown"
    zero = {k: report[k] for k in ("sessions_lost", "agent_respawned", "gaps_or_duplicates",
                                   "typed_missing", "typed_duplicated", "typed_out_of_order",
                                   "pastes_not_whole", "exit_codes_wrong",
                                   *[k for k in REBOOT_KEYS if k in report])}
    assert zero == dict.fromkeys(zero, 0), f"the chaos run lost something: {report}"
    assert report["lines_checked"] > COUNTERS * 100, f"too few lines to judge: {report}"
    assert soak.peak["host"] < HOST_RSS_BOUND and soak.peak["control"] < CONTROL_RSS_BOUND \
        and soak.peak.get("web", 0) < WEB_RSS_BOUND \
        and soak.peak.get("standby", 0) < STANDBY_RSS_BOUND, \
        f"daemon memory over its bound: {report}"
