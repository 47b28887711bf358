"""The registry: a durable record, on disk, of which agents should exist.

For each agent it keeps the PTY-host session id of the agent and of its companion shells,
the layout, how it last exited and why it was last (re)spawned.  It lives in the state
directory (``default_dir``) as ``registry.json`` and must survive crashes, restarts and
power loss, so every write goes to a temporary file in the same directory, is fsynced,
renamed over the old file and the directory fsynced: a reader sees the old file or the
new one, never a mix.  The file carries a format version and the sha256 of its body in
canonical JSON, so a torn or hand-edited file is detected instead of half-believed.

Before a write replaces a good ``registry.json`` it is copied to ``registry.json.prev``,
the fallback when the current file turns out to be damaged.  Loading never deletes or
rewrites anything: a damaged file stays where it is until the next good write, which
first copies it aside as ``registry.json.corrupt-<timestamp>`` for the post-mortem.
One writer (the daemon) is assumed; it is what removes temporary files left by a crash.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

FORMAT = 1
FILENAME = "registry.json"


class RegistryError(Exception):
    """The registry file could not be read, or its content is not a valid registry."""


def default_dir(scope: str) -> str:
    """The state directory of the ``"system"`` or ``"user"`` units."""
    if scope == "system":
        return "/var/lib/clowder"
    if scope == "user":
        base = os.environ.get("XDG_STATE_HOME", "")
        if not os.path.isabs(base):  # the XDG spec says to ignore a relative value
            base = os.path.join(os.path.expanduser("~"), ".local", "state")
        return os.path.join(base, "clowder")
    raise ValueError(f"scope must be 'system' or 'user', not {scope!r}")


def default_path(scope: str) -> str:
    """Where the registry of ``scope`` lives."""
    return os.path.join(default_dir(scope), FILENAME)


@dataclass
class AgentRecord:
    """One agent that should exist, and what the daemon knows about it."""

    name: str
    session: str | None = None
    shells: dict[str, str] = field(default_factory=dict)  # shell name -> session id
    layout: dict = field(default_factory=dict)
    last_exit: dict | None = None
    cause: str = ""  # why it was last (re)spawned
    spawned_at: float = 0.0  # wall-clock time.time()
    spawns: int = 0


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# field -> (test, what the field must be); the order is the dataclass's
_CHECKS = {
    "name": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "session": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "shells": (lambda v: isinstance(v, dict) and
               all(isinstance(k, str) and isinstance(s, str) for k, s in v.items()),
               "an object of strings"),
    "layout": (lambda v: isinstance(v, dict), "an object"),
    "last_exit": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "cause": (lambda v: isinstance(v, str), "a string"),
    "spawned_at": (_number, "a finite number"),
    "spawns": (lambda v: type(v) is int and v >= 0, "a non-negative integer"),
}
assert list(_CHECKS) == [f.name for f in dataclasses.fields(AgentRecord)]


def _record(raw, where: str) -> AgentRecord:
    """Validate one agent's JSON object and build its record."""
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: must be an object, found {_kind(raw)}")
    missing = [k for k in _CHECKS if k not in raw]
    unknown = sorted(set(raw) - set(_CHECKS))
    if missing or unknown:
        raise RegistryError(f"{where}: missing fields {missing}, unknown fields {unknown}")
    for key, (ok, what) in _CHECKS.items():
        if not ok(raw[key]):
            raise RegistryError(f"{where}: field {key!r} must be {what}, "
                                f"found {_kind(raw[key])} {raw[key]!r:.60}")
    return AgentRecord(**{**raw, "spawned_at": float(raw["spawned_at"])})


def _kind(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _digest(body) -> str:
    """sha256 of the canonical JSON of ``body``: independent of how the file is laid out."""
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                       allow_nan=False)
    return hashlib.sha256(canon.encode()).hexdigest()


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse(data: bytes, path: str) -> dict[str, AgentRecord]:
    """The records in the file content ``data``; RegistryError names ``path`` and the fault."""
    if not data.strip():
        raise RegistryError(f"{path}: the file is empty (a write cut short?)")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{path}: not UTF-8 text ({exc})") from None
    except ValueError as exc:
        raise RegistryError(f"{path}: not valid JSON, truncated or damaged ({exc})") from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{path}: the top level must be an object, found {_kind(doc)}")
    fmt = doc.get("format")
    if type(fmt) is not int:
        raise RegistryError(f"{path}: no integer 'format' version (found {fmt!r:.40})")
    if fmt != FORMAT:
        raise RegistryError(f"{path}: format version {fmt} is not supported "
                            f"(this clowder reads version {FORMAT})")
    if set(doc) != {"format", "sha256", "body"}:
        raise RegistryError(f"{path}: expected the keys format, sha256 and body, "
                            f"found {sorted(doc)}")
    try:
        actual = _digest(doc["body"])
    except ValueError as exc:  # e.g. 1e999, which parses as infinity
        raise RegistryError(f"{path}: the body cannot be checksummed ({exc})") from None
    if doc["sha256"] != actual:
        raise RegistryError(f"{path}: checksum mismatch (recorded {doc['sha256']!r:.20}, the "
                            f"body hashes to {actual[:16]}...): the file was edited or damaged")
    return _records(doc["body"], path)


def _records(body, path: str) -> dict[str, AgentRecord]:
    if not isinstance(body, dict) or set(body) != {"agents"} or \
            not isinstance(body["agents"], list):
        raise RegistryError(f"{path}: the body must be an object holding only an 'agents' array")
    agents: dict[str, AgentRecord] = {}
    for i, raw in enumerate(body["agents"]):
        label = raw.get("name") if isinstance(raw, dict) else None
        rec = _record(raw, f"{path}: agent #{i}" + (f" ({label!r:.40})" if label else ""))
        if rec.name in agents:
            raise RegistryError(f"{path}: agent {rec.name!r} is listed twice")
        agents[rec.name] = rec
    return agents


def encode(agents: dict[str, AgentRecord], path: str = FILENAME) -> bytes:
    """The file content for ``agents``, checked to load back (RegistryError if not)."""
    if any(name != rec.name for name, rec in agents.items()):
        raise RegistryError(f"{path}: refusing to write: an agent is filed under another name")
    body = {"agents": [dataclasses.asdict(agents[n]) for n in sorted(agents)]}
    try:
        doc = {"format": FORMAT, "sha256": _digest(body), "body": body}
        data = (json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n").encode()
    except (TypeError, ValueError) as exc:
        raise RegistryError(f"{path}: refusing to write: not JSON ({exc})") from None
    parse(data, path)  # never write what the next start could not read
    return data


def _read(path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror or exc}") from None


def load(path: str) -> dict[str, AgentRecord]:
    """The records in ``path``; empty if it does not exist (a first start)."""
    data = _read(path)
    return {} if data is None else parse(data, path)


def load_with_fallback(path: str) -> tuple[dict[str, AgentRecord], str | None]:
    """The records of ``path``, else of ``path.prev``, with a warning when it fell back.

    A missing ``path`` with a ``.prev`` beside it is not a first start (writes never
    leave the current file missing), so the previous copy is used then too.
    """
    prev = path + ".prev"
    missing = False
    try:
        data = _read(path)
        if data is not None:
            return parse(data, path), None
        missing, problem = True, f"{path}: missing"
    except RegistryError as exc:
        problem = str(exc)
    try:
        prev_data = _read(prev)
        if prev_data is None:
            if missing:
                return {}, None  # neither exists: a first start
            raise RegistryError(f"{prev}: missing")
        records = parse(prev_data, prev)
    except RegistryError as exc:
        raise RegistryError(f"no usable registry: {problem}; and {exc}") from None
    return records, f"{problem}; using the previous copy {prev} instead"


class Registry:
    """The agents that should exist, held in memory and saved to ``path``."""

    def __init__(self, path: str, agents: dict[str, AgentRecord] | None = None):
        self.path = path
        self.agents: dict[str, AgentRecord] = dict(agents or {})

    @classmethod
    def load(cls, path: str) -> "Registry":
        """Read ``path``; raises RegistryError if it is damaged."""
        return cls(path, load(path))

    @classmethod
    def load_with_fallback(cls, path: str) -> tuple["Registry", str | None]:
        """Read ``path`` or its previous copy; see the module function."""
        records, warning = load_with_fallback(path)
        return cls(path, records), warning

    def get(self, name: str) -> AgentRecord | None:
        return self.agents.get(name)

    def set(self, record: AgentRecord) -> None:
        """Add or replace the agent ``record.name`` (in memory; ``save`` to keep it)."""
        _record(dataclasses.asdict(record), f"agent {record.name!r}")  # fail now, not at save
        self.agents[record.name] = record

    def remove(self, name: str) -> AgentRecord | None:
        """Forget the agent ``name``; returns its record if there was one."""
        return self.agents.pop(name, None)

    def save(self) -> None:
        """Write the registry durably, keeping the last good copy and any damaged one."""
        data = encode(self.agents, self.path)
        directory = os.path.dirname(os.path.abspath(self.path))
        _ensure_dir(directory)
        for stale in glob.glob(os.path.join(glob.escape(directory),
                                            f".{FILENAME}*.tmp-*")):
            _unlink_quietly(stale)  # left by a crash mid-write; never authoritative
        current = _read(self.path)
        if current == data:
            return
        if current is not None:
            try:
                parse(current, self.path)
            except RegistryError:
                _keep_evidence(self.path, current)  # not rotated: .prev stays good
            else:
                prev = self.path + ".prev"
                old_prev = _read(prev)
                if old_prev is not None and not _valid(old_prev, prev):
                    _keep_evidence(prev, old_prev)
                _write_atomically(prev, current)
        _write_atomically(self.path, data)


def _valid(data: bytes, path: str) -> bool:
    try:
        parse(data, path)
        return True
    except RegistryError:
        return False


def _keep_evidence(path: str, data: bytes) -> str:
    """Copy a damaged file to ``<path>.corrupt-<timestamp>`` before it is replaced."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target, n = f"{path}.corrupt-{stamp}", 0
    while os.path.lexists(target):
        n += 1
        target = f"{path}.corrupt-{stamp}-{n}"
    _write_atomically(target, data)
    return target


def _ensure_dir(directory: str) -> None:
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask


def _write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` (mode 0600) so that a crash leaves old or new, whole."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
