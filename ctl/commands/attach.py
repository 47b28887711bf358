"""clowderctl attach: an interactive terminal on a session, with a detach key."""

import os
import selectors
import signal
import sys
import termios
import time
import tty

from ptyhostd import protocol

from ..client import Client, ClientError, RequestFailed


def add_parser(sub):
    p = sub.add_parser("attach", help="attach this terminal to a session")
    p.add_argument("session", metavar="ID")
    p.add_argument("--read-only", action="store_true", help="watch; send no input")
    p.add_argument("--detach-key", default="^\\",
                   help="the key that detaches, as ^X (default ^\\, i.e. Ctrl-backslash)")
    p.set_defaults(run=run, parser=p)


def parse_key(text: str) -> int:
    if len(text) == 2 and text[0] == "^" and 0x3f <= ord(text[1].upper()) <= 0x5f:
        return ord(text[1].upper()) ^ 0x40
    if len(text) == 1:
        return ord(text)
    raise ValueError(f"invalid detach key {text!r}: use ^X, e.g. ^]")


def _size() -> tuple[int, int]:
    try:
        return os.get_terminal_size(sys.stdin.fileno())
    except OSError:
        return 0, 0


class _Session:
    """One attach connection; returns why it ended."""

    def __init__(self, args, key: int):
        self.args = args
        self.key = key
        self.out = sys.stdout.buffer
        self.resized = False

    def run(self, first: bool) -> tuple[str, object]:
        cols, rows = _size()
        with Client(self.args.socket) as c:
            c.send(protocol.Attach(session=self.args.session, cols=cols, rows=rows,
                                   read_only=self.args.read_only))
            c.recv()  # Attached (errors raise)
            if not first:
                self.out.write(b"\x1bc")  # the backlog replays onto a clean screen
            sel = selectors.DefaultSelector()
            sel.register(c.sock, selectors.EVENT_READ, "sock")
            stdin = sys.stdin.fileno()
            sel.register(stdin, selectors.EVENT_READ, "stdin")
            while True:
                for sk, _ in sel.select(timeout=0.5):
                    if sk.data == "sock":
                        try:
                            data = c.sock.recv(1 << 16)
                        except ConnectionResetError:
                            data = b""
                        if not data:
                            return "dropped", None
                        for msg in c.reader.feed(data):
                            if isinstance(msg, protocol.Output):
                                self.out.write(msg.data)
                            elif isinstance(msg, protocol.Exited):
                                self.out.flush()
                                return "exited", msg
                            elif isinstance(msg, protocol.Error) and not msg.fatal:
                                continue  # e.g. input refused on a read-only attach
                            elif isinstance(msg, protocol.Error):
                                raise ClientError(msg.message)
                        self.out.flush()
                    else:
                        data = os.read(stdin, 4096)
                        if not data:
                            sel.unregister(stdin)
                            continue
                        if self.key in data:
                            before = data[:data.index(self.key)]
                            if before and not self.args.read_only:
                                c.send(protocol.Input(data=before))
                            c.send(protocol.Detach())
                            return "detached", None
                        if not self.args.read_only:
                            c.send(protocol.Input(data=data))
                if self.resized:
                    self.resized = False
                    cols, rows = _size()
                    if cols and rows and not self.args.read_only:
                        c.send(protocol.Resize(cols=cols, rows=rows))


def run(args) -> int:
    try:
        key = parse_key(args.detach_key)
    except ValueError as exc:
        args.parser.error(str(exc))
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    session = _Session(args, key)
    signal.signal(signal.SIGWINCH, lambda *_: setattr(session, "resized", True))
    keyname = args.detach_key
    print(f"[clowder: attached to {args.session}; detach with {keyname}]", file=sys.stderr)
    try:
        if saved is not None:
            tty.setraw(stdin)
        first = True
        while True:
            why, msg = session.run(first)
            first = False
            if why != "dropped":
                break
            # The host restarted: it comes back with the session; reattach.
            deadline = time.monotonic() + 60
            while True:
                try:
                    Client(args.socket).close()
                    break
                except RequestFailed:
                    raise
                except ClientError:
                    if time.monotonic() > deadline:
                        raise ClientError("the PTY host did not come back within 60 s")
                    time.sleep(0.1)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    if why == "detached":
        print(f"\r\n[clowder: detached from {args.session}]", file=sys.stderr)
        return 0
    code = msg.exit_code if msg.exit_code is not None else 128 + (msg.signal or 127)
    print(f"\r\n[clowder: session {args.session} ended: "
          f"{'signal ' + str(msg.signal) if msg.signal is not None else msg.exit_code}]",
          file=sys.stderr)
    return code
