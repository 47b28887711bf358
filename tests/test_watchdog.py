"""A frozen (SIGSTOP) or wedged PTY host is replaced by systemd's watchdog like a crashed
one, every session kept; clowderctl gives up on a daemon that does not answer, within its
deadline, with a message that names the daemon and its socket.

Under the real systemd, both scopes.  Whatever happens, the host is continued in a
``finally``, so a failing test leaves nothing frozen behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time

from conftest import PYTHON, wait_for
from test_handoff import numbers, reload_and_wait
from test_ptyhost import COUNTER

TIMEOUT_EXIT = 124  # clowderctl's exit status when a daemon does not answer in time
# What the replacement may take past the watchdog period: systemd's SIGABRT (and
# SIGCONT), the abort, the restart and the adoption (measured ~0.1-0.3 s; a loaded
# 2-core machine is slower).
MARGIN = 4.0


def timespan(text: str) -> float:
    """Seconds in a systemd timespan as ``systemctl show`` prints it ("1min 30s", "500ms");
    0 for "0" or "infinity" (no watchdog)."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600}
    if text in ("", "0", "infinity"):
        return 0.0
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)\s*(us|ms|min|s|h)", text))


def watchdog_period(host) -> float:
    period = timespan(host.show("clowder-ptyhost.service", "WatchdogUSec")["WatchdogUSec"])
    assert period > 0, "the host's unit has no WatchdogSec"
    return period


@contextlib.contextmanager
def frozen(pid: int):
    """SIGSTOP ``pid`` for the block; SIGCONT it afterwards, whatever happened."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def counting_session(host) -> tuple[str, int, int]:
    """A session printing numbered lines: its id, its pid and how far it got."""
    sid = host.spawn(PYTHON, "-c", COUNTER, name="counter")
    wait_for(lambda: len(numbers(host, sid)) > 50, 20, "the counter to print")
    return sid, host.ps()[sid]["pid"], len(numbers(host, sid))


def assert_session_back(host, sid: str, pid: int, mark: int) -> None:
    """Same program, still running, its backlog whole and growing again."""
    info = host.ps()[sid]
    assert info["pid"] == pid and info["state"] == "running", info
    wait_for(lambda: len(numbers(host, sid)) > mark + 100, 20,
             "the counter's output to flow again after the replacement")
    got = numbers(host, sid)
    assert got == list(range(1, len(got) + 1)), "a gap or a duplicate in the backlog"


def replaced_within(host, old: int, limit: float) -> float:
    """Wait for a new main PID (active); the seconds it took."""
    t0 = time.monotonic()
    host.wait_ready(old, timeout=limit)
    return time.monotonic() - t0


def test_frozen_host_is_replaced_and_clients_are_told(host):
    period = watchdog_period(host)
    sid, pid, mark = counting_session(host)
    old = host.main_pid()
    ctl = [PYTHON, "-m", "ctl", "--socket", host.socket]
    since = time.time() - 1
    t0 = time.monotonic()
    with frozen(old):
        # Issued during the freeze: each gives up at its own deadline, with the message.
        by_option = subprocess.Popen(host._as(ctl + ["--timeout", "2", "ps"]), env=host.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        by_env = subprocess.Popen(host._as(["env", "CLOWDER_TIMEOUT=1.5"] + ctl + ["ps"]),
                                  env=host.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        for proc, deadline in ((by_option, 2), (by_env, 1.5)):
            _, err = proc.communicate(timeout=30)
            took = time.monotonic() - t0
            assert proc.returncode == TIMEOUT_EXIT, err
            assert (f"clowder-ptyhost is not answering at {host.socket}: "
                    f"no reply within {deadline:g} s").encode() in err, err
            # Python's start-up on a loaded machine, then the deadline.
            assert took < deadline + 3, f"gave up after {took:.1f} s, deadline {deadline} s"
        assert host.main_pid() == old, "replaced before the watchdog period"
        took = replaced_within(host, old, period + MARGIN + 5)
    took = time.monotonic() - t0
    assert took < period + MARGIN, \
        f"a frozen host was replaced after {took:.1f} s (watchdog {period:g} s)"
    # systemd says why (the user manager logs to the same, unsplit journal).
    wait_for(lambda: b"clowder-ptyhost.service: Watchdog timeout" in host.run(
        ["journalctl", "--no-pager", "-o", "cat", "--since", f"@{int(since)}"]).stdout, 10,
        "systemd's journal line about the watchdog timeout")
    assert_session_back(host, sid, pid, mark)


def test_wedged_loop_is_replaced(host):
    # Fault injection: with $CLOWDER_FAULT_WEDGE, SIGUSR2 blocks the host's event loop.
    host.drop_in("[Service]\nEnvironment=CLOWDER_FAULT_WEDGE=1\n")
    host.restart()
    period = watchdog_period(host)
    sid, pid, mark = counting_session(host)
    old = host.main_pid()
    t0 = time.monotonic()
    try:
        os.kill(old, signal.SIGUSR2)
        # The process still runs (it is not stopped), but its loop no longer turns.
        wait_for(lambda: host.ctl("--timeout", "1", "ps", check=False).returncode
                 == TIMEOUT_EXIT, 10, "the wedged host to stop answering")
        replaced_within(host, old, period + MARGIN + 5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGCONT)
    took = time.monotonic() - t0
    assert took < period + MARGIN, \
        f"a wedged host was replaced after {took:.1f} s (watchdog {period:g} s)"
    # The SIGABRT made the wedged host say where it was stuck (faulthandler).
    log = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={old}"]).stdout
    assert b"in wedge" in log, log[-3000:]
    assert_session_back(host, sid, pid, mark)


def test_handoff_keeps_the_watchdog_fed(host):
    # A shorter period than the shipped one, so that outliving it costs seconds.
    host.drop_in("[Service]\nWatchdogSec=3\n")
    host.restart()
    period = watchdog_period(host)
    assert period == 3
    sid, pid, mark = counting_session(host)
    main = host.main_pid()
    reload_and_wait(host)
    assert host.main_pid() == main, "the reload was a restart, not a hand-off"
    environ = open(f"/proc/{main}/environ", "rb").read().split(b"\0")
    assert b"WATCHDOG_USEC=3000000" in environ and f"WATCHDOG_PID={main}".encode() in environ
    # Fed across the exec and after it: the same process outlives several periods.
    end = time.monotonic() + 2.5 * period
    wait_for(lambda: host.main_pid() != main or time.monotonic() > end, 3 * period + 5,
             "several watchdog periods to pass")
    assert host.main_pid() == main, "the watchdog replaced the host after a hand-off"
    # ... and still watched: frozen, it is replaced.
    with frozen(main):
        replaced_within(host, main, period + MARGIN + 5)
    assert_session_back(host, sid, pid, mark)


def test_the_handoff_check_does_not_feed_the_watchdog(host):
    # The pre-check child inherits our environment: it must not see a watchdog of its own.
    env = {**host.env, "WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1",
           "NOTIFY_SOCKET": "/run/systemd/notify"}
    code = ("from ptyhostd.watchdog import Watchdog; "
            "assert Watchdog.from_env() is None; print('none')")
    out = host.run([PYTHON, "-c", code], env=env).stdout
    assert out.strip() == b"none"


@contextlib.contextmanager
def frozen_host(host, timeout: str):
    """A session printing, then the host frozen for the block, clients run meanwhile
    given $CLOWDER_TIMEOUT=``timeout``; yields the session's id."""
    sid, _pid, _mark = counting_session(host)
    saved = host.env
    host.env = {**saved, "CLOWDER_TIMEOUT": timeout}
    try:
        with frozen(host.main_pid()):
            yield sid
    finally:
        host.env = saved


def test_attach_to_a_frozen_host_gives_up_at_one_deadline(host):
    """`clowderctl attach` asks before the rest of clowderctl is loaded (ctl/
    firstpaint.py), and the full path would ask again: a frozen host is told once, at
    one deadline, not after waiting out both."""
    from test_attach import Attach
    with frozen_host(host, "3") as sid:
        t0 = time.monotonic()
        client = Attach(host, sid, separate_stderr=True)
        try:
            code = client.finish(timeout=20)
            took = time.monotonic() - t0
            err = client.stderr()
        finally:
            client.close()
    assert code == TIMEOUT_EXIT, err
    assert b"clowder-ptyhost is not answering" in err, err
    # One deadline (3 s) and Python's start, not two deadlines.
    assert took < 3 + 2.5, f"attach gave up after {took:.1f} s (deadline 3 s)"


def test_ps_to_a_frozen_host_gives_up_at_one_deadline_in_the_full_paths_words(host):
    """`clowderctl ps` asks before the rest of clowderctl is loaded (ctl/quickps.py): a
    frozen host is told once, at one deadline, with the full path's message and status
    (the full path taken here by giving --timeout).  Both within the watchdog's 10 s,
    which would replace the frozen host."""
    with frozen_host(host, "2") as sid:
        t0 = time.monotonic()
        quick = host.ctl("ps", check=False, timeout=30)
        took = time.monotonic() - t0
        full = host.ctl("--timeout", "2", "ps", check=False, timeout=30)
    assert quick.returncode == full.returncode == TIMEOUT_EXIT, (quick, full)
    assert quick.stderr == full.stderr == (
        f"clowderctl ps: clowder-ptyhost is not answering at {host.socket}: no reply "
        f"within 2 s\n").encode(), (quick.stderr, full.stderr)
    assert took < 2 + 2.5, f"ps gave up after {took:.1f} s (deadline 2 s)"
    assert sid in host.ps()
