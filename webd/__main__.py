"""clowder-web's entry point: take the sockets systemd made, serve the page and tokens.

clowder-web.socket hands over three listening sockets, told apart by their address:
the TCP one (127.0.0.1:7380 by default) and ``web.sock`` serve HTTP, ``web-token.sock``
mints login tokens (mint.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket

from clowder_common import __version__, sdnotify
from clowder_common.log import add_argument as add_log_level
from clowder_common.log import setup as setup_logging

from . import access

log = logging.getLogger("clowder-web")
TOKEN_SOCKET = "web-token.sock"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clowder-web", description="the clowder web view")
    p.add_argument("--system", action="store_true", help="serve the system's PTY host "
                   "(the only scope so far)")
    p.add_argument("--host-socket", default="/run/clowder/ptyhost.sock",
                   help="the PTY host's socket (default /run/clowder/ptyhost.sock)")
    p.add_argument("--control-socket", default="/run/clowder/control.sock",
                   help="clowder-control's socket, for the agents and their busy/idle "
                        "(default /run/clowder/control.sock; \"\": sessions only)")
    p.add_argument("--input-for", action="append", default=[], metavar="USER",
                   help="let USER type into their sessions from the page (repeat for "
                        "more; default: nobody, every view is read-only)")
    p.add_argument("--origin", action="append", default=[], metavar="ORIGIN",
                   help="also accept WebSockets from ORIGIN (e.g. https://proxy.example, "
                        "a reverse proxy's); the page's own origin is always accepted")
    p.add_argument("--proxy-user", action="append", default=[], metavar="USER",
                   help="a reverse proxy's user, which may present other users' logins "
                        "(every other connection from this machine must be the login's "
                        "own uid or root)")
    p.add_argument("--url", help="the base URL `clowderctl web` prints (default: "
                   "http:// and the TCP socket's address)")
    p.add_argument("--version", action="version", version=f"clowder-web {__version__}")
    add_log_level(p)
    return p


def _sockets() -> tuple[list[socket.socket], list[socket.socket]]:
    """(HTTP sockets, token sockets) from what systemd handed over."""
    http, mint = [], []
    for fds in sdnotify.inherited().values():
        for fd in fds:
            sock = socket.socket(fileno=fd)  # family and type read from the fd
            name = sock.getsockname()
            if isinstance(name, str) and name.endswith("/" + TOKEN_SOCKET):
                mint.append(sock)
            else:
                http.append(sock)
    return http, mint


def _base_url(http: list[socket.socket]) -> str:
    for sock in http:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = sock.getsockname()[:2]
            return f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    return "http://localhost"  # unix socket only: the proxy in front names itself (--url)


async def serve(args) -> None:
    # Here, not at the top: the man page's build imports parser() without aiohttp.
    from aiohttp import web

    from .app import Settings, make_app, refused_connection
    from .gate import Gates
    from .mint import Mint
    from .tokens import Tokens
    http, mint = _sockets()
    if not http or not mint:
        raise SystemExit("clowder-web: start it through clowder-web.socket (it needs an "
                         "HTTP socket and web-token.sock from systemd)")
    settings = Settings(args.host_socket, access.input_uids(args.input_for),
                        frozenset(args.origin),
                        access.input_uids(args.proxy_user, "--proxy-user"),
                        args.control_socket)
    tokens = Tokens()
    gates = Gates(frozenset({0}) | settings.proxies, refused_connection)
    # 75 s: aiohttp 3.8's keep-alive (3.14's is an hour); 32 header lines of at most
    # 8,190 bytes (3.14 takes 128, 3.8 32,768): a head of at most 256 KiB.
    runner = web.AppRunner(make_app(settings, tokens, gates), access_log=None,
                           handle_signals=False, keepalive_timeout=75.0, max_headers=32)
    await runner.setup()
    loop = asyncio.get_running_loop()
    # Not aiohttp's SockSite: each connection's protocol is a Gate in front of
    # aiohttp's (gate.py).
    servers = [await loop.create_server(lambda: gates.protocol(runner.server()), sock=sock)
               for sock in http]
    base = (args.url or _base_url(http)).rstrip("/")
    for sock in mint:
        await loop.create_unix_server(lambda: Mint(tokens, base), sock=sock)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    log.info("clowder-web %s serving %s (input for uids %s)", __version__, base,
             sorted(settings.typists) or "nobody", extra={"CLOWDER_CAUSE": "start"})
    sdnotify.notify("READY=1")
    await stop.wait()
    sdnotify.notify("STOPPING=1")
    for server in servers:
        server.close()
    await runner.cleanup()


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    setup_logging("clowder-web", args.log_level)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
