"""clowder_wire: the one wire protocol of clowder's three programs (ptyhostd,
clowder-control, clowderctl), and nothing else: framing and version in frame.py, each
service's messages in a file of its own.  Every name is also here, flat
(``import clowder_wire as wire; wire.encode(wire.Hello(...))``): every kind must be
registered before a frame can be decoded, so importing one file alone would not do.

This package imports nothing of clowder's programs (tests/test_layering.py).
"""

from .frame import (
    PROTOCOL_VERSION, MAX_FRAME, MAX_DATA, HEADER, JSON_LEN, KINDS, ProtocolError,
    Message, register, fields_of, encode, check_header, decode, data_of, read_message,
    FrameReader,
)
from .handshake import (
    refuse_hello, Hello, Welcome, Error,
)
from .host import (
    AGENT_PREFIX, HOST_SET_ENV, search_dirs, SESSION_FIELDS, MAX_COLS, MAX_ROWS,
    MAX_CELLS, fit_size, encode_output, Spawn, ListSessions, Send, GetBacklog, Wait, Kill,
    Attach, Input, Resize, Detach, Remove, Rename, UpgradeCheck, HandOff, GetSnapshot,
    GetHistory, GetExport, Ok, SessionInfo, SessionList, Output, Exited, Attached,
    CheckReport, SnapshotData, InputAck, ExportHead, EVENT_KINDS, WatchEvents, Event,
)
from .control import (
    AgentUp, AgentDown, AgentRestart, GetStatus, AgentInfo, StatusReport, MAX_LOG_LINES,
    GetLogs, LogEntries, WatchAgentEvents, AgentEvent,
)
from .streams import (
    STREAM_WINDOW, STREAM_CHUNK, MAX_STREAMS, SERVICES, OpenStream, StreamOpened,
    StreamData, StreamAck, StreamClose,
)
from .files import (
    FileList, FileRead, FileWrite, FileWatch, FileUnwatch, FileListing, FileData,
    FileEvents,
)
from .vcs import (
    VcsStatus, VcsDiff, VcsLog, VcsReport,
)

# The union of the files' __all__ (tests/test_layering.py checks it).
__all__ = [
    "PROTOCOL_VERSION", "MAX_FRAME", "MAX_DATA", "HEADER", "JSON_LEN", "KINDS",
    "ProtocolError", "Message", "register", "fields_of", "encode", "check_header",
    "decode", "data_of", "read_message", "FrameReader", "refuse_hello", "Hello", "Welcome",
    "Error", "AGENT_PREFIX", "HOST_SET_ENV", "search_dirs", "SESSION_FIELDS", "MAX_COLS",
    "MAX_ROWS", "MAX_CELLS", "fit_size", "encode_output", "Spawn", "ListSessions", "Send",
    "GetBacklog", "Wait", "Kill", "Attach", "Input", "Resize", "Detach", "Remove", "Rename",
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
