"""The restart floor with a host already running: a kill -9 of a trivial notify service,
to its echo again, when systemd execs the server (as it execs ptyhostd) against when the
ExecStart is a small launcher that hands the fds to a pre-started spare process
(bench/spare_launcher.py, bench/spare_server.py), and against a standby: with
ExitType=cgroup the unit outlives its main process while another of its processes runs,
so a standby that holds copies of the fds takes over by MAINPID= with no restart at all.
A feasibility measure for issue 13's blackout (docs/design.md "A host already running:
the floor"), not a design of clowder's.

    python3 tools/sysinstance.py run --name NAME -- /usr/bin/python3 bench/spare_floor.py N

Run inside a private instance only: it writes units into /etc/systemd/system.  N pty
masters are parked in the FD store; 8 trials each; prints the medians, the unit's restart count, what is left
in its cgroup after a `systemctl stop`, and its journal (what systemd 252 says of each:
KillMode=process lets the spare outlive the main process, and systemd warns of it at
every restart).
"""

import os
import select
import socket
import statistics
import subprocess
import sys
import time

from common import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
UNIT = "spare-test.service"


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def install(exec_start: str, kill_mode: str, exit_type: str) -> None:
    with open("/etc/systemd/system/spare-test.socket", "w") as f:
        f.write("[Socket]\nListenStream=/run/spare-test.sock\n")
    with open(f"/etc/systemd/system/{UNIT}", "w") as f:
        f.write(f"""[Unit]
Requires=spare-test.socket
After=spare-test.socket
StartLimitIntervalSec=0
[Service]
Type=notify
NotifyAccess=all
ExecStart={exec_start}
FileDescriptorStoreMax=16384
LimitNOFILE=65536
Restart=always
RestartSec=0
KillMode={kill_mode}
ExitType={exit_type}
""")
    subprocess.run(["systemctl", "daemon-reload"], check=True)


def main_pid() -> int:
    return int(sh("systemctl", "show", "-p", "MainPID", "--value", UNIT) or 0)


def echo(timeout: float = 10) -> None:
    """Connect and see one byte echoed (the socket's backlog waits for a new server)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect("/run/spare-test.sock")
    s.sendall(b"x")
    if s.recv(1) != b"x":
        raise RuntimeError("no echo")
    s.close()


def trial() -> float:
    old = main_pid()
    pidfd = os.pidfd_open(old)
    t0 = time.monotonic()
    os.kill(old, 9)
    select.select([pidfd], [], [], 10)
    os.close(pidfd)
    echo()
    took = time.monotonic() - t0
    wait_for(lambda: main_pid() not in (0, old), 10, "a new main process", 0.005)
    return took


def main() -> None:
    n = int(sys.argv[1])
    with open("/run/spare-test.count", "w") as f:
        f.write(str(n))
    for label, script, kill_mode, exit_type in (
            ("exec", "spare_server.py", "mixed", "main"),
            # A stop sends SIGTERM to every process of the unit (KillMode=control-group):
            # under mixed only the main process gets it, and with ExitType=cgroup the
            # stop then waits for the standby until TimeoutStopSec.
            ("standby", "spare_server.py --with-standby", "control-group", "cgroup"),
            # Last: a stop leaves its spare running in the unit's cgroup.
            ("launcher + spare", "spare_launcher.py", "process", "main")):
        subprocess.run(["systemctl", "stop", UNIT])
        subprocess.run(["systemctl", "reset-failed", UNIT], capture_output=True)
        install(f"{PY} -S {HERE}/{script}", kill_mode, exit_type)
        cursor = sh("journalctl", "-n", "0", "--show-cursor", "-o", "cat").split()[-1]
        subprocess.run(["systemctl", "start", "spare-test.socket", UNIT], check=True)
        echo()
        times = []
        for _ in range(8):
            time.sleep(0.5)  # the next spare's imports: it must be waiting, as it would be
            times.append(trial() * 1e3)
        restarts = sh("systemctl", "show", "-p", "NRestarts", "--value", UNIT)
        began = time.monotonic()
        subprocess.run(["systemctl", "stop", UNIT])
        stop = time.monotonic() - began
        cgroup = sh("systemctl", "show", "-p", "ControlGroup", "--value", UNIT)
        left = sh("cat", f"/sys/fs/cgroup{cgroup}/cgroup.procs") if cgroup else ""
        print(f"{label} (KillMode={kill_mode}, ExitType={exit_type}), N={n}: kill -9 to the "
              f"echo, median {statistics.median(times):.1f} ms, each "
              f"{[round(t, 1) for t in times]}; restarts {restarts}; a stop took "
              f"{stop:.2f} s and left {left.split() or 'no process'}", flush=True)
        print(sh("journalctl", "-u", UNIT, "--no-pager", "-o", "cat",
                 "--after-cursor", cursor.removeprefix("cursor:"))[-900:], flush=True)


if __name__ == "__main__":
    main()
