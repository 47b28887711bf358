"""The systemd unit files, rendered for a given installation.

This is their one source: ``clowderctl install-units`` writes them with ``ExecStart=``
pointing at the running interpreter, and ``units/`` in the source tree holds the
rendering for a packaged install (a test keeps the two equal).
"""

from __future__ import annotations

PTYHOST_SOCKET = """\
[Unit]
Description=clowder PTY host socket

[Socket]
ListenStream=%t/clowder/ptyhost.sock
SocketMode={socket_mode}
{socket_group}DirectoryMode={dir_mode}
# Never RemoveOnStop: the path must exist for clients through every host restart.

[Install]
WantedBy=sockets.target
"""

PTYHOST_SERVICE = """\
[Unit]
Description=clowder PTY host
Requires=clowder-ptyhost.socket
After=clowder-ptyhost.socket
# Restarted as often as it dies: sessions live in the FD store meanwhile.
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start} --{scope}
# Pty masters, backlog rings and the manifest wait here across restarts and crashes.
FileDescriptorStoreMax=16384
LimitNOFILE=65536
Restart=always
RestartSec=0
# Sessions run in their own transient units, so nothing here reaches them.
KillMode=mixed
TimeoutStopSec=30
"""


def render(scope: str, exec_start: str) -> dict[str, str]:
    """{file name: text} for ``scope`` "system" or "user"."""
    if scope not in ("system", "user"):
        raise ValueError(scope)
    system = scope == "system"
    socket = PTYHOST_SOCKET.format(
        socket_mode="0660" if system else "0600",
        socket_group="SocketGroup=clowder\n" if system else "",
        dir_mode="0755" if system else "0700")
    service = PTYHOST_SERVICE.format(exec_start=exec_start, scope=scope)
    return {"clowder-ptyhost.socket": socket, "clowder-ptyhost.service": service}
