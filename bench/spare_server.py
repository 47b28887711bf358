"""The stand-in host of bench/spare_floor.py: imports about what the host imports
(asyncio and its company), parks the number of pty masters in COUNT on its first start,
sends READY=1 (unless a launcher does it for it), starts the next spare, and echoes what
a client sends.  With --spare it is that spare: it waits on SPARE for the launcher's fds,
answers with its pid, and serves them.

Run as ``--with-standby`` (the unit has ExitType=cgroup) it starts a standby instead:
``--standby PID FDS``, a process in the same cgroup that holds copies of the listening
socket and the parked fds from its start, waits for PID's death (its pidfd), then tells
systemd MAINPID= of itself and serves; the unit is never restarted."""

import array
import asyncio
import ctypes
import json
import logging
import os
import select
import socket
import subprocess
import sys

from floor_service import echo_forever, notify, park_to

SPARE = "/run/spare-test.spare"
COUNT = "/run/spare-test.count"
IMPORTED = (asyncio, ctypes, json, logging)  # what a host pays for at its start, unused


def serve(fd_names: list, ready_self: bool, standby: bool = False) -> None:
    listeners, parked = [], []
    for fd, name in fd_names:
        (parked if name.startswith("m.") else listeners).append(fd)
    park_to(parked, COUNT)
    if ready_self:
        notify(f"READY=1\nSTATUS=holding {len(parked)}")
    if standby:
        held = listeners + parked
        subprocess.Popen([sys.executable, "-S", __file__, "--standby", str(os.getpid()),
                          ",".join(f"{fd}:{'m' if fd in parked else 'l'}" for fd in held)],
                         pass_fds=held)
    else:
        subprocess.Popen([sys.executable, "-S", __file__, "--spare"], close_fds=True)
    echo_forever(listeners)


def standby(main: int, held: str) -> None:
    """Wait for ``main`` to die, then become the unit's main process and serve."""
    try:
        pidfd = os.pidfd_open(main)
    except ProcessLookupError:
        pidfd = None  # died already (or a stop is under way: its SIGKILL comes)
    if pidfd is not None:
        select.select([pidfd], [], [])
    notify(f"MAINPID={os.getpid()}")
    fd_names = [(int(fd), "m.x" if kind == "m" else "listen")
                for fd, kind in (item.split(":") for item in held.split(","))]
    serve(fd_names, ready_self=True, standby=True)


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
    elif sys.argv[1:2] == ["--standby"]:
        standby(int(sys.argv[2]), sys.argv[3])
    else:
        n = int(os.environ.get("LISTEN_FDS", "0"))
        serve(list(zip(range(3, 3 + n), os.environ.get("LISTEN_FDNAMES", "").split(":"))),
              ready_self=True, standby=sys.argv[1:] == ["--with-standby"])
