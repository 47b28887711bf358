"""Turn a results file into docs/bench.md (always) and docs/bench.png (with matplotlib).

A results file holds lines `BENCHRESULT <name> <json>`: `meta` and one per figure from
inner.py, then `run` from run.py.  `python report.py --plot RESULTS PNG` draws the plot
and needs matplotlib (run.py calls it with the plot venv's interpreter); the rest of
this module uses the standard library only.
"""

from __future__ import annotations

import json
import sys

PREFIX = "BENCHRESULT "
STALLED = "clowder, 2nd client stalled"
PEER_ORDER = ["raw pty", "tmux", "screen", "dtach", "abduco", "clowder", "clowderctl", STALLED]
ACTIONS = ("restart", "kill -9", "hand-off")

HOW = """\
## How to run

    python3 bench/run.py            # full: 100 MB, 5 rounds, N = 10, 100, 1000
    python3 bench/run.py --quick    # check run: 20 MB, 3 rounds, N = 10, 100, 1000
    python3 bench/run.py --figures repaint,echo --instance my-bench   # some figures only

As root.  It installs tmux, screen and dtach from Debian if missing (abduco is not
packaged for Debian 12 and is measured only if an `abduco` is on PATH), copies the tree
to /opt/clowder-bench/src, installs it into /opt/clowder-bench/venv, boots a private
systemd instance (tools/sysinstance.py) and runs every peer and clowder inside it, in
interleaved rounds (every peer once per round, the first one rotating).  Raw results
are kept in /opt/clowder-bench/results/.  Not part of the test suite; nothing here
asserts on time.

    python3 bench/tables.py docs/bench.md docs/bench.png   # redraw the plot alone

redraws docs/bench.png from this file's tables (with matplotlib), for a change of the
plot without a run (the raw results stay on the machine that ran it).
"""

WHAT = """\
## What each figure measures

**1. Throughput.** A fresh session per measurement runs
`stty -echo; (answer PONG to lines until "go"); cat FILE; print DONE`.  The peer's
client is attached in a pty of ours (80x24, TERM=xterm-256color; then every peer again
at 200x50, the session the same size); for clowder, either
the minimal client that speaks `clowder_wire` directly (`clowder`: splits frames
and keeps the Output bytes, nothing more) or `clowderctl attach` in a pty
(`clowderctl`).  A ping/PONG round trip proves the path is live, then the clock runs
from typing `go` to DONE reaching the attached client.  The raw pty is the limit: the
job on a pty whose master this process reads.  tmux and screen redraw a screen rather
than forward every byte, so they are timed to the same event (the end of the job on
the client's screen), not to a byte count.  MB = 10^6 bytes of the file.  Relay CPU is
the server plus client processes' CPU time (/proc/PID/schedstat) during the timed part,
per 100 MB (for clowder: ptyhostd and its standby; the minimal client's is this
process's).  The tmux and screen clients show no CPU because their servers write to the
client's terminal directly (the client hands its tty over).
"x raw" and "x tmux" are ratios of the medians; "paired" is the median of the ratios
taken within each round (less sensitive to the machine's load drifting).
"clowder, 2nd client stalled": clowder's measurement again, with a second, read-only
client attached to the same session that never reads (its receive buffer shrunk to
4 KiB): the session and the reading client should not notice it (issue 4, acceptance 4;
the test `test_stalled_client_is_bounded_and_repainted` checks memory and correctness
at 100 MB, this table the speed).

**2. Restart blackout.** clowder holds N sessions (N-1 `sleep infinity`, one probe
running `cat`) with the minimal client attached to the probe.  The clock starts just
before `systemctl restart clowder-ptyhost` is launched (or before `kill -9` of its
main PID); the client waits for the old host to close its connection, reconnects at
once (it waits in the socket's backlog, which systemd keeps), then: Welcome ("host
answers"), ListSessions ("ps answered"), Attach, one key typed and its echo received
("bytes flow", the headline).  After every trial all N sessions must be listed as
running; any shortfall is reported.  The floor is clowder-bench-floor.service
(bench/floor_service.py): a trivial socket-activated Type=notify service, in the same
interpreter, that gets N parked pty masters back from the FD store, sends READY=1 and
echoes; same clock, same client (connect, one byte, its echo).  The bare floor is the
same service with nothing parked.  "hand-off" is `systemctl reload clowder-ptyhost`:
the installed code is first run once as a check, then the host execs it in the same
process; the client's connection closes at the exec.  "clowderctl attach": the real
client, attached to the probe in a pty for the whole run, lives each restart and kill -9
on its own (it sees its connection end, reconnects and reattaches, ctl/commands/attach.py);
once the old host has exited (its pidfd), a key is typed into its terminal, and "bytes
flow" is when the echo shows there, from the same clock start.  Not run for the hand-off,
whose old host does not exit.

**3. Keystroke echo.** The session runs `stty raw -echo; exec cat`, so the program (not
the tty) writes each key back.  A sample is the time from writing one byte into the
client's terminal (or one Input frame) to that byte arriving in what the client draws;
samples are 5-15 ms apart.  "idle": nothing else runs in the instance.  "flood":
meanwhile another session of the same peer (in the same server for tmux and clowder;
screen, dtach and the raw pty have one process or pty per session anyway) cats the
throughput file in a loop to its own attached client, drained by a `cat` process.
"100 x 100 KB/s" (the scale figure): meanwhile 100 other sessions in the same server,
no client attached, each print 100 KB/s of log lines (a paced Python writer, a 2 KB
chunk every 20 ms); tmux and clowder only (screen and dtach run a process per session,
so the load would not share their client's server).  The server's CPU share during the
samples shows the load was really there.  "32 floods" (a crowd): meanwhile 32 other
sessions in the same server, no client attached, each cat the throughput file in a loop
as fast as the server takes it (another user's agents all printing at once); the same
peers and CPU share.

**4. Memory per session.** Sessions are added without a client (1, then 10, then 100)
and the PSS (/proc/PID/smaps_rollup) of the peer's server processes is summed: tmux's
one server; one SCREEN / dtach / abduco process per session; ptyhostd and its standby
(a second interpreter that takes over a crash, ptyhostd/standby.py).  The programs
in the sessions are not counted.  Marginal = (PSS at 100 - PSS at 1) / 99.  Two loads:
idle, and after each session printed 2,000 lines of ~70 characters.  For clowder the
growth of systemd's own PSS (PID 1 of the instance) is shown beside it: each session is
a transient unit that systemd keeps.

**5. Repaint latency.** The session draws a full 80x24 screen (23 rows of text with
colours and bold, then a marker at the end of the last row) and sleeps.  A sample is
the time from the attach's start to the marker reaching the client, i.e. the repaint
has drawn the whole screen: for `clowder`, from connecting (Hello, Attach, Attached,
the repaint's Output frames); for `clowderctl` (`attach --history 0`), tmux (`tmux
attach`) and screen (`screen -x`), from starting the client process in a pty of ours,
so theirs include a process start (a C program's ~2 ms; Python's ~60 ms for
clowderctl).  "idle": a quiet session, after one warm-up attach (clowder makes a
session's model on its first attach).  "after flood": a fresh session first cats the
throughput file with no client attached, then draws the screen; the attach starts the
moment the job has written its last byte.  "first": the same with no flood (a fresh
session's first attach, the moment it has drawn): after flood over first is what the
flood itself adds; a first attach also pays what a warm one does not (for clowder the
screen pool's thread wake-ups).  dtach and abduco keep no screen, so they have no
repaint to time.

**8. Snapshots, and echo beside snapshots of the largest screen** (`bench/fig_snapshot.py`).
(a) The repaint figure's 80x24 screen: snapshots of a quiet session, then one snapshot
right after a fresh session's `cat` of the throughput file (a fresh session per format
and round), asked the moment the job has written its last byte, and "first": one
snapshot of a fresh session that drew the screen with no flood, asked the same way.
clowder: a GetSnapshot
of each format on an open connection; tmux: `tmux capture-pane -p` (text) and `-p -e`
(ansi), a process start included.  The repaint row is figure 5's, same run.  (b) A
500x500 session (clowder's 250,000-cell cap; tmux gets the same size) full of coloured
words; another session in the same server echoes keystrokes (figure 3's sampling) while
a process of ours snapshots the big screen in a loop, one format per case.  ANSI, HTML
and JSON of that screen are over 1 MiB: the host makes them and answers `too-large`
(counted under "answers").  The control keeps one core busy outside the server
(`md5sum /dev/zero`): what the machine's cores alone cost the echo meanwhile.
"""


def line(name: str, value) -> str:
    return PREFIX + name + " " + json.dumps(value)


def load(path: str) -> dict:
    out = {}
    with open(path) as f:
        for text in f:
            if text.startswith(PREFIX):
                name, _, body = text[len(PREFIX):].partition(" ")
                out[name] = json.loads(body)
    return out


def _ordered(peers: dict) -> list[str]:
    return [p for p in PEER_ORDER if p in peers] + [p for p in peers if p not in PEER_ORDER]


def _f(value, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if value is None else fmt.format(value)


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _throughput_rows(peers: dict) -> list:
    rows = []
    for name in _ordered(peers):
        s = peers[name]
        if "mb_s" not in s:
            rows.append([name, "failed", "", "", "", "", "", "; ".join(s.get("errors", []))])
            continue
        rows.append([
            name, _f(s["mb_s"]), _f(s["seconds"], "{:.2f}"),
            _f(s.get("x_raw"), "{:.2f}") + f" ({_f(s.get('x_raw_paired'), '{:.2f}')})",
            _f(s.get("x_tmux"), "{:.2f}") + f" ({_f(s.get('x_tmux_paired'), '{:.2f}')})",
            _f(s["relay_cpu_s_per_100mb"], "{:.2f}"),
            ", ".join(f"{v:.1f}" for v in s["mb_s_all"]),
            "; ".join(s.get("errors", [])) or "",
        ])
    return rows


def _throughput(res: dict) -> str:
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    peers = res["peers"]
    head = ["peer", "MB/s", "s", "x raw (paired)", "x tmux (paired)",
            "relay CPU s / 100 MB", "each round MB/s", "errors"]
    mb = res["file_bytes"] / 1e6
    out = (f"`cat` of {mb:g} MB to an attached client in a {res.get('term', '80x24')} "
           f"terminal; medians of {res['rounds']} interleaved rounds.\n\n"
           + _table(head, _throughput_rows(peers)))
    stalled = peers.get(STALLED, {})
    if "x_alone" in stalled:
        out += (f"\nWith a second client attached to the session and stalled (it never "
                f"reads), the session and the reading client ran at "
                f"{stalled['mb_s']:.1f} MB/s: {stalled['x_alone']:.2f} x clowder with no "
                f"second client (paired within rounds: {_f(stalled.get('x_alone_paired'), '{:.2f}')}).\n")
    for term, at in res.get("at", {}).items():
        out += (f"\nThe same in a {term} terminal (issue 13 sets its throughput goal at "
                "this size), all peers in the same rounds:\n\n"
                + _table(head, _throughput_rows(at)))
    return out


def _blackout(res: dict) -> str:
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    out = []
    bare = res.get("bare_floor", {})
    out.append("Bare floor (trivial notify service, nothing parked), bytes flow again after: "
               f"restart {_f(bare.get('restart', {}).get('bytes_flow_ms'))} ms, "
               f"kill -9 {_f(bare.get('kill -9', {}).get('bytes_flow_ms'))} ms.\n")
    rows = []
    problems = []
    for n, entry in res["by_count"].items():
        for action in ACTIONS:
            c = entry.get("clowder", {}).get(action, {})
            if not c:
                continue
            fl = entry.get("floor", {}).get(action, {})
            ctl = entry.get("clowderctl", {}).get(action, {})
            ratio = (c["bytes_flow_ms"] / fl["bytes_flow_ms"]
                     if c.get("bytes_flow_ms") and fl.get("bytes_flow_ms") else None)
            rows.append([
                n, action, _f(c.get("bytes_flow_ms")), _f(ctl.get("bytes_flow_ms")),
                _f(c.get("dark_ms")),
                _f(c.get("ps_answered_ms")),
                _f(c.get("old_gone_ms")), _f(c.get("new_exec_ms")), _f(c.get("ready_ms")),
                _f(fl.get("new_exec_ms")), _f(fl.get("bytes_flow_ms")),
                _f(ratio, "{:.1f}"),
                ", ".join(f"{v:g}" for v in c.get("bytes_flow_all_ms", [])),
            ])
            problems += [f"N={n} {action}: {p}" for p in c.get("problems", [])]
            problems += [f"N={n} {action} (clowderctl): {p}" for p in ctl.get("problems", [])]
        problems += [f"N={n}: {e}" for e in entry.get("errors", [])]
    out.append(f"Medians of {res['rounds']} trials each, in ms from the restart (or kill) "
               "being issued.\n")
    out.append(_table(["N", "how", "clowder: bytes flow", "clowderctl attach: bytes flow",
                       "no connection", "ps answered",
                       "old host gone",
                       "new host exec'd", "new host READY", "floor: new exec'd",
                       "floor (N parked): bytes flow", "x floor", "clowder each trial"], rows))
    out.append("\n\"old host gone\": its connection to the client closed; \"exec'd\" and "
               "\"READY\": systemd's own timestamps (ExecMainStartTimestampMonotonic, "
               "ActiveEnterTimestampMonotonic) of the new main process.  READY to bytes flowing "
               "is the client's reconnect and attach.  \"no connection\": from the old "
               "connection's close to bytes flowing again, the time the client really had "
               "nothing (a hand-off keeps serving while it checks the new code).  The "
               "hand-off keeps the main PID, so systemd's stamps do not apply, and the floor "
               "has none: compare it with the restart rows.\n")
    extra = []
    for n, entry in res["by_count"].items():
        if "spawn_ms_per_session" in entry:
            fds = entry.get("host_fds") or {}
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(fds.items()))
            extra.append(f"spawning up to N={n}: {entry['spawn_ms_per_session']:.1f} ms a "
                         f"session ({_f(entry.get('spawn_ms_last10'))} ms each for the last "
                         "10; one Spawn request at a time on one connection); ptyhostd's open "
                         f"fds at N={n}: {sum(fds.values())} ({kinds})")
    st = res.get("startup", {})
    if st:
        extra.append(f"the bench venv's interpreter: {_f(st.get('python_bare_ms'))} ms to start "
                     f"and exit bare, {_f(st.get('python_import_ptyhostd_ms'))} ms to start and "
                     "import ptyhostd (all of its modules)")
    if "stop_seconds_at_max" in res:
        extra.append(f"`systemctl stop clowder-ptyhost` with the largest N: "
                     f"{res['stop_seconds_at_max']:.1f} s")
    if extra:
        out.append("\n" + "\n".join(f"- {e}" for e in extra) + "\n")
    if problems:
        out.append("\nProblems seen:\n\n" + "\n".join(f"- {p}" for p in problems) + "\n")
    return "\n".join(out)


def _echo(res: dict) -> str:
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    peers = res["peers"]
    loads = res.get("loads", ["idle"])

    def get(name, load, key):
        return peers.get(name, {}).get(load, {}).get(key)
    rows = []
    for name in _ordered(peers):
        row = [name]
        for load in loads:
            p50, tmux = get(name, load, "p50_ms"), get("tmux", load, "p50_ms")
            row += [_f(p50, "{:.2f}"), _f(get(name, load, "p99_ms"), "{:.2f}"),
                    _f(get(name, load, "max_ms"), "{:.2f}"),
                    _f(p50 / tmux if p50 and tmux else None, "{:.1f}")]
        row += [str(get(name, loads[0], "samples") or 0), "; ".join(peers[name]["errors"])]
        rows.append(row)
    header = ["peer"]
    for load in loads:
        header += [f"{load}: p50 ms", "p99 ms", "max ms", "p50 x tmux"]
    out = (f"{res['samples_per_round']} keystrokes a round, {res['rounds']} rounds, pooled "
           "(samples per load).\n\n" + _table(header + ["samples", "errors"], rows))
    for kind in ("scale", "crowd"):
        out += _many(res, kind)
    return out


def _many(res: dict, kind: str) -> str:
    """The paragraph of a load of many sessions in the server (fig_echo.MANY)."""
    peers, loads, many = res["peers"], res.get("loads", ["idle"]), res.get(kind)
    if not many:
        return ""
    load = many.get("load", loads[-1])  # older results: the scale load was the last
    tmux = peers.get("tmux", {}).get(load, {}).get("p99_ms")
    parts = []
    for name in _ordered(peers):
        d = peers[name].get(load, {})
        if "p50_ms" in d:
            parts.append(f"{name} p50 {d['p50_ms']:.2f} ms, p99 {d['p99_ms']:.2f} ms"
                         + (f" ({d['p99_ms'] / tmux:.1f} x tmux's p99)"
                            if tmux and name != "tmux" else "")
                         + (f", server CPU {d['server_cpu_share'] * 100:.0f} %"
                            if d.get("server_cpu_share") is not None else ""))
    what = (f"each print {many['bytes_per_s'] / 1e3:g} KB/s" if kind == "scale"
            else "each cat the flood's file in a loop, no client attached")
    return (f"\n\"{load}\" ({kind}): {many['sessions']} other sessions in the same "
            f"server {what} while the client types in another; only the peers that hold "
            "many sessions in one server.  " + "; ".join(parts) + ".\n")


def _memory(res: dict) -> str:
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    rows = []
    for name in _ordered(res["peers"]):
        s = res["peers"][name]
        row = [name]
        for load in ("idle", "2000 lines"):
            m = s.get(load, {})
            if "error" in m:
                row += ["failed", m["error"][:60]]
                continue
            pss = m.get("pss_kb", {})
            row += [_f(m.get("per_session_kb_1_100")) + f" ({_f(m.get('per_session_kb_1_10'))})",
                    " / ".join(str(pss.get(k, "-")) for k in ("1", "10", "100"))]
        mine = s.get("2000 lines", {}).get("per_session_kb_1_100")
        theirs = res["peers"].get("tmux", {}).get("2000 lines", {}).get("per_session_kb_1_100")
        row.append(_f(mine / theirs if mine and theirs else None, "{:.2f}"))
        pid1 = s.get("idle", {}).get("pid1_per_session_kb_1_100")
        row.append(_f(pid1) if name == "clowder" else "")
        rows.append(row)
    return ("kB of PSS per session, marginal over 1..100 (over 1..10 in brackets), and the "
            "servers' total PSS in kB at 1 / 10 / 100 sessions.\n\n"
            + _table(["peer", "idle: kB a session", "idle: PSS 1/10/100",
                      "2000 lines: kB a session", "2000 lines: PSS 1/10/100",
                      "2000 lines: x tmux", "systemd PID 1, kB a session (idle)"], rows))


def _repaint(res: dict) -> str:
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    peers = res["peers"]
    rows = []
    for name in _ordered(peers):
        row = [name]
        for load in ("idle", "after flood"):
            d = peers[name].get(load, {})
            row += [_f(d.get("median_ms"), "{:.1f}"), _f(d.get("max_ms"), "{:.1f}"),
                    _f(d.get("x_tmux"), "{:.2f}")]
        first = peers[name].get("first", {}).get("median_ms")
        after = peers[name].get("after flood", {}).get("median_ms")
        row += [_f(first, "{:.1f}"), _f(after / first if first and after else None,
                                         "{:.2f}")]
        row.append("; ".join(peers[name].get("errors", [])))
        rows.append(row)
    for name, why in res.get("no_repaint", {}).items():
        rows.append([name, "-", "", "", "-", "", "", "-", "", f"no repaint: {why}"])
    mb = res["flood_bytes"] / 1e6
    out = (f"Time from the attach's start to the whole 80x24 screen on the client, ms; "
           f"idle: {res['attaches_idle']} attaches a round after a warm-up, after flood: "
           f"one attach right after {mb:g} MB, first: the same with no flood (a fresh "
           f"session's first attach); {res['rounds']} rounds.\n\n"
           + _table(["peer", "idle: median ms", "max ms", "x tmux", "after flood: median ms",
                     "max ms", "x tmux", "first (no flood): median ms", "after / first",
                     "errors"], rows))
    m = res.get("model")
    flood = peers.get("clowder", {}).get("after flood", {})
    if m:
        out += (f"\nAfter a flood of any size: with ghostty, clowder's model is fed every "
                f"byte as it comes (the pty is not read while the model is more than ~2 ms of "
                f"its parsing behind, ptyhostd/session.py MODEL_LAG_SECONDS), so an attach "
                f"right after a flood parses at most that much first, then renders "
                f"({m['repaint_80x24_ms']:.1f} ms for 80x24, {m['repaint_200x50_ms']:.1f} ms "
                f"for 200x50, in this process): the repaint after {mb:g} MB took "
                f"{_f(flood.get('median_ms'), '{:.1f}')} ms (max "
                f"{_f(flood.get('max_ms'), '{:.1f}')} ms).  With pyte (no ghostty) the model "
                f"is fed lazily and rebuilt from the newest {m['catch_up_bytes'] // 1024} KiB "
                f"({m['feed_catch_up_ms']:.0f} ms of pyte here).  tmux and screen parse every "
                "byte too (which, like clowder's model, paces their throughput, table 1).\n")
    return out


def _snapshot(res: dict, repaint: dict | None = None) -> str:
    """Figure 8 (fig_snapshot.py), with the repaint figure's ratios of the same run."""
    if "error" in res:
        return f"Failed:\n\n```\n{res['error']}\n```\n"
    peers = res["peers"]
    mb = res["flood_bytes"] / 1e6
    rows = []
    for name in _ordered(peers):
        for fmt, d in peers[name].get("snapshot", {}).items():
            rows.append([name, f"snapshot {fmt}", _f(d["idle_ms"]), _f(d["after_flood_ms"]),
                         _f(d["after_flood_max_ms"]), _f(d["ratio"], "{:.2f}"),
                         _f(d.get("first_ms")), _f(d.get("after_flood_x_first"), "{:.2f}")])
    for name, d in sorted((repaint or {}).get("peers", {}).items()):
        idle, after = d.get("idle", {}), d.get("after flood", {})
        first = d.get("first", {}).get("median_ms")
        if idle.get("median_ms") and after.get("median_ms"):
            rows.append([name, "repaint (attach to first paint, figure 5's)",
                         _f(idle["median_ms"]), _f(after["median_ms"]), _f(after["max_ms"]),
                         _f(after["median_ms"] / idle["median_ms"], "{:.2f}"), _f(first),
                         _f(after["median_ms"] / first if first else None, "{:.2f}")])
    out = (f"(a) One snapshot of a quiet 80x24 session (median of "
           f"{res['snapshots_idle']} a round, after a warm-up) and one right after {mb:g} MB "
           f"of output (a fresh session a format and round), ms; first: the same as after "
           f"the flood with no flood (a fresh session's first snapshot); {res['rounds']} "
           f"rounds.\n\n"
           + _table(["peer", "what", "idle ms", "after flood ms", "max ms",
                     "after / idle", "first (no flood) ms", "after / first"], rows))
    cols, nrows = res["big"]
    rows = []
    for name in _ordered(peers):
        echo = peers[name].get("echo", {})
        base = echo.get("idle", {})
        for load, d in echo.items():
            answers = ", ".join(f"{k} {v}" for k, v in sorted(d.get("answers", {}).items()))
            rows.append([name, load, _f(d["p50_ms"], "{:.2f}"), _f(d["p99_ms"], "{:.2f}"),
                         _f(d["max_ms"], "{:.1f}"),
                         _f(d["p99_ms"] / base["p99_ms"] if base.get("p99_ms") else None,
                            "{:.1f}"),
                         _f(d.get("snapshot_ms")), str(d.get("snapshots", "")), answers])
    out += (f"\n(b) Another session's keystroke echo while snapshots of a {cols}x{nrows} "
            f"screen full of coloured text are taken one after another, "
            f"{res['samples_per_round']} keystrokes a round and format, pooled.\n\n"
            + _table(["peer", "snapshots of the big screen", "echo p50 ms", "p99 ms",
                      "max ms", "p99 x idle", "one snapshot, median ms", "snapshots",
                      "answers"], rows))
    errs = ["; ".join(peers[n].get("errors", [])) for n in _ordered(peers)]
    if any(errs):
        out += "\nErrors: " + " | ".join(e for e in errs if e) + "\n"
    return out


def markdown(results: dict, png: str | None, results_path: str) -> str:
    run = results.get("run", {})
    meta = results.get("meta", {})
    out = ["# Benchmarks: clowder beside tmux, screen, dtach and abduco\n"]
    kind = "quick check run (`--quick`)" if run.get("quick") else "full run"
    out.append(
        f"Generated by `python3 bench/run.py{' --quick' if run.get('quick') else ''}` on "
        f"{run.get('date', '?')}, {kind}, source {run.get('revision', '?')}.  Machine: "
        f"{meta.get('nproc', '?')} cores, load average "
        f"{_f((meta.get('loadavg_start') or [None])[0], '{:.2f}')} at the start; other work "
        "was running on it, so absolute numbers are noisy and the ratios taken within a "
        "round hold better than MB/s or ms.  Results file: "
        f"`{results_path}`.\n")
    if png:
        out.append(f"![benchmarks]({png})\n")
    versions = meta.get("versions", {})
    if versions:
        out.append("Versions: " + "; ".join(f"{k} {v}" for k, v in versions.items() if v) + ".\n")
    skipped = dict(meta.get("skipped", {}))
    skipped.update({k: v for k, v in run.get("apt_skipped", {}).items() if k not in skipped})
    if skipped:
        out.append("Skipped: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + ".\n")
    sections = [("1. Throughput", "throughput", _throughput),
                ("2. Restart blackout", "blackout", _blackout),
                ("3. Keystroke echo latency, idle and while another session floods", "echo",
                 _echo),
                ("4. Host memory per session", "memory", _memory),
                ("5. Repaint latency for an attaching client, idle and after a flood",
                 "repaint", _repaint),
                ("8. Snapshots idle and after a flood; echo beside snapshots of the largest "
                 "screen", "snapshot",
                 lambda res: _snapshot(res, results.get("repaint")))]
    for title, key, fn in sections:
        out.append(f"## {title}\n")
        out.append(fn(results[key]) if key in results else "Not run.\n")
    out.append(WHAT)
    out.append(HOW)
    return "\n".join(out)


# --- the plot (matplotlib) ----------------------------------------------------------------


PEERS = ("tmux", "screen", "dtach", "abduco")  # the other programs, as the title names them
FIGURES = ("throughput", "blackout", "echo", "memory", "repaint")


def _title(results: dict) -> str:
    """"clowder beside" the peers really measured; skipped ones said as skipped."""
    skipped = dict(results.get("meta", {}).get("skipped", {}))
    skipped.update(results.get("run", {}).get("apt_skipped", {}))
    measured = [p for p in PEERS if p not in skipped and any(
        p in results.get(f, {}).get("peers", {}) for f in FIGURES)]
    out = "clowder beside " + ", ".join(measured) if measured else "clowder"
    gone = [p for p in PEERS if p in skipped]
    if gone:
        out += f" ({', '.join(gone)} skipped: {'; '.join(skipped[p] for p in gone)})"
    return out


def _legend(ax, ncol: int, log: bool = False) -> None:
    """A legend in room of its own above the tallest bar: the y axis is stretched so the
    bars end below the legend's rows (it hid the 1,000-session hand-off bar before)."""
    lo, hi = ax.get_ylim()
    rows = -(-len(ax.get_legend_handles_labels()[1]) // ncol)
    room = 1 + 0.13 * (rows + 1)  # the share of the height the bars may use, inverted
    ax.set_ylim(lo, hi * (hi / lo) ** (room - 1) if log else lo + (hi - lo) * room)
    ax.legend(fontsize=8, loc="upper left", ncol=ncol, framealpha=0.9)


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Five figures numbered as docs/bench.md's sections: 1-3 on top, 4 and 5 below, each
    # bottom one a half of the width (no empty slot).
    fig = plt.figure(figsize=(19, 10))
    gs = fig.add_gridspec(2, 6)
    panels = [fig.add_subplot(gs[0, 0:2]), fig.add_subplot(gs[0, 2:4]),
              fig.add_subplot(gs[0, 4:6]), fig.add_subplot(gs[1, 0:3]),
              fig.add_subplot(gs[1, 3:6])]
    run = results.get("run", {})
    fig.suptitle(_title(results) + (" (quick run)" if run.get("quick") else "")
                 + f" - {run.get('date', '')}, {results.get('meta', {}).get('nproc', '?')} cores")

    ax = panels[0]
    tp = results.get("throughput", {}).get("peers", {})
    names = [n for n in _ordered(tp) if "mb_s" in tp[n]]
    if names:
        vals = [tp[n]["mb_s"] for n in names]
        colors = ["#888" if n == "raw pty" else "#d62" if n.startswith("clowder") else "#48c"
                  for n in names]
        ax.bar(names, vals, color=colors)
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
        mb = results["throughput"]["file_bytes"] / 1e6
        ax.set_title(f"1. cat of {mb:g} MB to an attached client (median MB/s)")
        ax.set_xticks(range(len(names)), [n.replace(", ", ",\n") for n in names],
                      rotation=20)
    else:
        ax.set_title("1. throughput: not run")

    ax = panels[1]
    bo = results.get("blackout", {}).get("by_count", {})
    if bo:
        labels, series = [], {"clowder restart": [], "clowder kill -9": [],
                              "clowder hand-off": [],
                              "floor restart": [], "floor kill -9": []}
        for n, entry in bo.items():
            labels.append(f"N={n}")
            for key in series:
                who, action = key.split(" ", 1)
                series[key].append(entry.get(who, {}).get(action, {}).get("bytes_flow_ms") or 0)
        width = 0.16
        for i, (key, vals) in enumerate(series.items()):
            xs = [x + (i - 2) * width for x in range(len(labels))]
            ax.bar(xs, vals, width, label=key)
            if key.startswith("clowder"):
                for x, v in zip(xs, vals):
                    ax.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=7)
        bare = results["blackout"].get("bare_floor", {}).get("restart", {}).get("bytes_flow_ms")
        if bare:
            ax.axhline(bare, color="#444", linestyle=":", label=f"bare floor restart {bare:.0f} ms")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylabel("ms until bytes flow again")
        ax.set_title("2. restart blackout (median)")
        _legend(ax, ncol=3)
    else:
        ax.set_title("2. restart blackout: not run")

    ax = panels[2]
    ec = results.get("echo", {}).get("peers", {})
    names = [n for n in _ordered(ec) if "p50_ms" in ec[n].get("idle", {})]
    if names:
        xs = range(len(names))
        loads = results["echo"].get("loads", ["idle", "flood"])
        bars = [(load, key) for load in loads for key in ("p50_ms", "p99_ms")]
        width = 0.8 / len(bars)
        for i, (load, key) in enumerate(bars):
            vals = [ec[n].get(load, {}).get(key) or 0 for n in names]
            ax.bar([x + (i - (len(bars) - 1) / 2) * width for x in xs], vals, width,
                   label=f"{load} {key[:3]}")
        ax.set_xticks(list(xs), names, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title("3. keystroke echo through an attached client")
        _legend(ax, ncol=len(loads), log=True)
    else:
        ax.set_title("3. echo: not run")

    ax = panels[3]
    me = results.get("memory", {}).get("peers", {})
    names = [n for n in _ordered(me) if "per_session_kb_1_100" in me[n].get("idle", {})]
    if names:
        xs = range(len(names))
        for off, load in ((-0.2, "idle"), (0.2, "2000 lines")):
            vals = [max(0.1, me[n].get(load, {}).get("per_session_kb_1_100") or 0.1)
                    for n in names]
            ax.bar([x + off for x in xs], vals, 0.4, label=load)
            for x, v in zip(xs, vals):
                ax.text(x + off, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(list(xs), names)
        ax.set_ylabel("kB PSS a session (log)")
        ax.set_title("4. server memory per session, marginal over 1..100")
        _legend(ax, ncol=2, log=True)
    else:
        ax.set_title("4. memory: not run")

    ax = panels[4]
    rp = results.get("repaint", {}).get("peers", {})
    names = [n for n in _ordered(rp) if "median_ms" in rp[n].get("idle", {})]
    if names:
        xs = range(len(names))
        for off, load in ((-0.2, "idle"), (0.2, "after flood")):
            vals = [rp[n].get(load, {}).get("median_ms") or 0 for n in names]
            ax.bar([x + off for x in xs], vals, 0.4, label=load)
            for x, v in zip(xs, vals):
                ax.text(x + off, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(list(xs), names)
        ax.set_ylabel("ms to the full screen (log)")
        mb = results["repaint"].get("flood_bytes", 0) / 1e6
        ax.set_title(f"5. repaint on attach, idle and after {mb:g} MB (median)")
        _legend(ax, ncol=2, log=True)
    else:
        ax.set_title("5. repaint: not run")

    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--plot":
        plot(load(sys.argv[2]), sys.argv[3])
    else:
        raise SystemExit("usage: report.py --plot RESULTS PNG")
