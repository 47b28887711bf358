"""Issue 5's hand-off: `systemctl reload clowder-ptyhost` runs the installed code in the
same process, keeping every session; a new code that cannot start or restore is refused
before the exec, and one that crashes during its real restore is restarted by systemd
from the FD store."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time

from conftest import PYTHON, socket_sampler, wait_for
from test_ptyhost import COUNTER
from test_standby import is_standby



def installed(package: str) -> str:
    """The installed code, as the host runs it (not this checkout, first on sys.path)."""
    return os.path.dirname(subprocess.run(
        [PYTHON, "-c", f"import {package}; print({package}.__file__)"], cwd="/", check=True,
        capture_output=True, text=True).stdout.strip())


SITE = installed("ptyhostd")
COMMON_SITE = installed("clowder_common")  # where the version is


def numbers(host, sid) -> list[int]:
    return [int(n) for n in re.findall(r"n(\d+)\r\n", host.backlog(sid).decode())]


def reload_and_wait(host) -> None:
    """Reload: `systemctl reload` returns once the new code serves (ptyhostd/reload.py)."""
    host.systemctl("reload", "clowder-ptyhost.service")
    assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == "active"


def handoffs(host, pid: int) -> int:
    """How many hand-offs the host of this pid has finished (its journal says)."""
    return host.run(["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff",
                     f"_PID={pid}"]).stdout.count(b"took over by hand-off")


def test_reload_returns_once_the_new_code_serves(host):
    """systemd 252 ends a reload job when ExecReload= exits: with `kill -HUP` that was at
    once, before the new code was even checked (a stop or a second reload right after it
    raced the exec).  ExecReload= now waits for the outcome."""
    sid = host.spawn("sleep", "100000")
    main = host.main_pid()
    for i in range(3):
        before = handoffs(host, main)
        host.systemctl("reload", "clowder-ptyhost.service")
        # No waiting: the new code took over before systemctl returned.
        assert handoffs(host, main) == before + 1, f"reload {i + 1} returned before it ended"
        assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == "active"
        assert host.ps()[sid]["state"] == "running"
    assert host.main_pid() == main
    # A stop right after a reload is a stop, not a wait on TimeoutStopSec.
    host.systemctl("reload", "clowder-ptyhost.service")
    host.systemctl("stop", "clowder-ptyhost.service")
    state = host.show("clowder-ptyhost.service", "ActiveState", "Result")
    assert state["ActiveState"] in ("inactive", "failed") and state["Result"] == "success", \
        state


def test_reload_keeps_pid_sessions_and_every_byte(host):
    sid = host.spawn(PYTHON, "-c", COUNTER, name="counter")
    other = host.spawn("sh", "-c", "sleep 1; exit 5")
    pids = {k: v["pid"] for k, v in host.ps().items()}
    main = host.main_pid()
    with socket_sampler(host.socket) as missing:
        for i in range(3):
            mark = len(numbers(host, sid))
            reload_and_wait(host)
            wait_for(lambda: len(numbers(host, sid)) > mark + 20, 10,
                     f"output to flow after hand-off {i + 1}")
    assert host.main_pid() == main, "the main PID changed: that was a restart, not a hand-off"
    assert not missing, "the socket file disappeared during a hand-off"
    now = host.ps()
    assert now[sid]["pid"] == pids[sid] and now[sid]["state"] == "running"
    # An exit that happened across the hand-offs is still delivered.
    proc = host.ctl("wait", other, check=False)
    assert proc.returncode == 5, proc.stdout
    host.ctl("kill", sid, "--signal", "KILL")
    host.ctl("wait", sid, check=False)
    got = numbers(host, sid)
    assert got == list(range(1, len(got) + 1)), "a gap or a duplicate across the hand-off"
    log = host.run(["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff",
                    f"_PID={main}"]).stdout
    assert b"took over by hand-off" in log


def test_reload_into_a_newer_version_and_refuse_a_downgrade(host):
    sid = host.spawn("sleep", "100000")
    main = host.main_pid()
    init = os.path.join(COMMON_SITE, "__init__.py")
    original = open(init).read()
    try:
        with open(init, "w") as f:
            f.write(original.replace('__version__ = "', '__version__ = "99.'))
        reload_and_wait(host)
        wait_for(lambda: b"ptyhostd 99." in host.run(
            ["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff",
             f"_PID={main}"]).stdout, 20,
            "the newer version to take over")
        assert host.main_pid() == main and host.ps()[sid]["state"] == "running"
        # Now the running code is 99.x: the installed 0.x would be a downgrade.
        with open(init, "w") as f:
            f.write(original)
        check = host.ctl("upgrade", "--check", check=False)
        assert check.returncode == 1 and b"downgrade" in check.stdout, check.stdout
    finally:
        with open(init, "w") as f:
            f.write(original)


def _break(path: str, line: str):
    """Make the *installed* code fail in a given way (the running host has it in memory)."""
    with open(path) as f:
        original = f.read()
    with open(path, "w") as f:
        f.write(original + "\n" + line + "\n")
    return original


def test_a_stop_while_the_new_code_is_checked_is_a_stop(host):
    """A stop that comes during a hand-off's check: its SIGTERM is handled by the running
    code, which must stop (ending the sessions) rather than exec the new code, which
    would never see it and leave the stop to wait out TimeoutStopSec (Result=timeout)."""
    sid = host.spawn("sleep", "100000")
    main = host.main_pid()
    path = os.path.join(SITE, "handoff.py")
    # The check imports the installed handoff.py: make it slow, so the stop lands in it.
    original = _break(path, "import time as _t; _t.sleep(4)")
    try:
        host.systemctl("reload", "--no-block", "clowder-ptyhost.service")
        wait_for(lambda: host.show("clowder-ptyhost.service", "StatusText")["StatusText"]
                 == "checking the new code", 10, "the hand-off's check to start")
        host.systemctl("stop", "clowder-ptyhost.service")
    finally:
        with open(path, "w") as f:
            f.write(original)
    state = host.show("clowder-ptyhost.service", "ActiveState", "Result")
    assert state == {"ActiveState": "inactive", "Result": "success"}, state
    log = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main}"]).stdout
    assert b"stopping: ending every session" in log, log[-2000:]
    assert b"took over by hand-off" not in log
    host.start()
    assert host.ps().get(sid, {}).get("state") != "running", "a stop left the session"


def _reload_refused(host, main: int) -> None:
    """`systemctl reload` fails, and the unit's journal says why (ptyhostd/reload.py)."""
    proc = host.systemctl("reload", "clowder-ptyhost.service", check=False)
    assert proc.returncode != 0, "a refused hand-off made `systemctl reload` succeed"
    field = "_SYSTEMD_USER_UNIT" if host.scope == "user" else "_SYSTEMD_UNIT"
    wait_for(lambda: b"ptyhostd --hand-off: hand-off refused" in host.run(
        ["journalctl", "--no-pager", "-o", "cat", f"{field}=clowder-ptyhost.service"]).stdout,
        20, "the reload's own words on why (in the unit's journal)")
    assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == "active"


def test_precheck_refuses_code_that_cannot_start(host):
    sid = host.spawn("sleep", "100000")
    main = host.main_pid()
    path = os.path.join(SITE, "handoff.py")
    original = _break(path, "raise SystemExit('this build is broken')")
    try:
        check = host.ctl("upgrade", "--check", check=False)
        assert check.returncode == 1 and b"refused" in check.stdout, check.stdout
        _reload_refused(host, main)
        wait_for(lambda: b"hand-off refused" in host.run(
            ["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff-refused",
             f"_PID={main}"]).stdout, 20, "the host to log why it refused the hand-off")
    finally:
        with open(path, "w") as f:
            f.write(original)
    assert host.main_pid() == main
    assert host.ps()[sid]["state"] == "running"
    assert host.ctl("upgrade", "--check").returncode == 0


def test_every_refusal_is_in_the_units_journal(host):
    """The reload client's own line on why is in `journalctl -u clowder-ptyhost`, every
    time: journald learns a stream's unit from its first line only while the writer
    lives, and a user unit's short-lived process lost its unit on 6-11 lines in 60 with no
    wait, 1 in 30 (ci76) with a wait at its end only (ptyhostd/reload.py
    _read_by_journald)."""
    main = host.main_pid()
    path = os.path.join(SITE, "handoff.py")
    original = _break(path, "raise SystemExit('this build is broken')")
    field = "_SYSTEMD_USER_UNIT" if host.scope == "user" else "_SYSTEMD_UNIT"
    said = b"ptyhostd --hand-off: hand-off refused"
    everywhere = ["journalctl", "--no-pager", "-o", "cat", "--since", "-5min", "--grep", "hand-off refused"]
    unit = [f"{field}=clowder-ptyhost.service"]
    before = host.run(everywhere, check=False).stdout.count(said)  # exits 1 if none
    before_unit = host.run(everywhere + unit, check=False).stdout.count(said)
    reloads = 30
    # A journald busy with another unit's output reads our lines late (a bad day's load):
    # without the wait in reload.py, most of them then arrive after their writer ended.
    load = "clowder-test-journal-load.service"
    host.run(["systemd-run", *(["--user"] if host.scope == "user" else []), "--quiet",
              "--collect", "-u", load, "/bin/sh", "-c", "while :; do seq 1 100000; done"])
    try:
        for _ in range(reloads):
            proc = host.systemctl("reload", "clowder-ptyhost.service", check=False)
            assert proc.returncode != 0, "a refused hand-off made `systemctl reload` succeed"
    finally:
        host.systemctl("stop", load, check=False)
        with open(path, "w") as f:
            f.write(original)
    wait_for(lambda: host.run(everywhere, check=False).stdout.count(said) - before >= reloads,
             20, f"the {reloads} refusals' lines in the journal")
    in_unit = host.run(everywhere + unit, check=False).stdout.count(said)
    assert in_unit - before_unit == reloads, (
        f"{reloads - (in_unit - before_unit)} of {reloads} refusals' lines are in the journal "
        f"without {field}=clowder-ptyhost.service")
    assert host.main_pid() == main


def test_precheck_refuses_code_that_cannot_restore(host):
    sid = host.spawn("sleep", "100000")
    main = host.main_pid()
    path = os.path.join(SITE, "manifest.py")
    original = _break(path, "def _read(fd):\n    raise ManifestError('cannot read this "
                      "manifest version')")
    try:
        check = host.ctl("upgrade", "--check", check=False)
        assert check.returncode == 1 and b"cannot read this manifest" in check.stdout
        _reload_refused(host, main)
        wait_for(lambda: b"cannot read this manifest" in host.run(
            ["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff-refused",
             f"_PID={main}"]).stdout, 20, "the host to log why it refused the hand-off")
    finally:
        with open(path, "w") as f:
            f.write(original)
    assert host.main_pid() == main and host.ps()[sid]["state"] == "running"


def test_crash_during_real_restore_loses_nothing_but_time(host):
    """The new code passes the check, then dies in its real restore: systemd restarts it
    from the FD store.  What is lost is recorded and asserted: nothing but time."""
    sid = host.spawn(PYTHON, "-c", COUNTER, name="counter")
    pid = host.ps()[sid]["pid"]
    main = host.main_pid()
    path = os.path.join(SITE, "host.py")
    # The check process never calls Host.start; the exec'd code does, and crashes once.
    flag = f"/tmp/clowder-test-crash-once-{host.scope}"
    open(flag, "w").close()
    os.chown(flag, host.uid, -1)  # the host (maybe a user) must be able to remove it
    original = _break(path, (
        "_orig_start = Host.start\n"
        "async def _crashing_start(config, stored, *rest):\n"
        "    import os\n"
        f"    if os.path.exists({flag!r}):  # the first start after the patch: the exec\n"
        f"        os.unlink({flag!r}); os._exit(70)\n"
        "    return await _orig_start(config, stored, *rest)\n"
        "Host.start = staticmethod(_crashing_start)\n"))
    try:
        before = len(numbers(host, sid))
        # The reload job may report a failure (the main process died during it, or not
        # yet): what matters is what the sessions lost.
        host.systemctl("reload", "clowder-ptyhost.service", check=False)
        new = host.wait_ready(main)
    finally:
        with open(path, "w") as f:
            f.write(original)
    assert not os.path.exists(flag), "the new code never crashed: the test proved nothing"
    assert new != main
    wait_for(lambda: len(numbers(host, sid)) > before + 20, 10, "output to flow again")
    lost = {"sessions": 0, "bytes": 0}
    info = host.ps()[sid]
    if info["pid"] != pid or info["state"] != "running":
        lost["sessions"] += 1
    host.ctl("kill", sid, "--signal", "KILL")
    host.ctl("wait", sid, check=False)
    got = numbers(host, sid)
    lost["bytes"] = len(set(range(1, max(got) + 1)) - set(got)) + (len(got) - len(set(got)))
    assert lost == {"sessions": 0, "bytes": 0}, f"lost in a crashed restore: {lost}"


def test_attached_client_is_repainted_after_a_handoff(host):
    """A client attached during the hand-off reconnects and is repainted from the screen
    that crossed the exec as VT bytes; typing carries on."""
    from test_attach import Attach, ready, shell
    sid = shell(host)
    main = host.main_pid()
    a = Attach(host, sid)
    try:
        ready(a)
        a.type(b"echo before-$((3+4))\r")
        a.expect(b"before-7", what="typing before the hand-off")
        reload_and_wait(host)
        reattached(a, b"before-7")
    finally:
        a.close()
    assert host.main_pid() == main
    log = host.run(["journalctl", "--no-pager", "-o", "cat", f"_PID={main}"]).stdout
    assert b"screens from the hand-off are unusable" not in log
    assert re.search(rb"[1-9]\d* screens carried across the hand-off", log), log[-2000:]


def _hold_fifo(host) -> str:
    return f"/tmp/clowder-test-hold-start-{host.scope}"


def _new_code_waits(host) -> bool:
    """The held new code has the FIFO open: it took every session (the hold is where it
    stops the bridge, Adoption._settle_bridge).  Opening a FIFO's write end without
    blocking succeeds only while a reader has it open (ENXIO otherwise)."""
    try:
        fd = os.open(_hold_fifo(host), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    os.close(fd)  # the reader opened it read-write: no hang-up reaches it
    return True


@contextlib.contextmanager
def new_code_held(host):
    """The installed code, once exec'd by a hand-off, waits before it stops the bridge
    (ptyhostd/bridge.py) until ``release()``: the window is the test's, not a race.
    It waits on a FIFO (30 s at most); its loop is held too, so the unit's watchdog
    (10 s) bounds how long that may be."""
    fifo = _hold_fifo(host)
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    os.chown(fifo, host.uid, -1)
    path = os.path.join(SITE, "bridge.py")
    original = _break(path, (
        "_orig_end = end\n"
        "def end():\n"
        "    try:  # held by the test (tests/test_handoff.py) until it writes a byte\n"
        f"        fd = os.open({fifo!r}, os.O_RDWR | os.O_NONBLOCK)\n"
        "    except FileNotFoundError:\n"
        "        return _orig_end()  # released already\n"
        "    try:\n"
        "        _ready([fd], select.POLLIN, 30)\n"
        "    finally:\n"
        "        os.close(fd)\n"
        "    return _orig_end()\n"))

    def release() -> None:
        if not os.path.exists(fifo):
            return
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            pass  # ENXIO: the new code is not waiting (yet); the unlink releases it
        else:
            os.write(fd, b"x")
            os.close(fd)
        os.unlink(fifo)
    try:
        yield release
    finally:
        with open(path, "w") as f:
            f.write(original)
        release()


def start_reload(host) -> subprocess.Popen:
    """`systemctl reload` in the background (it returns once the new code serves)."""
    scope = ["--user"] if host.scope == "user" else []
    return subprocess.Popen(host._as(["systemctl", *scope, "reload",
                                      "clowder-ptyhost.service"]), env=host.env, cwd="/")


def bridge_log(host, since: float) -> bytes:
    return host.run(["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=handoff-bridge",
                     f"--since=@{since:.6f}"]).stdout  # not int(): the last test's bridge


def wait_bridge(host, since: float) -> None:
    wait_for(lambda: b"hand-off bridge: serving" in bridge_log(host, since), 20,
             "the bridge to serve (the exec is done)")


@contextlib.contextmanager
def bridge_serving(host):
    """A reload whose new code is held while its bridge serves the attached clients:
    yields (release, the reload's process, when it began); released and waited for at
    the end whatever happened."""
    with new_code_held(host) as release:
        since = time.time()
        reload = start_reload(host)
        try:
            wait_bridge(host, since)
            # What is typed from here reaches rings the new code has already mapped:
            # it must take each ring's head as the bridge left it (Ring.settle).
            wait_for(lambda: _new_code_waits(host), 30,
                     "the new code to take the sessions and wait to stop the bridge")
            yield release, reload, since
        finally:
            release()
            if reload.poll() is None:
                reload.wait(60)


def reattached(a, seen: bytes) -> None:
    """After a hand-off: ``a`` (clowderctl attach) is reconnected and repainted with
    ``seen`` on its screen, typing works, and it detaches cleanly."""
    from test_attach import DETACH
    a.expect(b"\x1bc", timeout=30, what="the client to reattach after the hand-off")
    a.expect(seen, what="the repaint after the hand-off")
    a.type(b"echo after-$((5+5))\r")
    a.expect(b"after-10", what="typing after the hand-off")
    a.type(DETACH)
    assert a.finish() == 0


def bridge_pid(main: int) -> int:
    """The hand-off's bridge: the host's child that is not the check."""
    for child in open(f"/proc/{main}/task/{main}/children").read().split():
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if b"--check-handoff" not in f.read() and not is_standby(int(child)):
                return int(child)
    raise AssertionError("no bridge process")


def test_attached_client_types_through_the_bridge_while_the_new_code_starts(host):
    """The hand-off's bridge (ptyhostd/bridge.py): from the exec until the new code
    serves, an attached `clowderctl attach` keeps its connection: what it types reaches
    the program and the program's answer reaches it, before the new code reconnects and
    repaints it."""
    from test_attach import Attach, ready, shell
    sid = shell(host)
    main = host.main_pid()
    a = Attach(host, sid)
    try:
        ready(a)
        with bridge_serving(host) as (release, reload, since):
            a.type(b"echo during-$((2+3))\r")
            a.expect(b"during-5", what="the answer to typing through the bridge")
            assert b"\x1bc" not in a.out, "the client was reconnected before the new code served"
            assert reload.poll() is None, "the reload ended while the new code was held"
            assert host.show("clowder-ptyhost.service", "ActiveState")["ActiveState"] == \
                "reloading"
            release()
            assert reload.wait(60) == 0
        reattached(a, b"during-5")
    finally:
        a.close()
    assert host.main_pid() == main
    backlog = host.backlog(sid)
    assert backlog.count(b"echo during-$((2+3))") == 1 and backlog.count(b"during-5\r\n") == 1, \
        f"typed through the bridge not exactly once: {backlog[-1500:]!r}"
    moved = re.findall(rb"ended after \d+ ms: (\d+) bytes of output, (\d+) of input",
                       bridge_log(host, since))  # this hand-off's bridge ended last
    assert moved and int(moved[-1][0]) > 0 and int(moved[-1][1]) > 0, \
        bridge_log(host, since)[-2000:]
    children = open(f"/proc/{main}/task/{main}/children").read().split()
    assert [c for c in children if not is_standby(int(c))] == [], \
        "the bridge was not reaped"


def test_fds_above_select_limit_in_rm_and_the_bridge(host):
    """A host whose fds are numbered past 1,024 (a thousand sessions hold ~4,000): `rm`
    of a running session and the hand-off's bridge wait on their fds with poll; with
    select they raised (`rm` answered "internal error", the bridge died at once: found
    by the blackout bench at 1,000 sessions)."""
    from test_attach import Attach, ready, shell
    # Held by a process of its own: this one's select-based helpers need low fds.
    holder = subprocess.Popen(
        [PYTHON, "-c", "import resource, socket, sys\n"
         "resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))\n"
         "held = [socket.socket(socket.AF_UNIX) for _ in range(1100)]\n"
         f"[s.connect({host.socket!r}) for s in held]\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    main = host.main_pid()
    try:
        assert holder.stdout.readline().strip() == "held"
        wait_for(lambda: len(os.listdir(f"/proc/{main}/fd")) > 1100, 20,
                 "the host to accept the held connections")
        sid = shell(host)  # its pty, ring and pidfd are numbered past 1,024
        assert max(int(fd) for fd in os.listdir(f"/proc/{main}/fd")) > 1024
        refused = host.ctl("rm", sid, check=False)
        assert refused.returncode != 0 and b"kill it first" in refused.stderr, refused.stderr
        a = Attach(host, sid)
        try:
            ready(a)
            since = time.time()
            reload_and_wait(host)
            a.expect(b"\x1bc", timeout=30, what="the client to reattach after the hand-off")
            a.type(b"echo high-$((6*7))\r")
            a.expect(b"high-42", what="typing after the hand-off")
        finally:
            a.close()
    finally:
        holder.kill()
        holder.wait()
    log = bridge_log(host, since)
    assert b"ended after" in log and b"failed" not in log, log[-2000:]
    assert host.main_pid() == main
