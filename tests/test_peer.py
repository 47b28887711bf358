"""webd/peer.py alone: the owner of a loopback TCP connection's client end, asked of the
kernel both ways (sock_diag netlink, and /proc/net/tcp where netlink is refused), on real
sockets.  Through clowder-web: test_web.py::test_a_login_is_honoured_only_from_its_own_uid
and test_web_gate.py::test_connections_of_one_user_are_capped."""

from __future__ import annotations

import os
import socket

import pytest

from webd import peer


def _pair(family: int, host: str):
    listener = socket.socket(family)
    listener.bind((host, 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname()[:2])
    server, _ = listener.accept()
    listener.close()
    return client, server


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"),
                                          (socket.AF_INET6, "::1")])
def test_both_lookups_name_the_owner(family, host):
    try:
        client, server = _pair(family, host)
    except OSError as exc:
        pytest.fail(f"no loopback {host} here: {exc}")
    with client, server:
        peer_addr, ours = server.getpeername()[:2], server.getsockname()[:2]
        assert peer._diag_owner(peer_addr, ours) == os.getuid()
        assert peer._proc_owner(peer_addr, ours) == os.getuid()
        assert peer.tcp_owner(peer_addr, ours) == os.getuid()
        # A client address nobody has: nobody, both ways (the check fails closed).
        assert peer._diag_owner((host, 1), ours) == peer.NOBODY
        assert peer._proc_owner((host, 1), ours) == peer.NOBODY
