"""clowderctl export: a session's retained output as an asciinema cast, text or ansi."""

import os
import sys

import clowder_wire as protocol

from ..client import Client, ClientError

FORMATS = ("cast", "text", "ansi")
HISTORY_ALL = 1 << 30  # "every line": the host sends as many as one reply carries


def add_parser(sub):
    p = sub.add_parser("export", help="write the retained output as an asciinema cast, "
                                      "text or ansi", epilog="""\
cast: an asciinema v2 file (header, then [seconds, "o", text] events) with the times the
  host read the output, to within 20 ms; `asciinema play` replays it.  Its text joined
  is the backlog (`clowderctl backlog`) decoded as UTF-8.
text: the output as plain lines, as `history` shows them (escapes removed, a redrawn
  line as it was last drawn), all the backlog holds.
ansi: the lines with their colours and attributes, as `history --format ansi` (as many
  of the last lines as one reply carries, about 1 MiB).

examples:
  clowderctl export "$id" -o build.cast && asciinema play build.cast
  clowderctl export build --format text | grep -n error
""")
    p.add_argument("session", metavar="ID", help="a session id or name")
    p.add_argument("--format", choices=FORMATS, default="cast",
                   help="cast (default), text or ansi")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (replaced once complete) instead of stdout")
    p.set_defaults(run=run)


def fetch(c: Client, session: str) -> tuple[dict, int, list, bytes]:
    """(session info, ring offset of the first byte, stamps, bytes) of a GetExport."""
    c.send(protocol.GetExport(session=session))
    info, start, stamps, parts = {}, 0, [], []
    pos = None
    while True:
        msg = c.recv()
        if isinstance(msg, protocol.ExportHead):
            info, stamps = msg.session, msg.stamps
            if pos is None:
                start = pos = msg.start
            elif msg.start > pos:
                # The host's ring overwrote bytes before we read them: what we have is
                # no longer the start of what follows, so start over from the new start.
                parts, start, pos = [], msg.start, msg.start
        elif isinstance(msg, protocol.Output):
            parts.append(msg.data)
            pos += len(msg.data)
        elif isinstance(msg, protocol.Ok):
            return info, start, stamps, b"".join(parts)
        else:
            raise ClientError(f"unexpected {type(msg).__name__} in an export")


def render(args, c: Client) -> bytes:
    if args.format == "ansi":
        return c.request(protocol.GetHistory(session=args.session, lines=HISTORY_ALL,
                                             format="ansi"), protocol.SnapshotData).data
    info, start, stamps, data = fetch(c, args.session)
    cols, rows = info.get("cols") or 80, info.get("rows") or 24
    if args.format == "cast":
        from .. import cast
        return cast.cast(data, start, stamps, cols, rows,
                         title=info.get("name") or info.get("id", "")).encode()
    from clowder_common.lines import render as lines
    text = [line.rstrip() for line in lines(data, cut=start > 0, keep_cleared=True,
                                             width=cols)]
    if text and not text[-1]:
        text.pop()
    return "".join(line + "\n" for line in text).encode("utf-8", "replace")


def run(args) -> int:
    with Client(args.socket) as c:
        out = render(args, c)
    if args.output is None:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        return 0
    tmp = f"{args.output}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(out)
        os.replace(tmp, args.output)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ClientError(f"writing {args.output}: {exc.strerror}") from None
    return 0
