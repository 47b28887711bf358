"""An idle host does not wake to feed models that are fed as output comes: the quiet
sessions' feeder (Host.keep_screens) ends once ghostty is loaded, and goes on for pyte
(fed only on demand and while quiet) and while the engine is not settled yet."""

from __future__ import annotations

import asyncio
import types

from ptyhostd import engine
from ptyhostd.host import Host


def _runs_on(monkeypatch, chosen: str, factory, within: float) -> bool:
    """Whether keep_screens (turns 1 ms apart) is still running after ``within`` s."""
    monkeypatch.setattr(engine, "chosen", chosen)
    monkeypatch.setattr(engine, "_factory", factory)
    host = types.SimpleNamespace(sessions={})

    async def go() -> bool:
        task = asyncio.ensure_future(Host.keep_screens(host, interval=0.001))
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=within)
            return False
        except asyncio.TimeoutError:
            return True
        finally:
            task.cancel()
    return asyncio.run(go())


def test_ends_once_ghostty_is_loaded(monkeypatch):
    # A deadline: the loop ends at its first turn, 1 ms in.
    assert not _runs_on(monkeypatch, "ghostty", object(), within=10.0), \
        "keep_screens kept waking with ghostty loaded"


def test_goes_on_for_pyte_and_before_the_engine_is_loaded(monkeypatch):
    # What must not happen (an end at the first turn, 1 ms in) is watched for hundreds
    # of turns.
    assert _runs_on(monkeypatch, "pyte", object(), within=0.5), "keep_screens ended for pyte"
    # Not loaded yet: ghostty may still fail to load and leave pyte (engine.factory).
    assert _runs_on(monkeypatch, "ghostty", None, within=0.5), \
        "keep_screens ended before the load"
