"""clowder_wire: the one wire protocol of clowder's three programs (ptyhostd,
clowder-control, clowderctl), and nothing else: framing and version in frame.py, each
service's messages in a file of its own.  Every name is also here, flat
(``import clowder_wire as wire; wire.encode(wire.Hello(...))``): every kind must be
registered before a frame can be decoded, so importing one file alone would not do.

The framing, the handshake and the PTY host's messages are imported with the package;
the other services' files (control, streams, files, vcs: frame.LAZY_BLOCKS) at first
use: the first of their names asked for here (or ``KINDS``, the whole table) loads all
four, and a frame of one of their kinds loads its file before it is checked.  A command
that speaks only to the PTY host, as attach's first paint, does not load them (~0.5 ms
of its start).

This package imports nothing of clowder's programs (tests/test_layering.py).
"""

from .frame import (
    PROTOCOL_VERSION, MAX_FRAME, MAX_DATA, HEADER, JSON_LEN, ProtocolError,
    Message, register, fields_of, encode, frame_of, check_header, decode, data_of,
    read_message, FrameReader,
)
from . import frame as _frame
from .handshake import (
    refuse_hello, Hello, Welcome, Error,
)
from .host import (
    AGENT_PREFIX, HOST_SET_ENV, search_dirs, SESSION_FIELDS, MAX_ARGV_BYTES, MAX_CWD_BYTES,
    argv_bytes, MAX_COLS, MAX_ROWS, MAX_CELLS, fit_size, encode_output, encode_input,
    session_list_frame, next_page,
    Spawn,
    ListSessions, Send, GetBacklog, Wait, Kill, Attach, Input, Resize, Detach, TerminalReady,
    Remove,
    Rename, UpgradeCheck, HandOff, GetSnapshot, GetHistory, GetExport, Ok, SessionInfo,
    SessionList, Output, Exited, Attached, CheckReport, SnapshotData, InputAck, ExportHead,
    EVENT_KINDS, WatchEvents, Event,
)
# The union of the files' __all__ (tests/test_layering.py checks it).
__all__ = [
    "PROTOCOL_VERSION", "MAX_FRAME", "MAX_DATA", "HEADER", "JSON_LEN", "KINDS",
    "ProtocolError", "Message", "register", "fields_of", "encode", "frame_of", "check_header",
    "decode", "data_of", "read_message", "FrameReader", "refuse_hello", "Hello", "Welcome",
    "Error", "AGENT_PREFIX", "HOST_SET_ENV", "search_dirs", "SESSION_FIELDS", "MAX_ARGV_BYTES",
    "MAX_CWD_BYTES", "argv_bytes", "MAX_COLS", "MAX_ROWS", "MAX_CELLS", "fit_size", "encode_output",
    "encode_input", "session_list_frame", "next_page", "Spawn", "ListSessions", "Send",
    "GetBacklog", "Wait", "Kill", "Attach", "Input", "Resize", "Detach", "TerminalReady",
    "Remove", "Rename",
    "UpgradeCheck", "HandOff",
    "GetSnapshot", "GetHistory", "GetExport", "Ok", "SessionInfo", "SessionList", "Output", "Exited",
    "Attached", "CheckReport", "SnapshotData", "InputAck", "ExportHead", "EVENT_KINDS",
    "WatchEvents", "Event", "AgentUp", "AgentDown",
    "AgentRestart", "GetStatus", "AgentInfo", "StatusReport", "MAX_LOG_LINES", "GetLogs",
    "LogEntries", "WatchAgentEvents", "AgentEvent", "STREAM_WINDOW",
    "STREAM_CHUNK", "MAX_STREAMS", "SERVICES", "OpenStream", "StreamOpened",
    "StreamData", "StreamAck", "StreamClose", "FileList", "FileRead", "FileWrite",
    "FileWatch", "FileUnwatch", "FileListing", "FileData", "FileEvents", "VcsStatus",
    "VcsDiff", "VcsLog", "VcsReport",
]


def __getattr__(name: str):
    """A name of a file loaded at first use (PEP 562: asked only for names not yet
    here): all of them are loaded, then it is an ordinary global of the package."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in _frame.load_blocks():
        globals().update((n, getattr(module, n)) for n in module.__all__)
    globals()["KINDS"] = _frame.KINDS  # now complete
    return globals()[name]
