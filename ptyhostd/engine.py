"""Which terminal model the host's sessions use: chosen once, at start, in one place.

``ghostty`` (libghostty-vt through pyghostty, screen_ghostty.py) when installed, else
``pyte`` (screen.py, the tested fallback).  pyghostty is found in the Python
environment, else in the private directory of the clowder-ghostty package
(``PACKAGED``); its declarations and library are loaded by ghostty_abi.py, without
importing it.  ``--screen-engine`` (or
$CLOWDER_SCREEN_ENGINE) forces one; a forced engine that is not installed is an error
at start, not a silent fallback.  The choice and its cause are logged once.
docs/design.md "Choosing the engine" has the measurements behind the default.
"""

from __future__ import annotations

import errno
import importlib.machinery
import importlib.util
import logging
import time
from typing import Optional

from . import screenmemory

log = logging.getLogger("ptyhostd")

ENGINES = ("ghostty", "pyte")
# Where the clowder-ghostty package (.deb/.rpm) puts the pyghostty wheel's files: never
# dist-packages (Debian has no python3-pyghostty; a private copy must not shadow one).
PACKAGED = "/usr/lib/clowder/ghostty"
_factory = None
chosen: Optional[str] = None
# Whether preload made the renders a session's snapshot can make on the loop (text, ANSI,
# HTML): until then, a first one pays its format's cffi look-ups (~17-67 ms here).
warm = False


class EngineError(Exception):
    """The engine asked for cannot be used."""


class TooLarge(Exception):
    """A snapshot would be more than the ``limit`` it was asked with, in UTF-8 bytes:
    given up once that is certain, before the rest is made (an HTML or JSON snapshot of
    a big screen is megabytes, and turning them into text holds the GIL)."""

    def __init__(self, at_least: int):
        super().__init__(f"at least {at_least} bytes")
        self.at_least = at_least


def _pyghostty_where() -> Optional[str]:
    """Where pyghostty would be imported from: "" (the Python environment), PACKAGED, or
    None if it is in neither."""
    if importlib.util.find_spec("pyghostty") is not None:
        return ""
    if importlib.machinery.PathFinder.find_spec("pyghostty", [PACKAGED]) is not None:
        return PACKAGED
    return None


def _load(name: str):
    if name == "ghostty":
        # pyghostty's declarations and library, not its import (ghostty_abi.py: the
        # parse of its declarations was most of a restarted host's first repaint).
        from .screen_ghostty import GhosttyScreen  # loads it (ghostty_abi.load)
        return GhosttyScreen
    from .screen import Screen
    return Screen


def choose(name: Optional[str] = None) -> str:
    """Settle the engine: ``name``, or ghostty if installed, else pyte; logged once.

    Nothing is loaded here (ghostty's binding: ~15 ms from its cache, 0.35-0.5 s when
    its declarations are parsed, ghostty_abi.py): the model is loaded when a screen is
    first needed, in the screen pool.
    """
    global chosen
    if name is not None and name not in ENGINES:
        raise EngineError(f"unknown screen engine {name!r} (one of {', '.join(ENGINES)})")
    where = _pyghostty_where()
    if name is not None:
        if name == "ghostty" and where is None:
            raise EngineError("the ghostty screen engine needs pyghostty, not installed "
                              "(install the clowder-ghostty package, or pyghostty)")
        cause = "asked for"
    elif where is not None:
        name, cause = "ghostty", "the default: pyghostty is installed" + \
            (f" in {where}" if where else "")
    else:  # pyghostty is optional (Debian does not package it; clowder-ghostty does)
        name, cause = "pyte", "pyghostty is not installed: the clowder-ghostty package has it"
    if chosen != name:
        log.info("screen engine: %s (%s)", name, cause,
                 extra={"CLOWDER_CAUSE": "screen-engine", "CLOWDER_ENGINE": name})
    chosen = name
    return name


def factory():
    """The chosen engine's model class, loaded on first use; pyte if ghostty's library
    fails to load (a broken wheel), with the cause logged."""
    global _factory, chosen
    if _factory is None:
        name = chosen or choose()
        try:
            _factory = _load(name)
        except (ImportError, OSError) as exc:
            if name != "ghostty" or _out_of_fds(exc):
                raise  # out of fds (as at a LimitNOFILE): the next model tries again
            log.error("screen engine: ghostty cannot be loaded (%s); using pyte", exc,
                      extra={"CLOWDER_CAUSE": "screen-engine", "CLOWDER_ENGINE": "pyte"})
            chosen, _factory = "pyte", _load("pyte")
    return _factory


def loaded() -> bool:
    """Whether the engine is settled for good: its model class is loaded (``chosen``
    may still turn from ghostty to pyte until then, see ``factory``)."""
    return _factory is not None


def follows_output() -> bool:
    """Whether models are fed as output arrives (ghostty: it parses ~20 MB/s in C with
    the GIL released) rather than only on demand and while quiet (pyte: ~1 MB/s of
    Python, which fed every byte would starve the loop that forwards them)."""
    return chosen == "ghostty"


def _out_of_fds(exc: BaseException) -> bool:
    """Whether loading failed for want of file descriptors (an import or dlopen at the
    process's limit), not for a broken install: no reason to give up on the engine."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            return True
        if "Too many open files" in str(exc):  # dlopen's reason, in cffi's OSError text
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def preload() -> None:
    """Load the engine and make its first model and renders (in the screen pool, after
    READY): ghostty's first text and VT format cost ~40 and ~17 ms of cffi look-ups,
    paid here rather than by the first attach."""
    start = time.monotonic()
    try:
        screen = new_screen(80, 24)
        screen.feed(b"\x1b[1mwarm\x1b[0m")
        screen.repaint()
        for format in ("text", "ansi", "html"):  # each its own formatter (session.py)
            screen.snapshot(format)
    except Exception:  # the first real model reports it again, with its session
        log.exception("screen engine: loading %s failed", chosen)
        return
    global warm
    warm = True
    log.info("screen engine: %s loaded in %.0f ms", chosen, (time.monotonic() - start) * 1e3,
             extra={"CLOWDER_CAUSE": "screen-engine-loaded", "CLOWDER_ENGINE": chosen})


def new_screen(cols: int, rows: int, uid: Optional[int] = None):
    """A terminal model of the chosen engine (in the screen pool): a ghostty one of a
    session of ``uid``'s is counted in that user's part of the scrollback budget and
    gets its share."""
    screen = factory()(cols, rows)
    if hasattr(screen, "set_scrollback_bytes"):
        screenmemory.note_model(screen, uid)
    return screen
