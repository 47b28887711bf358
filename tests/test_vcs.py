"""The VCS service (controld/vcs.py): issue 6 acceptance 5, issue 7's fuzzing.

Real git on repositories made in tmp_path; only the stream is a list.  A hostile
repository's own configuration names commands that would leave a marker file: the
service's git must never run them (and plain git, run afterwards, shows they are live).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controld import vcs
from controld.vcs import VcsService, parse_status
import clowder_wire as P

from test_files import SECRET, SECRET_NAME, Stream, ask, make_tree, snapshot

GIT_ENV = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent", "PATH": os.environ["PATH"]}


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout


def commit(cwd, message: str, **files_) -> None:
    for name, text in files_.items():
        path = os.path.join(cwd, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)


def service(root: str):
    stream = Stream()

    def root_of(agent: str) -> str:
        if agent == "locked":
            raise PermissionError("not yours")
        return {"api": root}[agent]
    return VcsService(root_of, stream.send), stream


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def repo(tmp_path):
    """A repository one commit ahead of its upstream, with every kind of change."""
    root = str(tmp_path / "repo")
    os.mkdir(root)
    git(root, "init", "-q", "-b", "main")
    commit(root, "first", **{"a.txt": "a\n", "b.txt": "b\n", "old.txt": "old\n",
                             "*.txt": "a star\n", "dir/c.txt": "c\n"})
    git(tmp_path, "clone", "-q", "--bare", root, "upstream.git")
    git(root, "remote", "add", "origin", str(tmp_path / "upstream.git"))
    git(root, "fetch", "-q", "origin")
    git(root, "branch", "-q", "-u", "origin/main")
    commit(root, "second: ünïcode subject", **{"b.txt": "b2\n"})
    with open(os.path.join(root, "a.txt"), "a") as f:
        f.write("more a\n")
    with open(os.path.join(root, "*.txt"), "a") as f:
        f.write("more star\n")
    with open(os.path.join(root, "staged.txt"), "w") as f:
        f.write("staged\n")
    git(root, "add", "staged.txt")
    git(root, "mv", "old.txt", "new.txt")
    with open(os.path.join(root, "untracked.txt"), "w") as f:
        f.write("u\n")
    return root


def test_status(repo):
    async def main():
        svc, stream = service(repo)
        return await ask(svc, stream, P.VcsStatus(agent="api"))
    report = run(main())
    assert isinstance(report, P.VcsReport) and report.kind == "status"
    head = git(repo, "rev-parse", "HEAD").strip()
    assert report.info == {"branch": "main", "upstream": "origin/main", "ahead": 1,
                           "behind": 0, "oid": head}
    by_path = {e["path"]: e for e in report.entries}
    assert by_path["a.txt"] == {"path": "a.txt", "index": ".", "worktree": "M"}
    assert by_path["staged.txt"] == {"path": "staged.txt", "index": "A", "worktree": "."}
    assert by_path["new.txt"] == {"path": "new.txt", "index": "R", "worktree": ".",
                                  "orig": "old.txt"}
    assert by_path["untracked.txt"] == {"path": "untracked.txt", "index": "?",
                                        "worktree": "?"}
    assert not report.truncated


def test_diff_worktree_staged_and_one_literal_path(repo):
    async def main():
        svc, stream = service(repo)
        whole = await ask(svc, stream, P.VcsDiff(agent="api"))
        staged = await ask(svc, stream, P.VcsDiff(agent="api", staged=True))
        star = await ask(svc, stream, P.VcsDiff(agent="api", path="*.txt"))
        missing = await ask(svc, stream, P.VcsDiff(agent="api", path="gone/never.txt"))
        return whole, staged, star, missing
    whole, staged, star, missing = run(main())
    assert b"+more a" in whole.data and b"+more star" in whole.data
    assert b"staged.txt" not in whole.data
    assert b"+staged" in staged.data and b"+more a" not in staged.data
    # ':(literal)': "*.txt" is the file of that name, not a glob over a.txt.
    assert b"+more star" in star.data and b"a.txt" not in star.data
    assert missing.kind == "diff" and missing.data == b""


def test_diff_is_bounded(repo):
    with open(os.path.join(repo, "b.txt"), "w") as f:
        f.write("".join(f"line {i} of a big change\n" for i in range(80_000)))

    async def main():
        svc, stream = service(repo)
        return await ask(svc, stream, P.VcsDiff(agent="api", path="b.txt"))
    report = run(main())
    assert report.truncated and len(report.data) == P.MAX_DATA


def test_log(repo):
    async def main():
        svc, stream = service(repo)
        return [await ask(svc, stream, P.VcsLog(agent="api", limit=n))
                for n in (20, 1, 0, -7, 10 ** 12)]
    full, one, zero, negative, huge = run(main())
    assert [c["subject"] for c in full.entries] == ["second: ünïcode subject", "first"]
    first = full.entries[0]
    assert first["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert first["author"] == "Ada" and first["date"][:4].isdigit() and "T" in first["date"]
    assert len(one.entries) == len(zero.entries) == len(negative.entries) == 1
    assert huge.entries == full.entries


def test_empty_repository(tmp_path):
    root = str(tmp_path)
    git(root, "init", "-q", "-b", "trunk")

    async def main():
        svc, stream = service(root)
        return (await ask(svc, stream, P.VcsStatus(agent="api")),
                await ask(svc, stream, P.VcsLog(agent="api")))
    status, log = run(main())
    assert status.info["branch"] == "trunk" and status.info["oid"] is None
    assert log.kind == "log" and log.entries == []


def test_refusals(repo, tmp_path):
    root, outside = make_tree(tmp_path / "t")
    plain = tmp_path / "plain"
    plain.mkdir()

    async def main():
        svc, stream = service(repo)
        out = {}
        for path in ("../x", "a/../../x", "/etc/passwd", "x\0y"):
            out[path] = await ask(svc, stream, P.VcsDiff(agent="api", path=path))
        out["ghost"] = await ask(svc, stream, P.VcsStatus(agent="ghost"))
        out["locked"] = await ask(svc, stream, P.VcsLog(agent="locked"))
        out["bad"] = await ask(svc, stream, P.FileList(agent="api"))
        svc2, stream2 = service(str(plain))
        out["plain"] = await ask(svc2, stream2, P.VcsStatus(agent="api"))
        svc3, stream3 = service(root)
        for path in ("link_out", "dirlink_out/" + SECRET_NAME, "chain1"):
            out[path] = await ask(svc3, stream3, P.VcsDiff(agent="api", path=path))
        return out
    out = run(main())
    for path in ("../x", "a/../../x", "/etc/passwd", "x\0y", "link_out", "chain1",
                 "dirlink_out/" + SECRET_NAME):
        assert out[path].code == "path", (path, out[path])
    assert out["ghost"].code == "no-agent" and out["locked"].code == "permission"
    assert out["bad"].code == "bad-request"
    assert out["plain"].code == "not-a-repo" and str(plain) in out["plain"].message
    assert not any(m.fatal for m in out.values())


def test_git_missing_and_timeout(repo, tmp_path, monkeypatch):
    # A git that hangs, and leaves a child behind it: both must be killed.
    hung = tmp_path / "hung"
    hung.mkdir()
    sleep = shutil.which("sleep")
    (hung / "git").write_text(f"#!/bin/sh\n{sleep} 300 &\nexec {sleep} 301 # {repo}\n")
    (hung / "git").chmod(0o755)

    async def main():
        svc, stream = service(repo)
        monkeypatch.setenv("PATH", "/nonexistent")
        missing = await ask(svc, stream, P.VcsStatus(agent="api"))
        monkeypatch.setenv("PATH", str(hung))
        monkeypatch.setattr(vcs, "TIMEOUT", 0.5)
        hang = await ask(svc, stream, P.VcsLog(agent="api"))
        monkeypatch.undo()
        monkeypatch.setattr(vcs, "TIMEOUT", 0)  # real git, no time at all
        slow = await ask(svc, stream, P.VcsLog(agent="api"))
        monkeypatch.undo()
        after = await ask(svc, stream, P.VcsLog(agent="api"))
        return missing, hang, slow, after
    missing, hang, slow, after = run(main())
    assert missing.code == "no-git" and "git is not installed" in missing.message
    assert hang.code == "timeout" and "killed" in hang.message
    assert slow.code == "timeout"
    assert after.kind == "log"  # the stream carries on
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
                and repo.encode() in _cmdline(pid)], "a killed git is still running"
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit()
                and _cmdline(pid) in (f"{sleep}\0300\0".encode(), f"{sleep}\0301\0".encode())
                ], "the hung git or its child still runs"


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_hostile_repository_config_runs_nothing(repo, tmp_path):
    marker = tmp_path / "MARKER"
    touch = f"touch {marker}"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\n{touch}\n")
        (hooks / hook).chmod(0o755)
    config = f"""
[core]
    fsmonitor = "{touch}; echo"
    pager = {touch}; cat
    hooksPath = {hooks}
[diff]
    external = {touch}
[diff "evil"]
    textconv = {touch}; cat
    command = {touch}
[filter "evil"]
    clean = {touch}; cat
    smudge = {touch}; cat
    required = true
[filter "evil=odd"]
    clean = {touch}; cat
[filter "proc"]
    process = {touch}
[log]
    showSignature = true
[gpg]
    program = {touch}
[pager]
    status = {touch}; cat
    diff = {touch}; cat
    log = {touch}; cat
"""
    with open(os.path.join(repo, ".git", "config"), "a") as f:
        f.write(config)
    with open(os.path.join(repo, ".gitattributes"), "w") as f:
        f.write("*.txt filter=evil diff=evil\nb.txt filter=proc\n")
    # Dirty every tracked file, and make the index's stat data racy, so git must look.
    for name in ("a.txt", "b.txt", "dir/c.txt"):
        with open(os.path.join(repo, name), "a") as f:
            f.write("changed\n")
    os.utime(os.path.join(repo, ".git", "index"), (0, 0))

    async def main():
        svc, stream = service(repo)
        return [await ask(svc, stream, msg) for msg in (
            P.VcsStatus(agent="api"), P.VcsDiff(agent="api"),
            P.VcsDiff(agent="api", staged=True), P.VcsDiff(agent="api", path="a.txt"),
            P.VcsLog(agent="api"))]
    answers = run(main())
    assert [a.kind for a in answers] == ["status", "diff", "diff", "diff", "log"], answers
    assert b"+changed" in answers[1].data
    assert not marker.exists()
    # The configuration is live: git without the service's hardening runs it.
    subprocess.run(["git", "diff"], cwd=repo, env=GIT_ENV, capture_output=True)
    assert marker.exists()


def owned_copy(repo: str, base: str, uid: int, gid: int) -> str:
    """A copy of ``repo`` in ``base`` (made world-searchable) whose every file is
    ``uid``:``gid``: another user's worktree."""
    os.chmod(base, 0o755)
    owned = os.path.join(base, "repo")
    shutil.copytree(repo, owned, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(owned):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            os.lchown(name, uid, gid)
    return owned


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a repository to nobody")
def test_as_root_git_runs_as_the_worktree_owner(repo, tmp_path):
    """git refuses ("dubious ownership") a repository that another user owns, for good
    reason: its configuration is that user's. Run as root, the service runs git as the
    owner instead, so the repository's configuration only ever acts with its owner's
    rights."""
    base = tempfile.mkdtemp(prefix="clowder-vcs-")  # tmp_path's parents are private to root
    try:
        owned = owned_copy(repo, base, 65534, 65534)
        plain = subprocess.run(["git", "status"], cwd=owned, env=GIT_ENV,
                               capture_output=True, text=True)
        assert "dubious ownership" in plain.stderr

        async def main():
            svc, stream = service(owned)
            return await ask(svc, stream, P.VcsStatus(agent="api"))
        report = run(main())
        assert report.kind == "status" and report.info["branch"] == "main", report
    finally:
        shutil.rmtree(base)


def test_status_paths_stay_inside_a_subdirectory_root(repo):
    """An agent rooted in a subdirectory sees only its part of the worktree."""
    sub = os.path.join(repo, "dir")
    with open(os.path.join(sub, "c.txt"), "a") as f:
        f.write("c2\n")

    async def main():
        svc, stream = service(sub)
        return (await ask(svc, stream, P.VcsStatus(agent="api")),
                await ask(svc, stream, P.VcsDiff(agent="api")))
    status, diff = run(main())
    assert [e["path"] for e in status.entries] == ["c.txt"]  # as the file service names it
    assert b"a.txt" not in diff.data and b"+c2" in diff.data
    assert b"--- a/c.txt" in diff.data


def test_parse_status_handles_odd_records():
    out = (b"# branch.oid (initial)\0# branch.head (detached)\0# branch.ab +3 -2\0"
           b"u UU N... 100644 100644 100644 100644 a b c with space.txt\0"
           b"2 R. N... 100644 100644 100644 a b R100 new name\0old name\0"
           b"? \xff\xfe.bin\0garbage\0")
    info, entries = parse_status(out)
    assert info == {"branch": None, "upstream": None, "ahead": 3, "behind": 2, "oid": None}
    assert entries[0] == {"path": "with space.txt", "index": "U", "worktree": "U"}
    assert entries[1] == {"path": "new name", "index": "R", "worktree": ".",
                          "orig": "old name"}
    assert entries[2]["index"] == "?" and P.encode(P.VcsReport(kind="status",
                                                               entries=entries))


# --- fuzz (issue 7) ------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(["..", ".", "", "a.txt", "dir", "c.txt", ".git", "config",
                              "link_out", "dirlink_out", "chain1", SECRET_NAME, "\0", "/",
                              ":(glob)*", "*", "-p", "--output=/tmp/clowder-vcs-fuzz-out"])
PATHS = st.one_of(st.lists(_FRAGMENTS, max_size=5).map("/".join),
                  st.lists(_FRAGMENTS, min_size=1, max_size=3).map(lambda p: "/" + "/".join(p)),
                  st.text(max_size=10))
AGENTS = st.one_of(st.just("api"), st.just("api"), st.sampled_from(["ghost", "locked"]),
                   st.text(max_size=4))
VCS_MESSAGES = st.one_of(
    st.builds(P.VcsStatus, agent=AGENTS),
    st.builds(P.VcsDiff, agent=AGENTS, path=PATHS, staged=st.booleans()),
    st.builds(P.VcsLog, agent=AGENTS, limit=st.one_of(st.integers(-5, 5), st.integers())),
    st.builds(P.FileRead, agent=AGENTS, path=PATHS),
    st.just(P.Ok()))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(VCS_MESSAGES, min_size=1, max_size=3))
def test_fuzz_vcs_service(tmp_path, messages):
    root = str(tmp_path / "t" / "root")
    if not os.path.exists(root):
        root, _ = make_tree(tmp_path / "t")
        os.rename(os.path.join(root, ".git"), os.path.join(root, "not-git"))
        git(root, "init", "-q")
        commit(root, "c", **{"a.txt": "a\n", "dir/c.txt": "c\n"})
        with open(os.path.join(root, "a.txt"), "a") as f:
            f.write("a2\n")
    before = snapshot(str(tmp_path / "t" / "outside"))

    async def main():
        svc, stream = service(root)
        for msg in messages:
            answer = await ask(svc, stream, msg)
            assert isinstance(answer, (P.VcsReport, P.Error)), answer
            if isinstance(answer, P.Error):
                assert not answer.fatal and answer.code != "internal", (msg, answer)
        await svc.close()
        return stream.sent
    for msg in run(main()):
        assert SECRET not in P.encode(msg)
    assert snapshot(str(tmp_path / "t" / "outside")) == before
    assert not os.path.exists("/tmp/clowder-vcs-fuzz-out")
