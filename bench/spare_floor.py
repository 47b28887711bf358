"""The restart floor with a host already running: a kill -9 of a trivial notify service,
to its echo again, when systemd execs the server (as it execs ptyhostd) against when the
ExecStart is a small launcher that hands the fds to a pre-started spare process
(bench/spare_launcher.py, bench/spare_server.py).  A feasibility measure for issue 13's
blackout (docs/design.md "A host already running: the floor"), not a design of clowder's.

    python3 tools/sysinstance.py run --name NAME -- /usr/bin/python3 bench/spare_floor.py N

Run inside a private instance only: it writes units into /etc/systemd/system.  N pty
masters are parked in the FD store; 8 trials each; prints the medians, then the unit's
journal (what systemd 252 says of the spare: KillMode=process lets it outlive the main
process, and systemd warns of it at every restart).
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


def install(exec_start: str, kill_mode: str) -> None:
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
    for label, script, kill_mode in (("exec", "spare_server.py", "mixed"),
                                     ("launcher + spare", "spare_launcher.py", "process")):
        subprocess.run(["systemctl", "stop", UNIT])
        install(f"{PY} -S {HERE}/{script}", kill_mode)
        subprocess.run(["systemctl", "start", "spare-test.socket", UNIT], check=True)
        echo()
        times = []
        for _ in range(8):
            time.sleep(0.5)  # the next spare's imports: it must be waiting, as it would be
            times.append(trial() * 1e3)
        print(f"{label} (KillMode={kill_mode}), N={n}: kill -9 to the echo, median "
              f"{statistics.median(times):.1f} ms, each {[round(t, 1) for t in times]}",
              flush=True)
    print(sh("journalctl", "-u", UNIT, "--no-pager", "-o", "cat")[-1200:])


if __name__ == "__main__":
    main()
