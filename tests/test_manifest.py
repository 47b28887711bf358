"""The manifest's two memfd copies (ptyhostd/manifest.py): a restart's start takes the
"left" mark off by writing the adopted body again, not every session re-encoded."""

from __future__ import annotations

import os

import pytest

from ptyhostd import manifest
from ptyhostd.manifest import SLOTS, Manifest

RECORDS = [b'{"id":"a1","state":"running","argv":["sh"]}', b'{"id":"b2","state":"exited"}']


def parked(m: Manifest) -> dict[str, int]:
    """The copies as a next start gets them from the FD store: new fds of the memfds."""
    return {slot: os.dup(m.fds[slot].fd) for slot in SLOTS}


def test_unmark_writes_the_adopted_sessions_without_the_restart_mark():
    old = Manifest.create()
    old.write_sessions(RECORDS, left="restart")
    m, content = Manifest.adopt(parked(old))
    assert content["left"] == "restart" and [r["id"] for r in content["sessions"]] == ["a1", "b2"]
    gen = m.generation
    assert m.unmark() is True
    after, content2 = Manifest.adopt(parked(m))
    assert "left" not in content2 and content2["sessions"] == content["sessions"], content2
    assert after.generation == gen + 1
    assert m.unmark() is False  # once: the body is no longer the newest
    for x in (old, m, after):
        x.close()


@pytest.mark.parametrize("case", ["written-since", "no-mark"])
def test_unmark_writes_nothing_unless_the_adopted_body_is_newest_and_marked(case):
    old = Manifest.create()
    old.write_sessions(RECORDS, left="restart" if case == "written-since" else "")
    m, _ = Manifest.adopt(parked(old))
    if case == "written-since":  # a change during adoption saved the table whole
        m.write_sessions(RECORDS[:1])
    gen = m.generation
    assert m.unmark() is False and m.generation == gen
    _, content = Manifest.adopt(parked(m))
    assert "left" not in content
    assert len(content["sessions"]) == (1 if case == "written-since" else 2)
    old.close()
    m.close()


@pytest.mark.parametrize("changed", [False, True])
def test_a_restart_soon_after_marks_the_body_unmark_wrote_unless_a_change_was_saved(changed):
    old = Manifest.create()
    old.write_sessions(RECORDS, left="restart")
    m, _ = Manifest.adopt(parked(old))
    assert m.unmark() is True
    if changed:  # a change of the table is saved whole, as Host.save does
        m.write_sessions(RECORDS[:1])
    gen = m.generation
    assert m.mark("restart") is (not changed)
    assert m.generation == gen + (not changed)
    if changed:
        m.write_sessions(RECORDS[:1], left="restart")  # what the host does instead
    _, content = Manifest.adopt(parked(m))
    assert content["left"] == "restart"
    assert len(content["sessions"]) == (1 if changed else 2), content
    assert m.mark("restart") is False  # once
    old.close()
    m.close()


def test_the_older_copy_is_parsed_only_when_the_newer_is_unusable(monkeypatch):
    """A start parses the newest copy alone (each is ~2 ms of JSON at 1,000 sessions);
    a torn newest one still falls back to the older, whole one."""
    m = Manifest.create()
    m.write_sessions(RECORDS[:1])
    m.write_sessions(RECORDS)  # the newest: both sessions
    parsed = []
    real = manifest.json.loads
    monkeypatch.setattr(manifest.json, "loads", lambda b: parsed.append(b) or real(b))
    got, content = Manifest.adopt(parked(m))
    got.close()
    assert [r["id"] for r in content["sessions"]] == ["a1", "b2"] and len(parsed) == 1
    newest = SLOTS[m.generation % 2]
    os.pwrite(m.fds[newest].fd, b"X", manifest._HEADER.size + 3)  # torn: its CRC fails
    parsed.clear()
    got, content = Manifest.adopt(parked(m))
    got.close()
    m.close()
    assert [r["id"] for r in content["sessions"]] == ["a1"] and len(parsed) == 1


def _record(i: int, size: int) -> bytes:
    pad = "x" * max(0, size - 30)
    return b'{"id":"s%05d","argv":["%s"]}' % (i, pad.encode())


@pytest.mark.parametrize("sizes", [
    [], [10], [manifest._RUN], [manifest._RUN - 1, manifest._RUN, 5, 40_000, 3],
    [40_000] * 3 + [200] * 3000,  # the short ones past a run's bytes and IOV_MAX at once
    [35_000] * 1100,  # more long records than one pwritev takes
])
def test_a_body_of_long_and_short_records_is_their_comma_join(sizes):
    """The long records are written from where they are (no copy), the short ones in
    runs: what a next start reads must be exactly the records joined by commas."""
    records = [_record(i, n) for i, n in enumerate(sizes)]
    m = Manifest.create()
    m.write_sessions(records, left="restart")
    fd = m.fds[SLOTS[m.generation % 2]].fd
    gen, length, crc = manifest._header(fd)
    body = os.pread(fd, length, manifest._HEADER.size)
    assert body == b'{"version":1,"sessions":[%s],"left":"restart"}' % b",".join(records)
    assert os.fstat(fd).st_size == manifest._HEADER.size + length  # nothing stale after it
    got, content = Manifest.adopt(parked(m))
    assert [r["id"] for r in content["sessions"]] == ["s%05d" % i for i in range(len(sizes))]
    got.close()
    m.close()
