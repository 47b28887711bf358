"""The host's link to systemd survives ``systemctl daemon-reexec``.

Every systemd package upgrade runs ``daemon-reexec``, which closes every connection to
systemd's private socket.  The PTY host must reconnect, renew its job subscription, and
catch up on what happened meanwhile: spawns keep working, ends are recorded, nothing is
left ``starting`` or ``running`` forever.  Both scopes (the system manager, and the user
manager re-executed as the test user), under a real systemd.
"""

from __future__ import annotations

import subprocess
import threading

from conftest import wait_for

LONG = ("sleep", "100000")


def reexec(host) -> None:
    """Re-execute the scope's service manager (it drops every private-socket link)."""
    host.systemctl("daemon-reexec")


def reconnects(host) -> int:
    """How many times the host has said its link to systemd is back."""
    return host.run(["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=manager-reconnect",
                     f"_PID={host.main_pid()}"]).stdout.count(b"is back")


def wait_code(host, sid: str, timeout: float = 20) -> tuple[int, str]:
    """``clowderctl wait``'s exit code and output, failing the test past ``timeout``."""
    try:
        proc = host.ctl("wait", sid, "--timeout", str(timeout), check=False,
                        timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"clowderctl wait {sid} hung past {timeout} s") from None
    return proc.returncode, proc.stdout.decode().strip() + proc.stderr.decode().strip()


def assert_none_starting(host) -> dict:
    ps = host.ps()
    starting = [sid for sid, s in ps.items() if s["state"] == "starting"]
    assert not starting, f"sessions stuck in starting: {starting}"
    return ps


def test_spawn_after_reexec(host):
    first = host.spawn(*LONG, name="before")
    reexec(host)
    second = host.spawn("sh", "-c", "echo after-reexec; exec sleep 100000", name="after")
    wait_for(lambda: b"after-reexec" in host.backlog(second), 10,
             "the session spawned after the re-exec to print")
    ps = assert_none_starting(host)
    assert ps[first]["state"] == "running" and ps[second]["state"] == "running"
    assert ps[second]["pid"] > 0
    assert host.show(ps[second]["unit"], "ActiveState")["ActiveState"] == "active"
    main = host.main_pid()
    for cause, text in (("manager-disconnect", b"dropped"), ("manager-reconnect", b"is back")):
        wait_for(lambda: text in host.run(["journalctl", "--no-pager", "-o", "cat",
                                           f"CLOWDER_CAUSE={cause}", f"_PID={main}"]).stdout,
                 10, f"the host's journal line {cause}")
    # And once more: the renewed link itself survives a second re-exec.
    reexec(host)
    third = host.spawn(*LONG, name="third")
    assert host.ps()[third]["state"] == "running"


def test_exit_during_reexec_is_delivered(host):
    sid = host.spawn("sh", "-c", "sleep 0.3; exit 7", name="ending")
    reexec(host)
    code, out = wait_code(host, sid)
    assert code == 7, f"clowderctl wait said {out!r} (exit {code})"
    s = host.ps()[sid]
    assert s["state"] == "exited" and s["exit_code"] == 7
    wait_for(lambda: s["unit"] not in host.session_units(), 10,
             f"the ended session's unit {s['unit']} to be removed")


def test_exit_right_after_reexec_is_delivered(host):
    sid = host.spawn("sh", "-c", "exit 7", name="quick")
    code, out = wait_code(host, sid)
    assert code == 7, out
    # The end of a session whose program exits while systemd is still re-executing.
    sid = host.spawn("sh", "-c", "sleep 0.05; exit 7", name="racing")
    reexec(host)
    code, out = wait_code(host, sid)
    assert code == 7, f"clowderctl wait said {out!r} (exit {code})"


def test_interleaved_reexecs(host):
    a = host.spawn(*LONG, name="a")
    b = host.spawn(*LONG, name="b")
    c = host.spawn(*LONG, name="c")
    q0 = host.spawn("sh", "-c", "sleep 0.2; exit 10", name="q0")
    reexec(host)
    host.ctl("kill", a, "--signal", "KILL")
    q1 = host.spawn("sh", "-c", "exit 11", name="q1")
    reexec(host)
    reexec(host)
    host.ctl("kill", b, "--signal", "TERM")
    reexec(host)
    q2 = host.spawn("sh", "-c", "sleep 0.1; exit 12", name="q2")
    reexec(host)
    d = host.spawn(*LONG, name="d")

    for sid, want in ((q0, 10), (q1, 11), (q2, 12), (a, 128 + 9), (b, 128 + 15)):
        code, out = wait_code(host, sid)
        assert code == want, f"{sid}: clowderctl wait said {out!r} (exit {code})"
    ps = assert_none_starting(host)
    for sid, code in ((q0, 10), (q1, 11), (q2, 12)):
        assert ps[sid]["state"] == "exited" and ps[sid]["exit_code"] == code, ps[sid]
    assert ps[a]["state"] == "exited" and ps[a]["signal"] == 9, ps[a]
    assert ps[b]["state"] == "exited" and ps[b]["signal"] == 15, ps[b]
    for sid in (c, d):
        assert ps[sid]["state"] == "running" and ps[sid]["pid"] > 0, ps[sid]
        assert host.show(ps[sid]["unit"], "ActiveState")["ActiveState"] == "active"
    live = {ps[c]["unit"], ps[d]["unit"]}
    wait_for(lambda: set(host.session_units()) == live, 10,
             f"only the running sessions' units to be left ({live})")

    host.ctl("kill", c, "--signal", "KILL")
    code, out = wait_code(host, c)
    assert code == 128 + 9, out
    assert host.ps()[c]["state"] == "exited"
    assert host.ps()[d]["state"] == "running"


def test_spawns_racing_reexecs(host):
    """Spawns and re-execs at the same moment: some StartTransientUnit replies are lost
    with the link.  Each spawn either runs or fails with a clear error; none is started
    twice, none is left starting, and every unit belongs to a session."""
    results: list[tuple[str, int, str]] = []

    def spawner(tag: str, count: int = 5) -> None:
        for i in range(count):
            proc = host.ctl("spawn", "--name", f"{tag}{i}", "--", *LONG, check=False,
                            timeout=60)
            results.append((f"{tag}{i}", proc.returncode,
                            (proc.stdout + proc.stderr).decode().strip()))

    # The host links to systemd at its first call (or 0.5 s after its start): one spawn
    # first, so that every re-exec below drops a link, and the host says when it is back.
    spawner("w", 1)
    threads = [threading.Thread(target=spawner, args=(tag,)) for tag in "xy"]
    for t in threads:
        t.start()
    rounds = 0
    while any(t.is_alive() for t in threads) and rounds < 8:
        # Re-exec as soon as the host is linked again (back-to-back re-execs with no
        # gap starve any client that needs more than one round trip to authenticate).
        rounds += 1
        reexec(host)
        wait_for(lambda: reconnects(host) >= rounds, 20,
                 f"the host to report its link back after re-exec {rounds}")
    for t in threads:
        t.join()
    failed = [r for r in results if r[1] != 0]
    assert not any("internal error" in r[2] for r in failed), failed
    ps = assert_none_starting(host)
    started = {r[2] for r in results if r[1] == 0}
    assert started <= set(ps), (started, ps)
    assert len(results) - len(failed) >= 1 + 5, f"most spawns must work: {failed}"
    for sid in started:
        assert ps[sid]["state"] == "running" and ps[sid]["pid"] > 0, ps[sid]
    units = {ps[sid]["unit"] for sid in started}
    wait_for(lambda: set(host.session_units()) == units, 10,
             "exactly one unit per started session")
    # Their terminals were parked while systemd re-executed: a restart gets them back.
    host.restart()
    after = host.ps()
    for sid in started:
        assert after[sid]["state"] == "running" and after[sid]["pid"] == ps[sid]["pid"], \
            (sid, after[sid])
    for sid in started:
        host.ctl("kill", sid, "--signal", "KILL")
    for sid in started:
        code, out = wait_code(host, sid)
        assert code == 128 + 9, out
