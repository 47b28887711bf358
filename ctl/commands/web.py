"""clowderctl web: a one-time login URL for the web view, bound to your uid."""

import json
import os
import socket
import sys

from .. import exits

DEFAULT_SOCKET = "/run/clowder/web-token.sock"
TIMEOUT = 5.0
MAX_ANSWER = 4096


def add_parser(sub):
    p = sub.add_parser("web", help="print a login URL for the web view", epilog=f"""\
The URL holds a token minted for your uid by clowder-web (which reads who you are from
the kernel): it is good once and for two minutes; opening it logs that browser in as
you for 12 hours, read-only unless clowder-web was started with --input-for you.
clowder-web listens on 127.0.0.1:7380 only: from another machine, `clowderctl --host
HOST web` (it runs there), and `ssh -L 7380:127.0.0.1:7380 HOST` to open the URL.  Start it with `systemctl enable --now
clowder-web.socket`.

--json prints one object: {{"url": the URL, "token": its token, "expires_in": seconds}}.

exit status: {exits.UNREACHABLE} when clowder-web's token socket is not there.

examples:
  clowderctl web
  xdg-open "$(clowderctl web)"
""")
    p.add_argument("--web-socket", metavar="PATH",
                   default=os.environ.get("CLOWDER_WEB_SOCKET", DEFAULT_SOCKET),
                   help="clowder-web's token socket (default: $CLOWDER_WEB_SOCKET, "
                        f"else {DEFAULT_SOCKET})")
    p.add_argument("--json", action="store_true", help="print the URL and token as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        answer = _ask(args.web_socket)
    except TimeoutError:
        print(f"clowderctl web: clowder-web at {args.web_socket} did not answer within "
              f"{TIMEOUT:g} s", file=sys.stderr)
        return exits.TIMEOUT
    except OSError as exc:
        print(f"clowderctl web: cannot reach clowder-web at {args.web_socket}: {exc} "
              f"(is clowder-web.socket started?)", file=sys.stderr)
        return exits.UNREACHABLE
    try:
        reply = json.loads(answer)
        url = reply["url"]
    except (ValueError, KeyError, TypeError):
        print(f"clowderctl web: clowder-web answered {answer[:200]!r}, not a URL",
              file=sys.stderr)
        return exits.UNREACHABLE
    print(json.dumps(reply) if args.json else url)
    return exits.OK


def _ask(path: str) -> bytes:
    """The one line clowder-web writes to whoever connects (it reads nothing)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(TIMEOUT)
        s.connect(path)
        data = b""
        while len(data) < MAX_ANSWER:
            chunk = s.recv(MAX_ANSWER)
            if not chunk:
                break
            data += chunk
        return data
