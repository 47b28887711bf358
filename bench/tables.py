"""Read docs/bench.md's tables back into the results the plot draws.

The raw results file of a run stays on the machine that ran it
(/opt/clowder-bench/results/); docs/bench.md is what the repository keeps.  To redraw
docs/bench.png after a change of the plot alone, without running the bench again:

    python3 bench/tables.py docs/bench.md docs/bench.png

(with matplotlib; bench/run.py makes a venv with it).  Only what the plot draws is read
back: each figure's medians, the peers that were skipped, the run's date and cores.
"""

from __future__ import annotations

import re
import sys


def _sections(text: str) -> dict[str, str]:
    """Each "## N. title" section's body, by N."""
    out = {}
    for m in re.finditer(r"^## (\d)\. [^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M):
        out[m.group(1)] = m.group(2)
    return out


def _table(body: str) -> list[list[str]]:
    """The first markdown table of ``body``: its rows (the header first), cells stripped."""
    rows = []
    for line in body.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-") for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows


def _num(cell: str) -> float | None:
    """The first number of a cell ("2.7 (-2.9)" -> 2.7); None for "-" or empty."""
    m = re.match(r"\s*(-?[\d.]+)", cell)
    return float(m.group(1)) if m else None


def _mb(body: str) -> float:
    m = re.search(r"(\d+(?:\.\d+)?) MB", body)
    return float(m.group(1)) if m else 0.0


def results(text: str) -> dict:
    """The results the plot needs, from the text of docs/bench.md."""
    res: dict = {"run": {}, "meta": {}}
    m = re.search(r"on (\S+?), (quick check run|full run)", text)
    if m:
        res["run"] = {"date": m.group(1), "quick": m.group(2) != "full run"}
    m = re.search(r"Machine: (\d+) cores", text)
    if m:
        res["meta"]["nproc"] = int(m.group(1))
    m = re.search(r"^Skipped: (.*)\.$", text, re.M)
    if m:
        res["meta"]["skipped"] = dict(
            (s.group(1), s.group(2)) for s in re.finditer(r"(\S+) \(([^)]*)\)", m.group(1)))
    sec = _sections(text)

    if "1" in sec:
        rows = _table(sec["1"])
        res["throughput"] = {"file_bytes": _mb(sec["1"]) * 1e6, "peers": {
            r[0]: {"mb_s": _num(r[1])} for r in rows[1:] if _num(r[1]) is not None}}

    if "2" in sec:
        rows = _table(sec["2"])
        head = rows[0]
        flow = head.index("clowder: bytes flow")
        floor = head.index("floor (N parked): bytes flow")
        by_count: dict = {}
        for r in rows[1:]:
            entry = by_count.setdefault(r[0], {"clowder": {}, "floor": {}})
            entry["clowder"][r[1]] = {"bytes_flow_ms": _num(r[flow])}
            if _num(r[floor]) is not None:
                entry["floor"][r[1]] = {"bytes_flow_ms": _num(r[floor])}
        m = re.search(r"Bare floor.*?restart ([\d.]+) ms, kill -9 ([\d.]+) ms", sec["2"])
        bare = {"restart": {"bytes_flow_ms": float(m.group(1))},
                "kill -9": {"bytes_flow_ms": float(m.group(2))}} if m else {}
        res["blackout"] = {"by_count": by_count, "bare_floor": bare}

    if "3" in sec:
        rows = _table(sec["3"])
        head = rows[0]
        loads = [h.split(":")[0] for h in head if h.endswith(": p50 ms")]
        peers: dict = {}
        for r in rows[1:]:
            for load in loads:
                i = head.index(f"{load}: p50 ms")
                p50, p99 = _num(r[i]), _num(r[i + 1])
                if p50 is not None:
                    peers.setdefault(r[0], {})[load] = {"p50_ms": p50, "p99_ms": p99}
        res["echo"] = {"loads": loads, "peers": peers}

    if "4" in sec:
        rows = _table(sec["4"])
        head = rows[0]
        cols = {"idle": head.index("idle: kB a session"),
                "2000 lines": head.index("2000 lines: kB a session")}
        res["memory"] = {"peers": {
            r[0]: {load: {"per_session_kb_1_100": _num(r[i])} for load, i in cols.items()}
            for r in rows[1:] if _num(r[cols["idle"]]) is not None}}

    if "5" in sec:
        rows = _table(sec["5"])
        head = rows[0]
        cols = {"idle": head.index("idle: median ms"),
                "after flood": head.index("after flood: median ms")}
        res["repaint"] = {"flood_bytes": _mb(sec["5"].split("\n\n")[0]) * 1e6, "peers": {
            r[0]: {load: {"median_ms": _num(r[i])} for load, i in cols.items()}
            for r in rows[1:] if _num(r[cols["idle"]]) is not None}}
    return res


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: tables.py BENCH_MD PNG")
    sys.path.insert(0, __file__.rpartition("/")[0] or ".")
    from report import plot
    with open(sys.argv[1]) as f:
        plot(results(f.read()), sys.argv[2])
