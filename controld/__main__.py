"""clowder-control's entry point: load config and registry, reconcile, serve."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys

from clowder_common import __version__, events, sdnotify
from clowder_common.listener import Listener
from clowder_common.log import add_argument as add_log_level
from clowder_common.log import setup as setup_logging

from . import config as configuration
from . import configfile
from .hostclient import HostConnection, HostError
from .registry import Registry, RegistryError, default_path
from .server import ControlServer
from .supervisor import Supervisor

log = logging.getLogger("clowder-control")
STATUS_DEADLINE = 1.0  # seconds a status waits for the PTY host's part of it


def parser() -> argparse.ArgumentParser:
    """The command line, also read by packaging/gendocs.py for clowder-control(8)."""
    p = argparse.ArgumentParser(prog="clowder-control",
                                description="the clowder control daemon")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--system", dest="user", action="store_false", default=None,
                       help="run under the system manager (default when root)")
    scope.add_argument("--user", dest="user", action="store_true",
                       help="run under a user manager (default when not root)")
    p.add_argument("--config", help="the agents' YAML file (default: "
                   "/etc/clowder/clowder.yaml, user: $XDG_CONFIG_HOME/clowder/clowder.yaml)")
    p.add_argument("--registry", help="the registry file (default: "
                   "/var/lib/clowder/registry.json, user: "
                   "$XDG_STATE_HOME/clowder/registry.json)")
    p.add_argument("--host-socket", help="the PTY host's socket (default: "
                   "/run/clowder/ptyhost.sock, user: $XDG_RUNTIME_DIR/clowder/ptyhost.sock)")
    p.add_argument("--socket", help="listen here when not socket-activated")
    p.add_argument("--version", action="version", version=f"clowder-control {__version__}")
    add_log_level(p)
    return p


def _parse(argv):
    p = parser()
    args = p.parse_args(argv)
    if args.user is None:
        args.user = os.getuid() != 0
    scope_name = "user" if args.user else "system"
    runtime = os.environ.get("XDG_RUNTIME_DIR", "/run") if args.user else "/run"
    args.config = args.config or configuration.default_paths(scope_name)[0]
    args.registry = args.registry or default_path(scope_name)
    args.host_socket = args.host_socket or f"{runtime}/clowder/ptyhost.sock"
    return args


async def load_config(path: str):
    """(the configuration, "") or (None, the problem) if it cannot be used.
    Parsed in a separate process with a time cap (configfile.load_isolated): whatever the
    file is, this daemon keeps serving, and a file that cannot be used is a problem in
    ``status`` and the journal, never a reason to stop."""
    try:
        return await configfile.load_isolated(path), ""
    except FileNotFoundError:
        return configuration.Config(version=1, agents=()), ""
    except configuration.ConfigError as exc:
        problem = str(exc)
    except Exception as exc:  # a bug here must not take the daemon down with it
        log.exception("configuration %s: unexpected failure while loading", path,
                      extra={"CLOWDER_CAUSE": "config-error"})
        problem = f"{path}: cannot be loaded ({type(exc).__name__}: {exc})"
    log.error("configuration %s not applied, keeping what runs: %s", path, problem,
              extra={"CLOWDER_CAUSE": "config-error"})
    return None, f"configuration not applied: {problem}"


async def _serve(args) -> None:
    loop = asyncio.get_running_loop()
    try:
        registry, warning = Registry.load_with_fallback(args.registry)
    except RegistryError as exc:
        # Nothing usable on disk: run with what the host has (sessions are adopted by
        # name) and never overwrite the damaged file until a good state is written.
        registry, warning = Registry(args.registry), f"registry unusable: {exc}"
    host = HostConnection(args.host_socket)
    sup = Supervisor(host, args.host_socket, registry)
    if warning:
        sup.problems.append(warning)
        log.error("%s", warning, extra={"CLOWDER_CAUSE": "registry-error"})

    async def host_status() -> dict:
        """The host's part of a status, within STATUS_DEADLINE: a frozen or restarting
        host must not hold up a status that the rest of clowder-control can answer."""
        try:
            sessions = await host.sessions(timeout=STATUS_DEADLINE)
            return {"reachable": True, "answering": True, "sessions": len(sessions)}
        except HostError as exc:
            return {"reachable": False, "answering": False, "error": str(exc)}

    cfg, problem = await load_config(args.config)
    if problem:
        sup.problems.append(problem)
    await sup.apply(cfg, "clowder-control started")
    server = ControlServer(sup, host_status)
    listeners = [socket.socket(fileno=fd) for fds in sdnotify.inherited().values() for fd in fds]
    if not listeners:
        if not args.socket:
            raise SystemExit("clowder-control: not socket-activated and no --socket given")
        path = args.socket
        if os.path.exists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        sock.listen(64)
        listeners = [sock]
    # The PTY host's accept loop: a per-uid connection cap, and a clear refusal (logged
    # once per burst) instead of an EMFILE traceback per connection when out of fds.
    for sock in listeners:
        Listener(loop, sock, lambda: asyncio.StreamReaderProtocol(
                     asyncio.StreamReader(), server.handle),
                 daemon="clowder-control", unit="clowder-control.service", logger=log)

    reloading = asyncio.Lock()  # one reload at a time, in the order of the signals
    reloads: set[asyncio.Task] = set()

    async def run_reload() -> None:
        async with reloading:
            try:
                cfg, problem = await load_config(args.config)
                sup.problems.clear()
                if problem:
                    sup.problems.append(problem)
                await sup.apply(cfg, "configuration reloaded")
            except Exception:
                log.exception("reloading the configuration failed; keeping what runs",
                              extra={"CLOWDER_CAUSE": "config-error"})

    def reload() -> None:
        task = loop.create_task(run_reload())
        reloads.add(task)  # held, so it is neither collected nor left unretrieved
        task.add_done_callback(reloads.discard)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    sdnotify.notify(f"READY=1\nSTATUS={len(sup.runtimes)} agents")
    await stop.wait()
    sdnotify.notify("STOPPING=1")
    log.info("clowder-control stopping; agents keep running",
             extra={"CLOWDER_CAUSE": "stop", **events.fields("control-stopping")})


def main(argv=None) -> None:
    args = _parse(argv)
    setup_logging("clowder-control", args.log_level)
    try:
        asyncio.run(_serve(args))
    except Exception:
        log.exception("clowder-control failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
