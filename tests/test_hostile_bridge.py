"""The hand-off's bridge (ptyhostd/bridge.py) against hostile clients, in the system
scope with a second user: a client of bob's that floods input and never reads while the
bridge serves is bounded (the bridge's memory grows by less than BRIDGE_GROWTH, the
bound docs/design.md gives) and does not stall root's typing into alice's session; a
second client of bob's, attached to his own session, types into it and reads what it is
sent: nothing of alice's session reaches it, nothing of it reaches alice's."""

from __future__ import annotations

import subprocess

from conftest import PYTHON, wait_for
from hostile import MiB, Memory
from test_access import system_host  # noqa: F401  (alice, bob, mallory and the host)
from test_handoff import bridge_log, bridge_pid, bridge_serving

# CLIENT_BUFFER (1 MiB) of unsent frames, INPUT_BUFFER (64 KiB) of unwritten input, one
# frame being read (1 MiB) and the interpreter's own slack.
BRIDGE_GROWTH = 8 * MiB

# A client of the host run as another user: attaches with a token, says "attached", then
# waits for a line on stdin.  "flood": sends 64 KiB Input frames forever and never
# reads (says "blocked" once a send has waited 0.5 s); "type": types ``echo
# bob-was-here`` into its session, says "seen" once its output came back, and on a
# second line prints everything it was sent.  (No request may go to the host while the
# new code is held: it would wait for the new code.)
CLIENT = r"""
import os, select, socket, sys, time
import clowder_wire as P
path, sid, mode = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
if mode == "flood":
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(path)
s.sendall(P.encode(P.Hello(version=P.PROTOCOL_VERSION)) + P.encode(
    P.Attach(session=sid, cols=80, rows=24, token="hostile" + mode)))
r, got = P.FrameReader(), bytearray()
while not any(isinstance(m, P.Attached) for m in r.feed(s.recv(1 << 16))):
    pass
print("attached", flush=True)
sys.stdin.readline()
s.setblocking(False)
if mode == "flood":
    seq, said = 0, False
    while True:
        seq += 65536
        view = memoryview(P.encode(P.Input(data=b"y" * 65536, seq=seq)))
        while view:
            if not select.select([], [s], [], 0.5)[1]:
                if not said:
                    print("blocked", flush=True)
                    said = True
                continue
            try:
                view = view[s.send(view):]
            except BlockingIOError:
                pass
text = b"echo bob-was-here\r"
s.setblocking(True)
s.sendall(P.encode(P.Input(data=text, seq=len(text))))
s.setblocking(False)
def take(data):  # what the Output frames carry (a frame may end between two lines)
    for m in r.feed(data):
        if isinstance(m, P.Output):
            got.extend(m.data)
deadline = time.monotonic() + 8  # within the held host's watchdog (10 s)
while b"\nbob-was-here" not in got and time.monotonic() < deadline:
    if select.select([s], [], [], 0.05)[0]:
        data = s.recv(1 << 16)
        if not data:
            break
        take(data)
print("seen" if b"\nbob-was-here" in got else "not seen", flush=True)
sys.stdin.readline()
try:
    while True:  # whatever else was sent to us meanwhile
        data = s.recv(1 << 16)
        if not data:
            break
        take(data)
except BlockingIOError:
    pass
print(repr(bytes(got)), flush=True)
"""


def _client(h, user: str, sid: str, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen(["runuser", "-u", user, "--", PYTHON, "-c", CLIENT, h.socket, sid,
                             mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/",
                            text=True)
    assert proc.stdout.readline().strip() == "attached", f"{user}'s {mode} client"
    return proc


def test_bridge_bounds_a_flooding_client_and_crosses_no_user(system_host):  # noqa: F811
    from test_attach import Attach, PROMPT, ready
    h = system_host
    alice = h.spawn("sh", "-c", "echo started-$((1+1)); exec sh -i", env=f"PS1={PROMPT}",
                    user="alice", cwd="/home/alice")
    wait_for(lambda: PROMPT.encode() in h.backlog(alice), 15, "alice's shell to prompt")
    # Raw mode: its pty takes no more input once its buffer is full (a pty in canonical
    # mode drops what does not fit instead, so a flood never blocks there: the same for
    # the host and the bridge, a CPU cost and not a memory one).
    flooded = h.spawn("sh", "-c", "stty raw -echo; exec yes bob-flood", user="bob",
                      cwd="/home/bob")
    typed = h.spawn("sh", "-c", "echo started; exec sh -i", env="PS1=bob> ", user="bob",
                    cwd="/home/bob")
    wait_for(lambda: b"bob> " in h.backlog(typed, user="bob"), 15, "bob's shell to prompt")
    main = h.main_pid()
    root = Attach(h, alice)  # root's clowderctl attach: numbered input
    flooder = _client(h, "bob", flooded, "flood")
    typist = _client(h, "bob", typed, "type")
    try:
        ready(root)
        with bridge_serving(h) as (release, reload, since):
            memory = Memory(bridge_pid(main))
            flooder.stdin.write("go\n")
            flooder.stdin.flush()
            typist.stdin.write("go\n")
            typist.stdin.flush()
            assert flooder.stdout.readline().strip() == "blocked", \
                "the flooder was never held back"
            assert typist.stdout.readline().strip() == "seen", \
                "bob's typing through the bridge into his own session came back: " \
                + bridge_log(h, since).decode(errors="replace")
            root.type(b"echo alice-$((40+2))\r")
            root.expect(b"alice-42", what="root's typing through the bridge beside the flood")
            growth = memory.stop()
            assert growth < BRIDGE_GROWTH, f"the bridge grew by {growth / MiB:.1f} MiB"
            assert reload.poll() is None, "the new code was not held"
            typist.stdin.write("done\n")
            typist.stdin.flush()
            seen = typist.stdout.readline()
            release()
            assert reload.wait(60) == 0
    finally:
        for proc in (flooder, typist):
            proc.kill()
            proc.wait()
        root.close()
    assert h.main_pid() == main
    assert "bob-was-here" in seen and "alice" not in seen, seen[-1000:]
    assert b"bob-was-here" not in h.backlog(alice) and b"y" * 64 not in h.backlog(alice)
    info = h.ps()
    assert all(info[s]["state"] == "running" for s in (alice, flooded, typed)), info
