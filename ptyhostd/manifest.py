"""The manifest: a small record, parked in the FD store, of what else is parked.

It names each session, its unit, its parked master and ring, and how it ended.  It is
two memfds written in turn; each copy carries a generation number and a CRC, so a host
killed in the middle of writing one still finds the other, whole, on its next start.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Sequence

from .fd import Fd

MAGIC = b"CLWMANI1"
VERSION = 1
_HEADER = struct.Struct("<8sQQI")  # magic, generation, length, crc32
SLOTS = ("manifest.a", "manifest.b")
# Records shorter than this are joined into runs before they are written; longer ones are
# written from where they are (pwritev), with no copy: a table of the largest records a
# spawn allows is ~36 MB at one user's 1,024 sessions, and every copy of it cost ~20 ms
# (fresh pages faulted in), three copies and the CRC 92 ms a rewrite (docs/design.md,
# "The manifest's rewrite").
_RUN = 4096
_RUN_BYTES = 256 * 1024  # a run of short records is cut here
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)


class ManifestError(Exception):
    """No usable manifest copy was found."""


class Manifest:
    """The holder of the two manifest memfds."""

    def __init__(self, fds: dict[str, Fd], generation: int, created=SLOTS):
        self.fds = fds
        self.generation = generation
        self.created = set(created)  # slots whose memfd is new here: not parked yet
        self.adopted = b""  # the body adopt() took, while it is the newest (see unmark)
        self.unmarked = b""  # the body unmark() wrote, while it is the newest (see mark)

    @classmethod
    def create(cls) -> "Manifest":
        fds = {}
        for slot in SLOTS:
            fds[slot] = Fd(os.memfd_create(f"clowder-{slot}", os.MFD_CLOEXEC), slot)
        return cls(fds, 0)

    @classmethod
    def adopt(cls, raw: dict[str, int]) -> tuple["Manifest", dict]:
        """Take over the parked copies; returns the manifest and the newest valid content.

        Raises ManifestError (after closing the fds) when neither copy is usable.  A
        slot that was not parked gets a new memfd, listed in ``created`` for parking.
        """
        fds = {slot: Fd(fd, slot) for slot, fd in raw.items()}
        best = None
        problems = []
        # Newest first, by the headers alone: the older copy is parsed only if the newer
        # is unusable (each is ~2 ms of JSON at 1,000 sessions, before the host serves).
        newest = []
        for slot, fd in fds.items():
            try:
                newest.append((_generation(fd.fd), slot))
            except ManifestError as exc:
                problems.append(f"{slot}: {exc}")
        for _gen, slot in sorted(newest, reverse=True):
            try:
                best = _read(fds[slot].fd)
                break
            except ManifestError as exc:
                problems.append(f"{slot}: {exc}")
        if best is None:
            for fd in fds.values():
                fd.close()
            raise ManifestError("; ".join(problems) or "no manifest was parked")
        created = [slot for slot in SLOTS if slot not in fds]
        for slot in created:
            fds[slot] = Fd(os.memfd_create(f"clowder-{slot}", os.MFD_CLOEXEC), slot)
        manifest = cls(fds, best[0], created)
        manifest.adopted = best[2]
        return manifest, best[1]

    def write(self, content: dict) -> None:
        """Write ``content`` into the older copy, making it the newest."""
        self._write(json.dumps({"version": VERSION, **content}, separators=(",", ":")).encode())

    def write_sessions(self, records: Sequence[bytes], left: str = "") -> None:
        """Write a manifest of already-encoded session records (JSON objects); ``left``
        ("restart"): the host is exiting cleanly, for the next start to say why it
        started (older code ignores the key).  The body is what joining the records
        with commas would make, but long records are not copied into it."""
        parts: list[bytes] = []
        run = [b'{"version":%d,"sessions":[' % VERSION]
        size = 0
        for i, record in enumerate(records):
            if i:
                run.append(b",")
            if len(record) >= _RUN:
                parts += (b"".join(run), record)
                run, size = [], 0
            else:
                run.append(record)
                size += len(record)
                if size >= _RUN_BYTES:
                    parts.append(b"".join(run))
                    run, size = [], 0
        run.append(b"]%s}" % _mark(left))
        parts.append(b"".join(run))
        self._write_parts(parts)

    def unmark(self) -> bool:
        """Write the adopted manifest again without its "left" mark, if nothing was
        written since adopt() and it ends with the mark as write_sessions puts it; False
        (nothing written) otherwise.  What a restart's start does instead of encoding
        every session again (~5 ms at 1,000) before it serves: the sessions it adopted
        are those the body records, and any change since was saved whole."""
        body, self.adopted = self.adopted, b""
        mark = _mark("restart") + b"}"
        if not body.endswith(mark):
            return False
        body = body[:-len(mark)] + b"}"
        self._write(body)
        self.unmarked = body
        return True

    def mark(self, left: str) -> bool:
        """Write the body unmark() wrote again, marked ``left``, if nothing was written
        since; False (nothing written) otherwise.  A restart soon after a start (before
        anything changed the table) then costs its exit no encoding either: the host
        rewrites the manifest after every change, so the newest body is the table."""
        body, self.unmarked = self.unmarked, b""
        if not body:
            return False
        self._write(body[:-1] + _mark(left) + b"}")
        return True

    def _write(self, body: bytes) -> None:
        self._write_parts([body])

    def _write_parts(self, parts: list[bytes]) -> None:
        """Write the body made of ``parts`` into the older copy, making it the newest.
        The CRC and the writes release the GIL for long parts: this may run in a thread
        (manifestwriter.py)."""
        self.adopted = self.unmarked = b""  # no longer the newest
        self.generation += 1
        slot = SLOTS[self.generation % 2]
        length = crc = 0
        for part in parts:
            length += len(part)
            crc = zlib.crc32(part, crc)
        fd = self.fds[slot].fileno()
        os.ftruncate(fd, _HEADER.size + length)
        iov = [_HEADER.pack(MAGIC, self.generation, length, crc), *parts]
        offset = 0
        for start in range(0, len(iov), _IOV_MAX):
            batch = iov[start:start + _IOV_MAX]
            want = sum(map(len, batch))
            done = os.pwritev(fd, batch, offset)
            if done != want:  # a memfd takes all or fails; never a torn copy called whole
                raise OSError(f"{slot}: short write ({done} of {want} bytes)")
            offset += done

    def close(self) -> None:
        for fd in self.fds.values():
            fd.close()


def _mark(left: str) -> bytes:
    return b',"left":"%s"' % left.encode() if left else b""


def _read(fd: int) -> tuple[int, dict, bytes]:
    """(generation, content, body) of one copy; ManifestError if it is unusable."""
    try:
        return _parse(fd)
    except OSError as exc:
        raise ManifestError(f"cannot be read: {exc}") from None


def _generation(fd: int) -> int:
    """One copy's generation, from its header alone (ManifestError as _read)."""
    try:
        return _header(fd)[0]
    except OSError as exc:
        raise ManifestError(f"cannot be read: {exc}") from None


def _header(fd: int) -> tuple[int, int, int]:
    head = os.pread(fd, _HEADER.size, 0)
    if len(head) < _HEADER.size:
        raise ManifestError("empty")
    magic, gen, length, crc = _HEADER.unpack(head)
    if magic != MAGIC:
        raise ManifestError(f"bad magic {magic!r}")
    return gen, length, crc


def _parse(fd: int) -> tuple[int, dict, bytes]:
    gen, length, crc = _header(fd)
    body = os.pread(fd, length, _HEADER.size)
    if len(body) != length or zlib.crc32(body) != crc:
        raise ManifestError(f"generation {gen} is torn (length or CRC mismatch)")
    try:
        content = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"generation {gen}: invalid JSON: {exc}") from None
    if not isinstance(content, dict) or content.get("version") != VERSION:
        raise ManifestError(f"generation {gen}: unsupported manifest version "
                            f"{content.get('version') if isinstance(content, dict) else '?'}")
    if not isinstance(content.get("sessions", []), list):
        raise ManifestError(f"generation {gen}: its sessions are not a list")
    return gen, content, body
