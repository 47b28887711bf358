#!/usr/bin/env python3
"""How a fleet status costs grow with hosts and agents (issue 17, "Scale").

    python3 tools/sysinstance.py run --name fleet-bench -- \\
        VENV/bin/python bench/fleet.py [--hosts 1,2,5,10,20] [--agents 1,10,50] [--rounds 5]

Run as root inside a systemd instance (it boots an ssh box there, tools/sshhost.py,
nested), from a tree installed in VENV.  One box runs clowder's units with N agents; it
is reached under K names (ssh config aliases, `Host n1 n2 ...` with one HostName), so
`clowderctl --host n1 ... --host nK status --json` is a fleet of K hosts of N agents each
as the client sees it: K ssh connections, K relays, K clowder-control answers (the one
box's sshd and daemon serve them all, on the same two cores: a pessimistic server).

For each K x N, ROUNDS refreshes, each measured as:
- latency: the wall time of the command (median; and the slowest);
- connections: the TCP connections opened to port 22 (the box's sshd counts them);
- bytes: what crossed the veth both ways (ip -s link on the client side), per refresh,
  with ssh's handshakes, and the JSON the command printed;
once with a fresh ssh per host per refresh (what clowderctl does by itself), once with
ssh's ControlMaster (a master per host kept between refreshes: $CLOWDER_SSH with
ControlMaster=auto, ControlPersist), the change past which a fleet of hundreds is cheap.
It prints a markdown section (stdout); progress goes to stderr.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
from sshhost import SshHost  # noqa: E402

PYTHON = sys.executable
CONFIG = "/etc/clowder/clowder.yaml"


def log(*parts) -> None:
    print("[fleet-bench]", *parts, file=sys.stderr, flush=True)


def veth_bytes(box: SshHost) -> int:
    out = subprocess.run(["nsenter", f"--net={box.netns_path}", "ip", "-s", "-j", "link",
                          "show", "dev", box.client_if], check=True,
                         capture_output=True).stdout
    stats = json.loads(out)[0]["stats64"]
    return stats["rx"]["bytes"] + stats["tx"]["bytes"]


def accepted(box: SshHost) -> int:
    """TCP connections the box's sshd has accepted so far (its listen socket's count)."""
    out = box.exec(["nstat", "-az", "TcpPassiveOpens"], capture_output=True,
                   check=True).stdout.decode()
    for line in out.splitlines():
        if line.startswith("TcpPassiveOpens"):
            return int(line.split()[1])
    raise RuntimeError(f"nstat: no TcpPassiveOpens in {out!r}")


def set_agents(box: SshHost, n: int) -> None:
    text = "agents:\n" + "".join(
        f"  - name: a{i}\n    command: \"sleep 100000\"\n    cwd: /root\n" for i in range(n))
    box.put(CONFIG, text.encode())
    box.exec(["systemctl", "restart", "clowder-control.service"], check=True)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        r = box.exec([PYTHON, "-m", "ctl", "status", "--json"], capture_output=True)
        if r.returncode == 0:
            agents = json.loads(r.stdout)["agents"]
            if len(agents) == n and all(a["state"] == "running" for a in agents):
                return
        time.sleep(0.2)
    raise RuntimeError(f"{n} agents did not all run within 120 s")


def refresh(env: dict, names: list[str]) -> tuple[float, int, int]:
    argv = [PYTHON, "-m", "ctl", "--timeout", "30"]
    for name in names:
        argv += ["--host", name]
    start = time.monotonic()
    r = subprocess.run(argv + ["status", "--json"], env=env, capture_output=True, cwd="/")
    took = time.monotonic() - start
    if r.returncode != 0:
        raise RuntimeError(f"status over {len(names)} names exited {r.returncode}: "
                           f"{r.stderr.decode(errors='replace')[-2000:]}")
    answered = sum(h["answered"] for h in json.loads(r.stdout)["hosts"])
    return took, len(r.stdout), answered


def measure(box, env, names, rounds) -> dict:
    refresh(env, names)  # warm: page cache, and the masters when ControlMaster is on
    times, sizes = [], []
    b0, c0 = veth_bytes(box), accepted(box)
    for _ in range(rounds):
        took, size, answered = refresh(env, names)
        assert answered == len(names), f"{answered} of {len(names)} answered"
        times.append(took)
        sizes.append(size)
    return {"median": statistics.median(times), "max": max(times),
            "bytes": (veth_bytes(box) - b0) / rounds, "conns": (accepted(box) - c0) / rounds,
            "json": statistics.median(sizes)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default="1,2,5,10,20")
    p.add_argument("--agents", default="1,10,50")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    hosts = [int(x) for x in args.hosts.split(",")]
    agent_counts = [int(x) for x in args.agents.split(",")]
    rows = []
    with SshHost("clowder-fleet-bench", index=3) as box, \
            tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        r = box.exec([PYTHON, "-m", "ctl", "install-units", "--system", "--exec-start",
                      f"{PYTHON} -m ptyhostd"], capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"install-units: {r.stderr.decode()}")
        names = [f"n{i}" for i in range(1, max(hosts) + 1)]
        config = os.path.join(tmp, "ssh_config")
        with open(config, "w") as f:
            f.write(f"Host {' '.join(names)}\n  HostName {box.box_addr}\n  User root\n")
        ssh = list(box.ssh_command)
        ssh[ssh.index("-F") + 1] = config
        master = ssh + ["-o", "ControlMaster=auto", "-o",
                        f"ControlPath={tmp}/cm-%n", "-o", "ControlPersist=300"]
        base = {**os.environ, "CLOWDER_REMOTE_CTL": f"{PYTHON} -m ctl"}
        modes = {"fresh ssh": {**base, "CLOWDER_SSH": shlex.join(ssh)},
                 "ControlMaster": {**base, "CLOWDER_SSH": shlex.join(master)}}
        for n in agent_counts:
            log(f"{n} agents")
            set_agents(box, n)
            for k in hosts:
                for mode, env in modes.items():
                    m = measure(box, env, names[:k], args.rounds)
                    log(f"  {k} names, {mode}: {m}")
                    rows.append((k, n, mode, m))
        for name in names:  # the masters ControlPersist left running
            subprocess.run([*master, "-O", "exit", name], capture_output=True)
        box.exec(["systemctl", "stop", "clowder-control.service", "clowder-ptyhost.service"])
    today = datetime.date.today().isoformat()
    print("## 9. Fleet status: hosts x agents\n")
    print(f"`python3 tools/sysinstance.py run --name fleet-bench -- VENV/bin/python "
          f"bench/fleet.py --hosts {args.hosts} --agents {args.agents} --rounds "
          f"{args.rounds}` (issue 17), {today}: one ssh box (tools/sshhost.py) with N "
          f"agents, reached under K ssh config aliases, `clowderctl --host n1 ... --host "
          f"nK status --json`; per refresh, {args.rounds} refreshes after one warm-up. "
          f"\"fresh ssh\": clowderctl as it is (one new ssh per host per refresh); "
          f"\"ControlMaster\": the same with `ControlMaster=auto, ControlPersist` in "
          f"$CLOWDER_SSH. bytes: both directions on the wire (ssh included); JSON: what "
          f"the command printed.\n")
    print("| hosts K | agents N | ssh | latency median / max | TCP connections | "
          "bytes on the wire | JSON printed |")
    print("|---|---|---|---|---|---|---|")
    for k, n, mode, m in rows:
        print(f"| {k} | {n} | {mode} | {m['median'] * 1000:.0f} / {m['max'] * 1000:.0f} ms "
              f"| {m['conns']:.1f} | {m['bytes'] / 1024:.1f} KiB | "
              f"{m['json'] / 1024:.1f} KiB |")
    print("<!-- end of the fleet -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
