"""A crash of the host, seen by a client that reattaches: time to its screen again.

figure 2 (fig_blackout.py) times raw bytes flowing again (a client at an offset, no
repaint); a terminal client (`clowderctl attach`) reattaches with a repaint, which needs
the new host's terminal model: the engine's load and the session's model rebuilt from
its ring.  Per engine, one session that printed 3,000 lines and a coloured last line;
per trial a `kill -9` of the host's main process (systemd starts the next one at once:
Restart=always), then, timed from it:

- "minimal": a protocol client (clowder_wire) connects (its connection waits in the
  socket's backlog) and attaches with a repaint: until the repaint's last line has come;
- "clowderctl": `clowderctl attach` on a pty of ours, attached before, reconnects by
  itself: until the last line is drawn again after its reset (ESC c).

Not `systemctl restart`: with it, `clowderctl` (connected before, reconnecting on its
own) was repainted 130-300 ms after the restart by hosts that needed ~0.5 s to load the
engine, which this figure cannot explain (one reset, one repaint per restart); a kill
gives both clients the same start, and the new host nothing from the old one.

No tmux column: a tmux server that restarts has no sessions to repaint.  Run inside a
private instance, as root:

    python3 tools/sysinstance.py run --name rr -- VENV/bin/python bench/restart_repaint.py \\
        --src . --engines ghostty,pyte --trials 5

``--src`` is the tree whose code the host runs (its units installed from it too).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import clowder  # noqa: E402
from common import (PtyTerminal, client_env, drain, median, read_until, run,  # noqa: E402
                    spawn_on_pty)

LAST = b"REPAINT-LAST-LINE"
PROGRAM = ["sh", "-c", "seq 1 3000; printf '\\033[1;31mREPAINT-LAST-LINE\\033[0m'; "
           "exec sleep 100000"]


def _install(src: str, engine: str) -> None:
    env = f"/usr/bin/env CLOWDER_SCREEN_ENGINE={engine} PYTHONPATH={src}"
    run(["env", f"PYTHONPATH={src}", clowder.PYTHON, "-m", "ctl", "install-units",
         "--system", "--exec-start", f"{env} {clowder.PYTHON} -m ptyhostd"])
    clowder.stop_host()
    clowder.start_host()


def _crash() -> tuple[int, float]:
    """kill -9 the host; (its pid, the time it was sent)."""
    old = clowder.main_pid()
    t0 = time.monotonic()
    os.kill(old, signal.SIGKILL)
    return old, t0


def _minimal(sid: str) -> float:
    import clowder_wire as P
    old, t0 = _crash()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(clowder.SOCKET)
        s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)) +
                  P.encode(P.Attach(session=sid, cols=80, rows=24)))
        frames, got = P.FrameReader(), b""
        s.settimeout(30)
        while LAST not in got:
            data = s.recv(1 << 16)
            if not data:
                raise RuntimeError("a host closed the repainting client")
            for m in frames.feed(data):
                if isinstance(m, P.Output):
                    got += m.data
    took = time.monotonic() - t0
    clowder.wait_ready_after(old)
    return took


def _clowderctl(term: PtyTerminal) -> float:
    drain(term, quiet=0.5, limit=10)  # what the last trial's reconnect drew
    old, t0 = _crash()
    seen = b""
    while True:  # the reconnect's reset (ESC c), then the repaint's last line after it
        if time.monotonic() - t0 > 30:
            raise TimeoutError(f"clowderctl: no repaint within 30 s ({len(seen)} bytes)")
        seen += term.read(1.0)
        reset = seen.rfind(b"\x1bc")
        if reset >= 0 and LAST in seen[reset:]:
            break
    took = time.monotonic() - t0
    clowder.wait_ready_after(old)
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True)
    p.add_argument("--engines", default="ghostty,pyte")
    p.add_argument("--trials", type=int, default=5)
    args = p.parse_args()
    src = os.path.abspath(args.src)
    for engine in args.engines.split(","):
        _install(src, engine)
        conn = clowder.Conn()
        sid = clowder.spawn(conn, PROGRAM)
        conn.close()
        proc, master = spawn_on_pty([clowder.PYTHON, "-m", "ctl", "attach", sid],
                                    client_env(PYTHONPATH=src))
        term = PtyTerminal(proc, master, name="clowderctl")
        read_until(term, LAST, 30)
        got: dict[str, list[float]] = {"minimal": [], "clowderctl": []}
        try:
            for _ in range(args.trials):
                got["minimal"].append(_minimal(sid))
                got["clowderctl"].append(_clowderctl(term))
        finally:
            term.close()
        for client, values in got.items():
            each = ", ".join(f"{v * 1e3:.0f}" for v in values)
            print(f"{engine} {client}: kill -9 -> repaint median {median(values) * 1e3:.0f} ms "
                  f"({each})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
