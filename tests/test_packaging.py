"""The packages (packaging/): the .deb installs into the running systemd, upgrades from
version N to N+1 while sessions run without touching them, and is removed cleanly; the
.rpm builds, and its scriptlets never restart the PTY host.  With clowder-ghostty the
installed host runs the ghostty engine; without it, pyte, and it says why.

The packages are built here, inside the test instance, from a temporary copy of the
tree (packaging/build.sh; `make pkg-deps ghostty-wheel`, run by `make test`, puts the
tools and the pinned pyghostty wheel on / before the instance boots).
CLOWDER_TEST_DEBS=DIR uses two prebuilt clowder_*_all.deb from DIR instead, and the
clowder-ghostty_*.deb of the older one if DIR has it.  The .deb tests do their own
set-up and tear-down (not the ``host`` fixture): they set aside what other tests
installed (units in /etc/systemd/system, the control daemon's state and configuration,
Docker's policy-rc.d, which forbids starting services), and put it all back after
purging the packages.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, wait_for

BUILD = os.path.join(ROOT, "packaging", "build.sh")
PREBUILT = "CLOWDER_TEST_DEBS"
UNITS = ("clowder-ptyhost.socket", "clowder-ptyhost.service",
         "clowder-control.socket", "clowder-control.service")
CTL = "/usr/bin/clowderctl"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SOCKET = "/run/clowder/ptyhost.sock"
GHOSTTY_DIR = "/usr/lib/clowder/ghostty"  # ptyhostd/engine.py's PACKAGED
PRIVATE = "/usr/share/clowder"  # packaging/install-tree.sh
PACKAGES = ("ptyhostd", "ctl", "controld", "webd", "clowder_wire", "clowder_common")
PROGRAMS = ("ptyhostd", "clowderctl", "clowder-control", "clowder-web")
SURVIVAL = os.path.join(ROOT, "packaging", "debian", "tests", "survival")


def pyproject_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        return re.search(r'^version = "([^"]+)"', f.read(), re.M)[1]


N = pyproject_version()
N1 = N + ".1"


def run(argv, check=True, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("env", {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"})
    proc = subprocess.run(argv, **kw)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def build(kind: str, version: str, out: str) -> list[str]:
    """The paths of the packages built: clowder's, then clowder-ghostty's."""
    if not shutil.which("dpkg-buildpackage" if kind == "deb" else "rpmbuild",
                        path=PATH):
        pytest.fail(f"the {kind} build tools are missing: run `make pkg-deps` before the "
                    f"instance boots, or set {PREBUILT}=DIR with prebuilt .debs")
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"}
    if os.environ.get("CLOWDER_WHEELS"):  # the cache `make ghostty-wheel` filled
        env["CLOWDER_WHEELS"] = os.environ["CLOWDER_WHEELS"]
    proc = run(["sh", BUILD, kind, version, out], cwd=ROOT, check=False, env=env)
    if proc.returncode != 0:
        pytest.fail(f"building the {kind} of {version} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout.strip().splitlines()


def scripts_of(text: str) -> list[str]:
    """Lines that run: neither blank nor comments."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def assert_never_restarts_the_host(where: str, text: str) -> None:
    for line in scripts_of(text):
        if "ptyhost" in line:
            assert "restart" not in line, f"{where} restarts the host: {line}"
            assert not re.search(r"\b(stop|disable --now)\b", line) or "remove" in where, \
                f"{where} stops the host outside removal: {line}"


# --- the .deb ---------------------------------------------------------------------------


def deb_field(path: str, field: str) -> str:
    return run(["dpkg-deb", "-f", path, field]).stdout.strip()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, list[str]]:
    """{"old": [clowder N, clowder-ghostty N], "new": [clowder N+1, clowder-ghostty N+1]}
    (the ghostty ones where built)."""
    prebuilt = os.environ.get(PREBUILT)
    if prebuilt:
        found = glob.glob(os.path.join(prebuilt, "clowder_*_all.deb"))
        assert len(found) == 2, f"{PREBUILT}={prebuilt}: want two clowder_*_all.deb, got {found}"
        a, b = found
        older = run(["dpkg", "--compare-versions", deb_field(a, "Version"), "lt",
                     deb_field(b, "Version")], check=False).returncode == 0
        a, b = (a, b) if older else (b, a)
        return {key: [deb] + glob.glob(os.path.join(
            prebuilt, f"clowder-ghostty_{deb_field(deb, 'Version')}_*.deb"))
            for key, deb in (("old", a), ("new", b))}
    out = str(tmp_path_factory.mktemp("debs"))
    return {"old": build("deb", N, out), "new": build("deb", N1, out)}


@pytest.fixture(scope="module")
def debs(built) -> tuple[str, str]:
    """(clowder of version N, clowder of version N+1)."""
    return built["old"][0], built["new"][0]


@pytest.fixture(scope="module")
def ghostty_deb(built) -> str:
    """clowder-ghostty of version N."""
    if len(built["old"]) < 2:
        pytest.fail(f"no clowder-ghostty package was built ({built['old']}): it is built "
                    "on amd64 from the pinned wheel (packaging/ghostty-wheel.sh)")
    return built["old"][1]


def test_deb_contents(debs):
    old, new = debs
    assert deb_field(old, "Version") != deb_field(new, "Version")
    depends = deb_field(new, "Depends")
    for dep in ("python3-systemd", "python3-jeepney", "python3-yaml", "python3-pyte",
                "python3-wcwidth", "python3-aiohttp", "python3 (>= 3.11)"):
        assert dep in depends, depends
    files = set(re.findall(r" \.(/\S+)$", run(["dpkg-deb", "-c", new]).stdout, re.M))
    for path in ["/usr/bin/ptyhostd", "/usr/bin/clowderctl", "/usr/bin/clowder-control",
                 "/usr/lib/sysusers.d/clowder.conf", "/etc/clowder/clowder.yaml",
                 "/usr/lib/systemd/catalog/clowder.catalog",
                 f"{PRIVATE}/ptyhostd/__main__.py", f"{PRIVATE}/controld/__main__.py",
                 f"{PRIVATE}/ctl/__main__.py", f"{PRIVATE}/clowder_wire/frame.py",
                 f"{PRIVATE}/clowder_common/interpreter.py",
                 *[f"/usr/lib/systemd/system/{u}" for u in UNITS],
                 *[f"/usr/lib/systemd/user/{u}" for u in UNITS]]:
        assert path in files, f"{path} is not in {new}"
    # Nothing on Python's own path (PyPI has unrelated ctl and clowder), no unit in /lib.
    assert not [f for f in files if "-packages" in f or f.startswith("/lib/")], files
    conffiles = run(["dpkg-deb", "-I", new, "conffiles"]).stdout.split()
    assert conffiles == ["/etc/clowder/clowder.yaml"], conffiles
    # The licence (MIT, as LICENSE says) is the copyright file's.
    with open(os.path.join(ROOT, "LICENSE")) as f:
        assert f.readline().strip() == "MIT License" and \
            "Copyright (c) 2025 clowder developers" in f.read()
    copyright = deb_file(new, "./usr/share/doc/clowder/copyright")
    assert "License: MIT" in copyright and "2025 clowder developers" in copyright
    # Every man page a unit's Documentation= names is in the package.
    named = set()
    for unit in UNITS:
        for line in deb_file(new, f"./usr/lib/systemd/system/{unit}").splitlines():
            if line.startswith("Documentation="):
                named |= {d for d in line.split("=", 1)[1].split() if d.startswith("man:")}
    assert named
    for page in named:
        name, section = re.fullmatch(r"man:(.+)\((\d)\)", page).groups()
        assert f"/usr/share/man/man{section}/{name}.{section}.gz" in files, \
            f"{page} is named by a unit but not in {new}"
    assert re.search(rf"clowder-ghostty \(= {re.escape(deb_field(new, 'Version'))}\)",
                     deb_field(new, "Recommends")), deb_field(new, "Recommends")


# The man pages and completions, generated at build time (packaging/gendocs.py); their
# content is tests/test_manpages.py's.
MAN_PAGES = ("man1/clowderctl.1", "man8/ptyhostd.8", "man8/clowder-control.8",
             "man8/clowder-web.8", "man5/clowder.yaml.5")


def test_deb_ships_generated_man_pages_and_completions(debs, tmp_path):
    run(["dpkg-deb", "-x", debs[1], str(tmp_path)])
    env = {"PATH": PATH, "LANG": "C.UTF-8", "MANWIDTH": "80"}
    for page in MAN_PAGES:
        path = tmp_path / "usr/share/man" / f"{page}.gz"
        assert path.exists(), f"{page} is not in {debs[1]}"
        man = run(["man", "--warnings", "-l", str(path)], env=env)
        assert man.stderr == "", f"{page}: {man.stderr}"
    # Generated from this tree's parser: the hand-written page never had `completion`.
    ctl_page = re.sub(".\b", "", run(["man", "-l", str(tmp_path / "usr/share/man/man1/"
                                                    "clowderctl.1.gz")], env=env).stdout)
    assert re.search(r"^ +completion$", ctl_page, re.M), ctl_page[:2000]
    bash = tmp_path / "usr/share/bash-completion/completions/clowderctl"
    for path in (bash, tmp_path / "usr/share/zsh/vendor-completions/_clowderctl",
                 tmp_path / "usr/share/fish/vendor_completions.d/clowderctl.fish"):
        assert path.exists(), f"{path.relative_to(tmp_path)} is not in {debs[1]}"
    done = run(["bash", "--norc", "-c", f"source {bash}; COMP_WORDS=(clowderctl comp); "
                "COMP_CWORD=1; _clowderctl; echo ${COMPREPLY[@]}"])
    assert done.stdout.split() == ["completion"], done.stdout


def deb_file(deb: str, member: str) -> str:
    """One file of a .deb's data, as text (member: "./usr/...")."""
    data = run(["dpkg-deb", "--fsys-tarfile", deb], text=False).stdout
    with subprocess.Popen(["tar", "-xOf", "-", member], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as tar:
        return tar.communicate(data)[0].decode()


def test_lintian_pedantic_finds_no_warning_or_error(debs, ghostty_deb):
    """Issue 15, acceptance 3: lintian at -I --pedantic says nothing worse than
    information (I:) and experimental (X:) tags about the packages we ship."""
    proc = run(["lintian", "-EvIL", "+pedantic", "--no-tag-display-limit", debs[1],
                ghostty_deb], check=False, env={"PATH": PATH, "LANG": "C.UTF-8",
                                                 "HOME": "/root"})
    tags = [line for line in proc.stdout.splitlines() if re.match(r"[EWP]: ", line)]
    assert not tags, "lintian:\n" + "\n".join(tags)
    assert proc.returncode == 0, f"lintian exited {proc.returncode}: {proc.stderr}"


def test_deb_ghostty_contents(debs, ghostty_deb):
    """clowder-ghostty: the wheel's files in the private directory, nothing on Python's
    path, the licences in its copyright, cffi and the same clowder as dependencies."""
    assert deb_field(ghostty_deb, "Architecture") == "amd64"
    depends = deb_field(ghostty_deb, "Depends")
    assert "python3-cffi" in depends, depends
    assert f"clowder (= {deb_field(debs[0], 'Version')})" in depends, depends
    files = set(re.findall(r" \.(/\S+)$", run(["dpkg-deb", "-c", ghostty_deb]).stdout, re.M))
    for name in ("__init__.py", "_ffi.py", "_cdef.py", "core.py", "_lib/libghostty-vt.so"):
        assert f"{GHOSTTY_DIR}/pyghostty/{name}" in files, f"{name} is not in {ghostty_deb}"
    assert not [f for f in files if "-packages" in f or f.startswith("/usr/bin")], files
    copyright = run(["dpkg-deb", "--fsys-tarfile", ghostty_deb], text=False).stdout
    with subprocess.Popen(["tar", "-xOf", "-", "./usr/share/doc/clowder-ghostty/copyright"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as tar:
        text = tar.communicate(copyright)[0].decode()
    for needle in ("License: Apache-2.0", "Mitchell Hashimoto, Ghostty contributors",
                   "pyghostty", "/usr/share/common-licenses/Apache-2.0"):
        assert needle in text, f"{needle!r} is not in clowder-ghostty's copyright"


def test_deb_scripts_never_restart_the_host(debs, tmp_path):
    run(["dpkg-deb", "-e", debs[1], str(tmp_path)])
    scripts = {name: (tmp_path / name).read_text()
               for name in ("preinst", "postinst", "prerm", "postrm")
               if (tmp_path / name).exists()}
    # No stop before the files are swapped (debhelper's default would stop or restart).
    assert "ptyhost" not in scripts.get("preinst", "")
    assert_never_restarts_the_host("postinst", scripts["postinst"])
    # debhelper's snippets choose the action in a variable (_dh_action=restart).
    for block in re.findall(r"^# Automatically added by .*?^# End automatically added section",
                            scripts["postinst"], re.M | re.S):
        if "clowder-ptyhost" in block:
            assert "restart" not in block, f"a debhelper snippet restarts the host:\n{block}"
    assert "reload clowder-ptyhost.service" in scripts["postinst"]
    assert "try-restart clowder-control.service" in scripts["postinst"]
    prerm = scripts["prerm"]
    assert prerm.index("stop clowder-control.service") < \
        prerm.index("stop clowder-ptyhost.service"), "prerm must stop the control daemon first"


@pytest.fixture
def pkg_slate(systemd_required, tmp_path):
    """A system with no clowder installed, for the package; what was there comes back."""
    if os.getuid() != 0:
        pytest.fail("the package test runs as root (inside the test instance)")
    aside = tmp_path / "aside"
    aside.mkdir()
    moved: list[tuple[str, str]] = []

    def set_aside(path: str) -> None:
        if os.path.lexists(path):
            dest = str(aside / str(len(moved)))
            shutil.move(path, dest)
            moved.append((path, dest))

    def stop_clowder() -> None:
        run(["systemctl", "stop", "clowder-control.service", "clowder-control.socket"],
            check=False)
        run(["systemctl", "stop", "clowder-ptyhost.service", "clowder-ptyhost.socket"],
            check=False)

    def purge() -> None:
        for pkg in ("clowder-ghostty", "clowder"):  # it depends on clowder
            if run(["dpkg", "-s", pkg], check=False).returncode == 0:
                run(["dpkg", "--purge", pkg], check=False)

    purge()
    stop_clowder()
    # Other tests' `clowderctl install-units` (units in /etc override the package's), the
    # control daemon's registry and agents (it would bring their agents back), Docker's
    # policy-rc.d (exit 101: no service may start).
    for path in sorted(glob.glob("/etc/systemd/system/clowder-*")
                       + glob.glob("/etc/systemd/system/*.wants/clowder-*")
                       + glob.glob("/run/systemd/system/clowder-*")):
        set_aside(path)
    for path in ("/var/lib/clowder", "/etc/clowder", "/usr/sbin/policy-rc.d"):
        set_aside(path)
    run(["systemctl", "daemon-reload"])
    yield
    try:
        stop_clowder()
        purge()
        assert not active_clowder_units(), "clowder units left active after the purge"
    finally:
        for path, dest in reversed(moved):
            if os.path.lexists(path):
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) \
                    else os.unlink(path)
            # (the purge may have removed an emptied *.wants directory)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.move(dest, path)
        run(["systemctl", "daemon-reload"])


def show(unit: str, *props) -> dict:
    out = run(["systemctl", "show", unit, *[f"-p{p}" for p in props]]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def active_clowder_units() -> list[str]:
    out = run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
               "clowder-ptyhost.*", "clowder-control.*", "clowder-session-*"]).stdout
    return [" ".join(line.split()[:4]) for line in out.splitlines()
            if len(line.split()) >= 4 and line.split()[2] in
            ("active", "activating", "deactivating", "reloading")]


def ctl(*args) -> str:
    return run([CTL, *args], cwd="/").stdout


def ps() -> dict:
    return {s["id"]: s for s in json.loads(ctl("ps", "--all", "--json"))}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def backlog(sid: str) -> bytes:
    return run([CTL, "backlog", sid], text=False, cwd="/").stdout


def journal_cursor() -> str:
    out = run(["journalctl", "-n0", "--show-cursor", "-q"]).stdout
    return out.strip().split("cursor: ", 1)[1]


def engine_loaded(pid: str) -> tuple[str, str]:
    """(the engine the host with main PID ``pid`` loaded, why it chose it), from its
    journal (ptyhostd/engine.py: CLOWDER_CAUSE=screen-engine, then -loaded)."""
    def logged():
        out = run(["journalctl", "-q", "-o", "json", f"_PID={pid}"]).stdout
        entries = [json.loads(line) for line in out.splitlines() if line.strip()]
        said = {e.get("CLOWDER_CAUSE"): e for e in entries}
        if "screen-engine-loaded" in said and "screen-engine" in said:
            return (said["screen-engine-loaded"]["CLOWDER_ENGINE"],
                    said["screen-engine"]["MESSAGE"])
        return None
    return wait_for(logged, 30, f"the host (pid {pid}) to log the screen engine it loaded",
                    interval=0.2)


def host_pid() -> str:
    return wait_for(lambda: (lambda p: p if int(p) else None)(
        show("clowder-ptyhost.service", "MainPID")["MainPID"]), 20,
        "clowder-ptyhost.service to have a main PID")


def test_deb_install_upgrade_keeps_sessions_remove_stops_all(debs, pkg_slate):
    old, new = debs
    old_version, new_version = deb_field(old, "Version"), deb_field(new, "Version")

    # --- install N: the sockets and the control daemon enabled and running
    run(["dpkg", "-i", old])
    for unit in ("clowder-ptyhost.socket", "clowder-control.socket", "clowder-control.service"):
        assert run(["systemctl", "is-enabled", unit], check=False).stdout.strip() == "enabled", unit
        wait_for(lambda: show(unit, "ActiveState")["ActiveState"] == "active", 20,
                 f"{unit} to be active after the installation")
    # The units are the package's, in /usr/lib/systemd/system (systemd 252 may name them
    # by /lib/systemd/system, its first search path, which is the same directory here).
    owned = run(["dpkg", "-L", "clowder"]).stdout.split()
    for unit in UNITS:
        assert f"/usr/lib/systemd/system/{unit}" in owned, owned
        assert os.path.realpath(show(unit, "FragmentPath")["FragmentPath"]) == \
            os.path.realpath(f"/usr/lib/systemd/system/{unit}")
    # The modules are not on Python's own path: `import ctl` finds nothing of ours.
    for pkg in PACKAGES:
        proc = run(["/usr/bin/python3", "-P", "-c", f"import {pkg}"], check=False, cwd="/")
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, (pkg, proc)
    # The shipped example configuration is valid, to the packaged check (which runs
    # controld's check in a new interpreter, from the private directory).
    check = run([CTL, "config", "check", "/etc/clowder/clowder.yaml"], cwd="/")
    assert "OK (0 agents)" in check.stdout, check.stdout

    # An agent described in YAML (the administrator's edit of the conffile, which the
    # upgrade keeps): the packaged control daemon, reloaded, runs it through the upgrade.
    with open("/etc/clowder/clowder.yaml", "w") as f:
        f.write("agents:\n  - name: pkgagent\n    command: sh -c 'echo agent-up; exec sleep "
                "100000'\n    cwd: /\n")
    run(["systemctl", "reload", "clowder-control.service"])
    gid = int(run(["getent", "group", "clowder"]).stdout.split(":")[2])
    st = os.stat(SOCKET)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid

    # --- two sessions, with output, through the packaged clowderctl (root, system units)
    script = 'echo "hello $0"; while read -r line; do echo "got-$line $0"; done'
    ids = [ctl("spawn", "--name", f"pkg-{name}", "--", "sh", "-c", script, name).strip()
           for name in ("a", "b")]
    for sid, name in zip(ids, "ab"):
        wait_for(lambda: f"hello {name}".encode() in backlog(sid), 20,
                 f"session {name} to print its greeting")
    before = ps()
    pids = {sid: before[sid]["pid"] for sid in ids}
    backlogs = {sid: backlog(sid) for sid in ids}
    host = show("clowder-ptyhost.service", "MainPID", "InvocationID", "NRestarts")
    control = wait_for(lambda: (lambda p: p if int(p["MainPID"]) else None)(
        show("clowder-control.service", "MainPID", "InvocationID")), 20,
        "clowder-control to have a main PID")
    agent = wait_for(lambda: (lambda a: a if a.get("state") == "running" else None)(
        {x["name"]: x for x in json.loads(ctl("status", "--json"))["agents"]}
        .get("pkgagent", {})), 20, "the YAML agent to run under the packaged control daemon")
    socket_inode = os.stat(SOCKET).st_ino
    # Does the installed host hand off in place on reload (it answers the pre-check)?
    check = run([CTL, "upgrade", "--check"], check=False, cwd="/")
    handoff = f"running {old_version}" in check.stdout
    if os.path.exists(os.path.join(ROOT, "ptyhostd", "handoff.py")) and \
            not os.environ.get(PREBUILT):
        assert handoff, f"the pre-check of the installed host failed: {check.stdout}{check.stderr}"
    assert int(host["MainPID"]) and all(alive(p) for p in pids.values())
    # Without clowder-ghostty the packaged host runs pyte, and says why.
    assert engine_loaded(host["MainPID"]) == \
        ("pyte", "screen engine: pyte (pyghostty is not installed: the clowder-ghostty "
                 "package has it)")
    cursor = journal_cursor()

    # --- upgrade to N+1
    upgrade = run(["dpkg", "-i", new])
    assert run(["dpkg-query", "-W", "-f=${Version}", "clowder"]).stdout == new_version
    assert new_version in run(["/usr/bin/ptyhostd", "--version"]).stdout
    # The host was never stopped (a stop flushes the FD store): same invocation, same PID.
    after = show("clowder-ptyhost.service", "MainPID", "InvocationID", "NRestarts",
                 "ActiveState")
    assert after["ActiveState"] == "active", upgrade.stdout + upgrade.stderr
    assert after["InvocationID"] == host["InvocationID"], "the host was restarted by the upgrade"
    assert after["MainPID"] == host["MainPID"] and after["NRestarts"] == host["NRestarts"]
    assert os.stat(SOCKET).st_ino == socket_inode, "the listening socket was re-created"
    # The running host took over the new code in place (the hand-off), or, for a host
    # that predates it, logged the reload request and kept serving.
    if handoff:
        wait_for(lambda: f"running {new_version}" in run([CTL, "upgrade", "--check"],
                                                         check=False, cwd="/").stdout, 30,
                 f"the running host to report version {new_version} after the hand-off")
    else:
        wait_for(lambda: "SIGHUP" in run(["journalctl", "-q", "-o", "cat", "--after-cursor",
                                          cursor, "_PID=" + host["MainPID"]]).stdout, 20,
                 "the host to log the reload request of the upgrade")
    after = show("clowder-ptyhost.service", "MainPID", "InvocationID", "NRestarts",
                 "ActiveState")
    assert after["MainPID"] == host["MainPID"] and after["InvocationID"] == host["InvocationID"]
    # Sessions untouched: same ids and pids, running, backlogs intact, still served.
    now = ps()
    for sid in ids:
        assert sid in now and now[sid]["pid"] == pids[sid], (before, now)
        assert now[sid]["state"] == before[sid]["state"] and alive(pids[sid])
        assert backlog(sid).startswith(backlogs[sid]), "backlog changed by the upgrade"
    for sid, name in zip(ids, "ab"):
        ctl("send", sid, "ping\r")
        wait_for(lambda: f"got-ping {name}".encode() in backlog(sid), 20,
                 f"session {name} to answer after the upgrade")
    # The control daemon was restarted (it holds nothing a restart loses).
    wait_for(lambda: (lambda p: p["ActiveState"] == "active"
                      and p["InvocationID"] != control["InvocationID"]
                      and int(p["MainPID"]) not in (0, int(control["MainPID"])))(
        show("clowder-control.service", "ActiveState", "InvocationID", "MainPID")), 20,
        "clowder-control to run again, restarted by the upgrade")

    # The agent was kept, not re-spawned: same session, same pid, spawned once.
    kept = wait_for(lambda: (lambda a: a if a.get("state") == "running" else None)(
        {x["name"]: x for x in json.loads(ctl("status", "--json"))["agents"]}
        .get("pkgagent", {})), 20, "the agent to be reported after the upgrade")
    assert (kept["session"], kept["pid"], kept["spawns"]) == \
        (agent["session"], agent["pid"], 1), (agent, kept)
    pids[agent["session"]] = agent["pid"]

    # --- removal stops everything: no clowder unit active, no session process left
    os.unlink("/etc/clowder/clowder.yaml")
    run(["dpkg", "-r", "clowder"])
    assert not active_clowder_units(), active_clowder_units()
    wait_for(lambda: not any(alive(p) for p in pids.values()), 20,
             "the sessions' processes to end with the removal")
    for unit in UNITS:
        assert not os.path.exists(f"/usr/lib/systemd/system/{unit}")
    assert not os.path.exists(PRIVATE), os.listdir(PRIVATE)
    assert not os.path.exists("/usr/bin/ptyhostd")
    run(["dpkg", "--purge", "clowder"])
    assert run(["dpkg", "-s", "clowder"], check=False).returncode != 0
    assert not os.path.exists("/var/lib/clowder")
    assert not os.path.exists("/var/lib/clowder-ptyhost")
    assert not os.path.exists("/var/cache/clowder-ptyhost")
    assert old_version != new_version


def test_deb_ghostty_engine_is_loaded_and_pyte_runs_without_it(debs, ghostty_deb, pkg_slate):
    """With clowder-ghostty the packaged host (Debian's python3, no pyghostty of its own)
    loads the ghostty engine from the package's private directory; removed, the next
    host runs pyte and says why.  Sessions are served by either."""
    run(["dpkg", "-i", debs[0], ghostty_deb])
    wait_for(lambda: show("clowder-control.service", "ActiveState")["ActiveState"] ==
             "active", 20, "clowder-control to be active after the installation")
    ctl("ps")  # the socket starts the host
    pid = host_pid()
    engine, why = engine_loaded(pid)
    assert (engine, why) == ("ghostty", "screen engine: ghostty (the default: pyghostty is "
                             f"installed in {GHOSTTY_DIR})"), (engine, why)
    # The host's python3 imports it from nowhere else, and its path did not keep the
    # private directory (engine.py puts it there for the import only).
    assert run(["python3", "-c", "import pyghostty"], check=False).returncode != 0
    # Byte-compiled on installation (py3compile), so nothing is written at run time.
    assert glob.glob(f"{GHOSTTY_DIR}/pyghostty/__pycache__/*.pyc")
    sid = ctl("spawn", "--name", "pkg-ghostty", "--", "sh", "-c",
              "printf 'ghostty \\033[1mbold\\033[0m\\n'; exec sleep 100000").strip()
    wait_for(lambda: "ghostty bold" in ctl("snapshot", sid), 20,
             "the ghostty model to show the session's output")
    # Its binding was parsed once into the unit's cache directory (ghostty_abi.py); the
    # next host loads it from there, and its model shows the session again.
    wait_for(lambda: glob.glob("/var/cache/clowder-ptyhost/ghostty_abi_*.py"), 20,
             "the ghostty binding to be cached in /var/cache/clowder-ptyhost")
    run(["systemctl", "restart", "clowder-ptyhost.service"])
    pid = host_pid()
    wait_for(lambda: "(cache: /var/cache/clowder-ptyhost/" in run(
        ["journalctl", "--no-pager", "-o", "cat", "CLOWDER_CAUSE=screen-engine-binding",
         f"_PID={pid}"]).stdout, 20, "the restarted host to load the binding from the cache")
    wait_for(lambda: "ghostty bold" in ctl("snapshot", sid), 20,
             "the model of the restarted host to show the session's output")

    # Without the package: its files (and the byte-code) are gone, the next host runs pyte.
    run(["dpkg", "-r", "clowder-ghostty"])
    assert not os.path.exists("/usr/lib/clowder"), os.listdir("/usr/lib/clowder")
    run(["systemctl", "restart", "clowder-ptyhost.service"])
    new_pid = host_pid()
    assert new_pid != pid
    assert engine_loaded(new_pid) == \
        ("pyte", "screen engine: pyte (pyghostty is not installed: the clowder-ghostty "
                 "package has it)")
    wait_for(lambda: "ghostty bold" in ctl("snapshot", sid), 20,
             "the session (kept through the restart) to be shown by the pyte model")


def test_deb_survival_autopkgtest(debs, pkg_slate):
    """debian/tests/survival (the autopkgtest) against the installed .deb: a session kept
    through a restart and a SIGKILL of the host, same pid, backlog kept, answering."""
    run(["dpkg", "-i", debs[0]])
    proc = run(["python3", SURVIVAL], check=False, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "survival: restart: host" in proc.stdout and "survival: SIGKILL: host" in proc.stdout
    assert proc.stdout.rstrip().endswith("survival: ok"), proc.stdout


# --- the .rpm ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rpms(tmp_path_factory) -> list[str]:
    """[clowder's .rpm, clowder-ghostty's .rpm]."""
    return build("rpm", N, str(tmp_path_factory.mktemp("rpm")))


@pytest.fixture(scope="module")
def rpm(rpms) -> str:
    return rpms[0]


def test_rpm_ghostty_ships_the_wheel_privately(rpms):
    assert len(rpms) == 2 and rpms[1].endswith(".x86_64.rpm"), rpms
    ghostty = rpms[1]
    files = set(run(["rpm", "-qlp", ghostty]).stdout.split())
    for name in ("__init__.py", "_ffi.py", "_cdef.py", "core.py", "_lib/libghostty-vt.so"):
        assert f"{GHOSTTY_DIR}/pyghostty/{name}" in files, f"{name} is not in {ghostty}"
    assert not [f for f in files if "-packages" in f or f.startswith("/usr/bin")], files
    licences = {os.path.basename(f) for f in files if f.startswith("/usr/share/licenses/")}
    assert {"LICENSE", "LICENSE.ghostty", "copyright"} <= licences, licences
    requires = run(["rpm", "-qp", "--requires", ghostty]).stdout
    assert "python3-cffi" in requires and f"clowder = {N}-" in requires, requires
    # libghostty-vt.so is private: the package provides no soname for others to link.
    assert "libghostty" not in run(["rpm", "-qp", "--provides", ghostty]).stdout
    assert f"clowder-ghostty = {N}-" in run(["rpm", "-qp", "--recommends", rpms[0]]).stdout


def rpm_scriptlets(path: str) -> dict[str, str]:
    """{"pre": text, "post": ..., "preun", "postun", "posttrans"} from rpm -qp --scripts."""
    out = run(["rpm", "-qp", "--scripts", path]).stdout
    names = {"preinstall": "pre", "postinstall": "post", "preuninstall": "preun",
             "postuninstall": "postun", "posttrans": "posttrans", "pretrans": "pretrans"}
    parts: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^(\w+) scriptlet \(using [^)]*\):$", line)
        if m:
            current = names.get(m[1], m[1])
            parts[current] = ""
        elif current:
            parts[current] += line + "\n"
    return parts


def test_rpm_builds_with_the_layout(rpm):
    files = set(run(["rpm", "-qlp", rpm]).stdout.split())
    for path in ["/usr/bin/ptyhostd", "/usr/bin/clowderctl", "/usr/bin/clowder-control",
                 "/usr/lib/sysusers.d/clowder.conf", "/etc/clowder/clowder.yaml",
                 "/usr/lib/systemd/catalog/clowder.catalog",
                 f"{PRIVATE}/ptyhostd/__main__.py", f"{PRIVATE}/ctl/__main__.py",
                 f"{PRIVATE}/controld/__main__.py", f"{PRIVATE}/clowder_wire/frame.py",
                 f"{PRIVATE}/clowder_common/interpreter.py",
                 *[f"/usr/lib/systemd/system/{u}" for u in UNITS],
                 *[f"/usr/lib/systemd/user/{u}" for u in UNITS]]:
        assert path in files, f"{path} is not in {rpm}"
    # No preset (Fedora's guidelines: the distribution's preset policy decides), nothing
    # on Python's own path.
    assert not [f for f in files if "preset" in f or "-packages" in f or f.startswith("/lib/")]
    assert run(["rpm", "-qcp", rpm]).stdout.split() == ["/etc/clowder/clowder.yaml"]
    # %license (Fedora's %_docdir_fmt is the name alone; Debian's rpm adds the version)
    licences = run(["rpm", "-qLp", rpm]).stdout.split()
    assert len(licences) == 1 and re.fullmatch(
        rf"/usr/share/licenses/clowder(-{re.escape(N)})?/LICENSE", licences[0]), licences
    requires = run(["rpm", "-qp", "--requires", rpm]).stdout
    for dep in ("python3-systemd", "python3-jeepney", "python3-pyyaml", "python3-pyte",
                "python3-wcwidth", "python3-aiohttp", "python3 >= 3.11"):
        assert dep in requires.splitlines(), requires
    # Only names, no version Fedora (python3-systemd 236) or Debian could miss, and no
    # generated python3dist() pins.
    assert "python3dist" not in requires and "==" not in requires, requires
    # The wrappers run the private directory's code with the system's python3.
    with open(os.path.join(ROOT, "packaging", "install-tree.sh")) as f:
        assert f'PRIVATE={PRIVATE}\n' in f.read()


def test_rpm_ships_generated_man_pages_and_completions(rpm):
    files = set(run(["rpm", "-qlp", rpm]).stdout.split())
    for page in MAN_PAGES:  # compressed or not: the distribution's brp-compress decides
        assert {f"/usr/share/man/{page}", f"/usr/share/man/{page}.gz"} & files, \
            f"{page} is not in {rpm}"
    for path in ("/usr/share/bash-completion/completions/clowderctl",
                 "/usr/share/zsh/site-functions/_clowderctl",
                 "/usr/share/fish/vendor_completions.d/clowderctl.fish"):
        assert path in files, f"{path} is not in {rpm}"


def test_rpm_scriptlets_never_restart_the_host(rpm):
    s = rpm_scriptlets(rpm)
    for name in ("pre", "post", "postun", "posttrans"):
        assert_never_restarts_the_host(name, s.get(name, ""))
    # Upgrade: the old package's postun restarts only the control daemon ...
    restarts = [line for line in scripts_of(s["postun"]) if "restart" in line]
    assert restarts and all("clowder-control.service" in line for line in restarts), restarts
    # ... and posttrans hands the running host over to the new code, after an upgrade only.
    posttrans = s["posttrans"]
    assert "reload clowder-ptyhost.service" in posttrans
    assert "--signal=SIGHUP clowder-ptyhost.service" in posttrans
    assert "rpm-state/clowder/upgrade" in posttrans and "rpm-state/clowder/upgrade" in s["pre"]
    assert re.search(r"if \[ \$1 -gt 1 \]", s["pre"])
    # Removal: everything stopped, the control daemon before the host, only when $1 is 0.
    preun = s["preun"]
    assert re.search(r"if \[ \$1 -eq 0 \]", preun)
    assert preun.index("stop clowder-control.service") < \
        preun.index("stop clowder-ptyhost.service")
    # The group exists before the sockets (SocketGroup=clowder) are started.
    assert "clowder" in s["pre"] and ("groupadd" in s["pre"] or "sysusers" in s["pre"])
    # Installation enables nothing by itself: %systemd_post applies the distribution's
    # preset, and post starts only what that preset enabled.
    post = scripts_of(s["post"])
    assert not [line for line in post if re.search(r"systemctl .*\benable\b", line)], post
    assert any("preset" in line for line in post), post
    starts = [line for line in post if "systemctl start" in line]
    assert starts and "is-enabled" in s["post"].split("systemctl start")[0], s["post"]


# --- the packaging sources --------------------------------------------------------------


def test_a_missing_or_altered_ghostty_wheel_is_a_clear_error(tmp_path):
    """packaging/ghostty-wheel.sh with no index to download from: a cached file that is
    not the pinned wheel is removed, and the error says what is missing and where."""
    with open(os.path.join(ROOT, "packaging", "ghostty-wheel.sh")) as f:
        script = f.read()
    version = re.search(r"^PYGHOSTTY_VERSION=(\S+)$", script, re.M)[1]
    name = re.search(r"^PYGHOSTTY_WHEEL=(\S+)$", script, re.M)[1].replace(
        "$PYGHOSTTY_VERSION", version)
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert f'"pyghostty=={version}"' in f.read(), \
            "packaging/ghostty-wheel.sh must pin the pyghostty of pyproject.toml"
    (tmp_path / name).write_bytes(b"not the wheel")
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(tmp_path),
           "CLOWDER_WHEELS": str(tmp_path), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    proc = run(["sh", os.path.join(ROOT, "packaging", "ghostty-wheel.sh")], check=False,
               cwd=ROOT, env=env)
    assert proc.returncode == 1, proc
    assert "is not the pinned wheel" in proc.stderr and not (tmp_path / name).exists()
    assert f"the pyghostty {version} wheel (sha256 " in proc.stderr, proc.stderr
    assert f"is not in {tmp_path} and could not be downloaded" in proc.stderr, proc.stderr


def test_packaged_versions_follow_pyproject():
    with open(os.path.join(ROOT, "packaging", "debian", "changelog")) as f:
        assert re.match(rf"clowder \({re.escape(N)}\) ", f.readline()), \
            "packaging/debian/changelog: its top entry must be pyproject.toml's version"
    with open(os.path.join(ROOT, "packaging", "rpm", "clowder.spec")) as f:
        assert re.search(rf"%global clowder_version {re.escape(N)}\}}", f.read()), \
            "packaging/rpm/clowder.spec: its default clowder_version must be pyproject's"


def test_every_unit_is_packaged():
    with open(os.path.join(ROOT, "packaging", "debian", "clowder.install")) as f:
        listed = {line.split()[0] for line in f if line.startswith("units/")}
    shipped = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "units", "*.*"))
               + glob.glob(os.path.join(ROOT, "units", "user", "*.*"))}
    assert listed == shipped
    with open(os.path.join(ROOT, "packaging", "rpm", "clowder.spec")) as f:
        spec = f.read()
    for unit in {os.path.basename(p) for p in shipped}:
        assert unit in spec


def test_the_private_layout_lists_every_package_and_program():
    """packaging/install-tree.sh installs every top-level package of the tree and every
    program of pyproject.toml's [project.scripts], with the same main(); and clowderctl,
    a script of its own there (bin/clowderctl), runs the main install-tree.sh names."""
    with open(os.path.join(ROOT, "packaging", "install-tree.sh")) as f:
        script = f.read()
    packages = re.search(r'^PACKAGES="([^"]*)"$', script, re.M)[1].split()
    programs = dict(p.split(":") for p in re.search(r'^PROGRAMS="([^"]*)"$', script,
                                                     re.M)[1].split())
    tree = {d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py"))
            and d not in ("tests", "tools", "bench")}
    assert set(packages) == tree == set(PACKAGES)
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.]+):main"$',
                              text.split("[project.scripts]")[1].split("\n[")[0], re.M))
    assert "bin/clowderctl" in re.search(r'^script-files = \[([^]]*)\]$', text, re.M)[1]
    with open(os.path.join(ROOT, "bin", "clowderctl")) as f:
        assert "from ctl.__main__ import main\n" in f.read()
    scripts["clowderctl"] = "ctl.__main__"
    assert programs == scripts and set(programs) == set(PROGRAMS), (programs, scripts)


def test_the_private_layout_runs_the_programs_and_their_children(tmp_path):
    """The tree installed as the packages install it (install-tree.sh into a DESTDIR),
    run with Debian's python3: each program starts, and a module run in a new
    interpreter (the hand-off's check, the configuration's parser) finds the private
    directory, not ``python3 -m`` on Python's own path."""
    run(["sh", os.path.join(ROOT, "packaging", "install-tree.sh"), str(tmp_path)], cwd=ROOT)
    private = str(tmp_path) + PRIVATE
    for name in PROGRAMS:
        with open(tmp_path / "usr" / "bin" / name) as f:
            text = f.read().replace(f'"{PRIVATE}"', repr(private))
        (tmp_path / name).write_text(text)
        proc = run(["/usr/bin/python3", str(tmp_path / name), "--help"], check=False, cwd="/")
        assert proc.returncode == 0 and "usage:" in proc.stdout, (name, proc)
    probe = ("import subprocess, sys; sys.path.insert(0, sys.argv[1]); "
             "from clowder_common.interpreter import module_argv; "
             "print(subprocess.run(module_argv('ptyhostd', '--version'), capture_output=True,"
             " text=True).stdout, end=''); "
             "print(subprocess.run(module_argv('controld.check', sys.argv[2]), "
             "capture_output=True, text=True).stdout, end='')")
    example = os.path.join(ROOT, "packaging", "etc", "clowder.yaml")
    proc = run(["/usr/bin/python3", "-P", "-c", probe, private, example], cwd="/")
    assert proc.stdout.startswith("ptyhostd ") and "OK (0 agents)" in proc.stdout, proc


def test_the_packaged_clowderctl_starts_without_site_and_runs_it_when_needed(tmp_path):
    """The packages' clowderctl starts Python with -S (no site: ctl/sitepath.py says why),
    the other programs without; run through its own first line, a command line that
    needs what only site puts on the path still gets it: a client configuration file is
    read with PyYAML, which Debian keeps in dist-packages."""
    run(["sh", os.path.join(ROOT, "packaging", "install-tree.sh"), str(tmp_path)], cwd=ROOT)
    firsts = {}
    for name in PROGRAMS:
        with open(tmp_path / "usr" / "bin" / name) as f:
            firsts[name] = f.readline().strip()
    assert firsts == {name: "#!/usr/bin/python3" + " -S" * (name == "clowderctl")
                      for name in PROGRAMS}, firsts
    wrapper = tmp_path / "clowderctl"
    text = (tmp_path / "usr" / "bin" / "clowderctl").read_text()
    wrapper.write_text(text.replace(f'"{PRIVATE}"', repr(str(tmp_path) + PRIVATE)))
    wrapper.chmod(0o755)
    config = tmp_path / "client.yaml"
    config.write_text("hosts: [local]\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLOWDER_CLIENT_CONFIG": str(config)}
    proc = run([str(wrapper), "--socket", str(tmp_path / "none.sock"), "ps"], check=False,
               cwd="/", env=env)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc
    assert "local unreachable: nothing listens at" in proc.stdout + proc.stderr, proc


def test_the_example_configuration_is_valid(tmp_path):
    """The conffile /etc/clowder/clowder.yaml as shipped (no agent), and its commented
    example once uncommented, pass `clowderctl config check`'s check."""
    with open(os.path.join(ROOT, "packaging", "etc", "clowder.yaml")) as f:
        text = f.read()
    lines = text.splitlines()
    start = lines.index("# defaults:")
    end = next(i for i, line in enumerate(lines) if line.startswith("#         percent:"))
    uncommented = "\n".join(line[2:] for line in lines[start:end + 1]) + "\nversion: 1\n"
    for name, body, want in (("shipped", text, "OK (0 agents)"),
                             ("uncommented", uncommented, "OK (1 agent)")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(body)
        proc = subprocess.run([sys.executable, "-P", "-m", "controld.check", str(path)],
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": ROOT})
        assert proc.returncode == 0 and want in proc.stdout, (name, proc)


def test_the_autopkgtest_is_declared():
    with open(os.path.join(ROOT, "packaging", "debian", "tests", "control")) as f:
        control = f.read()
    assert re.search(r"^Tests: survival$", control, re.M)
    assert re.search(r"^Restrictions: .*needs-root", control, re.M)
    assert os.access(SURVIVAL, os.X_OK)


def test_the_screen_model_passes_on_debians_pyte_and_wcwidth():
    """The versions the .deb depends on (Debian 12: python3-pyte 0.8.0, python3-wcwidth
    0.2.5, older than the venv's): tests/test_screen.py's pyte cases run with Debian's
    python3 and its dist-packages first (pytest and hypothesis from the venv, after)."""
    want = {pkg: run(["dpkg-query", "-W", "-f=${Version}", f"python3-{pkg}"]).stdout
            .split("-")[0].split("+")[0] for pkg in ("pyte", "wcwidth")}
    venv_site = os.path.dirname(os.path.dirname(pytest.__file__))
    boot = ("import sys, importlib.metadata as m; sys.path.insert(0, sys.argv[1]); "
            "sys.path.append(sys.argv[2]); import pyte, wcwidth, pytest; "
            "print('versions', m.version('pyte'), m.version('wcwidth'), pyte.__file__, "
            "wcwidth.__file__, flush=True); "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/test_screen.py', "
            "'-k', 'not ghostty']))")
    proc = run(["/usr/bin/python3", "-P", "-c", boot, ROOT, venv_site], check=False, cwd=ROOT)
    head = proc.stdout.splitlines()[0].split()
    assert head[:3] == ["versions", want["pyte"], want["wcwidth"]], proc.stdout[:500]
    assert all(p.startswith("/usr/lib/python3/dist-packages/") for p in head[3:]), head
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-500:]
