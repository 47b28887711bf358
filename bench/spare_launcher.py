"""The launcher of bench/spare_floor.py's "spare" unit (its ExecStart, run `python3 -S`):
hand the fds systemd gave it (the listening socket and every parked pty master) to the
spare waiting on SPARE, tell systemd that the spare is the main process (MAINPID=, then
BARRIER=1, so it leaves only once systemd watches the spare), and exit.  No spare there:
exec the stand-in server itself, as a host without one would start."""

import array
import os
import socket
import sys

SPARE = "/run/spare-test.spare"


def main() -> None:
    n = int(os.environ.get("LISTEN_FDS", "0"))
    fds = list(range(3, 3 + n))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(SPARE)
    except OSError:
        server = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spare_server.py")
        os.execv(sys.executable, [sys.executable, "-S", server])
    head = f"{n}\n{os.environ.get('LISTEN_FDNAMES', '')}\n".encode()
    s.sendall(len(head).to_bytes(4, "big") + head)
    for i in range(0, n, 250):  # SCM_RIGHTS takes at most 253 fds a message
        s.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                            array.array("i", fds[i:i + 250]))])
    pid = int(s.recv(64).split()[0])
    addr = os.environ["NOTIFY_SOCKET"]
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    r, w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as d:
        d.sendto(f"MAINPID={pid}\nREADY=1".encode(), addr)
        d.sendmsg([b"BARRIER=1"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                    array.array("i", [w]))], 0, addr)
    os.close(w)
    os.read(r, 1)  # systemd closes its copy once it has handled the MAINPID=


if __name__ == "__main__":
    main()
