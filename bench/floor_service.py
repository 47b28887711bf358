#!/usr/bin/env python3
"""The floor of the restart figure: a trivial socket-activated Type=notify service.

Run by systemd as clowder-bench-floor.service (units written by fig_blackout.py).  It
does what any host must do to come back, and nothing else: take the listening socket
and its parked fds from LISTEN_FDS, park more pty masters until it holds the number
in /run/clowder-bench-floor.count (with FDPOLL=0, as ptyhostd does), send READY=1,
then echo whatever a client sends.  Standard library only, so its start-up is the
interpreter's.
"""

import array
import os
import selectors
import socket

COUNT_FILE = "/run/clowder-bench-floor.count"


def notify(state: str, fds=()) -> None:
    addr = os.environ["NOTIFY_SOCKET"]
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendmsg([state.encode()], anc, 0, addr)


def main() -> None:
    count = int(os.environ.get("LISTEN_FDS", "0"))
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    listeners, parked = [], []
    for fd, name in zip(range(3, 3 + count), names):
        (parked if name.startswith("m.") else listeners).append(fd)
    park_to(parked, COUNT_FILE)
    notify(f"READY=1\nSTATUS=holding {len(parked)} parked fds")
    echo_forever(listeners)


def park_to(parked: list[int], count_file: str) -> None:
    """Park new pty masters (FDPOLL=0, as ptyhostd does) until ``parked`` holds the
    number in ``count_file`` (none if there is no such file)."""
    try:
        with open(count_file) as f:
            want = int(f.read())
    except FileNotFoundError:
        want = 0
    for i in range(len(parked), want):
        master, slave = os.openpty()
        os.close(slave)
        notify(f"FDSTORE=1\nFDNAME=m.{i}\nFDPOLL=0", [master])
        parked.append(master)


def echo_forever(listeners: list[int]) -> None:
    """Accept on the listening sockets ``listeners`` and echo what each client sends
    (bench/spare_server.py serves the same way)."""
    sel = selectors.DefaultSelector()
    for fd in listeners:
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, "listen")
    while True:
        for key, _ in sel.select():
            if key.data == "listen":
                conn, _ = key.fileobj.accept()
                sel.register(conn, selectors.EVENT_READ, "conn")
                continue
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if data:
                key.fileobj.sendall(data)
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()


if __name__ == "__main__":
    main()
