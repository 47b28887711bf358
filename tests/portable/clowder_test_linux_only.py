"""The names of the standard library that Linux has and macOS does not, and a switch
that takes them away from every clowderctl the tests run.

clowderctl must run on macOS (`clowderctl --host box attach` from a laptop): it may
use none of these names directly (tests/test_portable.py walks its modules), and
`make test CLOWDER_TEST_NO_LINUX_ONLY=1 TESTS=...` runs the client tests with them
deleted from the os, socket, select, selectors, signal and fcntl modules of each
clowderctl process (tests/conftest.py installs a .pth file in the venv for the run;
it calls ``strip_if_client`` in every process of the venv, which acts only in
clowderctl: the daemons are Linux-only and keep everything).

Each name is marked "Availability: Linux" in Python's documentation, or is a Linux
system call or constant that macOS lacks (pipe2, SOCK_CLOEXEC, SOCK_NONBLOCK,
real-time signals, sigtimedwait).
"""

from __future__ import annotations

import os
import sys

LINUX_ONLY: dict[str, tuple[str, ...]] = {
    "os": (
        "pipe2", "memfd_create", "MFD_CLOEXEC", "MFD_ALLOW_SEALING", "MFD_HUGETLB",
        "eventfd", "eventfd_read", "eventfd_write", "EFD_CLOEXEC", "EFD_NONBLOCK",
        "EFD_SEMAPHORE", "pidfd_open", "P_PIDFD", "splice", "SPLICE_F_MOVE",
        "SPLICE_F_NONBLOCK", "SPLICE_F_MORE", "copy_file_range", "sched_getaffinity",
        "sched_setaffinity", "getresuid", "getresgid", "setresuid", "setresgid",
        "posix_fadvise", "posix_fallocate", "getxattr", "setxattr", "listxattr",
        "removexattr", "O_PATH", "O_TMPFILE", "O_DIRECT", "O_NOATIME", "unshare",
        "setns", "getrandom", "GRND_NONBLOCK", "GRND_RANDOM", "RWF_NOWAIT",
        "RWF_HIPRI", "RWF_APPEND", "RWF_DSYNC", "RWF_SYNC",
    ),
    "socket": (
        "SOCK_CLOEXEC", "SOCK_NONBLOCK", "SO_PEERCRED", "SO_PASSCRED",
        "SCM_CREDENTIALS", "SO_PEERSEC", "SO_BINDTODEVICE", "SO_MARK", "AF_NETLINK",
        "AF_PACKET", "AF_ALG", "AF_VSOCK", "MSG_CMSG_CLOEXEC", "TCP_USER_TIMEOUT",
    ),
    "select": (
        "epoll", "EPOLLIN", "EPOLLOUT", "EPOLLPRI", "EPOLLERR", "EPOLLHUP", "EPOLLET",
        "EPOLLONESHOT", "EPOLLEXCLUSIVE", "EPOLLRDHUP", "EPOLL_CLOEXEC",
    ),
    "selectors": ("EpollSelector",),
    "signal": (
        "pidfd_send_signal", "SIGRTMIN", "SIGRTMAX", "SIGPWR", "SIGSTKFLT",
        "sigtimedwait", "sigwaitinfo",
    ),
    "fcntl": (
        "F_SETPIPE_SZ", "F_GETPIPE_SZ", "F_ADD_SEALS", "F_GET_SEALS", "F_SEAL_SEAL",
        "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE", "F_OFD_GETLK", "F_OFD_SETLK",
        "F_OFD_SETLKW", "F_NOTIFY", "F_SETLEASE", "F_GETLEASE",
    ),
}

# Paths only Linux has: the client must not read them.
LINUX_PATHS = ("/proc/", "/sys/")

ENV = "CLOWDER_TEST_NO_LINUX_ONLY"


def is_client(argv: list[str]) -> bool:
    """Whether ``argv`` (sys.orig_argv) runs clowderctl: ``python -m ctl ...`` or the
    installed ``clowderctl`` script."""
    args = argv[1:]
    if args[:2] == ["-m", "ctl"]:
        return True
    return bool(args) and os.path.basename(args[0]) == "clowderctl"


def strip() -> list[str]:
    """Delete every LINUX_ONLY name from its module (imported for that): the names
    deleted."""
    import importlib
    gone = []
    for module_name, names in LINUX_ONLY.items():
        module = importlib.import_module(module_name)
        for name in names:
            if hasattr(module, name):
                delattr(module, name)
                gone.append(f"{module_name}.{name}")
    return gone


def strip_if_client(log: str | None = None) -> None:
    """In a clowderctl process only: strip, and note the process in ``log``."""
    if not is_client(list(getattr(sys, "orig_argv", []))):
        return
    gone = strip()
    if log:
        line = f"{os.getpid()} {' '.join(sys.orig_argv[1:])[:200]}: -{len(gone)}\n"
        try:  # no O_CREAT: install() made it writable by the test users
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        except OSError:
            return  # the stripping is what counts
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)


def install(site_dir: str, log: str) -> str:
    """Write the .pth that calls strip_if_client in every process of this interpreter's
    venv, and an empty ``log`` every user may append to; the .pth's path (remove it
    after the run)."""
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.dirname(log), exist_ok=True)
    os.chmod(os.path.dirname(log), 0o755)
    with open(log, "w"):
        pass
    os.chmod(log, 0o666)
    path = os.path.join(site_dir, "clowder-test-no-linux-only.pth")
    with open(path, "w") as f:
        # site.py adds a line that is a directory to sys.path, and runs a line that
        # starts with "import".
        f.write(f"{here}\n")
        f.write(f"import clowder_test_linux_only as _m; _m.strip_if_client({log!r})\n")
    return path
