"""Figure 2: restart blackout, with N sessions held by clowder, beside the bare floor.

clowder: N sessions (N-1 idle `sleep infinity` and one probe running `cat`), and the
minimal client attached to the probe.  The clock starts just before
`systemctl restart clowder-ptyhost` is launched (or just before `kill -9` of its main
PID).  The client waits for the old host to close its connection, reconnects at once
(the connection waits in the listening socket's backlog, which systemd keeps), and
timestamps every step: Welcome (the new host answers), SessionList ("ps" answered),
Attached, and the first Output byte after it typed one key ("bytes flow again", the
headline).  After each trial it checks that all N sessions are still there, running.

The floor: clowder-bench-floor.service (floor_service.py), a trivial socket-activated
Type=notify service in the same interpreter, which gets N parked pty masters back from
the FD store, sends READY=1 and echoes.  Same clock, same client steps (connect, one
byte, its echo).  Also measured at N=0 (nothing parked): the bare floor.

clowderctl: the same restart and kill -9 lived by `clowderctl attach` (the real client,
attached to the probe in a pty for the whole run): it sees its connection end, then
reconnects and reattaches by itself; once the old host has exited (its pidfd), a key is
typed into its terminal, and "bytes flow" is when the echo shows there.  No hand-off:
its old host does not exit.

A kill -9 waits first for the host's standby to be ready (ptyhostd/standby.py: a crash
long after the start, as users meet it, is taken over by the standby with no restart of
the unit; a trial it did not take over is marked as a problem).  The floor has none: it
is the exec that a crash of the host cost before it.

"hand-off": `systemctl reload clowder-ptyhost` (issue 5's in-place upgrade to the installed
code: a check run of the new code, then an exec in the same process).  Same clock and
client; the main PID stays, so systemd's exec/READY stamps do not apply.  The floor has
no hand-off; the restart floor is the reference.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import clowder
from common import (IDLE_ARGV, PtyTerminal, client_env, log, median, read_until,
                    run as sh, spawn_on_pty, wait_for)

FLOOR_SOCKET = "/run/clowder-bench-floor.sock"
FLOOR_SERVICE = "clowder-bench-floor.service"
FLOOR_COUNT = "/run/clowder-bench-floor.count"
HERE = os.path.dirname(os.path.abspath(__file__))

FLOOR_UNITS = {
    "clowder-bench-floor.socket": f"""\
[Unit]
Description=clowder bench: floor socket

[Socket]
ListenStream={FLOOR_SOCKET}
""",
    FLOOR_SERVICE: f"""\
[Unit]
Description=clowder bench: a trivial notify service (restart floor)
Requires=clowder-bench-floor.socket
After=clowder-bench-floor.socket
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
ExecStart={sys.executable} {HERE}/floor_service.py
FileDescriptorStoreMax=16384
LimitNOFILE=65536
Restart=always
RestartSec=0
""",
}


# --- the floor service ------------------------------------------------------------------


def install_floor() -> None:
    for name, text in FLOOR_UNITS.items():
        with open(f"/etc/systemd/system/{name}", "w") as f:
            f.write(text)
    sh(["systemctl", "daemon-reload"])
    sh(["systemctl", "start", "clowder-bench-floor.socket"])


def floor_pid() -> int:
    return int(sh(["systemctl", "show", "-p", "MainPID", "--value", FLOOR_SERVICE])
               .stdout.strip() or 0)


def set_floor_count(n: int) -> None:
    """Restart the floor from an empty FD store so that it parks exactly n masters."""
    sh(["systemctl", "stop", FLOOR_SERVICE])
    with open(FLOOR_COUNT, "w") as f:
        f.write(str(n))
    sh(["systemctl", "start", FLOOR_SERVICE])


class FloorClient:
    """A connection to the floor that can prove bytes flow (one byte, its echo)."""

    def __init__(self, timeout: float = 60):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(FLOOR_SOCKET)

    def echo(self) -> None:
        self.sock.sendall(b"x")
        if self.sock.recv(16) != b"x":
            raise RuntimeError("the floor service did not echo")

    def wait_closed(self) -> None:
        while self.sock.recv(4096):
            pass

    def close(self) -> None:
        self.sock.close()


# --- one trial --------------------------------------------------------------------------


def unit_times(service: str, t0: float) -> dict:
    """When, after t0 (CLOCK_MONOTONIC, as systemd's own stamps), systemd started the new
    main process and saw it READY, and (a restart) when the old run had wholly stopped, its
    standby and the cgroup's last process gone: splits a blackout into the stop, systemd's
    part and the start-up's."""
    props = ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic",
             "InactiveEnterTimestampMonotonic")
    out = sh(["systemctl", "show", service, *[f"-p{p}" for p in props]]).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    exec_start = int(values.get(props[0]) or 0) / 1e6
    ready = int(values.get(props[1]) or 0) / 1e6
    stopped = int(values.get(props[2]) or 0) / 1e6
    times = {}
    if exec_start > stopped > t0:  # a restart: the old unit's end, before the new exec
        times["stopped"] = stopped - t0
    if exec_start > t0:
        times["new_exec"] = exec_start - t0
        if ready > exec_start:
            times["ready"] = ready - t0
    return times



def _act(action: str, service: str, pid: int, t0: float) -> dict:
    """Restart, hand off (reload) or kill -9 the service; note when systemctl returns."""
    out: dict = {}
    if action == "kill -9":
        os.kill(pid, signal.SIGKILL)
        return out
    verb = "reload" if action == "hand-off" else "restart"
    proc = subprocess.Popen(["systemctl", verb, service])

    def waiter():
        proc.wait()
        out["systemctl_returned"] = time.monotonic() - t0
    threading.Thread(target=waiter, daemon=True).start()
    out["_proc"] = proc
    return out


def _retrying(connect, timeout: float = 60):
    """Connect, retrying only while the socket path is missing or refusing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect()
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def _standby_for(action: str) -> int:
    """Before a kill -9: the host's standby, once ready (a crash long after the start, as
    users meet it, is taken over by it: ptyhostd/standby.py); 0 for other actions, and
    for units without ExitType=cgroup (older trees' units, in bench/handoff_dark.py)."""
    if action != "kill -9":
        return 0
    exit_type = sh(["systemctl", "show", "-p", "ExitType", "--value", clowder.SERVICE])
    return clowder.ready_standby() if exit_type.stdout.strip() == "cgroup" else 0


def _check_takeover(t: dict, standby: int, new: int) -> None:
    if standby and new != standby:
        t["problem"] = f"not taken over by the standby {standby} (main PID {new})"


def clowder_trial(action: str, probe: str, expected: int) -> dict:
    term = clowder.AttachedClient(probe, replay=0)
    term.write(b"x")
    read_until(term, b"x", 10)  # the probe's tty echoes: the path is live
    standby = _standby_for(action)
    old = clowder.main_pid()
    t0 = time.monotonic()
    acted = _act(action, clowder.SERVICE, old, t0)
    try:
        while True:
            term.read(30)
    except EOFError:
        pass
    t = {"old_gone": time.monotonic() - t0}
    term.close()
    conn = _retrying(clowder.Conn)
    t["answered"] = time.monotonic() - t0
    sessions = clowder.list_sessions(conn)
    t["ps_answered"] = time.monotonic() - t0
    conn.close()
    term = clowder.AttachedClient(probe, replay=0)
    t["attached"] = time.monotonic() - t0
    term.write(b"y")
    read_until(term, b"y", 30)
    t["bytes_flow"] = time.monotonic() - t0
    t["dark"] = t["bytes_flow"] - t["old_gone"]  # the client had no connection
    term.close()
    if "_proc" in acted:
        acted.pop("_proc").wait()
        time.sleep(0.01)  # the waiter thread records the time
    t.update(acted)
    if action == "hand-off":
        new = clowder.wait_handed_off(old)
        if new != old:
            t["problem"] = f"the hand-off changed the main PID ({old} -> {new})"
    else:
        _check_takeover(t, standby, clowder.wait_ready_after(old))
        t.update(unit_times(clowder.SERVICE, t0))
    running = sum(1 for s in sessions if s["state"] == "running")
    t["sessions_running"] = running
    if running != expected:
        t["problem"] = f"{running} of {expected} sessions running after {action}"
    return t


def open_ctl(probe: str) -> PtyTerminal:
    """`clowderctl attach` to the probe in a pty (what a user runs), live: a key echoed.
    It stays attached across the trials: reattaching after the host comes back is its
    own work, and what these trials time."""
    proc, master = spawn_on_pty([clowder.PYTHON, "-m", "ctl", "attach", probe],
                                client_env())
    term = PtyTerminal(proc, master, name="clowderctl")
    mark = _mark()
    term.write(mark)
    read_until(term, mark, 30)
    return term


_marks = iter(range(1, 1 << 30))


def _mark() -> bytes:
    """A string typed once in the whole run (letters: the probe's tty echoes them as is)."""
    n, out = next(_marks), ""
    while n:
        n, d = divmod(n, 26)
        out += "abcdefghijklmnopqrstuvwxyz"[d]
    return f"Q{out}Q".encode()


def clowderctl_trial(action: str, term: PtyTerminal) -> dict:
    """The restart or kill -9 as `clowderctl attach` lives it: once the old host has
    exited (its pidfd says so), a key is typed into the client's terminal; "bytes flow"
    is when its echo shows there, from the same clock start.  Meanwhile the client has
    seen its connection end and reconnects and reattaches by itself (ctl/commands/
    attach.py), as for any user: its own start is not in it, its reconnect is."""
    standby = _standby_for(action)
    old = clowder.main_pid()
    pidfd = os.pidfd_open(old)
    mark = _mark()
    try:
        t0 = time.monotonic()
        acted = _act(action, clowder.SERVICE, old, t0)
        ready, _, _ = select.select([pidfd], [], [], 30)
        if not ready:
            raise TimeoutError(f"the old host ({old}) did not exit within 30 s of the {action}")
        t = {"old_gone": time.monotonic() - t0}
        term.write(mark)
        read_until(term, mark, 30)
        t["bytes_flow"] = time.monotonic() - t0
        t["dark"] = t["bytes_flow"] - t["old_gone"]
    finally:
        os.close(pidfd)
    if "_proc" in acted:
        acted.pop("_proc").wait()
    t.update(acted)
    _check_takeover(t, standby, clowder.wait_ready_after(old))
    t.update(unit_times(clowder.SERVICE, t0))
    return t


def floor_trial(action: str) -> dict:
    c = FloorClient()
    c.echo()
    old = floor_pid()
    t0 = time.monotonic()
    acted = _act(action, FLOOR_SERVICE, old, t0)
    c.wait_closed()
    t = {"old_gone": time.monotonic() - t0}
    c.close()
    c = _retrying(FloorClient)
    c.echo()
    t["bytes_flow"] = t["answered"] = time.monotonic() - t0
    t["dark"] = t["bytes_flow"] - t["old_gone"]
    c.close()
    if "_proc" in acted:
        acted.pop("_proc").wait()
        time.sleep(0.01)
    t.update(acted)
    wait_for(lambda: floor_pid() not in (0, old), 30, "the floor service to come back")
    t.update(unit_times(FLOOR_SERVICE, t0))
    return t


# --- the figure -------------------------------------------------------------------------


def startup_costs(runs: int = 5) -> dict:
    """Median ms to start the interpreter bare, and to import all of ptyhostd."""
    out = {}
    for key, code in (("python_bare_ms", "pass"),
                      ("python_import_ptyhostd_ms", "import ptyhostd.__main__")):
        times = []
        for _ in range(runs):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append((time.monotonic() - t0) * 1e3)
        out[key] = median(times)
    return out



def _summarise(trials: list[dict]) -> dict:
    keys = sorted({k for t in trials for k, v in t.items() if isinstance(v, float)})
    out = {k + "_ms": median(t.get(k) for t in trials) * 1e3 for k in keys}
    out["trials"] = len(trials)
    out["bytes_flow_all_ms"] = [round(t["bytes_flow"] * 1e3, 1) for t in trials]
    problems = [t["problem"] for t in trials if "problem" in t]
    if problems:
        out["problems"] = problems
    return out


def run(counts: list[int], rounds: int) -> dict:
    install_floor()
    conn = clowder.Conn()
    probe = clowder.spawn(conn, ["/bin/cat"], name="probe")
    have = 1
    results: dict = {"counts": counts, "rounds": rounds, "by_count": {},
                     "startup": startup_costs()}
    # The bare floor: nothing parked.
    set_floor_count(0)
    floor0 = {"restart": [], "kill -9": []}
    for r in range(rounds):
        for action in (("restart", "kill -9") if r % 2 == 0 else ("kill -9", "restart")):
            floor0[action].append(floor_trial(action))
    results["bare_floor"] = {a: _summarise(v) for a, v in floor0.items()}
    log(f"blackout bare floor: restart {results['bare_floor']['restart']['bytes_flow_ms']:.1f} "
        f"ms, kill -9 {results['bare_floor']['kill -9']['bytes_flow_ms']:.1f} ms")

    for n in counts:
        entry: dict = {}
        spawn_times = []
        for _ in range(n - have):
            t0 = time.monotonic()
            clowder.spawn(conn, IDLE_ARGV)
            spawn_times.append(time.monotonic() - t0)
        if spawn_times:
            entry["spawn_ms_per_session"] = sum(spawn_times) / len(spawn_times) * 1e3
            entry["spawn_ms_last10"] = sum(spawn_times[-10:]) / len(spawn_times[-10:]) * 1e3
        have = n
        entry["host_fds"] = clowder.ptyhost_fds()
        set_floor_count(n)
        trials: dict[tuple, list] = {}
        plan = [("clowder", "restart"), ("clowder", "kill -9"), ("clowder", "hand-off"),
                ("clowderctl", "restart"), ("clowderctl", "kill -9"),
                ("floor", "restart"), ("floor", "kill -9")]
        ctl = None
        for r in range(rounds):
            for who, action in plan[r % len(plan):] + plan[:r % len(plan)]:
                try:
                    if who == "clowder":
                        conn.close()
                        t = clowder_trial(action, probe, n)
                        conn = clowder.Conn()
                    elif who == "clowderctl":
                        ctl = ctl or open_ctl(probe)
                        conn.close()
                        t = clowderctl_trial(action, ctl)
                        conn = clowder.Conn()
                        running = sum(1 for s in clowder.list_sessions(conn)
                                      if s["state"] == "running")
                        if running != n:
                            t["problem"] = f"{running} of {n} sessions running after {action}"
                    else:
                        t = floor_trial(action)
                    trials.setdefault((who, action), []).append(t)
                    log(f"blackout N={n} {who} {action}: bytes flow after "
                        f"{t['bytes_flow'] * 1e3:.1f} ms"
                        + (f" ({t['problem']})" if "problem" in t else ""))
                except Exception as exc:
                    entry.setdefault("errors", []).append(f"{who} {action}: {exc!r}")
                    log(f"blackout N={n} {who} {action}: FAILED {exc!r}")
                    conn = _reconnect(conn)
                    if who == "clowderctl" and ctl is not None:
                        ctl.close()  # its state is unknown: the next trial opens another
                        ctl = None
                time.sleep(0.3)
        if ctl is not None:
            ctl.close()
        for (who, action), ts in trials.items():
            entry.setdefault(who, {})[action] = _summarise(ts)
        results["by_count"][str(n)] = entry
    conn.close()
    t0 = time.monotonic()
    clowder.stop_host()
    results["stop_seconds_at_max"] = time.monotonic() - t0
    log(f"blackout: stopping the host with {have} sessions took "
        f"{results['stop_seconds_at_max']:.1f} s")
    sh(["systemctl", "stop", FLOOR_SERVICE, "clowder-bench-floor.socket"], check=False)
    return results


def _reconnect(conn):
    try:
        conn.close()
    except OSError:
        pass
    try:
        wait_for(clowder.is_active, 30, "the host")
    except TimeoutError:
        pass
    return clowder.Conn()

