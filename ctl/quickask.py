"""The quick paths' first question (quickps.py, firstpaint.py): Hello and a ListSessions
in one write, and Welcome and the SessionList read back, before the command line is
imported (so with the wire package and _socket alone)."""

import clowder_wire as P
from clowder_common import __version__


def hello() -> bytes:
    """The Hello the full path sends (ctl/client.py), encoded."""
    return P.encode(P.Hello(version=P.PROTOCOL_VERSION, client=f"clowderctl {__version__}"))


def ask_sessions(sock, reader: P.FrameReader, frames: list, seconds: float,
                 **listing) -> tuple | None:
    """Send Hello and ListSessions(**listing) on ``sock`` (connected, its timeout set) and
    read until Welcome and the SessionList came: (Welcome, the sessions), with the
    SessionList's frame taken out of ``frames`` (Welcome stays first, as an Attach's
    answers expect), or None at anything else: the connection closed, an Error (a version
    the host does not speak ...), something a host does not send.  The deadline starts
    again at Welcome, as the full path's clock for a reply does.  Raises what the socket
    raises (TimeoutError, OSError) and P.ProtocolError."""
    sock.sendall(hello() + P.encode(P.ListSessions(**listing)))
    greeted = False
    while len(frames) < 2:
        data = sock.recv(1 << 16)
        if not data:
            return None
        frames += reader.frames(data)
        if not greeted and frames[:1] and frames[0][0] == P.Welcome.KIND:
            greeted = True
            sock.settimeout(seconds)
    if [kind for kind, _ in frames[:2]] != [P.Welcome.KIND, P.SessionList.KIND]:
        return None
    try:
        welcome, listed = P.decode(*frames[0]), P.decode(*frames[1])
        sessions = listed.sessions
    except (P.ProtocolError, KeyError, TypeError, ValueError, AttributeError):
        return None  # not what a host sends: the full path reports it
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions) \
            or listed.more:  # a page of a long list: the full path asks for the rest
        return None
    del frames[1]
    return welcome, sessions
