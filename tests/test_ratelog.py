"""clowder_common.ratelog.RateLimitedLog: one line per key every interval, the next one
saying how many were skipped, keys independent, and a table of keys that stays bounded.
A fake clock: no sleeps, no daemon.  (The daemons' own: test_capacity.py,
test_hostile_capacity.py, test_hostile_hoard.py, test_web.py.)"""

from __future__ import annotations

import logging

from clowder_common.ratelog import RateLimitedLog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.got: list[logging.LogRecord] = []

    def emit(self, record):
        self.got.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.got]


def _limited(name: str, **kw) -> tuple[RateLimitedLog, Lines, Clock]:
    lines, clock = Lines(), Clock()
    logger = logging.getLogger(f"test-ratelog-{name}")
    logger.handlers[:] = [lines]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return RateLimitedLog(logger, 10.0, clock=clock, **kw), lines, clock


def test_the_first_line_is_logged_with_its_fields_and_level():
    rl, lines, _clock = _limited("first")
    assert rl.warning(("web-origin", 1000), "origin %r refused (uid %d)", "http://e", 1000,
                      extra={"CLOWDER_CAUSE": "web-origin"})
    assert rl.info("minted", "token for uid %d", 7)
    assert lines.messages() == ["origin 'http://e' refused (uid 1000)", "token for uid 7"]
    assert [r.levelno for r in lines.got] == [logging.WARNING, logging.INFO]
    assert lines.got[0].CLOWDER_CAUSE == "web-origin"
    # The record names the caller's line, not the helper's (the journal's CODE_FILE).
    assert lines.got[0].pathname == __file__, lines.got[0].pathname
    assert lines.got[0].funcName == "test_the_first_line_is_logged_with_its_fields_and_level"


def test_repeats_within_the_interval_are_counted_and_the_next_line_says_how_many():
    rl, lines, clock = _limited("repeats")
    assert rl.warning("k", "refused")
    for _ in range(5):
        clock.now += 1.5
        assert not rl.warning("k", "refused")
    assert lines.messages() == ["refused"]
    clock.now += 2.5  # 10 s after the first line
    assert rl.warning("k", "refused again")
    assert lines.messages() == ["refused", "refused again (5 more since the last line)"]
    clock.now += 10.0  # none skipped since: no count
    assert rl.warning("k", "refused")
    assert lines.messages()[-1] == "refused"


def test_a_message_with_a_percent_and_no_arguments_is_logged_as_it_is():
    rl, lines, clock = _limited("percent")
    rl.warning("k", "origin 'http://%s%d' refused")
    rl.warning("k", "skipped")
    clock.now += 10.0
    rl.warning("k", "origin '%' refused")
    assert lines.messages() == ["origin 'http://%s%d' refused",
                                "origin '%' refused (1 more since the last line)"]


def test_keys_are_independent():
    rl, lines, clock = _limited("keys")
    assert rl.warning(("user-limit", 1000), "uid 1000")
    assert rl.warning(("user-limit", 1001), "uid 1001")
    assert rl.warning("store-full", "full")
    assert not rl.warning(("user-limit", 1000), "uid 1000")
    clock.now += 5.0
    assert not rl.warning(("user-limit", 1001), "uid 1001")
    assert not rl.warning(("user-limit", 1001), "uid 1001")
    clock.now += 5.0
    assert rl.warning(("user-limit", 1000), "uid 1000")
    assert rl.warning(("user-limit", 1001), "uid 1001")
    assert lines.messages()[3:] == ["uid 1000 (1 more since the last line)",
                                    "uid 1001 (2 more since the last line)"]


def test_the_table_of_keys_stays_bounded():
    rl, lines, clock = _limited("bound", keys=100)
    # 10,000 keys within one interval: the first 100 are kept, the rest share one entry
    # (one line for them all in the interval, the next one counting the others).
    for uid in range(10_000):
        rl.warning(uid, "uid %d", uid)
        assert len(rl) <= 101
    assert len(lines.got) == 101, len(lines.got)
    assert lines.messages()[100] == "uid 100"
    clock.now += 10.0
    assert rl.warning(20_000, "uid %d", 20_000)  # the old entries are forgotten for it
    assert len(rl) <= 101
    assert rl.warning(20_001, "uid %d", 20_001)
    # A key forgotten with the table is logged again at once: a line at most an
    # interval, as before it was forgotten.
    assert rl.warning(5, "uid %d", 5)
    assert not rl.warning(5, "uid %d", 5)
    # Keys that come one interval after another leave at most the keys of one interval.
    rl, _lines, clock = _limited("bound-steady", keys=100)
    for uid in range(10_000):
        rl.warning(uid, "uid %d", uid)
        clock.now += 1.0
        assert len(rl) <= 101
