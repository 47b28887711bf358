"""The host's CPU an echoed keystroke, keys spaced as figure 3's and back to back.

    python3 tools/sysinstance.py run --name NAME -- VENV/bin/python bench/echo_cpu.py \\
        [TREE] [KEYS]

In one systemd instance: the host runs from TREE (handoff_dark.use; default the bench
venv's own), one session runs figure 3's echo job with the minimal client attached, and
KEYS keystrokes (default 300) are echoed three ways: 5-15 ms apart, back to back, and
5-15 ms apart again.  Prints the echo's p50 and the CPU time the host's main thread
(/proc/PID/schedstat) spent a keystroke, and, first, what the quiet host spends a second
(its timers), so that share of the spaced runs can be told apart.  docs/design.md,
"Where a flood's and an echo's time goes".
"""

from __future__ import annotations

import os
import random
import sys
import time

import clowder
import fig_echo
from common import cpu_seconds, median
from handoff_dark import use


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1]:
        use(sys.argv[1])
    else:
        clowder.install_units()
        clowder.start_host()
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    os.makedirs("/tmp/clowder-bench", exist_ok=True)
    rng = random.Random(1)
    pid = clowder.main_pid()
    term = clowder.ClowderPeer().open(fig_echo.ECHO_ARGV)
    try:
        fig_echo._ready(term)
        c0, w0 = cpu_seconds([pid]), time.monotonic()
        time.sleep(3)
        print(f"quiet host: {(cpu_seconds([pid]) - c0) / (time.monotonic() - w0) * 1e6:.0f}"
              " us of CPU a second", flush=True)
        for gap in ((0.005, 0.015), (0.0, 0.0), (0.005, 0.015)):
            lat = []
            c0 = cpu_seconds([pid])
            for i in range(keys):
                lat.append(fig_echo.echo_once(term, i))
                if gap[1]:
                    time.sleep(rng.uniform(*gap))
            spent = (cpu_seconds([pid]) - c0) / keys
            how = "back to back" if not gap[1] else "5-15 ms apart"
            print(f"{how}: echo p50 {median(lat) * 1e3:.3f} ms, host main thread "
                  f"{spent * 1e6:.0f} us of CPU a keystroke", flush=True)
    finally:
        term.close()


if __name__ == "__main__":
    main()
