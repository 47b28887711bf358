"""The systemd unit files, rendered for a given installation.

This is their one source: ``clowderctl install-units`` writes them with ``ExecStart=``
pointing at the running interpreter, and ``units/`` in the source tree holds the
rendering for a packaged install (a test keeps the two equal).
"""

from __future__ import annotations

# The manual pages (packaging/man, installed by the .deb and .rpm) and the project's page,
# which debian/copyright (Source:) and the spec (URL:) name too (tests/test_units.py).
DOCS_URL = "https://example.org/clowder"
PTYHOST_DOCS = f"man:ptyhostd(8) man:clowderctl(1) {DOCS_URL}"
CONTROL_DOCS = f"man:clowder-control(8) man:clowder.yaml(5) man:clowderctl(1) {DOCS_URL}"
WEB_DOCS = f"man:clowder-web(8) man:clowderctl(1) {DOCS_URL}"
# clowder-web's TCP port (loopback only); a drop-in with ListenStream= changes it.
WEB_PORT = 7380

SOCKET = """\
[Unit]
Description=clowder {what} socket
Documentation={docs}

[Socket]
ListenStream=%t/clowder/{name}.sock
SocketMode={socket_mode}
{socket_group}DirectoryMode={dir_mode}
{comment}
[Install]
WantedBy=sockets.target
"""

PTYHOST_SERVICE = """\
[Unit]
Description=clowder PTY host
Documentation={docs}
Requires=clowder-ptyhost.socket
After=clowder-ptyhost.socket
# Restarted as often as it dies: sessions live in the FD store meanwhile.
StartLimitIntervalSec=0

[Service]
Type=notify
# A standby (ptyhostd/standby.py) takes over when the host dies, with no restart: the
# unit outlives its main process while the standby runs (ExitType=cgroup, systemd 250
# and later), and the standby names itself the main process (MAINPID=, which needs
# NotifyAccess=all).  An older systemd ignores ExitType=; the host then starts none.
NotifyAccess=all
ExitType=cgroup
ExecStart={exec_start} --{scope}
# reload = an in-place hand-off to the installed code: same PID, every session kept.
# ExecReload= stays until the new code serves (or says why not), so `systemctl reload`
# ends with the hand-off and fails when it was refused (ptyhostd/reload.py).
ExecReload={exec_start} --{scope} --socket %t/clowder/ptyhost.sock --hand-off $MAINPID
# Pty masters, backlog rings and the manifest wait here across restarts and crashes.
# Two entries a session (ptyhostd/fdstore.py counts them): 8,190 sessions, three host fds
# each; the host refuses a spawn that would not fit, and reads this value at each spawn.
FileDescriptorStoreMax=16384
LimitNOFILE=65536
Restart=always
RestartSec=0
# Sessions run in their own transient units, so nothing here reaches them.  A stop's
# SIGTERM goes to the host alone, which tells its standby to exit first.
KillMode=mixed
TimeoutStopSec=30
# The event loop pings every WatchdogSec/4: a host frozen (SIGSTOP) or wedged for ~10 s
# is replaced like a crashed one, sessions kept.  systemd sends SIGABRT (and SIGCONT,
# so a stopped host acts on it); the traceback goes to the journal, no core is dumped
# (it would hold every parked ring), and SIGKILL follows if the abort itself hangs.
WatchdogSec={watchdog_sec}
TimeoutAbortSec={abort_sec}
LimitCORE=0
# Each session's record and last screen, for the session list after a reboot
# (ptyhostd/statedir.py): /var/lib/clowder-ptyhost, or the user manager's state
# directory ($XDG_CONFIG_HOME/clowder-ptyhost on systemd 252: systemd.exec(5)).
StateDirectory=clowder-ptyhost
StateDirectoryMode=0700
# The ghostty binding's parsed declarations (ptyhostd/ghostty_abi.py), made at the first
# start: /var/cache/clowder-ptyhost, or the user's $XDG_CACHE_HOME/clowder-ptyhost.
CacheDirectory=clowder-ptyhost
CacheDirectoryMode=0700
"""

# Longer than anything a healthy host blocks its loop for (docs/design.md, "The
# watchdog"), short enough that a frozen host is replaced before people give up on it.
WATCHDOG_SEC = 10
ABORT_SEC = 5


CONTROL_SERVICE = """\
[Unit]
Description=clowder control daemon (agents, registry, status)
Documentation={docs}
Requires=clowder-control.socket
Wants=clowder-ptyhost.socket
After=clowder-control.socket clowder-ptyhost.socket
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start} --{scope}
ExecReload=/bin/kill -HUP $MAINPID
# Agents live on the PTY host: restarting this daemon never touches them.
Restart=always
RestartSec=0
# One fd a connection (two while an attach is relayed), and each uid but root and our
# own may hold 256 (clowder_common/listener.py): members cannot use them all up.
LimitNOFILE=16384
StateDirectory=clowder
StateDirectoryMode=0700

[Install]
WantedBy={wanted_by}
"""


WEB_SOCKET = """\
[Unit]
Description=clowder web view sockets
Documentation={docs}

[Socket]
# Loopback only: from elsewhere, `ssh -L {port}:127.0.0.1:{port}` or a reverse proxy on
# web.sock.  Another port: a drop-in with an empty ListenStream= and then the three.
ListenStream=127.0.0.1:{port}
ListenStream=%t/clowder/web.sock
# `clowderctl web` asks here for a login URL bound to its uid (SO_PEERCRED).
ListenStream=%t/clowder/web-token.sock
SocketMode=0660
SocketGroup=clowder
DirectoryMode=0755

[Install]
WantedBy=sockets.target
"""

WEB_SERVICE = """\
[Unit]
Description=clowder web view (sessions and terminals in a browser, read-only by default)
Documentation={docs}
Requires=clowder-web.socket
Wants=clowder-ptyhost.socket
After=clowder-web.socket clowder-ptyhost.socket
# Started again as often as it dies (kill -9, MemoryMax below): under systemd's default
# limit, five starts in 10 s left it and its socket failed until an admin came.
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
# Root, so that the PTY host shows it every user's sessions; it shows each browser only
# its own uid's (webd/access.py).  Root without any capability: it opens nothing but
# the host's socket (owned by root), and can neither read others' files nor signal.
# Typing from the page: add --input-for USER here (a drop-in); nobody may by default.
ExecStart={exec_start} --system
CapabilityBoundingSet=
NoNewPrivileges=yes
Restart=on-failure
LimitNOFILE=4096
# A backstop behind webd/gate.py's bounds (each measured in tests/test_web*.py at a few
# MiB a connection): if they are ever passed, the kernel ends clowder-web and systemd
# starts it again.  No session is lost with it (they are the PTY host's); open pages
# reconnect.
MemoryMax=512M

[Install]
WantedBy=multi-user.target
"""


def render_web(exec_start: str, port: int = WEB_PORT) -> dict[str, str]:
    """{file name: text} of the web view's pair (system scope only, so far)."""
    return {"clowder-web.socket": WEB_SOCKET.format(docs=WEB_DOCS, port=port),
            "clowder-web.service": WEB_SERVICE.format(docs=WEB_DOCS, exec_start=exec_start)}


def render(scope: str, exec_start: str, control_exec_start: str | None = None
           ) -> dict[str, str]:
    """{file name: text} for ``scope`` "system" or "user"."""
    if scope not in ("system", "user"):
        raise ValueError(scope)
    system = scope == "system"
    access = dict(socket_mode="0660" if system else "0600",
                  socket_group="SocketGroup=clowder\n" if system else "",
                  dir_mode="0755" if system else "0700")
    control = control_exec_start or exec_start.replace("ptyhostd", "controld")
    return {
        "clowder-ptyhost.socket": SOCKET.format(
            what="PTY host", name="ptyhost", docs=PTYHOST_DOCS, **access, comment="# Never RemoveOnStop: the "
            "path must exist for clients through every host restart.\n"),
        "clowder-ptyhost.service": PTYHOST_SERVICE.format(
            exec_start=exec_start, scope=scope, docs=PTYHOST_DOCS, watchdog_sec=WATCHDOG_SEC,
            abort_sec=ABORT_SEC),
        "clowder-control.socket": SOCKET.format(what="control", name="control",
                                                docs=CONTROL_DOCS, **access, comment=""),
        "clowder-control.service": CONTROL_SERVICE.format(
            exec_start=control, scope=scope, docs=CONTROL_DOCS,
            wanted_by="multi-user.target" if system else "default.target"),
    }
