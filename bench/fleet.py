#!/usr/bin/env python3
"""How a fleet status costs grow with hosts and agents (issue 17, "Scale").

    python3 tools/sysinstance.py run --name fleet-bench -- \\
        VENV/bin/python bench/fleet.py [--hosts 1,2,5,10,20] [--agents 1,10,50] [--rounds 5]

Run as root inside a systemd instance (it boots an ssh box there, tools/sshhost.py,
nested), from a tree installed in VENV.  One box runs clowder's units with N agents; it
is reached under K names (ssh config aliases, `Host n1 n2 ...` with one HostName), so
`clowderctl status --json` with `hosts: [n1, ..., nK]` in the client configuration (one
name is a fleet too, where one --host is not) is a fleet of K hosts of N agents each as
the client sees it: K ssh connections, K relays, K clowder-control answers (the one
box's sshd and daemon serve them all, on the same two cores: a pessimistic server).

For each K x N, ROUNDS refreshes, each measured as:
- latency: the wall time of the command (median; and the slowest);
- client CPU: user + system time of clowderctl and the ssh processes it ran (median; a
  ControlMaster's own master, detached, is not in it);
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
import resource
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


def children_cpu() -> float:
    """CPU seconds of the reaped children so far (clowderctl, and the ssh it reaped)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def refresh(env: dict, names: list[str]) -> tuple[float, int, int, float]:
    # The hosts from a client configuration: one name is a fleet too (one --host is not).
    config = os.path.join(env["FLEET_BENCH_DIR"], f"client-{len(names)}.yaml")
    with open(config, "w") as f:
        f.write("hosts:\n" + "".join(f"  - {n}\n" for n in names))
    cpu, start = children_cpu(), time.monotonic()
    r = subprocess.run([PYTHON, "-m", "ctl", "--timeout", "30", "status", "--json"],
                       env={**env, "CLOWDER_CLIENT_CONFIG": config}, capture_output=True,
                       cwd="/")
    took, cpu = time.monotonic() - start, children_cpu() - cpu
    if r.returncode not in (0, 4):
        raise RuntimeError(f"status over {len(names)} names exited {r.returncode}: "
                           f"{r.stderr.decode(errors='replace')[-2000:]}")
    hosts = json.loads(r.stdout)["hosts"]
    for h in hosts:
        if not h["answered"]:
            log(f"    {h['host']} did not answer: {h['error']}")
    return took, len(r.stdout), sum(h["answered"] for h in hosts), cpu


def measure(box, env, names, rounds) -> dict:
    refresh(env, names)  # warm: page cache, and the masters when ControlMaster is on
    times, sizes, cpus, missed = [], [], [], 0
    b0, c0 = veth_bytes(box), accepted(box)
    for _ in range(rounds):
        took, size, answered, cpu = refresh(env, names)
        missed += len(names) - answered
        times.append(took)
        sizes.append(size)
        cpus.append(cpu)
    return {"median": statistics.median(times), "max": max(times), "missed": missed,
            "cpu": statistics.median(cpus),
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
        # One sshd stands for K: sshd's default MaxStartups (10:30:100) drops connections
        # past 10 unauthenticated at once, which K boxes' K sshds would not.
        box.put("/etc/ssh/sshd_config.d/fleet-bench.conf", b"MaxStartups 200\n")
        box.exec(["systemctl", "restart", "ssh.service"], check=True)
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
        base = {**os.environ, "CLOWDER_REMOTE_CTL": f"{PYTHON} -m ctl",
                "FLEET_BENCH_DIR": tmp}
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
          f"agents, reached under K ssh config aliases, `clowderctl status --json` with "
          f"`hosts: [n1, ..., nK]` in the client configuration; per refresh, {args.rounds} refreshes after one warm-up. "
          f"\"fresh ssh\": clowderctl as it is (one new ssh per host per refresh); "
          f"\"ControlMaster\": the same with `ControlMaster=auto, ControlPersist` in "
          f"$CLOWDER_SSH. bytes: both directions on the wire (ssh included); JSON: what "
          f"the command printed; client CPU: clowderctl's and its ssh's. The box's sshd has `MaxStartups 200` (one sshd stands "
          f"for K; its default drops connections past 10 starting at once).\n")
    print("| hosts K | agents N | ssh | latency median / max | client CPU | TCP "
          "connections | bytes on the wire | JSON printed | hosts not answering |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, n, mode, m in rows:
        print(f"| {k} | {n} | {mode} | {m['median'] * 1000:.0f} / {m['max'] * 1000:.0f} ms "
              f"| {m['cpu'] * 1000:.0f} ms | {m['conns']:.1f} | {m['bytes'] / 1024:.1f} KiB | "
              f"{m['json'] / 1024:.1f} KiB | {m['missed']} of {k * args.rounds} |")
    print("<!-- end of the fleet -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
