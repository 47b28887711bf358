"""ptyhostd's entry point: adopt what systemd kept, serve, and exit cleanly."""

from __future__ import annotations

import gc
import signal
import sys

# No cyclic garbage collection until READY: the start makes tens of thousands of
# objects (modules, then a Session and its parts a session) and keeps every one, so each
# collection it would run is pure cost on a restart's blackout (~4 ms of it at 1,000
# sessions, docs/design.md "Start: adopt and reconcile").  At READY they are frozen
# (left out of collections) and collection is enabled: else the first one, over all of
# them, fell on the first clients' requests.  _after_the_clients unfreezes them.
# Only when this is the program (`-m ptyhostd`, or a wrapper named ptyhostd), not a
# process that imports the module for its parser (packaging/gendocs.py, the tests).
if sys.argv[0].endswith(("ptyhostd", "ptyhostd/__main__.py")):
    gc.disable()

# Before the ~100 ms of imports below: a SIGTERM (a stop) that arrives while we start
# must end the sessions properly once we can, not kill us half-way through adoption.
_early_signals: list[int] = []
signal.signal(signal.SIGTERM, lambda sig, _frame: _early_signals.append(sig))
# A reload (SIGHUP) while we start would kill us by default: this code is already the
# installed one, so it is ignored until the hand-off handler is set, once we serve.
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})  # see handoff

import os  # noqa: E402

# ExecReload's client (ptyhostd/reload.py) needs only the wire package: it is dispatched
# before the imports below, so that an installed build too broken to import is still
# asked through the running host, whose check refuses it with the reason.
if "--hand-off" in sys.argv[1:]:
    # A stop during the hand-off sends us SIGTERM too: systemd counts a control process
    # killed by it as the stop's failure (Result=signal), and the reload is cancelled
    # anyway, so leave quietly.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: os._exit(0))
    from .reload import main as _hand_off_main
    sys.exit(_hand_off_main(sys.argv[1:]))

# asyncio imports ssl when it can (~13 ms, a sixth of our start-up, which is the blackout
# of every restart); the host never speaks TLS, and asyncio works without ssl, as it
# does on a Python built without it.
sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import asyncio  # noqa: E402
import faulthandler  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

from clowder_common import __version__, events, sdnotify  # noqa: E402
from clowder_common.listener import Listener  # noqa: E402
from clowder_common.log import ENV as LOG_LEVEL_ENV  # noqa: E402
from clowder_common.log import add_argument as add_log_level  # noqa: E402
from clowder_common.log import parse_level  # noqa: E402
from clowder_common.log import setup as setup_logging  # noqa: E402

from . import (bridge, engine, handoff, inputqueue, recordbudget, screenmemory,  # noqa: E402
               screenwork, standby, statedir)
from .adopt import AFTER_START  # noqa: E402
from .connection import Connection  # noqa: E402
from .doorbell import DOORBELL  # noqa: E402
from .host import Config, Host  # noqa: E402
from .manifest import SLOTS  # noqa: E402
from .watchdog import Watchdog, install_wedge_fault  # noqa: E402

log = logging.getLogger("ptyhostd")

QUIET = 0.05  # seconds without a client request: see _after_the_clients


def _defaults() -> dict:
    """The options' defaults, from the environment (ptyhostd(8) names each variable);
    ValueError for a variable that is not a number."""
    env = os.environ.get
    return {"backlog_bytes": int(env("CLOWDER_BACKLOG_BYTES", 4 << 20)),
            "max_sessions_per_user": int(env("CLOWDER_MAX_SESSIONS_PER_USER", 1024)),
            "max_record_bytes_per_user": int(env(recordbudget.ENV, recordbudget.DEFAULT)),
            "show_ended": float(env("CLOWDER_SHOW_ENDED", 86400)),
            "input_queue_bytes": int(env("CLOWDER_INPUT_QUEUE_BYTES", 4 << 20)),
            "input_deadline": float(env("CLOWDER_INPUT_DEADLINE", 10)),
            "screen_engine": env("CLOWDER_SCREEN_ENGINE") or None,
            "screen_memory": int(env("CLOWDER_SCREEN_MEMORY") or 0) or None}


def parser():
    """The command line (an argparse.ArgumentParser), also read by packaging/gendocs.py
    for ptyhostd(8)."""
    import argparse
    d = _defaults()
    p = argparse.ArgumentParser(prog="ptyhostd", description="the clowder PTY host")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--system", dest="user", action="store_false", default=None,
                       help="run under the system manager (default when root)")
    scope.add_argument("--user", dest="user", action="store_true",
                       help="run under a user manager (default when not root)")
    p.add_argument("--socket", help="listen here when not socket-activated")
    p.add_argument("--backlog-bytes", type=int, default=d["backlog_bytes"],
                   help="raw output kept per session (default 4 MiB)")
    p.add_argument("--max-sessions-per-user", type=int, default=d["max_sessions_per_user"],
                   help="running sessions a non-root user may have (default 1024)")
    p.add_argument("--max-record-bytes-per-user", type=int, metavar="BYTES",
                   default=d["max_record_bytes_per_user"],
                   help="bytes a non-root user's session records, running and ended, may "
                        "take in the manifest that every start parses (default 4 MiB)")
    p.add_argument("--show-ended", type=float, metavar="SECONDS", default=d["show_ended"],
                   help="seconds an ended session nobody has seen stays in `ps` "
                        "(default 86400; `ps --all` lists every ended session kept)")
    p.add_argument("--input-queue-bytes", type=int, default=d["input_queue_bytes"],
                   help="input queued per session before its writers stop being read "
                        "(default 4 MiB)")
    p.add_argument("--input-deadline", type=float, default=d["input_deadline"],
                   help="seconds a send may wait on a program that reads none of its "
                        "input before it fails (default 10)")
    p.add_argument("--screen-engine", choices=engine.ENGINES, default=d["screen_engine"],
                   help="the terminal model of sessions (default: ghostty when pyghostty "
                        "is installed, else pyte)")
    p.add_argument("--screen-memory", type=int, metavar="BYTES", default=d["screen_memory"],
                   help="scrollback all sessions' terminal models may keep together, "
                        "shared out among them (default: MemTotal/16, at most 2 GiB)")
    p.add_argument("--version", action="version", version=f"ptyhostd {__version__}")
    add_log_level(p)
    p.add_argument("--check-handoff", action="store_true",
                   help="(internal) dry-run restore of a running host's state, for reload")
    p.add_argument("--hand-off", type=int, metavar="PID",
                   help="with --socket: ask the host there (the unit's main process PID) to "
                        "hand off to the installed code, and wait for the outcome "
                        "(what ExecReload= runs; ptyhostd/reload.py)")
    return p


def _quick(argv: list[str]):
    """The units' own command lines (``--system``, ``--user``, or none) read without
    argparse, whose import and parser are ~4 ms of every start, and so of a restart's
    blackout; None for any other command line, or a default that argparse must refuse."""
    if len(argv) > 1 or argv[:1] not in ([], ["--system"], ["--user"]):
        return None
    try:
        values = _defaults()
        values["log_level"] = parse_level(os.environ.get(LOG_LEVEL_ENV) or "info")
    except ValueError:
        return None  # parser() says what is wrong, as it would have
    return types.SimpleNamespace(user=argv[0] == "--user" if argv else None, socket=None,
                                 check_handoff=False, hand_off=None, **values)


def _refusal(args) -> str | None:
    """What is wrong with the options, or None."""
    if args.backlog_bytes < 4096:
        return "--backlog-bytes must be at least 4096"
    if args.max_sessions_per_user < 1:
        return "--max-sessions-per-user must be at least 1"
    if args.max_record_bytes_per_user < recordbudget.LARGEST:
        return (f"--max-record-bytes-per-user must be at least {recordbudget.LARGEST} "
                f"(the longest record one session can make), not "
                f"{args.max_record_bytes_per_user}")
    if args.screen_memory < screenmemory.FLOOR:
        return (f"--screen-memory must be at least {screenmemory.FLOOR} "
                "(one session's smallest share)")
    if args.show_ended < 0:
        return "--show-ended must not be negative"
    if args.input_queue_bytes < 4096 or args.input_deadline <= 0:
        return "--input-queue-bytes must be at least 4096 and --input-deadline positive"
    return None


def _parse(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _quick(argv) or parser().parse_args(argv)
    if args.user is None:
        args.user = os.getuid() != 0
    if args.screen_memory is None:
        args.screen_memory = screenmemory.default_budget()
    refusal = _refusal(args)
    if refusal is not None:
        parser().error(refusal)  # exits 2 with the usage, as argparse's own errors
    return args


def _is_parked(name: str) -> bool:
    """Everything but the listening sockets."""
    return name.startswith(("m.", "r.")) or name in SLOTS or name == handoff.SCREENS


def _listeners(stored: dict[str, list[int]], path: str | None) -> list[socket.socket]:
    """The listening sockets systemd passed, or one bound here for manual runs."""
    socks = [socket.socket(fileno=fd) for name, fds in stored.items() if not _is_parked(name)
             for fd in fds]
    if socks:
        return socks
    if not path:
        raise SystemExit("ptyhostd: not socket-activated and no --socket given")
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(128)
    return [sock]


async def _serve(args, taken: dict[str, list[int]] | None = None) -> None:
    """``taken``: what a standby held when it took over (standby.follow)."""
    loop = asyncio.get_running_loop()
    handed = handoff.inherited()
    watchdog = Watchdog.from_env()
    if watchdog is not None and (handed is not None or taken is not None):
        # After a hand-off systemd's watchdog is already running (the old code fed it
        # until the exec): feed it from the first moment, adoption included.  After a
        # restart it starts with READY=1, so a slow adoption is judged by
        # TimeoutStartSec instead, and can never become a watchdog crash loop.
        watchdog.start(loop)
    stored = taken if taken is not None else handed if handed is not None \
        else sdnotify.inherited()
    listeners = _listeners(stored, args.socket)
    listener_fds = {name: fds for name, fds in stored.items() if not _is_parked(name)}
    parked = {name: fds for name, fds in stored.items() if _is_parked(name)}
    inputqueue.configure(args.input_queue_bytes, args.input_deadline)
    _settle_engine(args)
    # After a hand-off, the old code's bridge serves its clients until the sessions are
    # taken, and stops before any pty is read (Adoption._settle_bridge).
    end = bridge.end if handed is not None else None
    host = await Host.start(Config(backlog_bytes=args.backlog_bytes,
                                   user_manager=args.user,
                                   max_sessions_per_user=args.max_sessions_per_user,
                                   max_record_bytes_per_user=args.max_record_bytes_per_user,
                                   show_ended=args.show_ended,
                                   state_dir=statedir.default_path()), parked, end)
    os.environ.pop(bridge.ENV, None)  # never passed on (the check, a manual start)
    # Never closed or unlinked by us: systemd owns the socket and keeps it bound.
    for sock in listeners:
        Listener(loop, sock, lambda: Connection(host))  # lives as the loop's reader
        DOORBELL.watch(sock.fileno())  # a client connecting: a flood's reads step aside
    host.listener_fds = listener_fds
    host.took_over = taken is not None  # _after_the_clients clears the unit's failure
    host.standby = standby.Standby(loop, host.kept_fds, lambda text: sdnotify.notify(
        f"STATUS=serving {len(host.sessions)} sessions; {text}"))
    if watchdog is not None:
        watchdog.also = host.standby.beat
    stop = asyncio.Event()
    def stopping() -> None:
        host.stop_requested = True  # before the loop runs anything else (handoff checks)
        host.standby.leave(wait=False)  # first: a crash from now on is the stop's
        stop.set()
    loop.add_signal_handler(signal.SIGTERM, stopping)
    loop.add_signal_handler(signal.SIGINT, stopping)
    if _early_signals:  # a stop that came while we were adopting is handled now
        stopping()
    # A HandOff request (what ExecReload sends) or SIGHUP (by hand, or an older unit's
    # ExecReload): hand off to the installed code.
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(host.handoff()))
    how = "after a hand-off" if handed is not None else ""
    host.bus.publish("host-started", cause="hand-off" if handed is not None
                     else host.start_cause, version=__version__,
                     sessions=len(host.sessions))
    if handed is not None:
        log.info("ptyhostd %s took over by hand-off: %d sessions", __version__,
                 len(host.sessions), extra={"CLOWDER_CAUSE": "handoff",
                                            **events.fields("handoff-done")})
    sdnotify.notify(f"READY=1\nSTATUS=serving {len(host.sessions)} sessions {how}".rstrip())
    host.last_request = time.monotonic()  # quiet is counted from READY
    gc.freeze()
    gc.enable()
    host._spawn_task(_after_the_clients(host))  # kept, and its failure logged
    if watchdog is not None and handed is None and taken is None:
        watchdog.start(loop)
    install_wedge_fault(loop)
    await stop.wait()
    sdnotify.notify("STOPPING=1")
    await host.shutdown()
    # Everything worth keeping is in systemd's FD store or already ended: leave without
    # Python's teardown (closing a thousand sessions' fds and maps one by one), which
    # would delay the next host of a restart by tens of ms.  logging.shutdown lets out
    # what waits for the log's writer thread (at most log.FLUSH_TIMEOUT, if journald
    # does not read: clowder_common/log.py).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def _after_the_clients(host: Host) -> None:
    """What the start leaves until no client has connected or asked anything for QUIET
    seconds (AFTER_START after the start at the latest): a restart's clients reconnect,
    list and attach in its first milliseconds, and wait behind whatever runs then.

    - The start's objects, frozen at READY, seen by the garbage collector again (the
      first collection over them would cost the clients a few ms: see the top).
    - The link to systemd (jeepney's import and the authentication, ~5 ms of the loop);
      opened before any stop can come that is not right after a client's request, as a
      stop asks systemd whether it is a restart (Manager.own_job_type).
    - The engine's first model and renders (engine.preload), ~30-60 ms of cffi look-ups
      in the screen pool that hold the GIL: beside them READY to bytes flowing again
      took 13-15 ms at 1,000 sessions, after them 9-10.  Not a fixed delay: a client
      that attached meanwhile would make the first model itself, and a stop arriving
      while it loads would wait for the GIL."""
    latest = time.monotonic() + AFTER_START
    while (now := time.monotonic()) < latest and now - host.last_request < QUIET:
        await asyncio.sleep(min(QUIET - (now - host.last_request), latest - now))
    gc.unfreeze()  # the start's objects are collected again, as any (see the top)
    host.input_seq.ready_to_send()  # ctypes, for the input's writes (inputseq.py)
    host.manager.link_now()
    if host.took_over:
        try:
            await host.manager.clear_own_result()
        except Exception as exc:  # a reload before a restart would then restart the unit
            log.error("%s", exc, extra={"CLOWDER_CAUSE": "standby"})
    if not engine.warm:  # a standby that took over loaded it while it waited
        await screenwork.run(engine.preload)
    try:
        allowed = await host.manager.standby_allowed()
    except Exception as exc:  # serving goes on; a crash then restarts the unit
        log.error("cannot tell whether the unit allows a standby: %s", exc,
                  extra={"CLOWDER_CAUSE": "standby"})
        allowed = False
    if not allowed:
        log.info("no standby: the unit does not have ExitType=cgroup and NotifyAccess=all; "
                 "a crash restarts the unit", extra={"CLOWDER_CAUSE": "standby"})
    elif not host.stop_requested:
        host.standby.enable()


def _warm_engine(args) -> None:
    """A standby loads the engine and makes its first renders before it says hello:
    the host that takes over a crash then serves its first attach's repaint without
    ghostty's cffi look-ups (~17 ms for the VT format, ~40 for text: the repaint of the
    first reattach waited for them, and its snapshots went to the pool until its
    preload, engine.warm).  Once per standby, while it only waits."""
    try:
        _settle_engine(args)
    except engine.EngineError:
        return  # _serve says why, if this standby ever serves
    engine.preload()


def _settle_engine(args) -> None:
    """The engine and the scrollback budget its models share (engine.EngineError for
    an engine that cannot be had)."""
    engine.choose(args.screen_engine)
    screenmemory.configure(args.screen_memory)


def main(argv=None) -> None:
    args = _parse(argv)
    if args.check_handoff:
        sys.exit(handoff.check_main())
    setup_logging("ptyhostd", args.log_level)
    sys.setswitchinterval(screenwork.SWITCH_INTERVAL)  # the loop's GIL wait: screenwork.py
    # A watchdog timeout sends SIGABRT: the journal then shows where the loop was stuck
    # (the unit sets LimitCORE=0, so no core of every parked ring is written).
    faulthandler.enable()
    taken = None
    if standby.wanted():
        if _early_signals:
            sys.exit(0)  # stopped while it imported: nothing to stand by for
        _warm_engine(args)
        taken = standby.follow()  # returns only to take over from a dead host
        # From here a start like any other: a stop during adoption is handled after it.
        signal.signal(signal.SIGTERM, lambda sig, _frame: _early_signals.append(sig))
    try:
        asyncio.run(_serve(args, taken))
    except Exception:
        log.exception("ptyhostd failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
