"""clowderctl relay: copy bytes between stdin/stdout and clowder-control's socket.

The remote end of ``clowderctl --host HOST ...``: ssh runs ``clowderctl relay`` on HOST
and the frames on its stdin/stdout reach the one supervised control daemon there (or,
with ``--to host``, the PTY host, for the session commands: the host then sees the ssh
user's own uid and applies its own access rules). The relay understands none of the
frames and keeps no state, so a dropped ssh connection loses nothing: the daemons keep
every session, and the next relay reaches the same ones.

It never starts anything itself. Connecting to a socket-activated socket lets systemd
start the daemon, as for any client; when nothing listens (no socket file, or connection
refused) the relay says so and exits 3 (unreachable) at once, and ssh passes both on.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading

from ..client import connect_unix, default_control_socket, default_socket

CHUNK = 256 * 1024  # per read: one syscall moves a whole burst of terminal output
CONNECT_TIMEOUT = 10.0  # a unix connect blocks only while the listen backlog is full


def add_parser(sub):
    p = sub.add_parser("relay", help="copy stdin/stdout to clowder-control's socket "
                       "(what `clowderctl --host` runs through ssh)", epilog="""\
Not for people: `clowderctl --host HOST ...` runs it there through ssh.

examples:
  ssh box clowderctl relay --to host
""")
    p.add_argument("--socket", dest="relay_socket", metavar="PATH",
                   help="the socket (default: --control-socket, $CLOWDER_CONTROL_SOCKET, "
                        "$XDG_RUNTIME_DIR/clowder/control.sock, /run/clowder/control.sock; "
                        "with --to host: --socket of clowderctl, $CLOWDER_SOCKET, ...)")
    p.add_argument("--to", choices=("control", "host"), default="control",
                   help="which daemon: clowder-control (default) or the PTY host")
    p.set_defaults(run=run)


def _wait(fd: int, write: bool) -> None:
    """Block until ``fd`` is ready: stdin/stdout may come to us non-blocking."""
    if write:
        select.select([], [fd], [])
    else:
        select.select([fd], [], [])


def _upstream(stdin: int, sock: socket.socket) -> None:
    """stdin -> socket until stdin's EOF, then half-close: the daemon still answers."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    try:
        while True:
            try:
                n = os.readv(stdin, [buf])
            except BlockingIOError:
                _wait(stdin, write=False)
                continue
            if not n:
                break
            sock.sendall(view[:n])
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        # The daemon went away (or stdin broke): the downstream direction sees the
        # daemon's EOF or reset and ends the relay.
        pass


def _downstream(sock: socket.socket, stdout: int) -> None:
    """socket -> stdout until the daemon closes, or until stdout is gone."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        try:
            n = sock.recv_into(buf)
        except ConnectionResetError:
            return
        if not n:
            return
        data = view[:n]
        while data:
            try:
                written = os.write(stdout, data)
            except BlockingIOError:
                _wait(stdout, write=True)
                continue
            except BrokenPipeError:
                return  # ssh (our reader) is gone: nobody is left to relay to
            data = data[written:]


def run(args) -> int:
    if args.to == "host":
        # args.socket: clowderctl's own --socket, the PTY host's.
        sock = connect_unix(args.relay_socket or args.socket or default_socket(),
                            CONNECT_TIMEOUT, "clowder-ptyhost.socket")
    else:
        sock = connect_unix(args.relay_socket or args.control_socket
                            or default_control_socket(), CONNECT_TIMEOUT,
                            "clowder-control.socket")
    sock.settimeout(None)
    # One blocking copy per direction: a slow reader on one side never holds up the
    # other, no fd that may be shared with a terminal is made non-blocking, and each
    # byte costs one read and one write, with no framing or buffering of ours between.
    up = threading.Thread(target=_upstream, args=(sys.stdin.fileno(), sock),
                          name="relay-upstream", daemon=True)
    up.start()
    _downstream(sock, sys.stdout.fileno())
    # The daemon closed (or stdout did): done.  The upstream thread may still be blocked
    # reading stdin or writing the socket; it is a daemon thread, so exiting does not wait
    # for it, and the socket is left for the exit to close (closing it under that thread
    # could let its write land on a reused fd number).
    return 0
