"""5xx: multiplexing (client <-> clowder-control).

After the handshake a client may open numbered streams instead of sending requests;
from then on the connection carries only 5xx frames.  Each stream is a byte stream of
its own: for the session, status, file and vcs services it carries frames of this same
protocol (already greeted), for forward the raw bytes of one TCP connection.  Flow
control is per stream: a sender keeps at most STREAM_WINDOW bytes of StreamData
unacknowledged, so one stalled stream never holds up the others, and an error inside
one stream (an oversize frame, a bad path) closes that stream only.
"""

from __future__ import annotations

from .frame import Message, register

STREAM_WINDOW = 1 << 20  # unacknowledged StreamData bytes a sender may have per stream
STREAM_CHUNK = 64 * 1024  # the largest data of one StreamData frame
MAX_STREAMS = 64  # open streams per connection
SERVICES = ("session", "status", "file", "vcs", "forward")

__all__ = ["STREAM_WINDOW", "STREAM_CHUNK", "MAX_STREAMS", "SERVICES", "OpenStream",
           "StreamOpened", "StreamData", "StreamAck", "StreamClose"]


@register
class OpenStream(Message):
    """Client -> control: open ``stream`` (a new number) to ``service``. -> StreamOpened
    or StreamClose. ``port``: forward only, a TCP port on the remote's loopback."""

    KIND = 500
    stream: int
    service: str
    port: int = 0


@register
class StreamOpened(Message):
    """Control -> client: the stream is open; StreamData may flow both ways."""

    KIND = 501
    stream: int


@register
class StreamData(Message):
    """Either way: the next bytes of ``stream`` (at most STREAM_CHUNK)."""

    KIND = 502
    stream: int
    data: bytes = b""


@register
class StreamAck(Message):
    """Either way: the receiver consumed ``size`` more bytes of ``stream``."""

    KIND = 503
    stream: int
    size: int


@register
class StreamClose(Message):
    """Either way: ``stream`` is finished; ``code``/``message`` say why if it failed.

    Sent by the side that is done writing; the stream is closed once both sides have
    sent it (a side that receives it stops writing and answers with its own).
    """

    KIND = 504
    stream: int
    message: str = ""
    code: str = ""
