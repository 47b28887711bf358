"""The HTTP side: login, the page, the session list, and a terminal per WebSocket.

Every request but /login needs the cookie a token was exchanged for (401 otherwise);
every answer is filtered by that cookie's uid (access.py).  A WebSocket must also come
from the page's own origin: a page elsewhere cannot open one with the user's cookie
(SameSite=Strict stops the cookie on cross-site requests already; the Origin check
does not depend on the browser's cookie policy).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os

from aiohttp import WSMsgType, web

import clowder_wire as protocol
from clowder_common.ratelog import RateLimitedLog

from . import access, hostlink, peer
from .gate import Gates
from .tokens import COOKIE_TTL, Tokens

log = logging.getLogger("clowder-web")
COOKIE = "clowder_web"
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
MAX_WS_MESSAGE = 64 << 10  # a browser's keystrokes and resizes: small
# Terminals (WebSockets) a uid may have open at once.  Each is an attach at the host,
# made as root, so the host's own cap per uid does not apply: one never read holds
# ~0.5 MiB here and ~1.1 MiB at the host (256 of them: +123 and +275 MiB).
MAX_TERMINALS = 16
NO_LOGIN = ("401: no valid login. Run `clowderctl web` and open the URL it prints "
            "(its token is good once, for a short while).\n")


class Settings:
    """What the web unit's command line configured."""

    def __init__(self, host_socket: str, typists: frozenset[int], origins: frozenset[str],
                 proxies: frozenset[int] = frozenset(), control_socket: str = ""):
        self.host_socket = host_socket
        self.control_socket = control_socket  # clowder-control's: the agents ("": none)
        self.typists = typists  # uids that may type (access.may_type)
        self.origins = origins  # extra allowed WebSocket origins (a reverse proxy's)
        self.proxies = proxies  # uids that may carry others' cookies (a reverse proxy's)


def make_app(settings: Settings, tokens: Tokens, gates: Gates) -> web.Application:
    app = web.Application(middlewares=[_begun(gates), _auth(tokens, settings)])
    app["settings"] = settings
    app["tokens"] = tokens
    app["gates"] = gates
    app.on_response_prepare.append(_upgraded)
    app["terminals"] = collections.Counter()  # uid -> terminals open (MAX_TERMINALS)
    app.router.add_get("/login", login)
    app.router.add_get("/", index)
    app.router.add_get("/api/sessions", sessions)
    app.router.add_get("/ws/{sid}", terminal)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    return app


def _begun(gates: Gates):
    """Tell the connection's Gate that a request it passed on is being handled."""
    @web.middleware
    async def begun(request: web.Request, handler):
        gates.started(request.transport)
        return await handler(request)
    return begun


async def _upgraded(request: web.Request, response: web.StreamResponse) -> None:
    if response.status == 101:  # a WebSocket: its frames follow, no more heads
        request.app["gates"].upgraded(request.transport)


def _auth(tokens: Tokens, settings: Settings):
    @web.middleware
    async def check(request: web.Request, handler):
        if request.path != "/login":
            uid = tokens.uid_of(request.cookies.get(COOKIE, ""))
            if uid is None:
                raise web.HTTPUnauthorized(text=NO_LOGIN)
            _check_peer(request, uid, settings)
            request["uid"] = uid
        response = await handler(request)
        if isinstance(response, web.StreamResponse) and not isinstance(
                response, web.WebSocketResponse):
            response.headers.setdefault("Cache-Control", "no-store")
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Referrer-Policy", "no-referrer")
            # Scripts from this server only; inline styles allowed because xterm.js
            # sets its colours and cell sizes in a <style> element it makes.
            response.headers.setdefault(
                "Content-Security-Policy", "default-src 'self'; connect-src 'self'; "
                "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
        return response
    return check


# Journal lines about refused requests: one per cause and uid every ratelog.INTERVAL,
# saying how many were not logged since (a client that asks in a loop made one a
# request: 14,700 lines for one connection's forged Origins, never read).
refusals = RateLimitedLog(log)


def refused_connection(who, held: int) -> None:
    """A Gate turned a connection away (gate.MAX_PER_UID); ``who``: a uid or an address."""
    name = who if isinstance(who, str) else f"uid {who}"
    refusals.warning(("web-connections", who), "a connection of %s refused: it holds %d, "
                     "the most one may", name, held,
                     extra={"CLOWDER_CAUSE": "web-connections"})


def _check_peer(request: web.Request, uid: int, settings: Settings) -> None:
    """A login is honoured only from its own uid where the kernel can tell (peer.py; read
    once a connection, by its Gate)."""
    gate = request.app["gates"].of(request.transport)
    who = gate.uid if gate is not None else peer.uid_of(request.transport)
    if who is not None and who not in (0, uid) and who not in settings.proxies:
        refusals.warning(("web-peer", uid, who), "uid %d's login presented by uid %d: "
                         "refused", uid, who, extra={"CLOWDER_CAUSE": "web-peer"})
        raise web.HTTPUnauthorized(text="401: this login belongs to another user. Run "
                                        "`clowderctl web` as yourself.\n")


async def login(request: web.Request) -> web.Response:
    """A token for a cookie: good once, then /."""
    tokens: Tokens = request.app["tokens"]
    uid = tokens.tokens.take(request.query.get("token", ""))
    if uid is None:
        raise web.HTTPUnauthorized(text=NO_LOGIN)
    _check_peer(request, uid, request.app["settings"])
    cookie = tokens.cookies.add(uid)
    response = web.HTTPSeeOther("/")
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="Strict", path="/",
                        max_age=int(COOKIE_TTL))
    raise response


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(os.path.join(STATIC, "index.html"))


async def sessions(request: web.Request) -> web.Response:
    """The user's sessions as the host lists them, and whether they may type."""
    settings: Settings = request.app["settings"]
    uid = request["uid"]
    try:
        shown = access.visible(uid, await hostlink.list_sessions(settings.host_socket))
    except hostlink.HostError as exc:
        return web.json_response({"error": str(exc)}, status=503)
    for s in shown:
        s["input"] = access.may_type(uid, s, settings.typists)
    agents = await hostlink.agents(settings.control_socket) \
        if settings.control_socket else None
    mine = None if agents is None else [
        {k: a.get(k) for k in AGENT_FIELDS} for a in agents if access.may_see_agent(uid, a)]
    return web.json_response({"uid": uid, "sessions": shown, "agents": mine})


# What the page shows of an agent (clowder-control's status has more: cwd, problems).
AGENT_FIELDS = ("name", "state", "activity", "activity_reason", "attention",
                "attention_cause", "session", "pid", "last_exit", "uptime", "user")


def origin_ok(request: web.Request, extra: frozenset[str]) -> bool:
    """The WebSocket comes from this page: Origin is this server as the browser named it
    (scheme and Host header), or one the unit allows (a reverse proxy's)."""
    origin = request.headers.get("Origin")
    return origin is not None and (origin == f"{request.scheme}://{request.host}"
                                   or origin in extra)


async def terminal(request: web.Request) -> web.WebSocketResponse:
    """One session's terminal: the repaint, then live output; input only if allowed."""
    settings: Settings = request.app["settings"]
    uid = request["uid"]
    if not origin_ok(request, settings.origins):
        refusals.warning(("web-origin", uid), "WebSocket from origin %.100r refused "
                         "(uid %d)", request.headers.get("Origin"), uid,
                         extra={"CLOWDER_CAUSE": "web-origin"})
        raise web.HTTPForbidden(text="403: this WebSocket's Origin is not this page's\n")
    held = request.app["terminals"]
    if held[uid] >= MAX_TERMINALS:
        raise web.HTTPTooManyRequests(text=f"429: {MAX_TERMINALS} terminals are open "
                                           f"for this user already: close one\n")
    held[uid] += 1
    try:
        return await _terminal(request, settings, uid)
    finally:
        held[uid] -= 1
        if not held[uid]:
            del held[uid]


async def _terminal(request: web.Request, settings: Settings, uid: int
                    ) -> web.WebSocketResponse:
    sid = request.match_info["sid"]
    try:
        known = {s["id"]: s for s in await hostlink.list_sessions(settings.host_socket)}
    except hostlink.HostError as exc:
        raise web.HTTPServiceUnavailable(text=f"503: {exc}\n")
    info = known.get(sid)
    if info is None or not access.may_see(uid, info):
        raise web.HTTPNotFound(text=f"404: no such session: {sid}\n")  # never "not yours"
    typing = access.may_type(uid, info, settings.typists)
    cols, rows = _size(request, info)
    ws = web.WebSocketResponse(max_msg_size=MAX_WS_MESSAGE, heartbeat=20)
    await ws.prepare(request)
    try:
        link, info = await hostlink.attach(settings.host_socket, sid, cols, rows,
                                           read_only=not typing)
    except hostlink.HostError as exc:
        await ws.close(code=1011, message=str(exc)[:100].encode())
        return ws
    await ws.send_str(json.dumps({"attached": info, "input": typing}))
    pump = asyncio.ensure_future(_host_to_browser(link, ws))
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            await _browser_to_host(msg.data, link, ws, typing)
    finally:
        pump.cancel()
        link.close()
    return ws


def _size(request: web.Request, info: dict) -> tuple[int, int]:
    try:
        cols, rows = int(request.query["cols"]), int(request.query["rows"])
    except (KeyError, ValueError):
        return info.get("cols") or 80, info.get("rows") or 24
    return (cols, rows) if _valid(cols, rows) else (0, 0)  # 0: the session's own size


def _valid(cols: int, rows: int) -> bool:
    return cols > 0 and rows > 0 and protocol.fit_size(cols, rows) == (cols, rows)


async def _host_to_browser(link: hostlink.Link, ws: web.WebSocketResponse) -> None:
    """Output frames as binary messages (send_bytes waits while the browser is slow, so
    the host sees a slow reader and catches it up from its ring); the end as JSON."""
    reason = "the PTY host closed the attach"
    try:
        while True:
            msg = await protocol.read_message(link.reader)
            data = hostlink.output_of(msg)
            if data is not None:
                await ws.send_bytes(data)
            elif isinstance(msg, protocol.Exited):
                await ws.send_str(json.dumps({"exited": {
                    "status": msg.status, "exit_code": msg.exit_code, "signal": msg.signal}}))
                reason = "the session ended"
                break
            elif isinstance(msg, protocol.Error):
                await ws.send_str(json.dumps({"error": msg.message, "code": msg.code}))
                if msg.fatal:
                    break
    except (asyncio.IncompleteReadError, OSError, protocol.ProtocolError):
        reason = "the PTY host went away (restarting?)"
    # 1012 "service restart": the page attaches again by itself.
    await ws.close(code=1012, message=reason.encode())


async def _browser_to_host(text: str, link: hostlink.Link, ws: web.WebSocketResponse,
                           typing: bool) -> None:
    """A message from the page: {"input": str} or {"resize": [cols, rows]}.  Input is
    never forwarded on a read-only view: it is answered with a refusal instead."""
    try:
        msg = json.loads(text)
    except ValueError:
        return
    if not isinstance(msg, dict):
        return
    if "input" in msg:
        if not typing or not isinstance(msg["input"], str):
            await ws.send_str(json.dumps({"refused": "read-only"}))
            return
        link.send(protocol.Input(data=msg["input"].encode()))
        await link.writer.drain()
    elif "resize" in msg:
        try:
            cols, rows = (int(x) for x in msg["resize"])
        except (TypeError, ValueError):
            return
        if _valid(cols, rows):
            link.send(protocol.Resize(cols=cols, rows=rows))
            await link.writer.drain()
