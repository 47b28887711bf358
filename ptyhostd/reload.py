"""ptyhostd --hand-off PID: what ExecReload= runs, so `systemctl reload` ends with the hand-off.

systemd 252 ends a reload job when ExecReload= exits; a bare `kill -HUP` exits at once, so
`systemctl reload` returned before the new code was even checked, said nothing when the
hand-off was refused, and a stop right after it raced the exec.  This client asks the
running host (a HandOff request on its socket) and stays until the outcome:

- the host answers Ok once it has told systemd RELOADING=1 (a notification systemd reads
  before it sees this process exit, so the unit stays `reloading` until READY=1);
- then an Error if the new code refused (or the hand-off failed): printed, exit 1, and
  `systemctl reload` fails with it while the running code serves on;
- or the connection closes as the process execs the new code: this client connects again
  until the host answers, and checks it is the same process (a hand-off keeps the PID; a
  new PID means it crashed and was restarted instead): exit 0 or 1.

A host from before the request answers "unknown message kind": it is sent SIGHUP, as the
unit did before (so a package upgrade reloads an old host with the new unit file).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import clowder_wire as protocol

# The whole hand-off: the new code's check (ptyhostd/handoff.py CHECK_TIMEOUT, 10 s), the
# screens packed, the exec and the adoption; below the unit's TimeoutStartSec (90 s).
DEADLINE = 60.0
FIRST_CONNECT = 10.0  # the running host answers at once, or is being replaced by systemd


# How long the client waits, at its end, for journald to read what it printed.
JOURNAL_READ = 1.0


class _Closed(Exception):
    """The host closed the connection."""


class _Failed(Exception):
    """The hand-off cannot be asked or ended: the message says why."""


def _connect(path: str, end: float) -> tuple[socket.socket, int]:
    """A greeted connection to the host at ``path`` and its pid (retried until ``end``)."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.1, end - time.monotonic()))
            sock.connect(path)
            sock.sendall(protocol.encode(protocol.Hello(version=protocol.PROTOCOL_VERSION,
                                                        client="ptyhostd --hand-off")))
            reply = _recv(sock, protocol.FrameReader(), [])
            if isinstance(reply, protocol.Error):
                raise _Failed(f"the host refused the greeting: {reply.message}")
            return sock, reply.pid  # 0: a host from before Welcome.pid
        except (OSError, _Closed) as exc:
            sock.close()
            if time.monotonic() >= end:
                raise _Failed(f"the host at {path} does not answer ({exc})") from None
            time.sleep(0.05)  # a host between two processes: systemd queues us meanwhile


def _recv(sock: socket.socket, reader: protocol.FrameReader,
          pending: list) -> protocol.Message:
    while not pending:
        data = sock.recv(1 << 16)
        if not data:
            raise _Closed("the host closed the connection")
        pending.extend(reader.feed(data))
    return pending.pop(0)


def main(argv: list[str]) -> int:
    """``[--system|--user] --socket PATH --hand-off PID`` (the unit's ExecReload=)."""
    import argparse
    p = argparse.ArgumentParser(prog="ptyhostd --hand-off")
    p.add_argument("--system", action="store_true")
    p.add_argument("--user", action="store_true")
    p.add_argument("--socket", required=True, help="the host's socket")
    p.add_argument("--hand-off", type=int, required=True, metavar="PID",
                   help="the unit's main process ($MAINPID)")
    args = p.parse_args(argv)
    # A first line, read by journald while this process surely lives on (the hand-off
    # takes a round trip at least): journald learns a stream's unit from its first line
    # and keeps it for the stream (_read_by_journald), so the last line has it too.
    print(f"ptyhostd --hand-off: asking pid {args.hand_off} to hand off", file=sys.stderr)
    sys.stderr.flush()
    _read_by_journald(sys.stderr.fileno(), time.monotonic() + JOURNAL_READ)
    try:
        return hand_off(args.socket, args.hand_off)
    except _Failed as exc:
        print(f"ptyhostd --hand-off: {exc}", file=sys.stderr)
        return 1
    finally:
        sys.stderr.flush()
        _read_by_journald(sys.stderr.fileno(), time.monotonic() + JOURNAL_READ)


def _read_by_journald(fd: int, end: float) -> None:
    """Return once what was written to ``fd`` has been read, if ``fd`` is a socket.

    Under systemd our stderr is a stream to journald, which learns the writer's unit from
    /proc/PID/cgroup when it logs the stream's first line, and keeps it for the stream's
    later lines (systemd's journald-stream.c, stdout_stream_log: the stream's context is
    acquired once).  From a process that has exited by then, the line has no unit, and
    `journalctl -u clowder-ptyhost`, which systemctl's failed reload points to, misses
    why.  Measured in a private instance: 6 and 11 of 60 lines of a user unit's process
    that wrote one line and exited (tests/test_handoff.py
    test_every_refusal_is_in_the_units_journal).  A stream socket's send queue
    (SIOCOUTQ) is empty once the reader has read it all; journald looks the unit up just
    after that read, so waiting only at the end still lost 1 line in 30 under a CI run's
    load (ci76): main() waits once at the start, before the hand-off's round trip."""
    import fcntl
    import stat
    import struct
    import termios
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return
        while struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0] > 0:
            if time.monotonic() >= end:
                return  # journald is not reading: the line may go without its unit
            time.sleep(0.002)
    except OSError:
        return  # not a queue we can ask about: nothing to wait for


def hand_off(path: str, main_pid: int) -> int:
    start = time.monotonic()
    end = start + DEADLINE
    sock, pid = _connect(path, start + FIRST_CONNECT)
    if pid and main_pid and pid != main_pid:
        print(f"ptyhostd --hand-off: the host at {path} is pid {pid}, not the unit's main "
              f"process {main_pid}", file=sys.stderr)
        return 1
    reader, pending = protocol.FrameReader(), []
    try:
        sock.settimeout(max(0.1, end - time.monotonic()))
        sock.sendall(protocol.encode(protocol.HandOff()))
        reply = _recv(sock, reader, pending)
        if isinstance(reply, protocol.Error) and reply.code == "unknown-kind":
            # A host from before HandOff: SIGHUP is what it knows.
            os.kill(pid or main_pid, signal.SIGHUP)
            print("ptyhostd --hand-off: an older host: sent it SIGHUP", file=sys.stderr)
            return 0
        if isinstance(reply, protocol.Error):
            print(f"ptyhostd --hand-off: {reply.message}", file=sys.stderr)
            return 1
        reply = _recv(sock, reader, pending)  # the outcome, if the running code stays
        message = reply.message if isinstance(reply, protocol.Error) else repr(reply)
        print(f"ptyhostd --hand-off: {message}", file=sys.stderr)
        return 1
    except _Closed:
        pass  # the exec: the new code closes what the old one had open
    except socket.timeout:
        print(f"ptyhostd --hand-off: no outcome within {DEADLINE:g} s", file=sys.stderr)
        return 1
    finally:
        sock.close()
    sock, now = _connect(path, end)
    sock.close()
    if pid and now != pid:
        print(f"ptyhostd --hand-off: the host was replaced (pid {pid} -> {now}), not handed "
              f"off: see its journal", file=sys.stderr)
        return 1
    return 0
