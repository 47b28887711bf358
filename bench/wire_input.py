"""What a keystroke's Input frame costs to make and to read, through the general encoder
and decoder and through the fast paths (clowder_wire/host.py: encode_input and its
decoder), warm (back to back) and as a keystroke finds the caches (10 ms apart).

    python3 bench/wire_input.py [SAMPLES]

Medians in us; no systemd needed.  Used for docs/design.md "The keystroke's frame".
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import clowder_wire as P  # noqa: E402
from clowder_wire import frame  # noqa: E402


def _general_decode(kind: int, payload: bytes):
    fast = frame.FAST_DECODERS.pop(kind)
    try:
        return frame.decode(kind, payload)
    finally:
        frame.FAST_DECODERS[kind] = fast


def main() -> None:
    samples = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    wire = P.encode_input(b"x", 123456)
    [(kind, payload)] = P.FrameReader().frames(wire)
    cases = {
        "encode, general": lambda: P.encode(P.Input(data=b"x", seq=123456)),
        "encode, fast": lambda: P.encode_input(b"x", 123456),
        "decode, general": lambda: _general_decode(kind, payload),
        "decode, fast": lambda: frame.decode(kind, payload),
    }
    for gap in (0.0, 0.01):
        row = {}
        for name, fn in cases.items():
            took = []
            for _ in range(samples):
                began = time.perf_counter_ns()
                fn()
                took.append(time.perf_counter_ns() - began)
                if gap:
                    time.sleep(gap)  # a pause between keystrokes, not a wait
            row[name] = round(statistics.median(took) / 1e3, 2)
        print(f"{gap * 1e3:g} ms apart:", row)


if __name__ == "__main__":
    main()
