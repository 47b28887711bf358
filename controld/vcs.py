"""The VCS service: status, diff and log of an agent's git worktree, read-only.

One VcsService serves one "vcs" stream.  git runs with a fixed argv (no shell, no option
chosen by the client; a client path only ever follows ``--`` as a ``:(literal)`` pathspec,
after paths.check and a resolution beneath the root).  A worktree's own configuration,
whatever its size and wherever it includes from, must not make git run a command
(docs/design.md, "What git could run", lists every way and how each is closed): every
setting that names a command is overridden at command-line scope (``_OVERRIDES``), no
protocol is allowed (``GIT_ALLOW_PROTOCOL`` beats a repository's
``protocol.<name>.allow``: no lazy fetch, no ssh, no upload-pack command), diffs run with
``--no-ext-diff --no-textconv``, and the ``filter.*`` drivers, which have no switch, are
asked of git itself (``git config --list``, which runs nothing, over the whole
configuration with its includes, read to its end however long) and each is emptied; a
configuration whose drivers cannot all be emptied is refused.  The environment is rebuilt
from nothing (no GIT_* of the daemon), with no system or global configuration.  When the
daemon runs as root, git runs as the owner of the worktree (uid, primary group and
groups from the password database), so whatever git does is done with that user's
rights.  Each run is killed after TIMEOUT seconds, its output is bounded, and status and
diff are limited to the agent's directory (``-- .``), their paths relative to it, like
the file service's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import signal

import clowder_wire as protocol

from . import paths
from .files import FileError, error_for, resolve_root

TIMEOUT = 10.0  # seconds one git command may take
MAX_OUTPUT = 8 << 20  # bytes of status or log output read before the rest is cut
MAX_ENTRIES = 10_000
MAX_LOG = 1000
MAX_PATH = 64 * 1024
_ENTRY_BYTES = protocol.MAX_DATA - 64 * 1024  # the entries' JSON in one report
MAX_FILTER_BYTES = 16 * 1024  # filter driver names' bytes the service will empty
MAX_KEY = 4096  # a configuration key longer than this is never a driver we can empty
NOGROUP = 65534
_GIT = ("git", "--no-pager", "--no-optional-locks")
# Settings that name a command or could lead to one, at command-line scope (it beats the
# repository's, its includes' and the worktree's).  Closed by other means, and so not
# here: filter.<driver>.* (below, by name), diff.<driver>.command and diff.external
# (--no-ext-diff), diff.<driver>.textconv (--no-textconv), remote.<name>.uploadpack,
# core.sshCommand, core.gitProxy and remote helpers (no protocol is allowed).
_OVERRIDES = (
    ("core.fsmonitor", "false"), ("core.hooksPath", "/dev/null"), ("core.pager", "cat"),
    ("core.sshCommand", "false"), ("core.askPass", "false"),
    ("core.alternateRefsCommand", ""), ("credential.helper", ""),
    ("diff.external", ""), ("diff.submodule", "short"), ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"), ("log.showSignature", "false"),
    ("gpg.program", "false"), ("gpg.ssh.program", "false"), ("gpg.x509.program", "false"),
    ("protocol.allow", "never"), ("gc.auto", "0"), ("maintenance.auto", "false"))

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
                    "--ignore-submodules=dirty", "--submodule=short"]
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
        home = "/"
        if uid == 0 and st.st_uid != 0:
            # The owner's own groups, not the directory's group: root may have given
            # the directory a group its owner is not in.
            uid = st.st_uid
            try:
                pw = pwd.getpwuid(uid)
                gid, groups, home = pw.pw_gid, os.getgrouplist(pw.pw_name, pw.pw_gid), \
                    pw.pw_dir
            except KeyError:
                gid, groups = NOGROUP, []
            self._user = {"user": uid, "group": gid, "extra_groups": groups}
        else:
            try:
                home = pwd.getpwuid(uid).pw_dir
            except KeyError:
                pass
        self._env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
                     "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1",
                     "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
                     # An empty list: no transport at all, whatever protocol.<name>.allow
                     # the repository sets (a partial clone's lazy fetch stops here).
                     "GIT_ALLOW_PROTOCOL": "", "GIT_NO_LAZY_FETCH": "1",
                     "GIT_SSH_COMMAND": "false", "GIT_ASKPASS": "false",
                     "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "PAGER": "cat",
                     "GIT_OPTIONAL_LOCKS": "0"}
        self._set_config(_OVERRIDES)
        names = await self._filter_drivers()
        # Through GIT_CONFIG_KEY_n rather than -c: a driver's name may hold a "=".
        self._set_config([*_OVERRIDES,
                          *[(f"filter.{name}.{key}", "") for name in sorted(names)
                            for key in ("clean", "smudge", "process")],
                          *[(f"filter.{name}.required", "false") for name in sorted(names)]])

    def _set_config(self, overrides) -> None:
        for key in [k for k in self._env if k.startswith("GIT_CONFIG_KEY_")
                    or k.startswith("GIT_CONFIG_VALUE_")]:
            del self._env[key]
        for n, (key, value) in enumerate(overrides):
            self._env[f"GIT_CONFIG_KEY_{n}"] = key
            self._env[f"GIT_CONFIG_VALUE_{n}"] = value
        self._env["GIT_CONFIG_COUNT"] = str(len(overrides))

    async def _filter_drivers(self) -> set[str]:
        """The names of every filter driver the whole configuration defines, asked of
        git (reading configuration runs nothing) and read to the end of its answer,
        however long, keeping only the names; FileError("unsafe-config") when they are
        too many or too long to empty."""
        scan = _DriverScan(self.root)
        await self.run(["config", "--list", "--name-only", "-z"], 0, sink=scan.feed)
        scan.feed(b"\0")  # a last key without its terminator
        return scan.names

    async def run(self, args: list, limit: int, *, no_commits_ok: bool = False,
                  sink=None) -> tuple[bytes, bool]:
        """(stdout up to ``limit`` bytes, whether it was cut); raises FileError.  With
        ``sink``, all of stdout goes to it instead, chunk by chunk."""
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
                _drain(proc, proc.stdout, limit, sink),
                _drain(None, proc.stderr, 64 * 1024)),
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
        text = err.decode("utf-8", "replace").strip()
        if no_commits_ok and "does not have any commits" in text:
            return b"", False
        if "not a git repository" in text or "must be run in a work tree" in text:
            raise FileError("not-a-repo", f"{self.root} is not in a git worktree")
        first = text.splitlines()[0] if text else f"exit status {proc.returncode}"
        raise FileError("git-error", f"git {args[0]} in {self.root} failed: {first[:300]}")


async def _drain(proc, stream, limit: int, sink=None) -> tuple[bytearray, bool]:
    """Read ``stream`` to its end, keeping ``limit`` bytes; past that git (``proc``) is
    killed, or, without one (stderr), the rest is read and thrown away.  With ``sink``
    every chunk goes to it and nothing is kept."""
    buf = bytearray()
    cut = False
    while True:
        chunk = await stream.read(64 * 1024)
        if not chunk:
            return buf, cut
        if sink is not None:
            sink(chunk)
            continue
        if not cut:
            buf += chunk
        if len(buf) > limit:
            del buf[limit:]
            cut = True
            if proc is not None:
                _kill(proc)  # more would be thrown away: no need to let git make it
                return buf, cut


class _DriverScan:
    """Filter driver names from ``git config --list --name-only -z`` fed in chunks,
    holding at most MAX_KEY bytes of a key and MAX_FILTER_BYTES of names."""

    def __init__(self, root: str):
        self.root = root
        self.names: set[str] = set()
        self._size = 0
        self._part = bytearray()
        self._long = False  # the current key is already longer than MAX_KEY

    def feed(self, chunk: bytes) -> None:
        *keys, rest = chunk.split(b"\0")
        for key in keys:
            self._part += key
            self._key(bytes(self._part))
            self._part.clear()
            self._long = False
        self._part += rest
        if len(self._part) > MAX_KEY:
            self._long = True
            del self._part[MAX_KEY:]

    def _key(self, key: bytes) -> None:
        if not key.startswith(b"filter."):
            return
        if self._long:
            raise self._refuse(f"a filter driver name longer than {MAX_KEY} bytes")
        name = os.fsdecode(key[len(b"filter."):]).rpartition(".")[0]
        if name and name not in self.names:
            self.names.add(name)
            self._size += len(name) + 16
            if self._size > MAX_FILTER_BYTES:
                raise self._refuse(f"filter drivers whose names add up to more than "
                                   f"{MAX_FILTER_BYTES} bytes")

    def _refuse(self, what: str) -> FileError:
        return FileError("unsafe-config", f"{self.root}: the repository's configuration "
                         f"defines {what}; the vcs service cannot disable them all, so "
                         "it does not run git there")


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
