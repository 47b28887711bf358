"""One client connection: handshake, who the peer is, and its requests.

The peer's uid comes from the kernel (``SO_PEERCRED``), never from anything it says.
A client sees and touches only its own sessions; root sees all.  Anything that is not
valid protocol gets a fatal Error frame and the connection is closed; nothing a client
sends can end the host or touch another client's stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import Optional

import clowder_wire as protocol
from clowder_common import __version__
from clowder_common.peercred import peer_creds

from . import engine, handoff, inputseq, peer, pty, terminal
from .attachment import Attachment
from .doorbell import DOORBELL
from .eventbus import WATCH_HIGH_WATER, WATCH_LOW_WATER, Watcher
from .host import Host
from .keystrokes import KEYSTROKES
from .requesterror import RequestError
from .session import Session

log = logging.getLogger("ptyhostd")

# A client's unsent output beyond this is not queued: it catches up from the ring.
CLIENT_HIGH_WATER = 1 << 20
CLIENT_LOW_WATER = 256 << 10
# Requests read but not yet handled (e.g. Sends behind a Wait): past this many bytes
# the client stops being read until the worker catches up, so memory stays bounded.
REQUESTS_HIGH_WATER = 2 << 20
# The most a SessionList carries of its sessions' JSON: past it, the list comes in pages
# (Connection._list); a frame's room, less what the reply's own fields take.
LIST_PAGE = protocol.MAX_DATA
# A Remove of a session killed this recently (or whose end is being recorded) waits up
# to REMOVE_WAIT for that end, so `kill --signal KILL ID; rm ID` works.
KILLED_RECENTLY = 5.0
REMOVE_WAIT = 3.0
_EOF = object()  # queued after the last request of a client that shut its side


class Connection(asyncio.Protocol):
    def __init__(self, host: Host):
        self.host = host
        host.last_request = time.monotonic()
        self.reader = protocol.FrameReader()
        self.transport: Optional[asyncio.Transport] = None
        self.uid = -1
        self.pid = 0
        self.control = False  # the peer is clowder-control (peer.py): may spawn agents
        self.greeted = False
        self.attachment: Optional[Attachment] = None
        self.closed = False
        self._queue: asyncio.Queue = asyncio.Queue()
        self._queued_bytes = 0  # of the requests in _queue
        self._worker: Optional[asyncio.Task] = None
        self._fd = -1  # its socket's, watched by the doorbell while it is read
        self._pauses: set[str] = set()  # why the client is not being read
        # Set while the client reads what we write: the request worker waits on it, so
        # a client that sends requests and never reads their replies stops being served
        # (and, its request queue full, stops being read) instead of filling our memory.
        self._writable = asyncio.Event()
        self._writable.set()

    # --- transport events --------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno()
        DOORBELL.watch(self._fd)  # its requests come before a flood's next read
        self.pid, self.uid, _gid = peer_creds(sock)
        transport.set_write_buffer_limits(high=CLIENT_HIGH_WATER, low=CLIENT_LOW_WATER)
        if self.host.uid != 0 and self.uid not in (0, self.host.uid):
            self.fatal(f"uid {self.uid} may not use the PTY host of uid {self.host.uid}",
                       "permission")
            return
        # Read once, now: the peer's process is the one that connected (peer.py).
        self.control = self.uid == self.host.uid and \
            peer.is_control(sock, self.pid, self.host.control_cgroup)
        log.debug("accepted a client: pid %d uid %d%s", self.pid, self.uid,
                  " (clowder-control)" if self.control else "",
                  extra={"CLOWDER_CAUSE": "accept"})
        self._worker = asyncio.get_running_loop().create_task(self._work())

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            messages = self.reader.feed(data)
        except protocol.ProtocolError as exc:
            self.fatal(str(exc), exc.code)
            return
        for msg in messages:
            if self.closed:
                return
            if not self.greeted:
                self._hello(msg)
            elif isinstance(msg, (protocol.Input, protocol.Resize, protocol.TerminalReady)) \
                    and self.attachment is not None and self._queue.empty():
                self._attached_input(msg)  # inline: keystrokes must not queue behind work
            else:
                # Requests, and keystrokes typed before the attach is done (a client
                # goes raw before the host has answered its Attach): in order.
                self._queue.put_nowait(msg)
                self._queued_bytes += _cost(msg)
                if self._queued_bytes > REQUESTS_HIGH_WATER:
                    self._pause("requests")

    def eof_received(self) -> bool:
        """The client is done sending: answer what it sent, then close (a client may
        send its requests, shut its side and read; the worker yields between requests,
        so closing at once would drop answers)."""
        if self.closed or self._worker is None:
            return False
        self._queue.put_nowait(_EOF)
        return True  # keep our side open for the answers

    def connection_lost(self, exc) -> None:
        DOORBELL.unwatch(self._fd)  # before asyncio closes the socket
        self.closed = True
        self._detach()
        if self._worker is not None:
            self._worker.cancel()

    # --- flow control of what the client sends -----------------------------------------

    def quiet(self) -> bool:
        """Nothing of the client's is queued or held back: its next bytes are the next
        thing it sent (the hand-off's bridge reads on from here, bridge.py)."""
        return self._queue.empty() and not self._pauses

    def _pause(self, why: str) -> None:
        if not self._pauses and not self.closed:
            self.transport.pause_reading()
            DOORBELL.unwatch(self._fd)  # unread, it stays readable: no ringing for it
        self._pauses.add(why)

    def _resume(self, why: str) -> None:
        if why in self._pauses:
            self._pauses.discard(why)
            if not self._pauses and not self.closed:
                self.transport.resume_reading()
                DOORBELL.watch(self._fd)

    def pause_input(self) -> None:
        """A session's input queue is full with what we sent: stop reading us."""
        self._pause("input")

    def resume_input(self) -> None:
        self._resume("input")

    def pause_writing(self) -> None:
        # Past CLIENT_HIGH_WATER unsent: replies wait (the worker), attached output
        # stops and later catches up from the ring (Attachment.paused).
        self._writable.clear()
        if self.attachment is not None and self.attachment.terminal is None:
            self.attachment.stop("socket")  # (its terminal's output is not on the socket)

    def resume_writing(self) -> None:
        self._writable.set()
        self._resume("output")
        if self.attachment is not None:
            self.attachment.go("socket")

    async def _drained(self) -> None:
        """Return once the client has read enough of what we wrote (the low-water mark)."""
        if not self._writable.is_set():
            await self._writable.wait()

    # --- output ------------------------------------------------------------------------

    def write_raw(self, frame: bytes) -> None:
        if not self.closed:
            self.transport.write(frame)

    def send(self, msg: protocol.Message) -> None:
        self.write_raw(protocol.encode(msg))

    def close_after_flush(self) -> None:
        if not self.closed:
            self.closed = True
            self._detach()
            self.transport.close()  # asyncio sends what is buffered first

    def fatal(self, message: str, code: str) -> None:
        """Refuse the connection with a reason the peer can show, then close it."""
        log.warning("client pid %d uid %d: %s", self.pid, self.uid, message,
                    extra={"CLOWDER_CAUSE": f"client-{code}"})
        self.send(protocol.Error(message=message, code=code, fatal=True))
        self.close_after_flush()

    # --- requests ----------------------------------------------------------------------

    def _hello(self, msg: protocol.Message) -> None:
        refusal = protocol.refuse_hello(msg, f"this host (ptyhostd {__version__})")
        if refusal is not None:
            self.fatal(refusal.message, refusal.code)
        else:
            self.greeted = True
            self.send(protocol.Welcome(version=protocol.PROTOCOL_VERSION,
                                       server=f"ptyhostd {__version__}", uid=self.uid,
                                       pid=os.getpid()))

    async def _work(self) -> None:
        """Handle queued requests one at a time, in order."""
        while True:
            await self._drained()  # one reply at most beyond the high-water mark
            # Neither wait yields when there is room and a request queued: without this a
            # client with thousands queued (GetSnapshot, each a few ms) held the loop
            # for a second at a time, and every other client waited.
            await asyncio.sleep(0)
            msg = await self._queue.get()
            if msg is _EOF:
                self.close_after_flush()
                return
            self._queued_bytes -= _cost(msg)
            if self._queued_bytes <= REQUESTS_HIGH_WATER // 2:
                self._resume("requests")
            try:
                await self._handle(msg)
            except RequestError as exc:
                self.send(protocol.Error(message=str(exc), code=exc.code))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("request %s from uid %d failed", type(msg).__name__, self.uid)
                self.send(protocol.Error(message=f"internal error: {exc!r}", code="internal"))

    def _session(self, ref: str) -> Session:
        """The session named by id, or by name: the running one of that name (names are
        unique per user among running sessions, but root sees every user's), else the
        one that ended last."""
        sessions = self.host.sessions
        s = sessions.get(ref)
        if s is None:
            named = [x for x in sessions.values() if x.name == ref and self._may(x)]
            live = [x for x in named if x.state in ("starting", "running")]
            if len(live) > 1:
                raise RequestError(f"name {_show(ref)} is ambiguous (sessions "
                                   f"{', '.join(x.id for x in live)}): use an id",
                                   "ambiguous")
            s = live[0] if live else \
                max(named, key=lambda x: x.ended_at or 0, default=None)
        if s is None or not self._may(s):
            raise RequestError(f"no such session: {_show(ref)}", "no-session")
        return s

    def _list(self, msg: protocol.ListSessions) -> None:
        """The sessions this client may see, in one SessionList; or, past LIST_PAGE
        bytes, in pages in the order of their ids, each naming where the next starts
        (``more``): thousands of sessions, or one user's long command lines, would
        otherwise make a list no frame can carry, for root and clowder-control too."""
        now, seen = time.time(), False
        shown = [s for s in self.host.sessions.values() if self._may(s)
                 and (msg.all or self.control or self.host.shown_in_ps(s, now))]
        parts = [s.info_json() for s in shown]
        more = ""
        if msg.after or sum(map(len, parts)) + len(parts) > LIST_PAGE:
            order = sorted((s.id, i) for i, s in enumerate(shown) if s.id > msg.after)
            page, room = [], LIST_PAGE
            for _sid, i in order:
                room -= len(parts[i]) + 1
                if room < 0 and page:
                    more = shown[page[-1]].id
                    break
                page.append(i)
            shown, parts = [shown[i] for i in page], [parts[i] for i in page]
        for s in shown if not msg.peek else ():
            seen = self._saw(s) or seen
        self.write_raw(protocol.session_list_frame(parts, more))
        if seen:
            self.host.save()

    def _may(self, s: Session) -> bool:
        return self.uid == 0 or s.uid == self.uid

    def _saw(self, s: Session) -> bool:
        """This client was told how ``s`` ended: if it is its owner (not root looking at
        another user's, nor clowder-control's watching), ``s`` is seen; whether it
        changed (the manifest then needs a save)."""
        if s.seen or s.state not in ("exited", "lost") or self.control or s.uid != self.uid:
            return False
        s.seen = True
        return True

    async def _handle(self, msg: protocol.Message) -> None:
        P = protocol
        self.host.last_request = time.monotonic()
        if isinstance(msg, (P.Input, P.Resize, P.TerminalReady)):
            self._attached_input(msg)
            return
        if self.attachment is not None and not isinstance(msg, P.Detach):
            raise RequestError(f"{type(msg).__name__} is not valid while attached",
                               "attached")
        if isinstance(msg, P.Spawn):
            s = await self.host.spawn(msg, self.uid, by_control=self.control)
            self.send(P.SessionInfo(session=s.info()))
        elif isinstance(msg, P.ListSessions):
            self._list(msg)
        elif isinstance(msg, P.Send):
            # Answered once every byte is written to the pty (see inputqueue.py).
            s = self._session(msg.session)
            fut = self._write_input(s, msg.data, wait=True)
            if fut is not None:
                why = await fut
                if why is not None:
                    raise RequestError(why, "not-reading")
            self.send(P.Ok())
        elif isinstance(msg, P.GetBacklog):
            ring = self._session(msg.session).ring
            pos, head = ring.tail, ring.head
            while pos < head:
                await self._drained()  # a chunk at a time: never the whole ring queued
                # A slow reader of a busy session: the ring may have moved on meanwhile;
                # go on from the oldest byte held, as an attached raw reader does.
                pos = max(pos, ring.tail)
                chunk = ring.read(pos, min(head, pos + P.MAX_DATA))
                if not chunk:
                    break
                self.write_raw(P.encode_output(chunk))
                pos += len(chunk)
            self.send(P.Ok())
        elif isinstance(msg, P.GetExport):
            await self._export(self._session(msg.session))
        elif isinstance(msg, P.Wait):
            s = self._session(msg.session)
            if s.state in ("exited", "lost"):
                self.send(s.exited_message())
            else:
                fut = asyncio.get_running_loop().create_future()
                s.waiters.append(fut)
                self.send(await fut)
            if self._saw(s):
                self.host.save()
        elif isinstance(msg, P.Kill):
            s = self._session(msg.session)
            if msg.signal:  # signal 0 is refused below (host.kill): not a kill
                s.killed_at = time.monotonic()
            await self.host.kill(s, msg.signal, msg.escalate)
            self.send(P.Ok())
        elif isinstance(msg, P.Remove):
            s = self._session(msg.session)
            if s.state == "running" and (s.id in self.host._finishing or s.pid_exited()
                                         or time.monotonic() - s.killed_at < KILLED_RECENTLY):
                await self._end_of(s, REMOVE_WAIT)
            if s.state not in ("exited", "lost"):
                raise RequestError(f"session {s.id} is still {s.state}: kill it first",
                                   "running")
            # Out of the manifest before its backlog goes: a crash between the two
            # leaves a parked ring no record claims (closed at the next start), never
            # a record whose backlog is gone.
            self.host.drop(s, f"removed by uid {self.uid}")
            try:
                await self.host.saved()
            finally:
                self.host.release(s)
            self.send(P.Ok())
        elif isinstance(msg, P.Rename):
            s = self._session(msg.session)
            self.host.rename(s, msg.name, self.uid, by_control=self.control)
            await self.host.saved()  # joins the rename's write (host.save)
            self.send(P.SessionInfo(session=s.info()))
        elif isinstance(msg, P.Attach):
            await self._attach(msg)
        elif isinstance(msg, P.GetSnapshot):
            if msg.format not in SNAPSHOT_FORMATS:
                raise RequestError(f"unknown snapshot format {_show(msg.format)}: one of "
                                   f"{', '.join(SNAPSHOT_FORMATS)}", "bad-request")
            s = self._session(msg.session)
            try:
                # JSON reads every cell in Python (~2 us each): never on the loop.
                text, _ = await s.screen_call(functools.partial(_snapshot, format=msg.format),
                                              inline=msg.format != "json")
                size = str(len(text))
            except engine.TooLarge as exc:  # given up before it was all made
                text, size = None, f"at least {exc.at_least}"
            if text is None or len(text) > P.MAX_DATA:
                raise RequestError(f"the {msg.format} snapshot of session {s.id} is "
                                   f"{size} bytes, more than a reply carries "
                                   f"({P.MAX_DATA}): ask for text", "too-large")
            self.send(P.SnapshotData(data=text))
        elif isinstance(msg, P.GetHistory):
            if msg.format not in ("text", "ansi"):
                raise RequestError(f"unknown history format {msg.format!r} (text or ansi)",
                                   "bad-request")
            s = self._session(msg.session)
            keep = await s.history(msg.lines, P.MAX_DATA, ansi=msg.format == "ansi")
            from .history import as_text  # at first use: not imported before serving
            self.send(P.SnapshotData(data=as_text(keep)))
        elif isinstance(msg, P.UpgradeCheck):
            # Each check starts a process as the host's user: not for anyone to loop.
            if self.uid not in (0, self.host.uid):
                raise RequestError(f"uid {self.uid} may not run the upgrade check: only "
                                   f"root may", "permission")
            try:
                report = await self.host.check_handoff()
                self.send(P.CheckReport(ok=True, message="the installed code would take over",
                                        version=__version__, new_version=report["version"]))
            except handoff.HandoffError as exc:
                self.send(P.CheckReport(ok=False, message=str(exc), version=__version__))
        elif isinstance(msg, P.HandOff):
            # The same hand-off as SIGHUP: only whoever may signal the host may ask.
            if self.uid not in (0, self.host.uid):
                raise RequestError(f"uid {self.uid} may not hand the host off: only root "
                                   f"may", "permission")
            why = await self.host.handoff(started=lambda: self.send(P.Ok()))
            raise RequestError(why, "handoff-refused")
        elif isinstance(msg, P.WatchEvents):
            await self._watch(msg)
        elif isinstance(msg, P.Detach):
            if self.attachment is not None:
                self.attachment.close_terminal()  # before the Ok: nothing written after
            self.send(P.Ok())
            self.close_after_flush()
        else:
            raise RequestError(f"{type(msg).__name__} is not a request", "bad-request")

    async def _export(self, s: Session) -> None:
        """The ring's bytes as they are now, with their stamps (GetExport): a frame at a
        time as the client reads, so a client that never reads holds one frame here."""
        P, ring = protocol, s.ring
        start, end = ring.tail, ring.head
        stamps = [[off, t] for off, t in ring.stamps.held(start)]
        self.send(P.ExportHead(session=s.info(), start=start, end=end, stamps=stamps))
        pos = start
        while pos < end:
            await self._drained()
            if pos < ring.tail:  # overwritten while the client was slow: say so, go on
                pos = ring.tail
                self.send(P.ExportHead(session=s.info(), start=pos, end=end, stamps=stamps))
                continue
            chunk = ring.read(pos, min(end, pos + P.MAX_DATA))
            if not chunk:
                break
            self.write_raw(P.encode_output(chunk))
            pos += len(chunk)
        self.send(P.Ok())

    async def _watch(self, msg: protocol.WatchEvents) -> None:
        """The recent events this client may see, Ok, then (``follow``) each new one as
        it comes, until the client goes: this connection serves nothing else meanwhile.
        What it does not read waits in its Watcher's bounded queue (eventbus.py)."""
        sid = self._session(msg.session).id if msg.session is not None else None
        bus = self.host.bus
        watcher = Watcher(self.uid, sid)
        recent = bus.since(watcher, msg.since)
        if msg.follow:  # at once, with no await since ``recent``: no event falls between
            bus.watchers.add(watcher)
            # Events are small: a watcher that does not read holds its queue (shared
            # frames), not up to a megabyte of send buffer (CLIENT_HIGH_WATER) of copies.
            self.transport.set_write_buffer_limits(high=WATCH_HIGH_WATER,
                                                   low=WATCH_LOW_WATER)
        try:
            for frame in recent:
                await self._drained()
                self.write_raw(frame)
            self.send(protocol.Ok())
            if not msg.follow:
                return
            while not self.closed:
                await watcher.wake.wait()
                watcher.wake.clear()
                while not self.closed:
                    await self._drained()
                    frame = watcher.take()
                    if frame is None:
                        break
                    self.write_raw(frame)
        finally:
            bus.watchers.discard(watcher)

    async def _end_of(self, s: Session, timeout: float) -> None:
        """Wait up to ``timeout`` for ``s`` to end (a kill just sent, say)."""
        fut = asyncio.get_running_loop().create_future()
        s.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            if fut in s.waiters:
                s.waiters.remove(fut)

    def _write_input(self, s: Session, data: bytes, wait: bool = False,
                     token=None) -> Optional[asyncio.Future]:
        """Write to the session's pty or queue behind what is queued; with ``wait``, a
        future for when it is written (None: done already), resolved to None or why not."""
        if s.state != "running" or s.master is None:
            raise RequestError(f"session {s.id} is not running ({s.state})", "not-running")
        KEYSTROKES.typed(s.id)  # other sessions' floods read in smaller wakes a while
        done = fut = None
        if wait:
            fut = asyncio.get_running_loop().create_future()

            def settle(why, fut=fut):
                if not fut.done():
                    fut.set_result(why)
            done = settle
        try:
            if s.input.write(data, self, done, token):
                return None
        except OSError as exc:
            raise RequestError(f"session {s.id}: writing its input: {exc}", "input-failed")
        return fut if wait else None

    async def _attach(self, msg: protocol.Attach) -> None:
        s = self._session(msg.session)
        if (msg.cols or msg.rows) and not pty.valid_size(msg.cols, msg.rows):
            raise RequestError(pty.size_problem(msg.cols, msg.rows), "bad-request")
        if msg.history_format not in ("text", "ansi"):
            raise RequestError(f"unknown history format {_show(msg.history_format)} (text "
                               f"or ansi)", "bad-request")
        att = Attachment(self, s, msg.read_only, repaints=msg.replay < 0,
                         size=(msg.cols, msg.rows))
        input_seq = None
        if msg.token is not None and not msg.read_only and s.state == "running":
            if not inputseq.valid_token(msg.token):
                raise RequestError(f"invalid input token {msg.token!r}", "bad-request")
            table = self.host.input_seq
            known = table.known(s.id, msg.token)
            att.token = table.token(s.id, msg.token)
            att.token.conn = self
            # Unknown (a new client, or a record lost): -1, so a client never resends
            # on a guess; it numbers on and the host follows (Token.take).
            input_seq = att.token.written if known else -1
        # The size belongs to the client that typed last; a new writer takes it if no
        # one holds it.  A read-only watcher never does.
        if not msg.read_only and s.state == "running" and s.size_owner not in s.attachments:
            s.size_owner = att
            if msg.cols and msg.rows:
                self.host.resize(s, msg.cols, msg.rows)
        if msg.terminal is not None and msg.replay < 0 and s.state == "running":
            self._take_terminal(att, msg.terminal)
        try:
            self.send(protocol.Attached(session=s.info(), input_seq=input_seq,
                                        terminal=att.terminal is not None))
            if msg.replay >= 0:  # raw bytes wanted (e.g. clowder-control's watchers)
                att.pos = max(s.ring.tail, s.ring.head - msg.replay)
            else:  # a terminal: the current screen, repainted, then live output
                await att.repaint(max(0, msg.history), ansi=msg.history_format == "ansi")
                if self.closed:
                    att.close_terminal()
                    return
        except BaseException:
            att.close_terminal()
            raise
        if s.state != "running":  # ended before, or while the repaint was made
            def end() -> None:
                att.close_terminal()
                self.send(s.exited_message())
                if self._saw(s):
                    self.host.save()
                self.close_after_flush()
            att.catch_up()
            att.finish(end)
            return
        self.attachment = att
        s.attachments.add(att)
        if not self._writable.is_set() and att.terminal is None:  # the repaint filled it
            att.stop("socket")
        att.catch_up()

    def _attached_input(self, msg: protocol.Message) -> None:
        att = self.attachment
        if att is None:
            self.send(protocol.Error(message=f"{type(msg).__name__} needs an attach first",
                                     code="not-attached"))
            return
        if isinstance(msg, protocol.TerminalReady):
            if att.terminal is not None:
                att.terminal.release()
                att.go("ready")
            return
        if att.read_only and isinstance(msg, protocol.Resize):
            # A watcher's terminal size is its own: frames of that size (screen_view.py),
            # never a resize of the session.
            if not pty.valid_size(msg.cols, msg.rows):
                self.send(protocol.Error(message=pty.size_problem(msg.cols, msg.rows),
                                         code="bad-request"))
                return
            att.size = (msg.cols, msg.rows)
            att.follow_size()
            return
        if att.read_only:
            self.send(protocol.Error(message="this attach is read-only: input refused",
                                     code="read-only"))
            return
        s = att.session
        try:
            if isinstance(msg, protocol.Input):
                if s.size_owner is not att:
                    s.size_owner = att  # typing takes the size
                    if all(att.size):
                        self.host.resize(s, *att.size)
                tok = att.token
                if tok is None or msg.seq is None:
                    self._write_input(s, msg.data)
                elif not 0 <= msg.seq < 1 << 62:
                    raise RequestError(f"input sequence {msg.seq} out of range", "bad-field")
                else:  # numbered: what the host took before a reattach is not retaken
                    data = tok.take(msg.seq, msg.data)
                    if data:
                        self._write_input(s, data, token=tok)
            else:
                if not pty.valid_size(msg.cols, msg.rows):
                    raise RequestError(pty.size_problem(msg.cols, msg.rows), "bad-request")
                att.size = (msg.cols, msg.rows)
                if s.size_owner in (att, None) or s.size_owner not in s.attachments:
                    s.size_owner = att
                    self.host.resize(s, msg.cols, msg.rows)
                att.follow_size()  # not the owner: its frames follow its own size
        except RequestError as exc:
            self.send(protocol.Error(message=str(exc), code=exc.code))
            if not self._writable.is_set():
                # Refusals answered inline (e.g. Input on a read-only attach) that the
                # client does not read: stop reading it until it does.
                self._pause("output")

    def _take_terminal(self, att: Attachment, spec) -> None:
        """Write ``att``'s output to the client's own terminal, if it is (terminal.py);
        held until the client's TerminalReady.  Else frames, as to any client."""
        fd, why = terminal.open_for(spec, self.uid)
        if fd is None:
            log.debug("client pid %d uid %d: its terminal is not written by the host: %s",
                      self.pid, self.uid, why, extra={"CLOWDER_CAUSE": "terminal-refused"})
            return
        loop = asyncio.get_running_loop()
        att.terminal = terminal.Terminal(fd, loop, on_room=lambda: att.go("terminal"),
                                         on_broken=self._terminal_broken)
        att.stop("ready")

    def _terminal_broken(self, why: str) -> None:
        """The client's terminal failed a write (hung up): the client is gone with it.
        Closed at the next turn: this runs inside a write to every attached client."""
        log.debug("client pid %d uid %d: its terminal: %s", self.pid, self.uid, why,
                  extra={"CLOWDER_CAUSE": "terminal-broken"})
        asyncio.get_running_loop().call_soon(self.close_after_flush)

    def _detach(self) -> None:
        if self.attachment is not None:
            att = self.attachment
            att.close_terminal()
            tok = att.token
            if tok is not None and tok.conn is self:
                tok.conn = None
            s = att.session
            s.attachments.discard(att)
            self.attachment = None
            if s.size_owner is att:
                self._pass_size(s)

    def _pass_size(self, s) -> None:
        """The owner of the size left: the writer attached last of those left takes it
        (as in tmux, the size follows the clients that remain), so its terminal shows
        the program's bytes instead of frames until it types."""
        s.size_owner = None
        writers = [a for a in s.attachments if not a.read_only and all(a.size)]
        if not writers or s.state != "running":
            return
        s.size_owner = max(writers, key=lambda a: a.attached_at)
        try:
            self.host.resize(s, *s.size_owner.size)
        except RequestError as exc:
            log.warning("session %s: giving the size to the next client: %s", s.id, exc,
                        extra={"CLOWDER_SESSION": s.id})


# GetSnapshot's formats (screen.SNAPSHOT_FORMATS; the model is not imported to check).
SNAPSHOT_FORMATS = ("text", "ansi", "html", "json")


def _snapshot(screen, format: str) -> bytes:
    """A snapshot as UTF-8 bytes: made in the screen pool; engine.TooLarge once it is
    certain not to fit in a reply."""
    return screen.snapshot(format, limit=protocol.MAX_DATA).encode()


def _cost(msg: protocol.Message) -> int:
    """What a queued request holds in memory, roughly: its bytes and strings too (a
    session name may be a megabyte; counting only ``data`` let 8,000 of those queue)."""
    cost = 256
    for value in vars(msg).values():
        if isinstance(value, (bytes, bytearray, str)):
            cost += len(value)
        elif isinstance(value, (list, dict)):  # Spawn's argv and env
            cost += len(repr(value))
    return cost


def _show(ref: str, limit: int = 64) -> str:
    """A client's name in our messages: quoted, and cut (a name may be a megabyte)."""
    return repr(ref) if len(ref) <= limit else f"{ref[:limit]!r}... ({len(ref)} chars)"
