"""Who is at the other end of a unix socket, from the kernel (``SO_PEERCRED``): the
pid, uid and gid of the process that connected.  Never what the client says."""

from __future__ import annotations

import socket
import struct

_CREDS = struct.Struct("3i")


def peer_creds(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of ``sock``'s peer; OSError if the kernel has none to give."""
    return _CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size))
