"""The hand-off's bridge: attached clients keep typing and seeing output while the new
code starts.

A hand-off execs the new code in the same process (same main PID, handoff.py); from the
exec to the new code serving (the interpreter's start, its imports, the adoption: 120-200
ms here) nothing read the ptys or the clients, and every attached client was cut off and
reconnected after it.  Now, just before the exec, the old code forks this bridge: a child
that waits for the exec to happen (``gate``: a close-on-exec pipe whose end the parent
holds; its EOF is the exec, a byte is a failed exec and the end), then moves the bytes of
the clients that were attached and in step: program output from the pty into the ring
(the same memfd the new code adopts) and on to those clients, and their numbered
keystrokes into the pty, recording each in the input table (inputseq.py) as the old code
does.  The new code, once imported, takes every session (fds, pidfds) without
reading a pty or writing a ring, then stops the bridge (``end``: SIGTERM, then waits for
its exit; Adoption._settle_bridge) and only then takes the rings' heads and reads the
ptys, so the two never run at once; the clients' connections close as the bridge exits,
and they reconnect and are repainted as before, only later and for less time
(docs/design.md, "Hand-off: the bridge").

What the bridge does not do (it runs none of the old code's machinery; it is a forked
copy of a threaded process, so it takes no lock another thread may have held, imports
nothing and uses no thread): requests, new connections (they wait in the listening
socket's backlog for the new code), models (the new code's model, restored from the
screen that crossed the exec, catches up from the ring: a session's pty is read at most
``LEAD`` past that screen, so the catch-up stays within what a repaint feeds), resizes
and anything else a client sends (that client is no longer read: the new code handles it
after the reconnect; numbered input not yet written is sent again by the client, as after
any restart).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import time
from typing import Optional

import clowder_wire as protocol
from clowder_common import pipes

from .pty import write_some
from .session import MODEL_LAG_MAX, READS_PER_WAKE, WAKE_BYTES

log = logging.getLogger("ptyhostd")

ENV = "CLOWDER_HANDOFF_BRIDGE"  # the bridge's pid, for the new code to stop it
LEAD = MODEL_LAG_MAX  # how far past its crossed screen a session's pty is read
LIFETIME = 60.0  # the longest a bridge waits for the new code (then it ends itself)
STOP_WAIT = 2.0  # the new code waits this long for the bridge to end, then kills it
FLUSH_WAIT = 0.02  # what the bridge spends, at its end, on clients' unsent frames
CLIENT_BUFFER = 1 << 20  # a client's unsent frames beyond this: it is no longer sent any
INPUT_BUFFER = 64 << 10  # a session's unwritten input beyond this: its clients not read


class _Feed:
    """One session's pty and ring, its clients, and input the pty has not taken yet."""

    def __init__(self, sid: str, fd: int, ring, limit: float):
        self.sid, self.fd, self.ring, self.limit = sid, fd, ring, limit
        self.clients: list[_Client] = []
        self.pending: list[list] = []  # [bytes, token or None], in order
        self.reading = True
        self.typing = True  # False once earlier input was queued in the old code

    def pending_bytes(self) -> int:
        return sum(len(p[0]) for p in self.pending)


class _Client:
    def __init__(self, fd: int, feed: _Feed, reader, token, sending: bool, reading: bool):
        self.fd, self.feed, self.reader, self.token = fd, feed, reader, token
        self.sending, self.reading = sending, reading
        self.out = bytearray()


class Plan:
    """What the bridge serves, taken from the old code's objects just before the fork."""

    def __init__(self, feeds: list[_Feed]):
        self.feeds = feeds
        self.clients = [c for f in feeds for c in f.clients]

    @classmethod
    def of(cls, sessions, screen_pos: dict[str, int]) -> "Plan":
        feeds = []
        for s in sessions:
            if s.state != "running" or s.master is None or not s.attachments:
                continue
            pos = screen_pos.get(s.id)
            feed = _Feed(s.id, s.master.fd, s.ring,
                         pos + LEAD if pos is not None else float("inf"))
            feed.typing = not s.input.items  # queued input goes first: the new code's
            for att in s.attachments:
                conn = att.conn
                transport = conn.transport
                if conn.closed or transport is None:
                    continue
                sock = transport.get_extra_info("socket")
                if sock is None:
                    continue
                # In step: the old code sent it everything and its transport holds none of
                # it; else it is repainted by the new code after the reconnect.
                # A terminal the host writes (terminal.py): the bridge sends frames on,
                # which the client writes after what its terminal already has.
                sending = (att.pos == s.ring.head and not att.paused and not att.viewing
                           and not att.resyncing and att.sized_to_session()
                           and transport.get_write_buffer_size() == 0
                           and (att.terminal is None or att.terminal.empty()))
                reading = (feed.typing and not att.read_only and att.token is not None
                           and conn.quiet())
                feed.clients.append(_Client(sock.fileno(), feed, conn.reader, att.token,
                                            sending, reading))
            if any(c.sending or c.reading for c in feed.clients):
                feeds.append(feed)
        return cls(feeds)


class Child:
    """The old code's handle on its bridge, until the exec (which hands it over)."""

    def __init__(self, pid: int, gate: int):
        self.pid, self.gate = pid, gate

    def cancel(self) -> None:
        """The exec failed: the bridge ends without having touched anything."""
        try:
            os.write(self.gate, b"x")
        except OSError:
            pass
        os.close(self.gate)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def fork(plan: Plan) -> Optional[Child]:
    """Fork the bridge for ``plan`` (None: nothing to serve, or no fork: the hand-off
    goes on without one, as it did before the bridge)."""
    if not plan.clients:
        return None
    prctl = _prctl()  # looked up before the fork: the child loads nothing
    for c in plan.clients:
        if c.token is not None:
            c.token.table.ready_to_send()  # sendfile and the table's address, likewise
    parent = os.getpid()
    gate_r, gate_w = os.pipe()  # both close-on-exec: the exec closes ours
    try:
        pid = os.fork()
    except OSError as exc:
        log.warning("hand-off: no bridge for the attached clients (fork: %s); they "
                    "reconnect once the new code serves", exc,
                    extra={"CLOWDER_CAUSE": "handoff-bridge"})
        os.close(gate_r)
        os.close(gate_w)
        return None
    if pid == 0:  # the bridge: never returns
        code = 1
        try:
            os.close(gate_w)
            # If the host dies (kill -9 of the starting new code), the bridge ends at
            # once, whatever the unit's KillMode: a restarted host must be the rings'
            # only user (systemd's mixed mode also kills it before the restart).
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            code = 0 if os.getppid() != parent else _Bridge(plan, gate_r).run()
        except BaseException as exc:  # noqa: BLE001 (a child must not unwind into the host)
            try:
                log.error("hand-off bridge failed: %s", exc,
                          extra={"CLOWDER_CAUSE": "handoff-bridge"})
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)
    os.close(gate_r)
    return Child(pid, gate_w)


_PR_SET_PDEATHSIG = 1



def _ready(fds: list[int], events: int, timeout: float) -> set[int]:
    """The fds of ``fds`` ready for ``events`` within ``timeout`` s.  poll, not select:
    a host of a thousand sessions has fds far above select's 1,024."""
    p = select.poll()
    for fd in fds:
        p.register(fd, events)
    try:
        return {fd for fd, _ in p.poll(timeout * 1000)}
    except InterruptedError:
        return set()


def _prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None  # then only the unit's KillMode ends a bridge whose host died


def end() -> None:
    """In the new code, once it has taken the sessions and before it reads any pty or
    writes any ring: stop the bridge the old code left (if any) and wait until it is
    gone, so that the rings and ptys have one user again."""
    text = os.environ.pop(ENV, None)
    if not text:
        return
    try:
        pid = int(text)
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except (ValueError, OSError, IndexError):
        log.warning("hand-off: no bridge %r to stop", text,
                    extra={"CLOWDER_CAUSE": "handoff-bridge"})
        return
    if ppid != os.getpid():
        log.warning("hand-off: %s is not our bridge (its parent is %d)", pid, ppid,
                    extra={"CLOWDER_CAUSE": "handoff-bridge"})
        return
    start = time.monotonic()
    pidfd = os.pidfd_open(pid)
    try:
        for sig, wait in ((signal.SIGTERM, STOP_WAIT), (signal.SIGKILL, STOP_WAIT)):
            signal.pidfd_send_signal(pidfd, sig)
            if _ready([pidfd], select.POLLIN, wait):
                break
            log.error("hand-off bridge %d did not end in %.1f s: killing it", pid, wait,
                      extra={"CLOWDER_CAUSE": "handoff-bridge"})
        os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    log.debug("hand-off bridge %d ended in %.1f ms", pid, (time.monotonic() - start) * 1e3,
              extra={"CLOWDER_CAUSE": "handoff-bridge"})


class _Bridge:
    def __init__(self, plan: Plan, gate: int):
        self.plan, self.gate = plan, gate
        self.stopping = False
        self.moved_out = self.moved_in = 0
        self.ep: Optional[select.epoll] = None
        self.masks: dict[int, int] = {}
        self.by_fd: dict[int, object] = {}

    def _signals(self) -> int:
        """SIGTERM (the new code, or a stop) ends the bridge; its handler's only work is
        the wake-up byte (the old code's handlers were the event loop's)."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        return wake_r

    def _stop(self, _sig, _frame) -> None:
        self.stopping = True

    def run(self) -> int:
        wake = self._signals()
        deadline = time.monotonic() + LIFETIME
        ready = _ready([self.gate, wake], select.POLLIN, LIFETIME)
        if self.gate not in ready or os.read(self.gate, 1) != b"" or self.stopping:
            return 0  # the exec failed (or never came): nothing was touched
        for c in self.plan.clients:
            if c.token is not None:
                c.token.conn = None  # no InputAck from here: not the old code's socket now
        started = time.monotonic()
        log.info("hand-off bridge: serving %d clients of %d sessions while the new code "
                 "starts (%d in step, %d typing)", len(self.plan.clients),
                 len(self.plan.feeds), sum(c.sending for c in self.plan.clients),
                 sum(c.reading for c in self.plan.clients),
                 extra={"CLOWDER_CAUSE": "handoff-bridge"})
        self.ep = select.epoll()
        self.ep.register(wake, select.EPOLLIN)
        for feed in self.plan.feeds:
            self._watch(feed.fd, feed, select.EPOLLIN)
            for c in feed.clients:
                self._watch(c.fd, c, select.EPOLLIN if c.reading else 0)
        while not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                events = self.ep.poll(left)
            except InterruptedError:
                continue
            for fd, ev in events:
                what = self.by_fd.get(fd)
                if fd == wake:
                    pipes.drain(wake)  # a signal came (SIGTERM has set ``stopping``)
                elif isinstance(what, _Feed):
                    self._on_pty(what, ev)
                elif isinstance(what, _Client):
                    self._on_client(what, ev)
        self._flush_at_end()
        log.info("hand-off bridge: ended after %.0f ms: %d bytes of output, %d of input "
                 "moved", (time.monotonic() - started) * 1e3, self.moved_out, self.moved_in,
                 extra={"CLOWDER_CAUSE": "handoff-bridge"})
        return 0

    # --- epoll bookkeeping ---------------------------------------------------------------

    def _watch(self, fd: int, what, mask: int) -> None:
        self.by_fd[fd] = what
        self.masks[fd] = mask
        self.ep.register(fd, mask)

    def _set(self, fd: int, what, mask: int) -> None:
        if fd not in self.by_fd:
            self._watch(fd, what, mask)  # a pty no longer read, given input to write
        elif self.masks[fd] != mask:
            self.masks[fd] = mask
            self.ep.modify(fd, mask)

    def _drop(self, fd: int) -> None:
        if self.by_fd.pop(fd, None) is not None:
            self.masks.pop(fd, None)
            self.ep.unregister(fd)

    # --- a session's pty -----------------------------------------------------------------

    def _on_pty(self, feed: _Feed, ev: int) -> None:
        if ev & select.EPOLLOUT:
            self._write_input(feed)
        if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            if feed.reading:
                self._read_output(feed)  # what the program wrote before it went
            elif ev & (select.EPOLLHUP | select.EPOLLERR):
                feed.pending.clear()  # the program is gone: its input goes nowhere
        self._set_pty_mask(feed)

    def _set_pty_mask(self, feed: _Feed) -> None:
        mask = (select.EPOLLIN if feed.reading else 0) | \
            (select.EPOLLOUT if feed.pending else 0)
        if mask:
            self._set(feed.fd, feed, mask)
        else:
            self._drop(feed.fd)

    def _read_output(self, feed: _Feed) -> None:
        ring = feed.ring
        start = ring.head
        room = min(WAKE_BYTES, ring.capacity - 2 * ring.guard, feed.limit - start)
        try:
            for _ in range(READS_PER_WAKE):
                if room <= 0 or not ring.fill_from(feed.fd) or ring.head - start >= room:
                    break
        except BlockingIOError:
            pass
        except OSError:
            feed.reading = False  # EIO: the program is gone; the new code records its end
        if ring.head >= feed.limit:
            feed.reading = False  # the rest waits in the pty for the new code's model
        got = ring.head - start
        if not got:
            return
        self.moved_out += got
        data = ring.read(start, ring.head)
        frames = b"".join(protocol.encode_output(data[i:i + protocol.MAX_DATA])
                          for i in range(0, len(data), protocol.MAX_DATA))
        for c in feed.clients:
            self._send(c, frames)

    def _write_input(self, feed: _Feed) -> None:
        while feed.pending:
            item = feed.pending[0]
            # Recorded in the same system call: not resent after the reconnect.
            n = write_some(feed.fd, item[0]) if item[1] is None \
                else item[1].write(feed.fd, item[0])
            self.moved_in += n
            if n < len(item[0]):
                item[0] = item[0][n:]
                break
            feed.pending.pop(0)
        if feed.pending_bytes() <= INPUT_BUFFER:
            for c in feed.clients:
                if c.reading and c.fd in self.by_fd:
                    self._set_client_mask(c)

    # --- a client ------------------------------------------------------------------------

    def _on_client(self, c: _Client, ev: int) -> None:
        if ev & (select.EPOLLHUP | select.EPOLLERR):
            c.sending = c.reading = False
            c.out.clear()
        else:
            if ev & select.EPOLLOUT:
                self._flush(c)
            if ev & select.EPOLLIN and c.reading:
                self._read_client(c)
        self._set_client_mask(c)

    def _set_client_mask(self, c: _Client) -> None:
        reading = c.reading and c.feed.pending_bytes() <= INPUT_BUFFER
        mask = (select.EPOLLIN if reading else 0) | (select.EPOLLOUT if c.out else 0)
        if c.fd not in self.by_fd:
            return  # done with (nothing to send it, nothing to read): never again
        if c.sending or c.reading or c.out:
            self._set(c.fd, c, mask)
        else:
            self._drop(c.fd)

    def _read_client(self, c: _Client) -> None:
        try:
            data = os.read(c.fd, 64 << 10)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            c.sending = c.reading = False
            c.out.clear()
            return
        try:
            messages = c.reader.feed(data)
        except protocol.ProtocolError:
            c.reading = False  # the new code says why, after the reconnect
            return
        feed = c.feed
        for msg in messages:
            if not (isinstance(msg, protocol.Input) and feed.typing and msg.seq is not None
                    and 0 <= msg.seq < 1 << 62):
                # Anything else is the new code's to handle: this client is not read
                # further, and what it sent here is sent again after its reconnect
                # (numbered input not recorded as written; its size with its Attach).
                c.reading = False
                return
            data = c.token.take(msg.seq, msg.data)
            if data:
                feed.pending.append([data, c.token])
        if feed.pending:
            self._write_input(feed)
            self._set_pty_mask(feed)

    def _send(self, c: _Client, frames: bytes) -> None:
        if not c.sending:
            return
        if c.out:
            c.out += frames
        else:
            try:
                n = os.write(c.fd, frames)
            except BlockingIOError:
                n = 0
            except OSError:
                c.sending = c.reading = False
                return
            if n < len(frames):
                c.out += frames[n:]
        if len(c.out) > CLIENT_BUFFER:
            c.sending = False  # it is repainted after the reconnect; what is queued goes
        self._set_client_mask(c)

    def _flush(self, c: _Client) -> None:
        try:
            n = os.write(c.fd, c.out)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EINTR:
                c.sending = c.reading = False
                c.out.clear()
            return
        del c.out[:n]

    def _flush_at_end(self) -> None:
        """Whole frames to the clients that can take them: a client cut off in the middle
        of one reconnects all the same, but sees an error first."""
        deadline = time.monotonic() + FLUSH_WAIT
        waiting = [c for c in self.plan.clients if c.out]
        while waiting and time.monotonic() < deadline:
            for c in waiting:
                self._flush(c)
            waiting = [c for c in waiting if c.out]
            if waiting:
                _ready([c.fd for c in waiting], select.POLLOUT,
                       max(0.0, deadline - time.monotonic()))
