"""The error a client's request is refused with: a message the client can show, and a
code it can act on (clowder_wire's error codes: "bad-request", "limit", "capacity", ...).
Raised by the host's spawn, end and request paths; connection.py sends it back."""


class RequestError(Exception):
    """A client's request cannot be done; the message goes back to that client."""

    def __init__(self, message: str, code: str = "error"):
        super().__init__(message)
        self.code = code
