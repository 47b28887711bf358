"""Who is at the other end of an HTTP connection, from the kernel.

A cookie is a bearer secret, and browsers send a host's cookies to every port of it: a
member running any server on 127.0.0.1 who gets another user's browser to visit it
receives that user's clowder-web cookie.  So a cookie is honoured only from its own
uid (or root, or a proxy the unit names) where the kernel can say who connected:

- on the unix socket, ``SO_PEERCRED``;
- on loopback TCP, the owner of the client's socket: the line of /proc/net/tcp whose
  local address is the client's and remote address ours (both ends are on this
  machine, in this network namespace).  Not found: nobody (the check fails closed).

A TCP connection from another machine (a drop-in that listens beyond loopback) has no
uid here: the cookie alone decides, as on any web server.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Optional

_CREDS = struct.Struct("3i")
NOBODY = -1  # a loopback peer whose socket was not found


def uid_of(transport) -> Optional[int]:
    """The uid behind ``transport``'s peer; None if it is not on this machine."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return NOBODY
    if sock.family == socket.AF_UNIX:
        return _CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                             _CREDS.size))[1]
    peer, ours = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
    if not peer or not ours or not ipaddress.ip_address(peer[0]).is_loopback:
        return None
    return tcp_owner(peer[:2], ours[:2])


def tcp_owner(client: tuple, server: tuple) -> int:
    """The uid owning the client end of the loopback connection client -> server."""
    v4 = ipaddress.ip_address(client[0]).version == 4
    want = (_proc_address(client), _proc_address(server))
    for table in ("/proc/net/tcp",) if v4 else ("/proc/net/tcp6",):
        try:
            with open(table) as f:
                next(f)  # the heading
                for line in f:
                    fields = line.split()
                    if (fields[1], fields[2]) == want:
                        return int(fields[7])
        except FileNotFoundError:
            pass
    return NOBODY


def _proc_address(addr: tuple) -> str:
    """An (ip, port) as /proc/net/tcp writes it: the address in host byte order."""
    ip = ipaddress.ip_address(addr[0])
    packed = ip.packed
    words = [packed[i:i + 4] for i in range(0, len(packed), 4)]
    hexed = "".join(struct.pack("=I", struct.unpack("!I", w)[0]).hex().upper()
                    for w in words)
    return f"{hexed}:{addr[1]:04X}"
