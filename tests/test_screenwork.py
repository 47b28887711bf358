"""screenwork.run_plan_then: a request that finds output not fed yet is fed and answered
in one turn of the screen pool (session.screen_call); what it must not do: render past a
feed stopped at the budget, or raise in the worker before the feed is accounted for."""

from __future__ import annotations

from ptyhostd import screenwork
from ptyhostd.screen import Screen


def test_what_sees_every_step_of_the_plan():
    screen = Screen(20, 3)
    ok, seconds, result, error = screenwork.run_plan_then(
        screen, [b"hello", (10, 2), b"\r\nworld"], lambda m: m.snapshot("text"))
    assert (ok, error) == (True, None) and seconds >= 0
    assert result == "hello\nworld\n"  # fed, resized, fed, then read: in that order
    assert (screen.cols, screen.rows) == (10, 2)


def test_nothing_is_rendered_past_a_feed_stopped_at_the_budget():
    calls = []
    ok, _, result, error = screenwork.run_plan_then(
        Screen(20, 3), [b"x" * 10_000], lambda m: calls.append(m), budget=0)
    assert (ok, result, error, calls) == (False, None, None, []), \
        "rendered from a model the session is about to rebuild"


def test_an_error_of_what_is_returned_after_the_feed_not_raised():
    screen = Screen(20, 3)

    def broken(model):
        raise ValueError("a render that fails")
    ok, _, result, error = screenwork.run_plan_then(screen, [b"fed"], broken)
    assert ok and result is None and isinstance(error, ValueError)
    assert screen.snapshot("text").startswith("fed"), "the feed was not done"


def test_a_feed_alone_renders_nothing():
    ok, _, result, error = screenwork.run_plan_then(Screen(20, 3), [b"fed"], None)
    assert (ok, result, error) == (True, None, None)
