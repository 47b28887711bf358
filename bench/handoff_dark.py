"""A hand-off's dark time, two source trees side by side (issue 13: hand-off dark <= 60 ms).

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/handoff_dark.py \\
        OLD_TREE,NEW_TREE 10,1000 6 [ACTIONS]

ACTIONS: figure 2's trial kinds, comma-separated (default ``hand-off``; ``restart`` and
``kill-9`` for the blackout of a restart and of a crash, issue 13's <= 100 ms;
``ctl-restart`` and ``ctl-kill-9`` for the same through `clowderctl attach`, figure 2's
clowderctl_trial, the client from the bench venv for both trees).

In one systemd instance: a host with N sessions (N-1 idle, one probe running `cat` with
the minimal client attached, figure 2's setup); each trial is figure 2's hand-off trial
(fig_blackout.clowder_trial): `systemctl reload`, the client reads until its connection
closes ("old gone"), reconnects, lists the sessions, attaches and sees its keystroke
echoed ("bytes flow"); "dark" is the time between the two, the time the client had no
connection.  The host runs each tree in turn (switched by a restart, which keeps the
sessions, before each trial; the trees alternate, starting with the other one every
other round), so a loaded machine weighs on both alike.  Prints each trial and the
medians; docs/bench.md section 2 keeps what it printed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import clowder
import fig_blackout
from common import IDLE_ARGV, read_until, run

PY = sys.executable


def use(src: str) -> None:
    """Run the host from ``src`` (its hand-off execs the same tree: PYTHONPATH crosses),
    under the units ``src`` writes (a standby needs its unit's ExitType=cgroup)."""
    run(["/usr/bin/env", f"PYTHONPATH={src}", PY, "-m", "ctl", "install-units", "--system",
         "--exec-start", f"/usr/bin/env PYTHONPATH={src} {PY} -m ptyhostd"])
    run(["systemctl", "daemon-reload"])
    old = clowder.main_pid()
    if old:
        run(["systemctl", "restart", clowder.SERVICE])
        clowder.wait_ready_after(old)
    else:
        clowder.start_host()


def tree_args(rounds: int, third: int) -> tuple[list[str], int, int]:
    """The tree tools' command line, TREE_A,TREE_B [ROUNDS [N]], with these defaults."""
    argv = sys.argv
    return (argv[1].split(","), int(argv[2]) if len(argv) > 2 else rounds,
            int(argv[3]) if len(argv) > 3 else third)


def in_turn(srcs: list[str], rounds: int):
    """(round, tree) for ``rounds`` rounds of every tree in turn, the first one rotating
    each round so a loaded machine weighs on all alike; the host is switched to each
    tree (use) before it is given."""
    for r in range(rounds):
        for src in srcs[r % len(srcs):] + srcs[:r % len(srcs)]:
            use(src)
            yield r, src


def main() -> None:
    srcs = sys.argv[1].split(",")
    counts = [int(x) for x in sys.argv[2].split(",")]
    trials = int(sys.argv[3])
    actions = [a.replace("kill-9", "kill -9")
               for a in (sys.argv[4] if len(sys.argv) > 4 else "hand-off").split(",")]
    ctl = None
    use(srcs[0])
    conn = clowder.Conn()
    probe = clowder.spawn(conn, ["/bin/cat"], name="probe")
    have = 1
    for n in counts:
        for _ in range(n - have):
            clowder.spawn(conn, IDLE_ARGV)
        have = n
        conn.close()
        got: dict[tuple, list[dict]] = {(s, a): [] for s in srcs for a in actions}
        for t in range(trials):
            for src in (srcs if t % 2 == 0 else srcs[::-1]):
                for action in actions:
                    use(src)
                    if action.startswith("ctl-"):
                        ctl = ctl or fig_blackout.open_ctl(probe)
                        mark = fig_blackout._mark()  # reattached after the switch
                        ctl.write(mark)
                        read_until(ctl, mark, 30)
                    time.sleep(0.3)  # as figure 2 leaves between trials
                    if action.startswith("ctl-"):
                        r = fig_blackout.clowderctl_trial(action[4:], ctl)
                    else:
                        r = fig_blackout.clowder_trial(action, probe, n)
                    got[src, action].append(r)
                    print(n, action, src, {k: round(v * 1e3, 1) for k, v in r.items()
                                           if isinstance(v, float)},
                          r.get("problem", ""), flush=True)
        for (src, action), rs in got.items():
            for key in ("old_gone", "stopped", "new_exec", "ready", "ps_answered", "dark",
                        "bytes_flow"):
                vals = [r[key] * 1e3 for r in rs if key in r]
                if vals:
                    print(f"N={n} {action} {os.path.basename(src)} {key}: median "
                          f"{statistics.median(vals):.1f} ms, each "
                          f"{[round(v) for v in vals]}", flush=True)
        conn = clowder.Conn()
    conn.close()
    if ctl is not None:
        ctl.close()


if __name__ == "__main__":
    main()
