"""Issue 12 item 7, acceptance 6: a repository's configuration runs nothing, whatever its size.

Each case hides one execution path git offers behind a multi-MiB configuration (padding
before the bad entries), written into ``.git/config`` itself, through ``include.path`` or
through ``includeIf``.  Every VCS request (status, diff, staged diff, one path's diff,
log) must answer and no marker file may appear.  Where plain git can show that the entry
is live (it leaves the marker), the test runs it afterwards, so a case cannot pass by
being broken.  Real git on repositories in tmp_path; only the stream is a list.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import ensure_user, under_systemd
from controld import vcs
import clowder_wire as P

from test_files import ask
from test_vcs import GIT_ENV, git, owned_copy, repo, service  # noqa: F401 (repo: fixture)

MiB = 1 << 20
REQUESTS = (P.VcsStatus(agent="api"), P.VcsDiff(agent="api"),
            P.VcsDiff(agent="api", staged=True), P.VcsDiff(agent="api", path="a.txt"),
            P.VcsLog(agent="api"))
# What the old service's flags were: plain git with these shows a repository's own
# protocol.<name>.allow beating a -c protocol.allow=never.
OLD_FLAGS = ("-c", "protocol.allow=never", "-c", "core.fsmonitor=false",
             "-c", "core.hooksPath=/dev/null")


def _padding() -> str:
    """2 MiB that git reads before the bad entries: keys of a harmless filter (1.3 MiB of
    names: the old service's 1 MiB probe of filter names stopped in them), plain keys and
    comments."""
    filters = '[filter "pad"]\n' + "\tclean = cat\n" * (MiB // 13)
    plain = "[user]\n" + ("\tpad = " + "x" * 200 + "\n") * (MiB // 2 // 208)
    comments = ("# " + "-" * 98 + "\n") * (MiB // 2 // 100)
    return plain + comments + filters


def _lazy_fetch(repo: str) -> None:
    """Make a.txt's index blob missing from a partial clone, so a diff must fetch it."""
    blob = git(repo, "rev-parse", ":a.txt").strip()
    os.unlink(os.path.join(repo, ".git", "objects", blob[:2], blob[2:]))
    git(repo, "config", "core.repositoryformatversion", "1")


# name -> (configuration hiding the path, .gitattributes, plain git argv that shows the
# entry is live or None, set-up that the path needs or None).  {m} is the marker file.
CASES = {
    "filter-clean": ('[filter "evil"]\n\tclean = touch {m}; cat\n\trequired = true\n',
                     "*.txt filter=evil\n", ["diff"], None),
    "filter-smudge": ('[filter "evil"]\n\tsmudge = touch {m}; cat\n',
                      "*.txt filter=evil\n", None, None),
    "filter-process": ('[filter "proc"]\n\tprocess = touch {m}\n',
                       "*.txt filter=proc\n", ["diff"], None),
    "filter-name-with-dots-and-equals": ('[filter "a.b=c"]\n\tclean = touch {m}; cat\n',
                                         "*.txt filter=a.b=c\n", ["diff"], None),
    "diff-textconv": ('[diff "evil"]\n\ttextconv = touch {m}; cat\n',
                      "*.txt diff=evil\n", ["diff"], None),
    "diff-driver-command": ('[diff "evil"]\n\tcommand = touch {m}\n',
                            "*.txt diff=evil\n", ["diff"], None),
    "diff-external": ("[diff]\n\texternal = touch {m}\n", "", ["diff"], None),
    "fsmonitor": ('[core]\n\tfsmonitor = "touch {m}; echo"\n', "", ["status"], None),
    "hooks": ("[core]\n\thooksPath = {hooks}\n", "", None, None),
    "pager": ("[core]\n\tpager = touch {m}; cat\n[pager]\n\tstatus = touch {m}; cat\n"
              "\tdiff = touch {m}; cat\n\tlog = touch {m}; cat\n", "", None, None),
    "gpg": ("[log]\n\tshowSignature = true\n[gpg]\n\tprogram = touch {m}\n"
            '[gpg "ssh"]\n\tprogram = touch {m}\n[gpg "x509"]\n\tprogram = touch {m}\n',
            "", None, None),
    "alias": ('[alias]\n\tstatus = "!touch {m}"\n\tdiff = "!touch {m}"\n'
              '\tlog = "!touch {m}"\n\tconfig = "!touch {m}"\n\trev-parse = "!touch {m}"\n',
              "", None, None),
    "lazy-fetch-ext": ("[extensions]\n\tpartialClone = evil\n[remote \"evil\"]\n"
                       "\turl = ext::sh -c touch% {m}\n\tpromisor = true\n"
                       "[protocol \"ext\"]\n\tallow = always\n", "",
                       [*OLD_FLAGS, "diff"], _lazy_fetch),
    "lazy-fetch-uploadpack": ("[extensions]\n\tpartialClone = evil\n[remote \"evil\"]\n"
                              "\turl = {upstream}\n\tpromisor = true\n"
                              "\tuploadpack = touch {m}; git-upload-pack\n"
                              "[protocol \"file\"]\n\tallow = always\n", "",
                              [*OLD_FLAGS, "diff"], _lazy_fetch),
    "lazy-fetch-ssh": ("[extensions]\n\tpartialClone = evil\n[remote \"evil\"]\n"
                       "\turl = ssh://nowhere.invalid/x\n\tpromisor = true\n"
                       "[core]\n\tsshCommand = touch {m}; false\n"
                       "[protocol \"ssh\"]\n\tallow = always\n", "",
                       [*OLD_FLAGS, "diff"], _lazy_fetch),
    "lazy-fetch-remote-helper": ("[extensions]\n\tpartialClone = evil\n[remote \"evil\"]\n"
                                 "\tvcs = ext\n\turl = sh -c touch% {m}\n\tpromisor = true\n"
                                 "[protocol \"ext\"]\n\tallow = always\n", "",
                                 [*OLD_FLAGS, "diff"], _lazy_fetch),
    "submodule-summary": ("[status]\n\tsubmoduleSummary = true\n[diff]\n\tsubmodule = diff\n",
                          "", None, None),
}


def _hostile(repo: str, tmp, case: str, where: str) -> str:
    """Write the case into the repository (padding first); return the marker's path."""
    marker = str(tmp / "MARKER")
    hooks = tmp / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "reference-transaction", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    text, attributes, _, setup = CASES[case]
    bad = text.format(m=marker, hooks=hooks, upstream=tmp / "upstream.git")
    if setup is not None:
        setup(repo)
    body = _padding() + bad
    config = os.path.join(repo, ".git", "config")
    if where == "inline":
        with open(config, "a") as f:
            f.write(body)
    else:
        inc = tmp / "elsewhere" / "included.inc"
        inc.parent.mkdir()
        inc.write_text(body)
        header = ("[include]\n" if where == "include"
                  else f'[includeIf "gitdir:{repo}/"]\n')
        with open(config, "a") as f:
            f.write(f"{header}\tpath = {inc}\n")
    with open(os.path.join(repo, ".gitattributes"), "w") as f:
        f.write(attributes)
    # Dirty every tracked file, and make the index's stat data racy, so git must look.
    for name in ("a.txt", "b.txt", "dir/c.txt"):
        with open(os.path.join(repo, name), "a") as f:
            f.write("changed\n")
    os.utime(os.path.join(repo, ".git", "index"), (0, 0))
    return marker


def _answers(repo: str) -> list:
    async def main():
        svc, stream = service(repo)
        return [await ask(svc, stream, msg) for msg in REQUESTS]
    return asyncio.run(main())


# Every case inline and through include.path; includeIf (evaluated by git alike) for a few.
WHERE = [(case, where) for case in sorted(CASES) for where in ("inline", "include")] + \
    [(case, "includeif") for case in ("filter-clean", "filter-process", "lazy-fetch-ext")]


@pytest.mark.parametrize("case,where", WHERE)
def test_multi_mib_config_hides_no_execution_path(repo, tmp_path, case, where):  # noqa: F811
    marker = _hostile(repo, tmp_path, case, where)
    answers = _answers(repo)
    assert not os.path.exists(marker), f"{case} ({where}): the service's git ran it"
    if case.startswith("lazy-fetch"):
        # The blob is not there and may not be fetched: diffs that need it fail clearly.
        kinds = [a.kind if isinstance(a, P.VcsReport) else a.code for a in answers]
        assert kinds[0] == "status" and kinds[-1] == "log", answers
        assert set(kinds[1:4]) <= {"diff", "git-error"} and "git-error" in kinds, answers
    else:
        assert [getattr(a, "kind", a) for a in answers] == \
            ["status", "diff", "diff", "diff", "log"], answers
        assert b"+changed" in answers[1].data, answers[1]
    live = CASES[case][2]
    if live is not None:
        # The configuration is live: git without the service's hardening runs it.
        subprocess.run(["git", *live], cwd=repo, env=GIT_ENV, capture_output=True)
        assert os.path.exists(marker), f"{case} ({where}): the hostile entry is not live"


def test_a_filter_name_too_long_to_disable_is_refused(repo, tmp_path):  # noqa: F811
    """A driver name of megabytes cannot be overridden (the environment would not hold
    it): every request is refused with a clear error, and nothing runs."""
    marker = tmp_path / "MARKER"
    name = "n" * (2 * MiB)
    with open(os.path.join(repo, ".git", "config"), "a") as f:
        f.write(f'[filter "{name}"]\n\tclean = touch {marker}; cat\n')
        f.write(f'[filter "evil"]\n\tclean = touch {marker}; cat\n')
    with open(os.path.join(repo, ".gitattributes"), "w") as f:
        f.write(f"a.txt filter={name[:100]}\n*.txt filter=evil\n")
    with open(os.path.join(repo, "a.txt"), "a") as f:
        f.write("changed\n")
    answers = _answers(repo)
    assert not marker.exists()
    assert all(isinstance(a, P.Error) and a.code == "unsafe-config" for a in answers), answers
    assert "filter" in answers[0].message


def test_too_many_filter_drivers_are_refused(repo, tmp_path):  # noqa: F811
    marker = tmp_path / "MARKER"
    with open(os.path.join(repo, ".git", "config"), "a") as f:
        for i in range(vcs.MAX_FILTER_BYTES // 8):
            f.write(f'[filter "f{i:07d}"]\n\tclean = touch {marker}; cat\n')
    with open(os.path.join(repo, ".gitattributes"), "w") as f:
        f.write("*.txt filter=f0000001\n")
    with open(os.path.join(repo, "a.txt"), "a") as f:
        f.write("changed\n")
    answers = _answers(repo)
    assert not marker.exists()
    assert all(isinstance(a, P.Error) and a.code == "unsafe-config" for a in answers), answers


@pytest.mark.skipif(os.geteuid() != 0 or not under_systemd(),
                    reason="makes a second user: only inside a test instance, as root")
def test_git_runs_as_the_owner_with_the_owners_groups(repo, monkeypatch):  # noqa: F811
    """Run as root in bob's worktree, every git is bob: his uid, his primary group and his
    groups (clowder among them), never the directory's group (root's here)."""
    try:
        grp.getgrnam("clowder")
    except KeyError:  # as install-units makes it, when no host fixture ran before
        subprocess.run(["groupadd", "--system", "clowder"], check=True)
    uid = ensure_user("bob", 2002, "clowder")
    pw = pwd.getpwnam("bob")
    base = tempfile.mkdtemp(prefix="clowder-vcs-owner-")
    try:
        owned = owned_copy(repo, base, uid, 0)
        ids = os.path.join(base, "ids")
        open(ids, "w").close()
        os.chmod(ids, 0o666)
        bindir = os.path.join(base, "bin")
        os.mkdir(bindir)
        real = shutil.which("git")
        with open(os.path.join(bindir, "git"), "w") as f:
            f.write(f'#!/bin/sh\necho "$(id -u) $(id -g) $(id -G)" >> {ids}\n'
                    f'exec {real} "$@"\n')
        os.chmod(os.path.join(bindir, "git"), 0o755)
        os.chmod(bindir, 0o755)
        monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
        answers = _answers(owned)
        assert [getattr(a, "kind", a) for a in answers] == \
            ["status", "diff", "diff", "diff", "log"], answers
        want_groups = set(os.getgrouplist("bob", pw.pw_gid))
        assert grp.getgrnam("clowder").gr_gid in want_groups
        runs = [line.split() for line in open(ids).read().splitlines()]
        assert len(runs) >= len(REQUESTS) * 2, runs  # the probe and the command, each time
        for run_ in runs:
            assert (int(run_[0]), int(run_[1])) == (uid, pw.pw_gid), run_
            assert {int(g) for g in run_[2:]} == want_groups, run_
    finally:
        shutil.rmtree(base)
