"""Who is at the other end of an HTTP connection, from the kernel.

A cookie is a bearer secret, and browsers send a host's cookies to every port of it: a
member running any server on 127.0.0.1 who gets another user's browser to visit it
receives that user's clowder-web cookie.  So a cookie is honoured only from its own
uid (or root, or a proxy the unit names) where the kernel can say who connected:

- on the unix socket, ``SO_PEERCRED``;
- on loopback TCP, the owner of the client's socket (both ends are on this machine, in
  this network namespace): asked of the kernel by the connection's addresses through
  sock_diag netlink, the query `ss` makes (~20 us); where netlink is refused, the line
  of /proc/net/tcp whose local address is the client's and remote address ours (~1 ms
  with 100 sockets, growing with their number).  Not found: nobody (the check fails
  closed).

A TCP connection from another machine (a drop-in that listens beyond loopback) has no
uid here: the cookie alone decides, as on any web server.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Optional

from clowder_common.peercred import peer_creds

NOBODY = -1  # a loopback peer whose socket was not found


def uid_of(transport) -> Optional[int]:
    """The uid behind ``transport``'s peer; None if it is not on this machine."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return NOBODY
    if sock.family == socket.AF_UNIX:
        return peer_creds(sock)[1]
    peer, ours = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
    if not peer or not ours or not ipaddress.ip_address(peer[0]).is_loopback:
        return None
    return tcp_owner(peer[:2], ours[:2])


def tcp_owner(client: tuple, server: tuple) -> int:
    """The uid owning the client end of the loopback connection client -> server."""
    try:
        return _diag_owner(client, server)
    except OSError:
        return _proc_owner(client, server)


# sock_diag (linux/sock_diag.h, linux/inet_diag.h): one exact lookup of a TCP socket by
# its four addresses; the answer's inet_diag_msg holds the owner's uid.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_NLH = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
_DIAG_REQ = struct.Struct("=BBBBI")  # family, protocol, extensions, pad, states
_DIAG_ID = struct.Struct("!HH16s16s")  # ports, addresses: network order
_DIAG_ID_TAIL = struct.Struct("=III")  # interface, cookie (none: all ones)
_UID_AT = _NLH.size + 4 + _DIAG_ID.size + _DIAG_ID_TAIL.size + 12  # inet_diag_msg.idiag_uid


def _diag_owner(client: tuple, server: tuple) -> int:
    c, s = ipaddress.ip_address(client[0]), ipaddress.ip_address(server[0])
    family = socket.AF_INET if c.version == 4 else socket.AF_INET6
    body = (_DIAG_REQ.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
            + _DIAG_ID.pack(client[1], server[1], c.packed.ljust(16, b"\0"),
                            s.packed.ljust(16, b"\0"))
            + _DIAG_ID_TAIL.pack(0, 0xFFFFFFFF, 0xFFFFFFFF))
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.sendto(_NLH.pack(_NLH.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
                  + body, (0, 0))
        answer = nl.recv(8192)
    kind = _NLH.unpack_from(answer)[1]
    if kind == _SOCK_DIAG_BY_FAMILY and len(answer) >= _UID_AT + 4:
        return struct.unpack_from("=I", answer, _UID_AT)[0]
    if kind == _NLMSG_ERROR:
        return NOBODY  # no such socket (ENOENT): gone, or not on this machine
    raise OSError(f"sock_diag answered message type {kind}")


def _proc_owner(client: tuple, server: tuple) -> int:
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
