"""A journal that does not read: journald stopped with SIGSTOP, as when it is busy
flushing to a slow disk or restarting in a systemd package upgrade.  Its datagram queue
fills after ten lines (net.unix.max_dgram_qlen), and a daemon that logs from its event
loop then waited for it: the host answered no one, no session's bytes moved, until
journald read again.  Now the lines leave from a writer thread of their own
(clowder_common/log.py BackgroundHandler): the host serves on, and what it logged
meanwhile reaches the journal once journald reads, up to a bound past which lines are
counted in one line.  Nothing in the test itself may log through journald or syslog
while it is stopped (runuser does, through PAM): it speaks to the host directly, as root.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import subprocess

import pytest

from clowder_common.log import QUEUE_LIMIT
from conftest import wait_for
from test_host_faults import journal
from ctl.client import Client
import clowder_wire as P

JOURNALD = "systemd-journald.service"


@contextlib.contextmanager
def journal_stopped():
    subprocess.run(["systemctl", "kill", "-s", "SIGSTOP", JOURNALD], check=True)
    try:
        yield
    finally:
        subprocess.run(["systemctl", "kill", "-s", "SIGCONT", JOURNALD], check=True)


def refuse_hellos(path: str, count: int, version: int) -> None:
    """``count`` connections, each with a Hello of unknown ``version``: each is answered
    with its fatal Error, and is one line of the host's log, which names the version."""
    for i in range(count):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(P.encode(P.Hello(version=version, client="journal-test")))
            try:
                got = P.FrameReader().feed(s.recv(1 << 16))
            except socket.timeout:
                pytest.fail(f"connection {i + 1} of {count}: no answer within 5 s while "
                            f"the journal did not read")
            assert got and isinstance(got[0], P.Error) and got[0].code == "version", got


def refusals(host, main: int, version: int) -> int:
    """The refusals of ``version`` in the host's journal: a version no other test sends,
    so a line another test left on its way to the journal is not counted (once, a count
    taken before the test missed one that landed after it: kept + dropped was sent + 1)."""
    return journal(host, "client-version", main).count(f"protocol version {version} is not")


def settled(host, main: int) -> None:
    """Wait until the host has done what its start leaves for later (the start's checks,
    the engine's preload: ptyhostd/__main__.py _after_the_clients), each of which logs:
    a line of its among the refusals, dropped, would be counted as one of them."""
    for cause in ("start-checks", "screen-engine-loaded"):
        wait_for(lambda: journal(host, cause, main), 30, f"the host's {cause} line")


def backlog(c: Client, sid: str) -> bytes:
    c.send(P.GetBacklog(session=sid))
    out = b""
    while not isinstance(msg := c.recv(), P.Ok):
        out += msg.data
    return out


def test_a_journal_that_does_not_read_stops_no_one(host):
    sid = host.spawn("cat")
    main = host.main_pid()
    settled(host, main)
    version = random.randrange(10**6, 10**7)
    with journal_stopped():
        refuse_hellos(host.socket, 100, version)
        with Client(host.socket, timeout=5) as c:
            c.request(P.Send(session=sid, data=b"still-typing\n"), P.Ok)
            wait_for(lambda: backlog(c, sid).count(b"still-typing") == 2, 10,
                     "the session's echo and output while the journal did not read")
    wait_for(lambda: refusals(host, main, version) == 100, 30,
             "the 100 refusals' lines in the journal once journald reads again")
    assert host.main_pid() == main


def test_past_the_bound_every_line_is_in_the_journal_or_counted(host):
    main = host.main_pid()
    settled(host, main)
    version = random.randrange(10**6, 10**7)
    sent = QUEUE_LIMIT + 300
    with journal_stopped():
        refuse_hellos(host.socket, sent, version)
    said = wait_for(lambda: re.findall(r"(\d+) log lines were dropped", journal(
        host, "log-dropped", main)), 30, "the line that counts the dropped")
    dropped = sum(map(int, said))
    kept = refusals(host, main, version)
    # Kept: those queued (QUEUE_LIMIT, less any other line of the host's meanwhile),
    # those journald's socket held and the one its writer was sending.
    assert QUEUE_LIMIT - 50 <= kept <= sent - dropped, (kept, dropped)
    assert kept + dropped >= sent, f"{sent - kept - dropped} lines lost without a count"
    assert host.main_pid() == main
