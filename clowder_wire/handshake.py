"""1xx: the handshake and errors, on every connection to either daemon.

Every connection starts with Hello from the client, answered by Welcome (or by a fatal
Error on a version mismatch, naming both versions: refuse_hello).
"""

from __future__ import annotations

from .frame import PROTOCOL_VERSION, Message, register

__all__ = ["refuse_hello", "Hello", "Welcome", "Error"]


@register
class Hello(Message):
    """Client -> host, first frame. Answered by Welcome or a fatal Error."""

    KIND = 100
    version: int
    client: str = ""


@register
class Welcome(Message):
    """Host -> client: the handshake succeeded; ``uid`` is who the host thinks you are;
    ``pid``, the daemon's (SO_PEERCRED names systemd, which made the listening socket):
    a hand-off keeps it, a restart does not.  Newer than the message: 0 from older ones."""

    KIND = 101
    version: int
    server: str
    uid: int
    pid: int = 0


@register
class Error(Message):
    """Host -> client: a request failed. ``fatal`` means the host closes the connection."""

    KIND = 102
    message: str
    code: str = "error"
    fatal: bool = False


def refuse_hello(msg: Message, server: str) -> Error | None:
    """The fatal Error for a first message that is not an acceptable Hello, else None.

    Both daemons answer version skew the same way: naming both versions, never hanging.
    """
    if not isinstance(msg, Hello):
        return Error(message=f"expected Hello first, got {type(msg).__name__}",
                     code="handshake", fatal=True)
    if msg.version != PROTOCOL_VERSION:
        return Error(message=f"protocol version {msg.version} is not supported: {server} "
                             f"speaks version {PROTOCOL_VERSION}", code="version", fatal=True)
    return None
