"""clowderctl forward PORT: a local TCP port that reaches PORT on the daemon's loopback.

Each accepted connection becomes one ``forward`` stream on a multiplexed connection to
clowder-control (through ssh with ``--host``), which connects to 127.0.0.1:PORT (or
[::1]:PORT) there. When the connection drops (ssh killed, network gone) the next local
connection opens a new one: nothing to restart by hand.
"""

from __future__ import annotations

import socket
import sys
import threading

from ..client import ClientError, default_control_socket
from ..mux import Mux


def add_parser(sub):
    p = sub.add_parser("forward", help="forward a local TCP port to a port on the "
                       "daemon's machine (its loopback)", epilog="""\
It runs until ^C; a dropped connection is opened again at the next local connection.

examples:
  clowderctl --host box forward 8080
  clowderctl --host box forward 5432 --listen 0
""")
    p.add_argument("port", type=_port, help="the port there")
    p.add_argument("--listen", type=_port, metavar="PORT",
                   help="the local port on 127.0.0.1 (default: the same number; 0: any)")
    p.set_defaults(run=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port < 65536:
        raise ValueError(f"invalid port {text!r}")
    return port


_port.__name__ = "port"  # argparse names the type in its error message


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for s in (src, dst):  # one side broke: end both directions
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(conn: socket.socket, stream: socket.socket) -> None:
    other = threading.Thread(target=_pipe, args=(stream, conn), daemon=True)
    other.start()
    _pipe(conn, stream)
    other.join()
    conn.close()
    stream.close()


def run(args) -> int:
    target = args.control_socket or default_control_socket()
    listen = args.port if args.listen is None else args.listen
    server = socket.create_server(("127.0.0.1", listen))
    print(f"forwarding 127.0.0.1:{server.getsockname()[1]} to port {args.port} "
          f"through {target} (^C to stop)", file=sys.stderr, flush=True)
    mux: Mux | None = None
    try:
        while True:
            conn, _ = server.accept()
            stream = None
            for attempt in (1, 2):
                try:
                    if mux is None or mux.dead:
                        if mux is not None:
                            mux.close()
                        mux = None
                        mux = Mux(target)
                    stream = mux.open("forward", port=args.port)
                    break
                except ClientError as exc:
                    # A connection that died since the last accept is re-opened once.
                    if attempt == 1 and mux is not None and mux.dead:
                        continue
                    print(f"clowderctl forward: {exc}", file=sys.stderr, flush=True)
                    break
            if stream is None:
                conn.close()
                continue
            threading.Thread(target=_serve, args=(conn, stream), daemon=True).start()
    finally:
        server.close()
        if mux is not None:
            mux.close()
