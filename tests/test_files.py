"""The file service (controld/files.py, paths.py, watch.py): issue 6 acceptance 5, issue 7.

Real filesystem, real openat2, real inotify; only the stream is a list that collects
what the service sends.  Every test root has a sibling directory "outside" holding a
secret, and symlinks inside the root pointing at it: no answer may ever carry it.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controld import files, paths, watch
from controld.files import FileService
import clowder_wire as P

SECRET = b"TOPSECRET-7d1f0c"
SECRET_NAME = "secretname-88af2"


class Stream:
    """What a service sent, and a way to wait for what it will send."""

    def __init__(self):
        self.sent: list[P.Message] = []
        self._more = asyncio.Event()  # set at each send

    async def send(self, msg: P.Message) -> None:
        P.encode(msg)  # every answer must fit in one frame
        self.sent.append(msg)
        self._more.set()

    async def wait_for(self, predicate, what: str, timeout: float = 5.0):
        deadline = time.monotonic() + timeout
        while True:
            for msg in self.sent:
                if predicate(msg):
                    return msg
            self._more.clear()
            try:
                await asyncio.wait_for(self._more.wait(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break
        pytest.fail(f"timed out waiting for {what}; sent: {self.sent}")


def make_tree(base) -> tuple[str, str]:
    """(root, outside): a working directory and a sibling the root must never reach."""
    root, outside = base / "root", base / "outside"
    (root / "sub" / "deep").mkdir(parents=True)
    outside.mkdir()
    (outside / SECRET_NAME).write_bytes(SECRET)
    (root / "hello.txt").write_bytes(b"hello\n")
    (root / "sub" / "deep" / "f.txt").write_bytes(b"deep\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_bytes(b"[core]\n")
    os.symlink(outside / SECRET_NAME, root / "link_out")  # a file outside
    os.symlink(outside, root / "dirlink_out")  # a directory outside
    os.symlink("../outside", root / "rel_out")  # relative, still outside
    os.symlink("chain2", root / "chain1")  # a chain that ends outside
    os.symlink("dirlink_out/" + SECRET_NAME, root / "chain2")
    os.symlink("hello.txt", root / "inside_link")  # stays inside: allowed
    os.symlink(".git", root / "gitlink")
    return str(root), str(outside)


def snapshot(path: str) -> dict:
    """Names, modes and contents of everything under ``path`` (symlinks not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            content = open(full, "rb").read() if stat.S_ISREG(st.st_mode) else None
            out[full] = (st.st_mode, content)
    return out


def roots(root: str):
    def root_of(agent: str) -> str:
        if agent == "locked":
            raise PermissionError("this client may not use agent 'locked'")
        return {"api": root}[agent]
    return root_of


async def ask(svc, stream: Stream, msg: P.Message) -> P.Message:
    """The one answer ``svc`` gives to ``msg`` (FileEvents of a watch set aside)."""
    before = [m for m in stream.sent if not isinstance(m, P.FileEvents)]
    await svc.handle(msg)
    after = [m for m in stream.sent if not isinstance(m, P.FileEvents)]
    assert len(after) == len(before) + 1, f"{msg} got {after[len(before):]}"
    return after[-1]


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path)


def run(coro):
    return asyncio.run(coro)


def service(root: str):
    stream = Stream()
    return FileService(roots(root), stream.send), stream


# --- list, read, write ----------------------------------------------------------------

def test_list_read_write(tree):
    root, _ = tree

    async def main():
        svc, stream = service(root)
        listing = await ask(svc, stream, P.FileList(agent="api"))
        assert isinstance(listing, P.FileListing) and not listing.truncated
        kinds = {e["name"]: e["type"] for e in listing.entries}
        assert kinds["hello.txt"] == "file" and kinds["sub"] == "dir"
        assert kinds["link_out"] == "link" and kinds["dirlink_out"] == "link"
        assert [e["name"] for e in listing.entries] == sorted(kinds)
        sub = await ask(svc, stream, P.FileList(agent="api", path="sub/./deep/"))
        assert sub.path == "sub/deep" and [e["name"] for e in sub.entries] == ["f.txt"]

        data = await ask(svc, stream, P.FileRead(agent="api", path="hello.txt"))
        assert (data.data, data.size, data.offset) == (b"hello\n", 6, 0)
        part = await ask(svc, stream, P.FileRead(agent="api", path="hello.txt", offset=1,
                                                 length=3))
        assert (part.data, part.size, part.offset) == (b"ell", 6, 1)
        via_link = await ask(svc, stream, P.FileRead(agent="api", path="inside_link"))
        assert via_link.data == b"hello\n"

        ok = await ask(svc, stream, P.FileWrite(agent="api", path="sub/new.txt", data=b"x\0y"))
        assert isinstance(ok, P.Ok)
        again = await ask(svc, stream, P.FileRead(agent="api", path="sub/new.txt"))
        assert again.data == b"x\0y"
        await svc.close()
    run(main())
    assert [n for n in os.listdir(os.path.join(root, "sub")) if n.startswith(".clowder")] == []


def test_write_is_atomic_keeps_mode_and_writes_through_inside_links(tree):
    root, _ = tree
    target = os.path.join(root, "hello.txt")
    os.chmod(target, 0o640)
    old = open(target, "rb")  # held open so its inode cannot be reused by the new file
    inode = os.fstat(old.fileno()).st_ino

    async def main():
        svc, stream = service(root)
        assert isinstance(await ask(svc, stream, P.FileWrite(
            agent="api", path="hello.txt", data=b"new\n")), P.Ok)
        assert isinstance(await ask(svc, stream, P.FileWrite(
            agent="api", path="inside_link", data=b"through\n")), P.Ok)
        missing = await ask(svc, stream, P.FileWrite(agent="api", path="nope.txt",
                                                     create=False, data=b"x"))
        assert missing.code == "not-found" and "nope.txt" in missing.message
        no_dir = await ask(svc, stream, P.FileWrite(agent="api", path="nodir/x", data=b"x"))
        assert no_dir.code == "not-found"
        on_dir = await ask(svc, stream, P.FileWrite(agent="api", path="sub", data=b"x"))
        assert on_dir.code == "not-a-file"
    run(main())
    st = os.stat(target)
    assert open(target, "rb").read() == b"through\n"
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_ino != inode  # replaced by a rename, not rewritten in place
    assert old.read() == b"hello\n"
    old.close()
    assert os.path.islink(os.path.join(root, "inside_link"))
    assert not os.path.exists(os.path.join(root, "nope.txt"))


ESCAPES = ["..", "../outside/" + SECRET_NAME, "a/../../x", "sub/../../outside",
           "/etc/passwd", "/" + SECRET_NAME, "link_out", "dirlink_out/" + SECRET_NAME,
           "dirlink_out", "rel_out/" + SECRET_NAME, "chain1", "chain2", "x\0y", "hello.txt\0",
           "", "a" * 5000]


@pytest.mark.parametrize("path", ESCAPES)
def test_escapes_are_refused_by_every_request(tree, path):
    root, outside = tree
    before = snapshot(outside)

    async def main():
        svc, stream = service(root)
        for msg in (P.FileList(agent="api", path=path), P.FileRead(agent="api", path=path),
                    P.FileWrite(agent="api", path=path, data=b"pwned"),
                    P.FileWatch(agent="api", path=path)):
            answer = await ask(svc, stream, msg)
            assert isinstance(answer, P.Error) and answer.code == "path", (msg, answer)
            assert not answer.fatal and len(answer.message) < 400
        await svc.close()
        return stream.sent
    for msg in run(main()):
        assert SECRET not in P.encode(msg)
    assert snapshot(outside) == before


def test_without_openat2_the_realpath_fallback_still_refuses_escapes(tree, monkeypatch):
    """Kernels before 5.6 answer openat2 with ENOSYS; the fallback checks the resolved
    path instead (racy, but every static escape is still refused)."""
    root, _ = tree
    monkeypatch.setattr(paths, "_have_openat2", False)

    async def main():
        svc, stream = service(root)
        for path in ("link_out", "dirlink_out/" + SECRET_NAME, "rel_out/" + SECRET_NAME,
                     "chain1"):
            answer = await ask(svc, stream, P.FileRead(agent="api", path=path))
            assert answer.code == "path", (path, answer)
        assert (await ask(svc, stream, P.FileRead(agent="api", path="inside_link"))).data \
            == b"hello\n"
        assert isinstance(await ask(svc, stream, P.FileWrite(
            agent="api", path="sub/deep/f.txt", data=b"w")), P.Ok)
        refused = await ask(svc, stream, P.FileWrite(agent="api", path="gitlink/config",
                                                     data=b"w"))
        assert refused.code == "path"
    run(main())


def test_a_directory_swapped_for_a_symlink_is_refused(tree):
    """The static form of the race openat2 closes: a directory the client has seen is
    replaced by a symlink out before the next request names a path through it."""
    root, outside = tree
    victim = os.path.join(root, "sub", "deep")

    async def main():
        svc, stream = service(root)
        first = await ask(svc, stream, P.FileRead(agent="api", path="sub/deep/f.txt"))
        assert first.data == b"deep\n"
        os.rename(victim, victim + ".old")
        os.symlink(outside, victim)
        for msg in (P.FileRead(agent="api", path="sub/deep/" + SECRET_NAME),
                    P.FileList(agent="api", path="sub/deep"),
                    P.FileWrite(agent="api", path="sub/deep/planted", data=b"x")):
            answer = await ask(svc, stream, msg)
            assert answer.code == "path", answer
    run(main())
    assert sorted(os.listdir(outside)) == [SECRET_NAME]


def test_writes_into_git_are_refused(tree):
    root, _ = tree
    os.makedirs(os.path.join(root, "sub", ".git"))
    os.makedirs(os.path.join(root, ".git", "hooks"))
    os.symlink(".git/config", os.path.join(root, "cfglink"))

    async def main():
        svc, stream = service(root)
        for path in (".git/config", ".git/hooks/pre-commit", ".git", "sub/.git/config",
                     ".GIT/config", "gitlink/config", "gitlink/hooks/post-checkout",
                     "cfglink"):
            answer = await ask(svc, stream, P.FileWrite(agent="api", path=path, data=b"x"))
            assert answer.code == "path" and ".git" in answer.message, (path, answer)
        # Reading .git is not refused: it is the agent's own repository.
        cfg = await ask(svc, stream, P.FileRead(agent="api", path=".git/config"))
        assert cfg.data == b"[core]\n"
    run(main())
    assert open(os.path.join(root, ".git", "config"), "rb").read() == b"[core]\n"
    assert os.listdir(os.path.join(root, ".git", "hooks")) == []


def test_read_bounds(tree):
    root, _ = tree
    big = os.path.join(root, "big.bin")
    with open(big, "wb") as f:
        f.write(os.urandom(P.MAX_DATA + 1000))
    os.mkfifo(os.path.join(root, "fifo"))

    async def main():
        svc, stream = service(root)
        too = await ask(svc, stream, P.FileRead(agent="api", path="big.bin",
                                                length=P.MAX_DATA + 1))
        assert too.code == "too-large" and str(P.MAX_DATA) in too.message
        neg = await ask(svc, stream, P.FileRead(agent="api", path="big.bin", offset=-1))
        assert neg.code == "bad-request"
        first = await ask(svc, stream, P.FileRead(agent="api", path="big.bin"))
        assert len(first.data) == P.MAX_DATA and first.size == P.MAX_DATA + 1000
        rest = await ask(svc, stream, P.FileRead(agent="api", path="big.bin",
                                                 offset=P.MAX_DATA))
        assert len(rest.data) == 1000
        past = await ask(svc, stream, P.FileRead(agent="api", path="big.bin", offset=1 << 80))
        assert past.data == b"" and past.size == P.MAX_DATA + 1000
        # A FIFO would block an open for reading: it is refused without being opened.
        fifo = await ask(svc, stream, P.FileRead(agent="api", path="fifo"))
        assert fifo.code == "not-a-file"
        on_dir = await ask(svc, stream, P.FileRead(agent="api", path="sub"))
        assert on_dir.code == "not-a-file"
        listing_a_file = await ask(svc, stream, P.FileList(agent="api", path="hello.txt"))
        assert listing_a_file.code == "not-a-directory"
        missing = await ask(svc, stream, P.FileRead(agent="api", path="nope"))
        assert missing.code == "not-found" and "nope" in missing.message
    run(main())


def test_listing_is_bounded(tree, monkeypatch):
    root, _ = tree
    monkeypatch.setattr(files, "MAX_ENTRIES", 5)
    for i in range(20):
        open(os.path.join(root, "sub", f"f{i:02}"), "w").close()

    async def main():
        svc, stream = service(root)
        listing = await ask(svc, stream, P.FileList(agent="api", path="sub"))
        assert listing.truncated and len(listing.entries) == 5
    run(main())


def test_agents_and_requests_that_are_refused(tree):
    root, _ = tree

    async def main():
        svc, stream = service(root)
        unknown = await ask(svc, stream, P.FileList(agent="ghost"))
        assert unknown.code == "no-agent" and "ghost" in unknown.message
        locked = await ask(svc, stream, P.FileRead(agent="locked", path="hello.txt"))
        assert locked.code == "permission"
        for msg in (P.Ok(), P.VcsStatus(agent="api"), P.Hello(version=1),
                    P.FileEvents(events=[])):
            answer = await ask(svc, stream, msg)
            assert answer.code == "bad-request" and not answer.fatal
        # The stream carries on after every refusal.
        assert (await ask(svc, stream, P.FileRead(agent="api", path="hello.txt"))).data
    run(main())


# --- watch ----------------------------------------------------------------------------

def events_of(stream: Stream) -> list[P.FileEvents]:
    return [m for m in stream.sent if isinstance(m, P.FileEvents)]


def test_watch_coalesces_many_writes_into_one_batch(tree):
    root, _ = tree

    async def main():
        svc, stream = service(root)
        assert isinstance(await ask(svc, stream, P.FileWatch(agent="api")), P.Ok)
        with open(os.path.join(root, "busy.txt"), "wb") as f:
            for i in range(200):
                f.write(b"line %d\n" % i)
                f.flush()
        for i in range(50):
            with open(os.path.join(root, "hello.txt"), "ab") as f:
                f.write(b"more\n")
        await stream.wait_for(lambda m: isinstance(m, P.FileEvents), "a batch of events")
        await batches_passed(root, 2)  # a stray second batch would have come by then
        await svc.close()
        return [b for b in events_of(stream)  # the witness's own files left out
                if not all(e["path"].startswith("witness-") for e in b.events)]
    batches = run(main())
    assert len(batches) == 1, batches
    assert sorted(batches[0].events, key=lambda e: e["path"]) == [
        {"path": "busy.txt", "kind": "created"}, {"path": "hello.txt", "kind": "modified"}]


def test_watch_reports_deletes_new_directories_and_skips_git(tree):
    root, _ = tree

    async def main():
        svc, stream = service(root)
        await ask(svc, stream, P.FileWatch(agent="api"))
        os.unlink(os.path.join(root, "sub", "deep", "f.txt"))
        os.mkdir(os.path.join(root, "newdir"))
        await stream.wait_for(lambda m: isinstance(m, P.FileEvents) and any(
            e["path"] == "newdir" for e in m.events), "newdir created")
        # The new directory is watched: a file made in it later is seen.
        with open(os.path.join(root, "newdir", "later.txt"), "w") as f:
            f.write("x")
        with open(os.path.join(root, ".git", "index"), "w") as f:
            f.write("churn")
        await stream.wait_for(lambda m: isinstance(m, P.FileEvents) and any(
            e["path"] == "newdir/later.txt" for e in m.events), "newdir/later.txt")
        # Came and went within one batch: dropped, as watch.py documents.
        open(os.path.join(root, "blink"), "w").close()
        os.unlink(os.path.join(root, "blink"))
        os.rename(os.path.join(root, "newdir"), os.path.join(root, "moved"))
        await stream.wait_for(lambda m: isinstance(m, P.FileEvents) and any(
            e["path"] == "moved" for e in m.events), "the rename")
        await svc.close()
        return [e for b in events_of(stream) for e in b.events]
    events = run(main())
    assert {"path": "sub/deep/f.txt", "kind": "deleted"} in events
    assert {"path": "newdir", "kind": "deleted"} in events
    assert not any(e["path"].startswith(".git") or e["path"] == "blink" for e in events)


async def batches_passed(root: str, n: int) -> None:
    """Return once a second watch of ``root`` (a witness) has reported ``n`` files made
    one after another, each in its own batch: any event another watch of the same tree
    would send for what was done before this call has been sent by then (events come in
    order, and each batch waits BATCH_DELAY at most)."""
    witness, seen = service(root)
    await ask(witness, seen, P.FileWatch(agent="api"))
    try:
        for i in range(n):
            name = f"witness-{i}-{time.monotonic_ns()}"
            open(os.path.join(root, name), "w").close()
            await seen.wait_for(lambda m: isinstance(m, P.FileEvents) and any(
                e["path"] == name for e in m.events), f"the witness's {name}")
    finally:
        await witness.close()


def test_watch_replaced_unwatched_and_closed_leaves_no_fd(tree):
    root, _ = tree
    fds = len(os.listdir("/proc/self/fd"))

    async def main():
        svc, stream = service(root)
        await ask(svc, stream, P.FileWatch(agent="api", path="sub"))
        await ask(svc, stream, P.FileWatch(agent="api", path="sub/deep"))  # replaces it
        open(os.path.join(root, "sub", "outer.txt"), "w").close()
        open(os.path.join(root, "sub", "deep", "inner.txt"), "w").close()
        got = await stream.wait_for(lambda m: isinstance(m, P.FileEvents), "inner.txt")
        assert got.events == [{"path": "sub/deep/inner.txt", "kind": "created"}]
        assert isinstance(await ask(svc, stream, P.FileUnwatch()), P.Ok)
        open(os.path.join(root, "sub", "deep", "after.txt"), "w").close()
        await batches_passed(root, 2)
        assert len(events_of(stream)) == 1
        await ask(svc, stream, P.FileWatch(agent="api"))
        await svc.close()
        await svc.close()  # idempotent
        open(os.path.join(root, "closed.txt"), "w").close()
        await batches_passed(root, 2)
        assert len(events_of(stream)) == 1
    run(main())
    assert len(os.listdir("/proc/self/fd")) == fds


def test_watch_limit_reports_overflow_once(tree, monkeypatch):
    root, _ = tree
    monkeypatch.setattr(watch, "MAX_WATCHES", 3)
    for i in range(6):
        os.makedirs(os.path.join(root, "many", f"d{i}"))

    async def main():
        svc, stream = service(root)
        await ask(svc, stream, P.FileWatch(agent="api", path="many"))
        first = await stream.wait_for(lambda m: isinstance(m, P.FileEvents), "overflow")
        assert first.overflow
        os.mkdir(os.path.join(root, "many", "d9"))
        await stream.wait_for(lambda m: isinstance(m, P.FileEvents) and m.events,
                              "the next batch")
        await svc.close()
        return events_of(stream)
    batches = run(main())
    assert [b.overflow for b in batches] == [True, False]


def test_watch_of_missing_or_file_path_is_an_error(tree):
    root, _ = tree
    fds = len(os.listdir("/proc/self/fd"))

    async def main():
        svc, stream = service(root)
        assert (await ask(svc, stream, P.FileWatch(agent="api", path="nope"))).code == \
            "not-found"
        assert (await ask(svc, stream, P.FileWatch(agent="api", path="hello.txt"))).code \
            == "not-a-directory"
        await svc.close()
    run(main())
    assert len(os.listdir("/proc/self/fd")) == fds


# --- fuzz (issue 7) ------------------------------------------------------------------

_FRAGMENTS = st.sampled_from(["..", ".", "", "sub", "deep", "f.txt", "hello.txt", ".git",
                              "config", "link_out", "dirlink_out", "rel_out", "chain1",
                              "chain2", "inside_link", "gitlink", "new", "\0",
                              "outside", "/"])
PATHS = st.one_of(
    st.sampled_from(ESCAPES + ["hello.txt", "inside_link", "sub", "sub/deep/f.txt"]),
    st.lists(_FRAGMENTS, min_size=1, max_size=3).map("/".join),
    st.lists(_FRAGMENTS, max_size=6).map("/".join),
    st.lists(_FRAGMENTS, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.text(max_size=12))
AGENTS = st.one_of(st.just("api"), st.just("api"), st.just("api"),
                   st.sampled_from(["ghost", "locked"]), st.text(max_size=4))
INTS = st.one_of(st.just(0), st.integers(-10, 100), st.integers())
LENGTHS = st.one_of(st.just(P.MAX_DATA), st.integers(-10, 100), st.integers())
# Requests that only a broken containment would answer with something from outside.
HOSTILE_PATHS = st.one_of(
    st.sampled_from(ESCAPES),
    st.lists(st.sampled_from(["link_out", "dirlink_out", "rel_out", "chain1", "..", "sub",
                              "."]), min_size=1, max_size=3).map("/".join)
    .map(lambda p: p + "/" + SECRET_NAME if "out" in p else p))
HOSTILE = st.one_of(
    st.builds(P.FileRead, agent=st.just("api"), path=HOSTILE_PATHS),
    st.builds(P.FileList, agent=st.just("api"), path=HOSTILE_PATHS),
    st.builds(P.FileWrite, agent=st.just("api"), path=HOSTILE_PATHS, data=st.just(b"pwned")))
FILE_MESSAGES = st.one_of(
    HOSTILE, HOSTILE,
    st.builds(P.FileList, agent=AGENTS, path=PATHS),
    st.builds(P.FileRead, agent=AGENTS, path=PATHS, offset=INTS, length=LENGTHS),
    st.builds(P.FileWrite, agent=AGENTS, path=PATHS, create=st.booleans(),
              data=st.binary(max_size=64)),
    st.builds(P.FileWatch, agent=AGENTS, path=PATHS),
    st.just(P.FileUnwatch()),
    st.builds(P.VcsLog, agent=AGENTS, limit=INTS),
    st.builds(P.Error, message=st.text(max_size=5)),
)
REPLIES = (P.FileListing, P.FileData, P.Ok, P.Error)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(FILE_MESSAGES, min_size=1, max_size=6))
def test_fuzz_file_service(tmp_path, messages):
    base = tmp_path / f"ex{time.monotonic_ns()}"
    base.mkdir()
    root, outside = make_tree(base)
    before = snapshot(outside)

    async def main():
        svc, stream = service(root)
        for msg in messages:
            answer = await ask(svc, stream, msg)
            assert isinstance(answer, REPLIES), answer
            if isinstance(answer, P.Error):
                assert not answer.fatal and answer.code != "internal", (msg, answer)
        await svc.close()
        return stream.sent
    for msg in run(main()):
        assert SECRET not in P.encode(msg), msg
        # Names from outside never show up (error messages may echo a client's path).
        names = [e["name"] for e in getattr(msg, "entries", [])] + \
            [e["path"] for e in getattr(msg, "events", [])]
        assert not any(SECRET_NAME in n for n in names), msg
    assert snapshot(outside) == before
    assert sorted(os.listdir(base)) == ["outside", "root"]
