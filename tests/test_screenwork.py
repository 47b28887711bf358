"""screenwork.run_plan_then: a request that finds output not fed yet is fed and answered
in one turn of the screen pool (session.screen_call); what it must not do: render past a
feed stopped at the budget, or raise in the worker before the feed is accounted for."""

from __future__ import annotations

from ptyhostd import screenwork
from ptyhostd.screen import Screen


def test_what_sees_every_step_of_the_plan():
    screen = Screen(20, 3)
    ok, seconds, result, error, _ = screenwork.run_plan_then(
        screen, [b"hello", (10, 2), b"\r\nworld"], lambda m: m.snapshot("text"))
    assert (ok, error) == (True, None) and seconds >= 0
    assert result == "hello\nworld\n"  # fed, resized, fed, then read: in that order
    assert (screen.cols, screen.rows) == (10, 2)


def test_nothing_is_rendered_past_a_feed_stopped_at_the_budget():
    calls = []
    ok, _, result, error, _ = screenwork.run_plan_then(
        Screen(20, 3), [b"x" * 10_000], lambda m: calls.append(m), budget=0)
    assert (ok, result, error, calls) == (False, None, None, []), \
        "rendered from a model the session is about to rebuild"


def test_an_error_of_what_is_returned_after_the_feed_not_raised():
    screen = Screen(20, 3)

    def broken(model):
        raise ValueError("a render that fails")
    ok, _, result, error, _ = screenwork.run_plan_then(screen, [b"fed"], broken)
    assert ok and result is None and isinstance(error, ValueError)
    assert screen.snapshot("text").startswith("fed"), "the feed was not done"


def test_a_feed_alone_renders_nothing():
    ok, _, result, error, _ = screenwork.run_plan_then(Screen(20, 3), [b"fed"], None)
    assert (ok, result, error) == (True, None, None)


def test_a_feed_asked_to_stop_leaves_the_rest_of_its_last_step_for_the_next_turn():
    """``stop`` (the pool's "a request waits for this thread") ends a feed after a slice;
    what it left, fed at the next turn, gives the screen the whole feed gives."""
    data = b"".join(b"line %05d\r\n" % n for n in range(2000))
    whole, parts = Screen(20, 5), Screen(20, 5)
    screenwork.run_plan_then(whole, [data], None)
    asked = []

    def stop():
        asked.append(1)
        return True
    ok, _, result, error, unfed = screenwork.run_plan_then(parts, [data], None, stop=stop)
    assert (ok, result, error) == (True, None, None) and asked == [1]
    assert unfed == len(data) - screenwork.SLICE, "stopped after one slice"
    _, _, _, _, left = screenwork.run_plan_then(parts, [data[-unfed:]], None)
    assert left == 0 and parts.snapshot("text") == whole.snapshot("text")


def test_a_request_and_a_step_before_a_resize_are_never_stopped():
    """A render waits on the whole feed (``stop`` is not asked), and only the plan's
    last step may be cut: a resize after it would otherwise be fed out of order."""
    data = b"x" * (4 * screenwork.SLICE)
    ok, _, result, _, unfed = screenwork.run_plan_then(
        Screen(20, 3), [data], lambda m: "rendered", stop=lambda: True)
    assert (ok, result, unfed) == (True, "rendered", 0)
    screen = Screen(20, 3)
    _, _, _, _, unfed = screenwork.run_plan_then(screen, [data, (10, 2), b"y" * 10], None,
                                                  stop=lambda: True)
    assert unfed == 0 and (screen.cols, screen.rows) == (10, 2)
