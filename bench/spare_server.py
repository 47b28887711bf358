"""The stand-in host of bench/spare_floor.py: imports about what the host imports
(asyncio and its company), parks the number of pty masters in COUNT on its first start,
sends READY=1 (unless a launcher does it for it), starts the next spare, and echoes what
a client sends.  With --spare it is that spare: it waits on SPARE for the launcher's fds,
answers with its pid, and serves them."""

import array
import asyncio
import ctypes
import json
import logging
import os
import socket
import subprocess
import sys

from floor_service import echo_forever, notify, park_to

SPARE = "/run/spare-test.spare"
COUNT = "/run/spare-test.count"
IMPORTED = (asyncio, ctypes, json, logging)  # what a host pays for at its start, unused


def serve(fd_names: list, ready_self: bool) -> None:
    listeners, parked = [], []
    for fd, name in fd_names:
        (parked if name.startswith("m.") else listeners).append(fd)
    park_to(parked, COUNT)
    if ready_self:
        notify(f"READY=1\nSTATUS=holding {len(parked)}")
    subprocess.Popen([sys.executable, "-S", __file__, "--spare"], close_fds=True)
    echo_forever(listeners)


def spare() -> None:
    os.setsid()
    try:
        os.unlink(SPARE)
    except FileNotFoundError:
        pass
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(SPARE)
    ls.listen(1)
    c, _ = ls.accept()
    ls.close()
    os.unlink(SPARE)
    head = c.recv(int.from_bytes(c.recv(4, socket.MSG_WAITALL), "big"), socket.MSG_WAITALL)
    count, names = head.decode().split("\n")[:2]
    count, names = int(count), names.split(":") if names else []
    fds: list = []
    while len(fds) < count:
        _, anc, _, _ = c.recvmsg(1, socket.CMSG_SPACE(250 * 4))
        for _, _, data in anc:
            fds += array.array("i", data[:len(data) - len(data) % 4]).tolist()
    c.sendall(f"{os.getpid()}\n".encode())
    c.close()
    serve(list(zip(fds, names)), ready_self=False)


if __name__ == "__main__":
    if sys.argv[1:] == ["--spare"]:
        spare()
    else:
        n = int(os.environ.get("LISTEN_FDS", "0"))
        serve(list(zip(range(3, 3 + n), os.environ.get("LISTEN_FDNAMES", "").split(":"))),
              ready_self=True)
