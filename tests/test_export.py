"""Issue 16, acceptance 4: output timestamps and `clowderctl export`.

The stamps' rules are tested on a ring of our own (ptyhostd/stamps.py: the interval, the
bound, which stamp goes when full, a torn index); the cast's on bytes and stamps given
(ctl/cast.py: UTF-8 across events, bytes before any stamp).  Then under real systemd, a
session that prints a line every 0.3 s is exported as a cast that parses as asciinema v2,
whose times increase and span the printing, whose text is the backlog, and whose times
are the same after `systemctl restart`, `kill -9` of the host and a hand-off (reload);
`asciinema cat` accepts it; text and ansi are the history's; another user cannot export
the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import wait_for
from ctl import cast
from ptyhostd import pty, stamps
from ptyhostd.ring import Ring
from test_access import system_host  # noqa: F401  (alice, bob and the system host)

LINES = 12
GAP = 0.3  # seconds between the session's lines: they take LINES * GAP = 3.6 s
PRINTER = (f"for i in $(seq 1 {LINES}); do printf 'line %s \\303\\251\\n' $i; "
           f"sleep {GAP}; done; echo done-printing; exec sleep 100000")


# --- the index, on a ring of our own -----------------------------------------------------

@pytest.fixture
def ring():
    r = Ring.create("t", 1 << 20)
    yield r
    r.close()


def test_a_stamp_at_most_every_interval(ring):
    st = ring.stamps
    for i in range(100):  # 100 reads 1 ms apart: a stamp every 20 or 21 of them
        st.note(i * 10, 0, now=1000.0 + i * 0.001)
    offs = [off for off, _ in st.entries]
    assert offs[0] == 0 and 4 <= len(offs) <= 5, offs
    assert all(200 <= b - a <= 210 for a, b in zip(offs, offs[1:])), offs
    st.note(offs[-1], 0, now=2000.0)  # time moved, no bytes since the last stamp: none
    assert [off for off, _ in st.entries] == offs


def test_full_index_keeps_pauses_and_drops_what_left_the_ring(ring):
    st = ring.stamps
    t = 1000.0
    for i in range(stamps.SLOTS * 3):
        # Every 10th stamp follows a pause of 5 s; the others 25 ms apart.
        t += 5.0 if i % 10 == 0 else 0.025
        st.note(i * 100, 0, now=t)
    assert stamps.SLOTS - stamps.MERGE < len(st.entries) <= stamps.SLOTS, \
        "the index grew past its slots, or merged more than a batch"
    times = [t for _, t in st.entries]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert sum(g >= 5.0 for g in gaps) >= stamps.SLOTS * 3 // 10 - 1, \
        "a pause was merged away while shorter gaps were kept"
    # The ring moved on: stamps wholly before its tail go first.
    tail = st.entries[10][0]
    assert st.held(tail)[0][0] == tail and st.held(tail + 1)[0][0] == tail
    while len(st.entries) < stamps.SLOTS:  # full again
        t += 0.025
        st.note(st.entries[-1][0] + 100, 0, now=t)
    st.note(10 ** 9, tail, now=t + 10)
    assert st.entries[0][0] == tail and len(st.entries) == stamps.SLOTS - 9


def test_stamps_survive_adoption_and_a_torn_index(ring):
    master, slave, _ = pty.open_pair("t")
    try:
        for i in range(3):
            os.write(slave.fd, b"x" * 100)
            wait_for(lambda: _fill(ring, master.fd) or ring.head >= 100 * (i + 1), 5,
                     "the ring to read what was written")
            ring.stamps._last -= 1  # as if 1 s passed: the next read stamps
        before = list(ring.stamps.entries)
        assert [off for off, _ in before] == [0, 100, 200]
        again = Ring.adopt(os.dup(ring.fd.fd), "t")
        assert again.stamps.entries == before
        # A merge killed half-way leaves an entry twice: adoption keeps it once.
        again.stamps.entries.insert(2, before[1])
        again.stamps._write_from(0)
        third = Ring.adopt(os.dup(ring.fd.fd), "t")
        assert third.stamps.entries == before
        third.close()
        again.close()
    finally:
        master.close()
        slave.close()


def test_a_ring_of_older_code_starts_an_index(ring):
    """Older code left bytes 40-4095 of the header page zero: no stamps, then new ones."""
    ring._mm[stamps.AT:stamps.PAGE] = bytes(stamps.PAGE - stamps.AT)
    again = Ring.adopt(os.dup(ring.fd.fd), "t")
    assert again.stamps.entries == []
    again.stamps.note(0, 0, now=1000.0)
    third = Ring.adopt(os.dup(ring.fd.fd), "t")
    assert third.stamps.entries == [(0, 1000.0)]
    third.close()
    again.close()


def _fill(ring, fd) -> bool:
    try:
        ring.fill_from(fd)
    except BlockingIOError:
        pass
    return False


def test_cast_keeps_characters_whole_and_times_in_order():
    data = "héllo wörld".encode()
    _, evs = cast.events(data, 100, [[100, 50.0], [102, 50.5], [108, 51.25]])
    # Offset 102 falls inside "é": it goes whole into the later event.
    assert evs == [[0.0, "o", "h"], [0.5, "o", "éllo w"], [1.25, "o", "örld"]]
    # Bytes older than every stamp (a ring of older code) are at time 0.
    t0, evs = cast.events(data, 100, [[103, 50.0]])
    assert t0 == 50.0 and [e[0] for e in evs] == [0.0, 0.0]
    assert "".join(e[2] for e in evs) == data.decode()


# --- under systemd -----------------------------------------------------------------------

def _cast(host, sid, user=None) -> tuple[dict, list]:
    out = host.ctl("export", sid, "--format", "cast", user=user).stdout.decode()
    lines = out.splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _check_cast(host, sid, header, evs) -> None:
    assert header["version"] == 2
    assert (header["width"], header["height"]) == (80, 24)
    assert abs(header["timestamp"] - host.ps()[sid]["created"]) < 60
    times = [e[0] for e in evs]
    assert all(e[1] == "o" for e in evs)
    assert times == sorted(times), f"event times go back: {times}"
    line_times = {}
    for t, _, text in evs:
        for n in range(1, LINES + 1):
            if f"line {n} é" in text:
                line_times.setdefault(n, t)
    assert sorted(line_times) == list(range(1, LINES + 1)), evs
    span = line_times[LINES] - line_times[1]
    printed = (LINES - 1) * GAP  # 3.3 s from the first line to the last
    # Wide bounds for a loaded machine; all times 0 (or one stamp) fails the lower one.
    assert printed * 0.6 < span < printed + 30, f"the lines span {span:.2f} s: {evs}"
    assert len(set(line_times.values())) >= LINES // 2, f"lines share times: {line_times}"
    assert "".join(e[2] for e in evs) == \
        host.backlog(sid).decode("utf-8", "replace"), "the cast's text is not the backlog"


def test_export_cast_times_survive_restart_kill9_and_handoff(host):
    sid = host.spawn("sh", "-c", PRINTER)
    wait_for(lambda: b"done-printing" in host.backlog(sid), 30,
             "the session to print its lines")
    header, evs = _cast(host, sid)
    _check_cast(host, sid, header, evs)
    path = os.path.join(host.env.get("HOME", "/root"), "export-test.cast")
    host.ctl("export", sid, "-o", path)
    with open(path) as f:
        assert f.read().splitlines()[1:] == [json.dumps(e, ensure_ascii=False) for e in evs]
    if shutil.which("asciinema"):  # Makefile APT_PKGS installs it
        # asciinema reads its keys from /dev/tty: script(1) gives it a terminal.
        proc = subprocess.run(["script", "-qec", f"asciinema cat {path}", "/dev/null"],
                              stdin=subprocess.DEVNULL, capture_output=True)
        assert proc.returncode == 0, proc.stderr
        assert b"line 12 \xc3\xa9" in proc.stdout
    else:
        pytest.fail("asciinema is not installed (make deps installs it)")
    os.unlink(path)
    def handoff():  # `systemctl reload` returns once the new process serves
        host.systemctl("reload", "clowder-ptyhost.service")
    for survive in (host.restart, host.kill9, handoff):
        survive()
        assert _cast(host, sid) == (header, evs), f"the cast changed across {survive.__name__}"
    # Output after the restarts is timed after what came before.
    host.ctl("send", sid, "x")  # sleep ignores it; the pty echoes it
    wait_for(lambda: len(_cast(host, sid)[1]) > len(evs), 10, "the echo to be exported")
    assert _cast(host, sid)[1][-1][0] >= evs[-1][0]


def test_export_text_and_ansi(host):
    sid = host.spawn("sh", "-c", "printf 'plain\\n\\033[31mred\\033[0m text\\r\\n"
                                 "50%%\\r100%%\\n'; echo end; exec sleep 100000")
    wait_for(lambda: b"end" in host.backlog(sid), 10, "the session to print")
    text = host.ctl("export", sid, "--format", "text").stdout.decode()
    assert text == "plain\nred text\n100%\nend\n", repr(text)
    ansi = host.ctl("export", sid, "--format", "ansi").stdout.decode()
    hist = host.ctl("history", sid, "--format", "ansi", "-n", "1000").stdout.decode()
    assert ansi == hist
    assert "red" in ansi and "100%" in ansi and "50%" not in ansi


def test_another_user_cannot_export(system_host):
    h = system_host
    sid = h.spawn("sh", "-c", "echo secret-output; exec sleep 100000", user="alice",
                  cwd="/home/alice")
    wait_for(lambda: b"secret-output" in h.backlog(sid, user="alice"), 10,
             "alice's session to print")
    assert b"secret-output" in h.ctl("export", sid, user="alice").stdout
    for fmt in ("cast", "text", "ansi"):
        proc = h.ctl("export", sid, "--format", fmt, user="bob", check=False)
        assert proc.returncode == 1, (fmt, proc)
        assert b"no such session" in proc.stderr and b"secret" not in proc.stdout
