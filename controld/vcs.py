"""The VCS service: status, diff and log of an agent's git worktree, read-only.

One VcsService serves one "vcs" stream.  git runs with a fixed argv (no shell, no option
chosen by the client; a client path only ever follows ``--`` as a ``:(literal)`` pathspec,
after paths.check and a resolution beneath the root).  A worktree's own configuration
must not make git run a command: ``core.fsmonitor=false``, ``core.hooksPath=/dev/null``,
``log.showSignature=false``, ``--no-ext-diff`` (diff.external, diff drivers),
``--no-textconv``, no pager; ``filter.*`` drivers (the clean filter git status and diff
run) are read from the configuration and emptied through GIT_CONFIG_KEY_n.  The environment is
rebuilt from nothing (no GIT_* of the daemon), with GIT_CONFIG_NOSYSTEM=1.  When the
daemon runs as root, git runs as the owner of the worktree, so whatever git does is done
with that user's rights.  Each run is killed after TIMEOUT seconds, its output is bounded,
and status and diff are limited to the agent's directory (``-- .``), their paths
relative to it, like the file service's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import signal

from ptyhostd import protocol

from . import paths
from .files import FileError, error_for, resolve_root

TIMEOUT = 10.0  # seconds one git command may take
MAX_OUTPUT = 8 << 20  # bytes of status or log output read before the rest is cut
MAX_ENTRIES = 10_000
MAX_LOG = 1000
MAX_PATH = 64 * 1024
_ENTRY_BYTES = protocol.MAX_DATA - 64 * 1024  # the entries' JSON in one report
_GIT = ("git", "--no-pager", "--no-optional-locks", "-c", "core.fsmonitor=false",
        "-c", "core.hooksPath=/dev/null", "-c", "log.showSignature=false",
        "-c", "core.pager=cat", "-c", "protocol.allow=never")

# A child of clowder-control's logger, so its journal handler serves these lines too.
log = logging.getLogger("clowder-control.vcs")


class VcsService:
    """One per "vcs" stream."""

    def __init__(self, root_of, send):
        self._root_of = root_of
        self._send = send
        self._procs: set[asyncio.subprocess.Process] = set()
        self._lock = asyncio.Lock()  # one request at a time: answers go out in order

    async def handle(self, msg: protocol.Message) -> None:
        """Answer one request with one message: a VcsReport or a non-fatal Error."""
        async with self._lock:
            try:
                reply = await self._answer(msg)
            except Exception as exc:
                reply = error_for(exc, type(msg).__name__)
                if not isinstance(exc, (FileError, paths.PathError, OSError)):
                    agent = getattr(msg, "agent", "")
                    log.exception("vcs service: %s", type(msg).__name__,
                                  extra={"CLOWDER_CAUSE": "vcs-internal",
                                         "CLOWDER_AGENT": agent if isinstance(agent, str)
                                         else ""})
            await self._send(reply)

    async def close(self) -> None:
        """Kill any git still running for this stream; idempotent."""
        for proc in list(self._procs):
            _kill(proc)

    async def _answer(self, msg) -> protocol.VcsReport:
        if not isinstance(msg, (protocol.VcsStatus, protocol.VcsDiff, protocol.VcsLog)):
            raise FileError("bad-request", f"the vcs service does not answer "
                                           f"{type(msg).__name__}")
        pathspec = None
        if isinstance(msg, protocol.VcsDiff) and msg.path != "":
            pathspec = paths.check(msg.path)
        root = await resolve_root(self._root_of, msg.agent)
        if pathspec is not None:
            await asyncio.to_thread(_check_beneath, root, pathspec)
        git = _Git(root, self._procs)
        await git.prepare()
        if isinstance(msg, protocol.VcsStatus):
            # Status names paths from the top of the repository; the agent's directory
            # may be below it, and the client's paths are relative to that directory.
            top, _ = await git.run(["rev-parse", "--show-prefix"], MAX_PATH)
            out, _ = await git.run(["status", "--porcelain=v2", "--branch", "-z",
                                    "--ignore-submodules=dirty", "--", "."], MAX_OUTPUT)
            info, entries = parse_status(out, os.fsdecode(top.rstrip(b"\n")))
            entries, cut = _bounded(entries)
            return protocol.VcsReport(kind="status", info=info, entries=entries,
                                      truncated=cut)
        if isinstance(msg, protocol.VcsDiff):
            argv = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", "--relative",
                    "--ignore-submodules=dirty"]
            if msg.staged:
                argv.append("--cached")
            argv += ["--", f":(literal){pathspec}" if pathspec else "."]
            out, cut = await git.run(argv, protocol.MAX_DATA)
            return protocol.VcsReport(kind="diff", data=out, truncated=cut)
        limit = max(1, min(MAX_LOG, msg.limit))
        out, _ = await git.run(["log", f"-n{limit}", "-z", "--no-show-signature",
                                "--format=%H%x00%an%x00%aI%x00%s"], MAX_OUTPUT,
                               no_commits_ok=True)
        entries, cut = _bounded(parse_log(out))
        return protocol.VcsReport(kind="log", entries=entries, truncated=cut)


def _check_beneath(root: str, rel: str) -> None:
    """Refuse a diff path that resolves outside the root; a path that does not exist
    (a deleted file has a diff too) is fine as far as its existing part goes."""
    with paths.Root(root) as top:
        probe = rel
        while True:
            try:
                os.close(top.open(probe, os.O_PATH))
                return
            except FileNotFoundError:
                if "/" not in probe:
                    return
                probe = probe.rpartition("/")[0]


def _bounded(entries: list) -> tuple[list, bool]:
    """The first entries that fit in one report, and whether any were cut."""
    used = 0
    for i, entry in enumerate(entries):
        used += len(json.dumps(entry, separators=(",", ":"))) + 1
        if i >= MAX_ENTRIES or used > _ENTRY_BYTES:
            return entries[:i], True
    return entries, False


class _Git:
    """git for one request in one worktree: the argv, the environment and the user."""

    def __init__(self, root: str, procs: set):
        self.root = root
        self._procs = procs
        self._user: dict = {}
        self._env: dict = {}

    async def prepare(self) -> None:
        """Decide the user and environment, and find the filter drivers to disable."""
        st = await asyncio.to_thread(os.stat, self.root)
        uid = os.geteuid()
        if uid == 0 and st.st_uid != 0:
            uid = st.st_uid
            self._user = {"user": st.st_uid, "group": st.st_gid, "extra_groups": []}
        try:
            home = pwd.getpwuid(uid).pw_dir
        except KeyError:
            home = "/"
        self._env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
                     "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
                     "GIT_PAGER": "cat", "PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0"}
        # Reading configuration runs nothing; it names the filters whose commands
        # status and diff would otherwise run on worktree files.
        out, _ = await self.run(["config", "--name-only", "-z", "--get-regexp",
                                 r"^filter\."], 1 << 20, config_probe=True)
        names = {k.split(".", 1)[1].rpartition(".")[0]
                 for k in out.decode("utf-8", "surrogateescape").split("\0") if "." in k}
        # Through GIT_CONFIG_KEY_n rather than -c: a driver's name may hold a "=".
        overrides = [(f"filter.{name}.{key}", "") for name in sorted(names)
                     for key in ("clean", "smudge", "process")]
        overrides += [(f"filter.{name}.required", "false") for name in sorted(names)]
        for n, (key, value) in enumerate(overrides):
            self._env[f"GIT_CONFIG_KEY_{n}"] = key
            self._env[f"GIT_CONFIG_VALUE_{n}"] = value
        self._env["GIT_CONFIG_COUNT"] = str(len(overrides))

    async def run(self, args: list, limit: int, *, no_commits_ok: bool = False,
                  config_probe: bool = False) -> tuple[bytes, bool]:
        """(stdout up to ``limit`` bytes, whether it was cut); raises FileError."""
        argv = [*_GIT, "-C", self.root, *args]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._env, start_new_session=True,
                **self._user)
        except FileNotFoundError:
            raise FileError("no-git", "git is not installed on this host "
                                      "(the vcs service needs it)") from None
        self._procs.add(proc)
        try:
            (out, cut), (err, _) = await asyncio.wait_for(asyncio.gather(
                _drain(proc, proc.stdout, limit), _drain(None, proc.stderr, 64 * 1024)),
                TIMEOUT)
            await asyncio.wait_for(proc.wait(), TIMEOUT)
        except asyncio.TimeoutError:
            raise FileError("timeout", f"git {args[0]} in {self.root} took longer than "
                                       f"{TIMEOUT:g} s and was killed") from None
        finally:
            if proc.returncode is None:
                _kill(proc)
                await proc.wait()
            self._procs.discard(proc)
        if cut or proc.returncode == 0:
            return bytes(out), cut
        if config_probe and proc.returncode == 1:
            return b"", False  # no key matched
        text = err.decode("utf-8", "replace").strip()
        if no_commits_ok and "does not have any commits" in text:
            return b"", False
        if "not a git repository" in text or "must be run in a work tree" in text:
            raise FileError("not-a-repo", f"{self.root} is not in a git worktree")
        first = text.splitlines()[0] if text else f"exit status {proc.returncode}"
        raise FileError("git-error", f"git {args[0]} in {self.root} failed: {first[:300]}")


async def _drain(proc, stream, limit: int) -> tuple[bytearray, bool]:
    """Read ``stream`` to its end, keeping ``limit`` bytes; past that git (``proc``) is
    killed, or, without one (stderr), the rest is read and thrown away."""
    buf = bytearray()
    cut = False
    while True:
        chunk = await stream.read(64 * 1024)
        if not chunk:
            return buf, cut
        if not cut:
            buf += chunk
        if len(buf) > limit:
            del buf[limit:]
            cut = True
            if proc is not None:
                _kill(proc)  # more would be thrown away: no need to let git make it
                return buf, cut


def _kill(proc) -> None:
    """Kill git and anything it started (it leads its own session)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def parse_status(out: bytes, prefix: str = "") -> tuple[dict, list]:
    """info and entries from ``git status --porcelain=v2 --branch -z``, the paths made
    relative to ``prefix`` (the agent's directory below the top of the repository)."""
    info = {"branch": None, "upstream": None, "ahead": 0, "behind": 0, "oid": None}
    entries = []
    records = out.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if rec.startswith("# "):
            key, _, value = rec[2:].partition(" ")
            if key == "branch.oid":
                info["oid"] = None if value == "(initial)" else value
            elif key == "branch.head":
                info["branch"] = None if value == "(detached)" else value
            elif key == "branch.upstream":
                info["upstream"] = value
            elif key == "branch.ab":
                ahead, _, behind = value.partition(" ")
                info["ahead"], info["behind"] = _count(ahead), _count(behind)
        elif rec[:2] in ("1 ", "2 ", "u "):
            fields = rec.split(" ", {"1": 8, "2": 9, "u": 10}[rec[0]])
            if len(fields) < 3:
                continue
            entry = {"path": _below(fields[-1], prefix), "index": fields[1][0],
                     "worktree": fields[1][1:2]}
            if rec[0] == "2" and i < len(records):
                # -z: a rename's source is the next record (it may come from elsewhere)
                entry["orig"] = _below(records[i], prefix)
                i += 1
            entries.append(entry)
        elif rec[:2] in ("? ", "! "):
            entries.append({"path": _below(rec[2:], prefix), "index": rec[0],
                            "worktree": rec[0]})
    return info, entries


def _below(path: str, prefix: str) -> str:
    if path.startswith(prefix):
        return path[len(prefix):]
    return os.path.relpath(path, prefix)


def _count(text: str) -> int:
    try:
        return abs(int(text))
    except ValueError:
        return 0


def parse_log(out: bytes) -> list:
    """Commits from ``git log -z --format=%H%x00%an%x00%aI%x00%s``."""
    fields = out.decode("utf-8", "replace").split("\0")
    commits = []
    for i in range(0, len(fields) - 3, 4):
        commit, author, date, subject = fields[i:i + 4]
        commits.append({"commit": commit.strip("\n"), "author": author, "date": date,
                        "subject": subject})
    return commits
