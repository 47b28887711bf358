"""The file service: list, read, write and watch files of an agent's working directory.

One FileService serves one "file" stream.  Every path is resolved beneath the agent's
working directory by paths.Root (openat2 with RESOLVE_BENEATH), and the operation is
done on the fd that comes back, never on the name again.  Reads are bounded by
protocol.MAX_DATA per request, listings by MAX_ENTRIES (and by what fits in a frame),
writes are atomic (a temporary file beside the target, fsync, rename) and never go into
``.git``.  The filesystem work runs in a thread so a slow disk stalls no other stream.
Every failure is answered with a non-fatal Error naming the path and what failed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import secrets
import stat

import clowder_wire as protocol

from . import paths
from .watch import Watch

MAX_ENTRIES = 10_000
_LISTING_BYTES = protocol.MAX_DATA - 64 * 1024  # the entries' JSON, leaving room for the rest

# A child of clowder-control's logger, so its journal handler serves these lines too.
log = logging.getLogger("clowder-control.files")


class FileError(Exception):
    """A request that cannot be served; ``code`` is the Error code the client gets."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


async def resolve_root(root_of, agent) -> str:
    """The agent's working directory from ``root_of``, or FileError (no-agent, permission)."""
    if not isinstance(agent, str):
        raise FileError("bad-request", f"agent must be a string, not {type(agent).__name__}")
    try:
        root = root_of(agent)
        if inspect.isawaitable(root):
            root = await root
    except KeyError:
        raise FileError("no-agent", f"no agent named {paths.show(agent)}") from None
    except PermissionError as exc:
        raise FileError("permission", f"agent {paths.show(agent)}: {exc or 'not allowed'}") \
            from None
    return root


def error_for(exc: BaseException, what: str) -> protocol.Error:
    """The non-fatal Error a client gets for ``exc``, raised while doing ``what``."""
    if isinstance(exc, (FileError, paths.PathError)):
        return protocol.Error(message=str(exc), code=exc.code)
    codes = {FileNotFoundError: "not-found", PermissionError: "permission",
             NotADirectoryError: "not-a-directory", IsADirectoryError: "not-a-file"}
    if isinstance(exc, OSError):
        code = next((c for t, c in codes.items() if isinstance(exc, t)), "io")
        return protocol.Error(message=f"{what}: {exc.strerror or exc}", code=code)
    return protocol.Error(message=f"{what}: internal error ({type(exc).__name__})",
                          code="internal")


class FileService:
    """One per "file" stream."""

    def __init__(self, root_of, send):
        self._root_of = root_of
        self._send = send
        self._watch: Watch | None = None
        self._closed = False
        self._lock = asyncio.Lock()  # one request at a time: answers go out in order

    async def handle(self, msg: protocol.Message) -> None:
        """Answer one request with one message (a FileWatch's events follow later)."""
        async with self._lock:
            watch = None
            try:
                reply, watch = await self._answer(msg)
            except Exception as exc:
                reply = error_for(exc, _describe(msg))
                if not isinstance(exc, (FileError, paths.PathError, OSError)):
                    log.exception("file service: %s", _describe(msg),
                                  extra={"CLOWDER_CAUSE": "file-internal",
                                         "CLOWDER_AGENT": _agent(msg)})
            try:
                await self._send(reply)
            except BaseException:
                if watch is not None:
                    await watch.close()
                raise
            if watch is not None:
                if self._closed:  # closed while the Ok was being sent
                    await watch.close()
                    return
                self._watch = watch
                watch.run()

    async def close(self) -> None:
        """Stop the watch, if any; idempotent."""
        self._closed = True
        watch, self._watch = self._watch, None
        if watch is not None:
            await watch.close()

    async def _answer(self, msg):
        """(reply, new watch or None) for ``msg``; raises FileError, PathError, OSError."""
        if isinstance(msg, protocol.FileUnwatch):
            await self._stop_watch()
            return protocol.Ok(), None
        if not isinstance(msg, (protocol.FileList, protocol.FileRead, protocol.FileWrite,
                                protocol.FileWatch)):
            raise FileError("bad-request",
                            f"the file service does not answer {type(msg).__name__}")
        rel = paths.check(msg.path)
        top = await resolve_root(self._root_of, msg.agent)
        if isinstance(msg, protocol.FileWatch):
            await self._stop_watch()  # a new watch replaces the old one
            return protocol.Ok(), await self._start_watch(top, rel)
        work = {protocol.FileList: _list, protocol.FileRead: _read,
                protocol.FileWrite: _write}[type(msg)]
        reply = await asyncio.to_thread(work, top, rel, msg)
        if isinstance(msg, protocol.FileWrite):
            # A change to the agent's tree made by a client, not by the agent.
            log.info("agent %s: file %s written (%d bytes) through the file service",
                     msg.agent, paths.show(rel), len(msg.data),
                     extra={"CLOWDER_CAUSE": "file-write", "CLOWDER_AGENT": msg.agent})
        return reply, None

    async def _stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            await watch.close()

    async def _start_watch(self, top: str, rel: str) -> Watch:
        root = paths.Root(top)
        watch = Watch(root, rel, self._send)
        try:
            await asyncio.to_thread(watch.start)
        except BaseException:
            await watch.close()
            raise
        if self._closed:  # closed while the tree was being walked
            await watch.close()
            raise FileError("closed", "the file stream was closed")
        return watch


def _agent(msg) -> str:
    agent = getattr(msg, "agent", "")
    return agent if isinstance(agent, str) else ""


def _describe(msg) -> str:
    path = getattr(msg, "path", None)
    name = type(msg).__name__
    return f"{name} of {paths.show(path)}" if path is not None else name


def _list(top: str, rel: str, msg: protocol.FileList) -> protocol.FileListing:
    entries, used, truncated = [], 0, False
    with paths.Root(top) as root:
        fd = root.open(rel, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed since it was read from the directory
                    item = {"name": entry.name, "type": _type_of(st.st_mode),
                            "size": st.st_size, "mtime": st.st_mtime}
                    used += len(json.dumps(item, separators=(",", ":"))) + 1
                    if len(entries) >= MAX_ENTRIES or used > _LISTING_BYTES:
                        truncated = True
                        break
                    entries.append(item)
        finally:
            os.close(fd)
    entries.sort(key=lambda e: e["name"])
    return protocol.FileListing(path=rel, entries=entries, truncated=truncated)


def _type_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "link" if stat.S_ISLNK(mode) else "other"


def _read(top: str, rel: str, msg: protocol.FileRead) -> protocol.FileData:
    if msg.offset < 0 or msg.length < 0:
        raise FileError("bad-request", f"reading {paths.show(rel)}: offset and length must "
                                       f"not be negative (got {msg.offset}, {msg.length})")
    if msg.length > protocol.MAX_DATA:
        raise FileError("too-large", f"reading {paths.show(rel)}: at most {protocol.MAX_DATA} "
                                     f"bytes per request, {msg.length} asked")
    with paths.Root(top) as root:
        pfd = root.open(rel, os.O_PATH)
        try:
            size = _regular(pfd, rel).st_size
            if msg.offset >= size or msg.length == 0:
                return protocol.FileData(path=rel, size=size, offset=msg.offset)
            # Opened for reading only now, through the fd checked above: never a FIFO
            # (which would block) nor a device (whose open can act).
            fd = paths.reopen(pfd, os.O_RDONLY | os.O_NOCTTY)
            try:
                data = os.pread(fd, min(msg.length, size - msg.offset), msg.offset)
            finally:
                os.close(fd)
        finally:
            os.close(pfd)
    return protocol.FileData(path=rel, size=size, offset=msg.offset, data=data)


def _regular(fd: int, rel: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileError("not-a-file", f"{paths.show(rel)} is not a regular file "
                                      f"(a {_type_of(st.st_mode)})")
    return st


def _write(top: str, rel: str, msg: protocol.FileWrite) -> protocol.Ok:
    if paths.in_git_dir(rel):
        raise paths.PathError(f"path {paths.show(rel)}: writing into .git is refused")
    if rel == ".":
        raise paths.PathError("path '.': the working directory itself is not a file")
    with paths.Root(top) as root:
        target, existing = _write_target(root, rel, msg.create)
        parent, _, name = target.rpartition("/")
        # The real path has no symlinks left: one appearing now is a race, and refused.
        dfd = root.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
        try:
            _replace(dfd, name, msg.data, existing)
        finally:
            os.close(dfd)
    return protocol.Ok()


def _write_target(root: paths.Root, rel: str, create: bool):
    """(real path relative to the root, its stat or None): where a write to ``rel`` lands.

    A symlink inside the root is written through to its target, and the .git rule is
    applied to where the data would really go."""
    try:
        fd = root.open(rel, os.O_PATH)
    except FileNotFoundError:
        if not create:
            raise FileError("not-found", f"{paths.show(rel)} does not exist "
                                         "(and the write was not asked to create it)")
        parent, _, name = rel.rpartition("/")
        fd = root.open(parent or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            target, existing = _join(root.relative(fd), name), None
        finally:
            os.close(fd)
    else:
        try:
            existing = _regular(fd, rel)
            target = root.relative(fd)
        finally:
            os.close(fd)
    if paths.in_git_dir(target):
        raise paths.PathError(f"path {paths.show(rel)}: it leads into .git, and writing "
                              "there is refused")
    return target, existing


def _join(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent}/{name}"


def _replace(dfd: int, name: str, data: bytes, existing) -> None:
    """Atomically make ``name`` in directory ``dfd`` hold ``data``, keeping its mode."""
    try:
        now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    if (now is None) != (existing is None) or (now and not stat.S_ISREG(now.st_mode)):
        raise FileError("conflict", f"{paths.show(name)} changed while it was being written")
    tmp = f".clowder-write-{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600 if existing else 0o666, dir_fd=dfd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if existing is not None:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
            if os.geteuid() == 0:
                # Run as root, the daemon must not leave root-owned files in a user's tree.
                owner = existing or os.fstat(dfd)
                os.fchown(fd, owner.st_uid, owner.st_gid)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    os.fsync(dfd)  # the rename itself is durable only once the directory is synced
