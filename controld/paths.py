"""Client paths, resolved inside an agent's working directory and nowhere else.

A client names files by paths relative to the agent's working directory (its "root").
``check`` refuses what is wrong on its face: absolute paths, ``..``, NUL bytes, paths
longer than PATH_MAX.  That alone cannot stop a symlink (or a symlinked directory on the
way) that points out of the root, nor a directory swapped for such a symlink between a
check and the open.  So nothing is ever opened by name: ``Root`` holds an ``O_PATH`` fd
of the root, every open goes through ``openat2(2)`` relative to it with
``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` (the kernel refuses, atomically, any
resolution that would leave the root), and the caller works on the fd it gets back.
"""

from __future__ import annotations

import ctypes
import errno
import os

MAX_PATH = 4096  # bytes, the kernel's PATH_MAX; also keeps a reply that echoes a path small

# openat2(2): the syscall number is the same on x86_64 and aarch64 (the unified table).
_SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class PathError(Exception):
    """A client path that names something outside the root, or is not a valid path."""

    code = "path"


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_have_openat2 = True  # cleared once the kernel says ENOSYS


def show(path) -> str:
    """``path`` for an error message: quoted, and cut so a hostile path cannot bloat it."""
    text = repr(path)
    return text if len(text) <= 200 else text[:197] + "..."


def check(path) -> str:
    """The normalised form of a client's relative path ("." for the root itself).

    Raises PathError for anything that is not a plain relative path: the kernel would
    refuse most of these too, but refusing them here gives the client a clear reason.
    """
    if not isinstance(path, str) or not path:
        raise PathError(f"path {show(path)}: a path must be a non-empty string")
    if "\0" in path:
        raise PathError(f"path {show(path)}: contains a NUL byte")
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        raise PathError(f"path {show(path)}: not encodable as a file name") from None
    if len(raw) > MAX_PATH:
        raise PathError(f"path {show(path)}: longer than {MAX_PATH} bytes")
    if path.startswith("/"):
        raise PathError(f"path {show(path)}: absolute paths are refused; "
                        "paths are relative to the agent's working directory")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathError(f"path {show(path)}: '..' is refused; "
                        "paths may not leave the agent's working directory")
    return "/".join(parts) or "."


def in_git_dir(path: str) -> bool:
    """Whether a normalised relative path is a ``.git`` directory or inside one."""
    return any(p.lower() == ".git" for p in path.split("/"))


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """The raw syscall; raises OSError (ENOSYS where the kernel predates 5.6)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    while True:
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd),
                           ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                           ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        # EAGAIN: a concurrent rename raced the ".." checks; the kernel asks for a retry.
        if err not in (errno.EINTR, errno.EAGAIN):
            raise OSError(err, os.strerror(err), path)


class Root:
    """An agent's working directory, held open; every client path is opened beneath it."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        """Close the root's fd; idempotent (the fd is forgotten first, so never closed twice)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> "Root":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self, rel: str, flags: int, mode: int = 0, *, no_symlinks: bool = False) -> int:
        """An fd of ``rel`` (already through ``check``), opened beneath the root.

        Symlinks inside the root are followed unless ``no_symlinks``; any resolution
        that would leave the root raises PathError.
        """
        global _have_openat2
        resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
        if no_symlinks:
            resolve |= RESOLVE_NO_SYMLINKS
        if _have_openat2:
            try:
                return openat2(self.fd, rel, flags, resolve, mode)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise PathError(f"path {show(rel)}: leads outside the agent's "
                                    "working directory") from None
                if exc.errno == errno.ELOOP:
                    raise PathError(f"path {show(rel)}: goes through a symlink that is "
                                    "refused here, or too many of them") from None
                if exc.errno != errno.ENOSYS:
                    raise
                _have_openat2 = False
        return self._open_checked(rel, flags, mode, no_symlinks)

    def _open_checked(self, rel: str, flags: int, mode: int, no_symlinks: bool) -> int:
        # Kernels before 5.6 have no openat2: check the resolved path, then open it by
        # name. A symlink swapped in between the two can still escape; this fallback is
        # weaker than the kernel's check, which is why openat2 is preferred.
        top = os.path.realpath(f"/proc/self/fd/{self.fd}")
        target = os.path.join(top, rel)
        real = os.path.realpath(target)
        if real != top and not real.startswith(top.rstrip("/") + "/"):
            raise PathError(f"path {show(rel)}: leads outside the agent's working directory")
        if no_symlinks and os.path.normpath(target) != real:
            raise PathError(f"path {show(rel)}: goes through a symlink that is refused here")
        return os.open(real, flags | os.O_CLOEXEC, mode)

    def relative(self, fd: int) -> str:
        """Where ``fd`` really is, relative to the root ("." for the root itself).

        Read from /proc, so symlinks are resolved: used to apply rules (no writes into
        .git) to the file a path really names, not to the name the client used.
        """
        top = os.readlink(f"/proc/self/fd/{self.fd}")
        real = os.readlink(f"/proc/self/fd/{fd}")
        if real == top:
            return "."
        prefix = top.rstrip("/") + "/"
        if not real.startswith(prefix):
            raise PathError(f"{real!r} is no longer inside the agent's working directory")
        return real[len(prefix):]


def reopen(fd: int, flags: int) -> int:
    """A new open file description for the file behind ``fd`` (typically an O_PATH fd).

    Goes through /proc's link to the very inode ``fd`` holds, so the file cannot be
    swapped between the check done on ``fd`` and this open.
    """
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)
