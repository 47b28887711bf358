"""2xx and 3xx: the PTY host's requests (client -> host), its replies and streams.

Each request's docstring says what answers it.  The sizes a session may have are part
of this contract too: the host refuses others (ptyhostd/pty.py), a client asks for
fit_size() of its terminal.
"""

from __future__ import annotations

from .frame import FAST_DECODERS, HEADER, JSON_LEN, Message, frame_of, register
from .jsonpart import dumps

# Session names starting with this are clowder-control's agents (``agent:NAME`` and
# ``agent:NAME/SHELL``): the host takes them only from clowder-control (ptyhostd/peer.py).
AGENT_PREFIX = "agent:"


def search_dirs(path: str) -> list[str]:
    """The directories of a PATH the host has a bare program name looked up in.

    systemd's ExecSearchPath= takes only absolute, normalised directories: repeated and
    trailing slashes are dropped here (the same directory), entries that are relative
    or hold ``.`` or ``..`` are left out (clowderctl sends a program found through one as
    an absolute path), as are unprintable ones (no directory a shell would find)."""
    out: list[str] = []
    for d in path.split(":"):
        parts = [p for p in d.split("/") if p]
        if not d.startswith("/") or "." in parts or ".." in parts or not d.isprintable():
            continue
        d = "/" + "/".join(parts)
        if d not in out:
            out.append(d)
    return out


# Variables the host sets in every session, from the passwd entry of the session's user
# and its own table (ptyhostd/sessionenv.py): a Spawn whose env names one is refused.
HOST_SET_ENV = ("HOME", "USER", "LOGNAME", "SHELL", "CLOWDER_SESSION", "CLOWDER_AGENT")

SESSION_FIELDS = (
    "id", "name", "pid", "unit", "state", "exit_code", "signal", "cols", "rows",
    "created", "uid", "cwd", "argv",
    "agent",  # started by clowder-control (optional: older hosts omit it)
    # What ended it when the host did not see the program end: "reboot" (a session of
    # a previous boot, kept on disk: ptyhostd/statedir.py) or "lost"; None otherwise
    # (optional: older hosts omit it).
    "ended_by",
)

# The most a session's command line may take (its arguments' UTF-8 bytes, with a NUL
# each, as the kernel counts them) and its working directory (PATH_MAX).  Every listing
# and the manifest carry them, for every session: unbounded, one user's sessions could
# make another's `ps` (and clowder-control's) too large to answer, and the host's memory
# grow by what a Spawn frame holds, a thousand times over.
MAX_ARGV_BYTES = 32 * 1024
MAX_CWD_BYTES = 4096


def argv_bytes(argv: list[str]) -> int:
    """What a command line takes, as MAX_ARGV_BYTES counts it."""
    return sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in argv)

# The sizes a session may have.  The screen model's cost grows with the cells drawn
# (a coloured erase of 1000x1000 measured 59 MiB and 1.6 s in pyte; 500x500, 13 MiB and
# 0.17 s), so the cap is on cells as well as on each side: 500x500, 1000x250, 250x1000.
MAX_COLS = MAX_ROWS = 1000
MAX_CELLS = 250_000

__all__ = ["AGENT_PREFIX", "HOST_SET_ENV", "search_dirs", "SESSION_FIELDS", "MAX_ARGV_BYTES",
           "MAX_CWD_BYTES", "argv_bytes", "MAX_COLS", "MAX_ROWS", "MAX_CELLS", "fit_size", "encode_output",
           "encode_input", "session_list_frame", "next_page", "Spawn", "ListSessions",
           "Send", "GetBacklog", "Wait", "Kill", "Attach", "Input", "Resize", "Detach",
           "TerminalReady", "Remove", "Rename", "UpgradeCheck", "HandOff", "GetSnapshot",
           "GetHistory",
           "GetExport", "Ok",
           "SessionInfo", "SessionList", "Output", "Exited", "Attached", "CheckReport",
           "SnapshotData", "InputAck", "ExportHead", "EVENT_KINDS", "WatchEvents", "Event"]

# What an Event's ``event["kind"]`` may be (the journal's kinds, clowder_common/events.py,
# where one is logged): a session's life, its output's busy and idle, a bell, a program's
# notification (OSC 9, OSC 777 notify, OSC 99), the host's start; ``events-lost`` is the
# subscriber's own (its queue overflowed: ``count`` events before the next were dropped).
# A client shows a kind it does not know as it is: the host may add kinds.
EVENT_KINDS = ("session-started", "session-ended", "session-busy", "session-idle",
               "session-bell", "session-notification", "host-started", "events-lost")


@register
class Spawn(Message):
    """Start a program on a new pty as its own systemd unit. -> SessionInfo.

    ``env`` is what the caller passes (clowderctl: a fixed list of its own variables, its
    PATH, --env); the host adds HOST_SET_ENV, and looks a bare ``argv[0]`` up on
    ``env["PATH"]`` as the session's user."""

    KIND = 200
    argv: list
    name: str | None = None
    cwd: str | None = None
    env: dict = {}
    cols: int = 80
    rows: int = 24
    user: str | None = None  # only root may name another user
    # The id of an ended session of the caller's whose last screen opens this one's
    # output, followed by a one-line notice: an agent brought back after a reboot
    # (clowder-control).  Optional: an older host ignores it.
    resumes: str | None = None


@register
class ListSessions(Message):
    """List the sessions this client may see. -> SessionList.

    Without ``all``, an ended session is left out once its owner has seen how it ended
    (a Wait, an attach, a list answered with it) or the host's --show-ended time after
    its end; listing it to its owner counts as seeing it, unless ``peek`` (a listing no
    person reads, e.g. attach's lookup of the newest session).  An older host lists all."""

    KIND = 201
    all: bool = False
    peek: bool = False
    # The rest of a list too large for one frame: the ``more`` of the SessionList before
    # (its last session's id).  An older host ignores it, and answers with one frame.
    after: str = ""


@register
class Send(Message):
    """Write ``data`` to a session's terminal input. -> Ok."""

    KIND = 202
    session: str
    data: bytes = b""


@register
class GetBacklog(Message):
    """Ask for the retained raw output. -> Output frames, then Ok."""

    KIND = 203
    session: str


@register
class Wait(Message):
    """Block until the session has ended. -> Exited."""

    KIND = 204
    session: str


@register
class Kill(Message):
    """Send a signal to the session's program (its whole unit). -> Ok.

    ``escalate``: end the session: ``signal`` (SIGHUP), then SIGTERM, then SIGKILL, each
    after the host's grace time (ptyhostd.host.Host.ESCALATION); Ok only once it has ended
    (a Wait then says how).  A host without the field sends ``signal`` alone."""

    KIND = 205
    session: str
    signal: int = 15
    escalate: bool = False


@register
class Attach(Message):
    """Stream a session. -> Attached, Output (a repaint, then live), ..., Exited.
    With ``history`` (and a repaint), a SnapshotData comes between Attached and the
    repaint: the last that many lines that scrolled off the screen (as GetHistory's
    ``format``, one line each), from the same look at the model as the repaint, so no
    line is in both or in neither.  Newer than the message: an older host sends none."""

    KIND = 206
    session: str
    cols: int = 0  # 0: leave the size alone
    rows: int = 0
    read_only: bool = False
    replay: int = -1  # -1: the screen, repainted; N >= 0: the last N raw bytes instead
    # A client's random name for its input stream, the same on each reattach of one run:
    # the host then numbers what it wrote of it (Input.seq, Attached.input_seq).
    token: str | None = None
    history: int = 0
    history_format: str = "ansi"
    # The client's own terminal, for the host to write the output to itself (ptyhostd/
    # terminal.py): {"path": "/dev/pts/N", "dev": st_dev, "ino": st_ino} of its stdout.
    # Taken only if the host can check it is the client's (Attached.terminal); then
    # nothing is written to it before TerminalReady, and Output frames still may come
    # (the hand-off's bridge sends them).  An older host ignores it.
    terminal: dict | None = None


@register
class Input(Message):
    """Attached client -> host: keystrokes. Refused on a read-only attach."""

    KIND = 207
    data: bytes = b""
    seq: int | None = None  # with a token: the stream offset of the end of ``data``


@register
class Resize(Message):
    """Attached client -> host: its terminal's size changed. No answer."""

    KIND = 208
    cols: int
    rows: int


@register
class Detach(Message):
    """Attached client -> host: stop streaming. -> Ok, then the host closes.  The host
    writes nothing more to the client's terminal once the Ok is sent."""

    KIND = 209


@register
class TerminalReady(Message):
    """Attached client -> host, after an Attached with ``terminal``: the client has drawn
    what goes before the screen (its history, its terminal's modes): the host may
    write the repaint and what follows to the terminal.  No answer.  Sent only to a
    host that took the terminal (an older one closes on the unknown kind)."""

    KIND = 218


@register
class Remove(Message):
    """Forget an ended session and its backlog. -> Ok."""

    KIND = 210
    session: str


@register
class Rename(Message):
    """Give a session a new name: printable, not one of the owner's running sessions'
    (as a Spawn's name). -> SessionInfo.  An older host closes on the unknown kind."""

    KIND = 215
    session: str
    name: str


@register
class UpgradeCheck(Message):
    """Run the hand-off pre-check against the installed code, change nothing. -> CheckReport."""

    KIND = 211


@register
class HandOff(Message):
    """Hand off in place to the installed code, as SIGHUP does (ExecReload= sends this, so
    that ``systemctl reload`` ends when the hand-off has). -> Ok once systemd was told the
    host is reloading; then an Error if the hand-off is refused or fails (the running code
    serves on), or the connection closes as the new code takes over."""

    KIND = 214


@register
class GetSnapshot(Message):
    """The current screen as ``format`` text, ansi, html or json. -> SnapshotData."""

    KIND = 212
    session: str
    format: str = "text"


@register
class GetHistory(Message):
    """The last ``lines`` lines of output, as plain ``text`` or ``ansi`` (with their
    colours and attributes, where the host's model keeps them). -> SnapshotData.
    ``format`` is newer than the message: an older host ignores it (plain text)."""

    KIND = 213
    session: str
    lines: int = 100
    format: str = "text"


@register
class GetExport(Message):
    """The retained output with the times it arrived (clowderctl export). -> ExportHead,
    then Output frames carrying the ring's bytes from ``ExportHead.start`` on, in order,
    then Ok.  Sent a frame at a time as the client reads; if the session's output
    overwrote bytes not yet sent (a reader slower than the program), another ExportHead
    says where the Output frames after it start.  An older host closes on the unknown
    kind."""

    KIND = 216
    session: str


@register
class WatchEvents(Message):
    """The host's events this client may see (its own sessions', root: all, and the
    host's own), of one ``session`` (id or name) or all. -> Event frames of the recent ones
    the host keeps (newer than ``since``, a wall-clock time), then Ok; with ``follow``,
    Event frames as they happen after it, until the client closes.  An older host closes
    on the unknown kind."""

    KIND = 217
    session: str | None = None
    since: float | None = None
    follow: bool = False


@register
class Ok(Message):
    """The request succeeded and has nothing more to say."""

    KIND = 300


@register
class SessionInfo(Message):
    """One session, as a dict with the keys of ``SESSION_FIELDS``."""

    KIND = 301
    session: dict


@register
class SessionList(Message):
    """Every session visible to the client; or, when they do not fit in one frame, a
    page of them, in the order of their ids, and ``more`` is the id to ask on after
    (ListSessions(after=more)) for the rest; "" once the list is whole."""

    KIND = 302
    sessions: list
    more: str = ""


def next_page(reply: SessionList, after: str) -> str | None:
    """The ``after`` to ask the next page of a listing on, or None once ``reply`` (the
    page asked for after ``after``) ends it: its ``more`` is empty, or not past
    ``after`` (a host whose pages go nowhere must not loop a client forever)."""
    return reply.more if reply.more and reply.more > after else None


def session_list_frame(sessions: list[str], more: str = "") -> bytes:
    """The frame of SessionList(sessions=..., more=more) from each session's JSON,
    already encoded (``dumps(info)``): the bytes ``encode`` makes, without encoding
    every session again (the host keeps each one's, ptyhostd/session.py)."""
    body = '{"sessions":[' + ",".join(sessions) + '],"more":' + dumps(more) + "}"
    return frame_of(SessionList, body.encode())


@register
class Output(Message):
    """Raw terminal output (backlog or live)."""

    KIND = 303
    data: bytes = b""


@register
class Exited(Message):
    """The session ended: ``exit_code`` or ``signal`` is set, ``status`` says which."""

    KIND = 304
    session: str
    status: str  # "exited", "killed", "dumped" or "lost"
    exit_code: int | None = None
    signal: int | None = None


@register
class Attached(Message):
    """The attach succeeded; Output frames follow."""

    KIND = 305
    session: dict
    # With a token: how much of its input stream the host wrote to the pty (resend what
    # follows); -1: the host has no record of that token (a new client, or lost).
    input_seq: int | None = None
    # The host writes the output to the client's terminal itself (Attach.terminal).
    terminal: bool = False


@register
class CheckReport(Message):
    """Host -> client: whether a hand-off to the installed code would be accepted."""

    KIND = 306
    ok: bool
    message: str
    version: str = ""
    new_version: str = ""


@register
class SnapshotData(Message):
    """Host -> client: a snapshot or history, as UTF-8 bytes."""

    KIND = 307
    data: bytes = b""


@register
class InputAck(Message):
    """Host -> attached client with a token: its input up to ``seq`` is in the pty."""

    KIND = 309
    seq: int


@register
class ExportHead(Message):
    """Host -> client: what an export holds.  ``session``: as SessionInfo's; the Output
    frames that follow carry ring offsets ``start`` to ``end``; ``stamps``: [[ring offset,
    unix time], ...], offsets increasing: the bytes from one offset to the next arrived
    at its time (or up to the gap to the next stamp later); the first may be before
    ``start`` (it times the oldest bytes), and bytes before the first have no time."""

    KIND = 310
    session: dict
    start: int
    end: int
    stamps: list = []


@register
class Event(Message):
    """Host -> watching client: one event, a dict with ``kind`` (EVENT_KINDS), ``time``
    (wall clock, float), ``session``, ``name`` and ``uid`` (null for the host's own),
    and the kind's fields (docs/design.md, "Events")."""

    KIND = 311
    event: dict


def encode_output(data) -> bytes:
    """Fast path for the hottest frame: Output with raw bytes and no JSON."""
    return HEADER.pack(JSON_LEN.size + len(data), Output.KIND) + b"\0\0\0\0" + bytes(data)


# The hottest request, each keystroke of an attach: Input, as ``encode`` spells it.  These
# two make and read exactly those bytes without the general field walk and JSON (each
# way ~1.5 -> ~0.4 us warm, several times that from the caches a keystroke finds cold);
# tests/test_wire_input.py checks both against the general ones, for every field Input has.
_SEQ_NULL = b'{"seq":null}'


def encode_input(data, seq: int | None) -> bytes:
    """``encode(Input(data=data, seq=seq))``, byte for byte."""
    return frame_of(Input, _SEQ_NULL if seq is None else b'{"seq":%d}' % seq, bytes(data))


def _decode_input(payload: bytes):
    """The Input ``encode_input`` writes, or None for any other spelling (the general
    decoder then reads it, or refuses it: a leading zero, a sign, a huge number)."""
    jlen = int.from_bytes(payload[:4], "big")
    end = 4 + jlen
    if len(payload) < end:
        return None
    if jlen == 12 and payload[4:end] == _SEQ_NULL:
        seq = None
    elif payload[4:11] == b'{"seq":' and payload[end - 1:end] == b"}":
        digits = payload[11:end - 1]
        if not digits.isdigit() or len(digits) > 19 or (digits[0] == 48 and len(digits) > 1):
            return None
        seq = int(digits)
    else:
        return None
    msg = Input.__new__(Input)
    msg.data, msg.seq = bytes(payload[end:]), seq
    return msg


FAST_DECODERS[Input.KIND] = _decode_input


def fit_size(cols: int, rows: int) -> tuple[int, int]:
    """The largest size within the cap that fits in a terminal of ``cols`` x ``rows``
    (a client on a wider terminal asks for this, and the program draws in its corner,
    as in a tmux pane smaller than the terminal).  0 stays 0: no size known."""
    if cols <= 0 or rows <= 0:
        return cols, rows
    cols = min(cols, MAX_COLS)
    return cols, min(rows, MAX_ROWS, MAX_CELLS // cols)
