#!/usr/bin/env python3
"""Boot a private systemd system instance over an overlay of /, for tests and demos.

Runs as root on a machine whose PID 1 is not systemd (Debian 12, systemd 252). The
instance is systemd as PID 1 in new mount/pid/uts/ipc/net/cgroup namespaces; its root is
an overlay whose lower layer is the host's root filesystem and whose upper layer is a
private tmpfs, so the host's files are visible at the same paths (as they were at boot)
and every write inside vanishes at stop. Recipe: /work/shared/notes/systemd.md, section 1A.

    sysinstance.py run [--name N] [--timeout S] [--cwd DIR] [--env K=V]... -- CMD ARGS...
        boot, run CMD inside as root, power off, clean up; exit with CMD's exit code
        (128+N if CMD died of signal N; 125 if the instance itself failed)
    sysinstance.py start [--name N] [--timeout S]   boot and leave running; print pid, state dir
        (run and start: --keep DIR:PATH binds DIR over PATH inside at boot: kept across boots)
    sysinstance.py exec --name N [--cwd DIR] [--env K=V]... -- CMD...   run CMD in it
    sysinstance.py stop --name N                    power off and clean up (also stale state)

--timeout is the boot deadline (default 30 s). CMD runs through `nsenter -a` in the
instance's namespaces (not in a unit), with stdio passed through, cwd defaulting to the
caller's (it must exist inside) and only PATH, HOME, TERM, LANG and --env set. Ctrl-C
during boot aborts and cleans up; while CMD runs it goes to CMD, as in a shell. State of
an instance lives in /run/clowder-sysinstance/NAME/ (pid, console.log, launcher.err), its
cgroup in /sys/fs/cgroup/unified/clowder-sysinstance-NAME/. A `run` killed with SIGKILL
leaves its instance behind: `stop --name` it (names are listed in the state directory).

From Python (pytest):

    from sysinstance import Instance
    with Instance("t1") as inst:
        r = inst.exec(["systemctl", "is-system-running"], capture_output=True, text=True)

Units the instance must not run are masked; ssh and postgresql are among them, so a test
that installs or uses them inside must `systemctl unmask` them first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

STATE_ROOT = Path("/run/clowder-sysinstance")
SANE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TARGET = "clowder-sysinstance.target"
CONTAINER = "clowder"  # the $container value systemd sees; unknown names count as "container-other"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")  # also used as the hostname
SYSTEMD = "/lib/systemd/systemd"

# Units a container must not run: they touch the kernel or host hardware, or are
# periodic jobs and daemons that make boots slow and logs noisy.
MASKED = (
    "systemd-sysctl.service", "systemd-modules-load.service", "systemd-binfmt.service",
    "proc-sys-fs-binfmt_misc.automount", "proc-sys-fs-binfmt_misc.mount",
    "systemd-random-seed.service", "systemd-timesyncd.service", "systemd-pstore.service",
    "systemd-repart.service", "systemd-firstboot.service", "systemd-machine-id-commit.service",
    "systemd-pcrphase.service", "systemd-pcrphase-sysinit.service",
    "systemd-pcrphase-initrd.service", "kmod-static-nodes.service",
    "systemd-tmpfiles-setup-dev.service", "sys-kernel-config.mount", "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount", "dev-hugepages.mount",
    "systemd-journald-audit.socket", "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service", "systemd-logind.service", "getty.target",
    "getty@.service", "console-getty.service", "container-getty@.service",
    "serial-getty@.service", "autovt@.service", "apt-daily.timer", "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer", "fstrim.timer", "e2scrub_all.timer", "e2scrub_reap.service",
    "man-db.timer", "systemd-tmpfiles-clean.timer", "postgresql.service", "postgresql@.service",
)
# Masked only when installed at boot, so a test can still dpkg -i them inside and use them.
MASKED_IF_PRESENT = ("ssh.service", "ssh.socket")

TARGET_UNIT = """\
[Unit]
Description=clowder system instance
Requires=basic.target
Wants=systemd-journald.service systemd-user-sessions.service
After=basic.target systemd-journald.service systemd-user-sessions.service
AllowIsolate=yes
"""
JOURNALD_CONF = "[Journal]\nStorage=volatile\nRateLimitBurst=0\n"

DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8),
           ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))


class InstanceError(Exception):
    """The instance could not be started, reached or stopped."""


def fstype_at(path: str | Path, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Return the filesystem type of the topmost mount exactly at path, or None."""
    found = None
    with open(mountinfo) as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mountpoint = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), left.split()[4])
            if mountpoint == str(path):
                found = right.split()[0]  # later lines are mounted on top of earlier ones
    return found


def cgroup2_mount() -> Path:
    """Return where the cgroup2 hierarchy is mounted on the host (hybrid or unified)."""
    for path in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if fstype_at(path) == "cgroup2":
            return path
    raise InstanceError("no cgroup2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup")


def strip_ansi(text: str) -> str:
    """Drop terminal escapes and carriage returns from console output."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", text)


# --- stage 2: runs as PID 1 of the new namespaces, then becomes systemd -----------------


def sh(*argv: str) -> None:
    """Run a helper program in stage 2; any failure aborts the boot."""
    subprocess.run(argv, check=True)


def mount(fstype: str, target: Path, options: str) -> None:
    """Mount a new filesystem of fstype on target."""
    sh("mount", "-t", fstype, "-o", options, fstype, str(target))


def make_dev(dev: Path, console: str) -> None:
    """Fill a fresh tmpfs /dev with the basic nodes, a private devpts and the console."""
    mount("tmpfs", dev, "mode=755,nosuid")
    for name, major, minor in DEVICES:
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)
    for name, target in DEV_LINKS:
        os.symlink(target, dev / name)
    # systemd insists on a real tty as /dev/console: bind the pty that script(1) gave us.
    (dev / "console").touch(0o600)
    sh("mount", "--bind", console, str(dev / "console"))
    (dev / "pts").mkdir()
    mount("devpts", dev / "pts", "newinstance,ptmxmode=0666,mode=620,gid=5,nosuid,noexec")
    (dev / "shm").mkdir()
    mount("tmpfs", dev / "shm", "mode=1777,nosuid,nodev")


def prepare_etc(root: Path, name: str) -> None:
    """Write the instance's identity, masks, default target and journald settings."""
    etc = root / "etc"
    (etc / "machine-id").write_text(secrets.token_hex(16) + "\n")
    (etc / "hostname").write_text(name + "\n")
    units = etc / "systemd" / "system"
    present = [u for u in MASKED_IF_PRESENT
               if (root / "lib/systemd/system" / u).exists() or (units / u).exists()]
    for unit in (*MASKED, *present):
        link = units / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    (units / TARGET).write_text(TARGET_UNIT)
    default = units / "default.target"
    if default.is_symlink() or default.exists():
        default.unlink()
    default.symlink_to(TARGET)
    conf = etc / "systemd" / "journald.conf.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "clowder-sysinstance.conf").write_text(JOURNALD_CONF)


def stage2(name: str, host_mntns: str, kept: str = "[]") -> None:
    """Build the overlay root in this private mount namespace and exec systemd as PID 1.

    ``kept``: JSON list of [directory here, path inside] bound into the instance, so
    what is written there outlives it (a test's "reboot": two boots, one directory)."""
    # Every guard below protects the host: this code mounts and writes as root.
    if os.getpid() != 1:
        sys.exit("sysinstance stage2: refusing to run: not PID 1 of a new pid namespace")
    if os.readlink("/proc/self/ns/mnt") == host_mntns:
        sys.exit("sysinstance stage2: refusing to run: still in the host's mount namespace")
    console = os.ttyname(0)
    os.umask(0o022)
    state = STATE_ROOT / name
    # /proc is still the host's procfs here, so /proc/self names our pid on the host.
    host_pid = os.readlink("/proc/self")
    (state / "pid.tmp").write_text(host_pid + "\n")
    os.rename(state / "pid.tmp", state / "pid")

    # The upper layer must be on a tmpfs: the kernel refuses an upper dir on / itself.
    scratch = state / "mnt"
    mount("tmpfs", scratch, "mode=700")
    for sub in ("upper", "work", "root"):
        (scratch / sub).mkdir()
    root = scratch / "root"
    mount("overlay", root, f"lowerdir=/,upperdir={scratch}/upper,workdir={scratch}/work")
    if fstype_at(root) != "overlay":
        sys.exit(f"sysinstance stage2: {root} is not an overlay; refusing to continue")

    mount("proc", root / "proc", "nosuid,nodev,noexec")
    for path in ("proc/sys", "proc/sysrq-trigger"):  # the latter only if the kernel has it
        if (root / path).exists():
            sh("mount", "--bind", "-o", "ro", str(root / path), str(root / path))
    mount("sysfs", root / "sys", "ro,nosuid,nodev,noexec")
    # In our cgroup namespace this shows only the instance's own cgroup directory.
    mount("cgroup2", root / "sys/fs/cgroup", "nosuid,nodev,noexec")
    make_dev(root / "dev", console)
    # A tmpfs on /var/log/journal, or journalctl also reads the host's journal files.
    for path, mode in (("run", "755"), ("tmp", "1777"), ("var/log/journal", "2755")):
        (root / path).mkdir(parents=True, exist_ok=True)
        mount("tmpfs", root / path, f"mode={mode},nosuid,nodev")
    for src, dest in json.loads(kept):
        # Only absolute paths, and never over the instance's own guarded mounts.
        if not (src.startswith("/") and dest.startswith("/") and ".." not in dest.split("/")):
            sys.exit(f"sysinstance stage2: bad kept directory {src!r} -> {dest!r}")
        (root / dest.lstrip("/")).mkdir(parents=True, exist_ok=True)
        sh("mount", "--bind", src, str(root / dest.lstrip("/")))
    prepare_etc(root, name)

    os.chdir(root)
    os.mkdir(".oldroot")
    sh("pivot_root", ".", ".oldroot")
    os.chdir("/")
    sh("umount", "-l", "/.oldroot")
    os.rmdir("/.oldroot")
    # Last check before systemd runs tmpfiles with --remove: / must be the overlay.
    if fstype_at("/") != "overlay":
        sys.exit("sysinstance stage2: / is not an overlay after pivot_root; refusing to boot")
    os.execve("/usr/bin/setpriv", [
        "setpriv", "--bounding-set", "-sys_module,-sys_time,-sys_rawio", "--",
        SYSTEMD, "--system", f"--unit={TARGET}", "--show-status=yes",
    ], {"container": CONTAINER})


# --- host side --------------------------------------------------------------------------


def sane_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return the environment commands get inside the instance."""
    env = {"PATH": SANE_PATH, "HOME": "/root", "TERM": os.environ.get("TERM", "dumb"),
           "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def kill_entered(proc: subprocess.Popen) -> None:
    """Kill what an nsenter started inside an instance, so that nsenter reaps it and exits."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text()
        pids = [int(pid) for pid in children.split()]
    except FileNotFoundError:
        pids = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if not pids:
        proc.kill()  # nothing entered (yet, or any more): nothing can be orphaned
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Instance:
    """A private systemd system instance: start(), exec(), stop(); also a context manager."""

    def __init__(self, name: str | None = None, boot_timeout: float = 30.0,
                 kept: tuple[tuple[str, str], ...] = ()):
        """``kept``: (directory here, path inside) pairs bound into the instance at each
        boot, e.g. a state directory that must outlive a poweroff (tests/test_reboot.py)."""
        self.name = name or f"run-{secrets.token_hex(4)}"
        if not NAME_RE.fullmatch(self.name):
            raise InstanceError(f"bad instance name {self.name!r}: use letters, digits and '-'")
        self.state = STATE_ROOT / self.name
        self.cgroup = cgroup2_mount() / f"clowder-sysinstance-{self.name}"
        self.boot_timeout = boot_timeout
        self.kept = [[os.path.abspath(src), dest] for src, dest in kept]
        self._launcher: subprocess.Popen | None = None

    def __enter__(self) -> Instance:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """Return the host pid of the instance's PID 1."""
        try:
            return int((self.state / "pid").read_text())
        except FileNotFoundError:
            raise InstanceError(
                f"instance {self.name} is not running (no {self.state}/pid)") from None

    def start(self) -> Instance:
        """Boot the instance and wait until systemd reports running or degraded."""
        if os.geteuid() != 0:
            raise InstanceError("sysinstance needs root")
        STATE_ROOT.mkdir(mode=0o755, exist_ok=True)
        try:
            self.state.mkdir(mode=0o700)
        except FileExistsError:
            raise InstanceError(f"instance {self.name} exists ({self.state}); if it is stale: "
                                f"sysinstance.py stop --name {self.name}") from None
        try:
            (self.state / "mnt").mkdir()
            self.cgroup.mkdir()
            self._launch()
            self._wait_booted(time.monotonic() + self.boot_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        """Start script(1) -> unshare -> stage 2 inside the instance's own cgroup."""
        stage = [sys.executable, "-I", os.path.abspath(__file__), "_stage2", self.name,
                 os.readlink("/proc/self/ns/mnt"), json.dumps(self.kept)]
        unshare = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                   "--kill-child", "--uts", "--ipc", "--net", "--cgroup", *stage]
        # script gives systemd a real tty for /dev/console and records it in console.log.
        script = ["script", "-qfec", shlex.join(unshare), str(self.state / "console.log")]
        # The shell joins the cgroup before exec so every later process starts inside it,
        # and the cgroup namespace made by unshare is rooted there.
        wrapper = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs"),
                   *script]
        with open(self.state / "launcher.err", "wb") as err:
            # A new session, and no pipe of the caller held open, so `start` can detach.
            self._launcher = subprocess.Popen(
                wrapper, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env={"PATH": SANE_PATH, "SHELL": "/bin/sh", "LANG": "C.UTF-8"},
                start_new_session=True)

    def _wait_booted(self, deadline: float) -> None:
        """Poll until the pid file appears and systemd says running or degraded."""
        state = "no pid file yet"
        while True:
            if self._launcher.poll() is not None:
                raise InstanceError(self._diagnose(
                    f"instance {self.name}: the launcher exited with status "
                    f"{self._launcher.returncode} before systemd finished booting "
                    f"(last state: {state})"))
            if (self.state / "pid").exists():
                try:
                    r = self.exec(["systemctl", "is-system-running"], cwd="/",
                                  capture_output=True, text=True)
                    state = r.stdout.strip() or r.stderr.strip() or f"exit {r.returncode}"
                except InstanceError as exc:  # PID 1 just died: the launcher follows
                    state = str(exc)
                if state in ("running", "degraded"):
                    return
                if state in ("maintenance", "stopping"):
                    raise InstanceError(self._diagnose(
                        f"instance {self.name}: boot failed, systemd is in state '{state}'"))
            if time.monotonic() > deadline:
                raise InstanceError(self._diagnose(
                    f"instance {self.name}: systemd did not reach 'running' or 'degraded' within "
                    f"{self.boot_timeout:g} s (last state: {state})"))
            time.sleep(0.02)

    def _diagnose(self, message: str) -> str:
        """Append the console tail, launcher errors and failed units to message."""
        parts = [message]
        for fname, label in (("console.log", "console (last 40 lines)"),
                             ("launcher.err", "launcher stderr")):
            try:
                text = strip_ansi((self.state / fname).read_bytes().decode(errors="replace"))
            except FileNotFoundError:
                continue
            if text.strip():
                parts.append(f"--- {label} ---\n" + "\n".join(text.strip().splitlines()[-40:]))
        if (self.state / "pid").exists() and self._launcher.poll() is None:
            try:
                r = self.exec(["systemctl", "--failed", "--no-pager", "--no-legend"], cwd="/",
                              capture_output=True, text=True, timeout=5)
                parts.append("--- systemctl --failed ---\n" + (r.stdout + r.stderr).strip())
            except subprocess.TimeoutExpired:
                parts.append("--- systemctl --failed --- (no answer within 5 s)")
        return "\n".join(parts)

    def exec(self, argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             input=None, capture_output: bool = False, timeout: float | None = None,
             check: bool = False, **popen_kwargs) -> subprocess.CompletedProcess:
        """Run argv as root inside the instance, like subprocess.run; cwd defaults to ours."""
        # nsenter must outlive argv: dead first, it would orphan argv to a reaper outside the
        # instance's pid namespace, and an unreaped zombie in there stalls poweroff for 10 s.
        # So nsenter ignores the usual deadly signals and env restores them for argv.
        pid = self.pid
        if not self._owns(pid):  # else nsenter could enter a host process that reused the pid
            raise InstanceError(f"instance {self.name} is not running (pid {pid} is not its PID 1)")
        wrapped = ["sh", "-c", 'trap "" INT QUIT TERM HUP; exec "$@"', "sh",
                   "nsenter", "-t", str(pid), "-a", "-r", "-w", "--",
                   "env", "--default-signal=INT,QUIT,TERM,HUP", f"--chdir={cwd or os.getcwd()}",
                   "--", *argv]
        if capture_output:
            popen_kwargs["stdout"] = popen_kwargs["stderr"] = subprocess.PIPE
        if input is not None:
            popen_kwargs["stdin"] = subprocess.PIPE
        with subprocess.Popen(wrapped, env=sane_env(env), **popen_kwargs) as proc:
            try:
                out, err = proc.communicate(input, timeout)
            except BaseException:  # a timeout, Ctrl-C or SIGTERM of ours
                kill_entered(proc)
                raise
        result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check:
            result.check_returncode()
        return result

    def stop(self, timeout: float = 15.0) -> None:
        """Power the instance off (SIGKILL after timeout), then remove its cgroup and state."""
        # Ctrl-C must not leave half a cleanup behind: signals wait until we are done.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK,
                                         {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            # With no PID 1 to power off (not booted yet, or gone), kill the cgroup at once.
            self._empty_cgroup(patience=3 if self._poweroff(timeout) else 0)
            if self._launcher is not None:
                self._launcher.wait()
            self._remove_state()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _poweroff(self, timeout: float) -> bool:
        """Power PID 1 off (SIGKILL after timeout); tell whether there was one to stop."""
        try:
            pid = self.pid
            pidfd = os.pidfd_open(pid)
        except (InstanceError, ProcessLookupError, ValueError):
            return False
        try:
            if not self._owns(pid):
                return False  # a stale pid file whose number now belongs to someone else
            # Before systemd has exec'd, PID 1 of the namespace ignores everything but SIGKILL.
            if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                signal.pidfd_send_signal(pidfd, signal.SIGRTMIN + 4)
                if select.select([pidfd], [], [], timeout)[0]:
                    return True
                print(f"sysinstance: {self.name} did not power off within {timeout:g} s; "
                      "killing it", file=sys.stderr)
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            select.select([pidfd], [], [], 5)
            return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        finally:
            os.close(pidfd)

    def _owns(self, pid: int) -> bool:
        """Tell whether pid is PID 1 of a pid namespace and lives in our cgroup."""
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cgroups = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except FileNotFoundError:
            return False
        nspid = next((line.split()[1:] for line in status.splitlines()
                      if line.startswith("NSpid:")), [])
        ours = "/" + str(self.cgroup.relative_to(cgroup2_mount()))
        in_cgroup = any(line == f"0::{ours}" or line.startswith(f"0::{ours}/") for line in cgroups)
        return nspid[-1:] == ["1"] and in_cgroup

    def _wait_cgroup_empty(self, timeout: float) -> bool:
        """Wait up to timeout for the instance's cgroup to hold no process; tell if it does not."""
        deadline = time.monotonic() + timeout
        while "populated 1" in (self.cgroup / "cgroup.events").read_text():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _empty_cgroup(self, patience: float) -> None:
        """Kill what is left in the instance's cgroup after patience s; remove its directories."""
        if not self.cgroup.is_dir():
            return
        # script and unshare exit by themselves once PID 1 is gone; killing them at once
        # would orphan unshare before script reaps it.
        if not self._wait_cgroup_empty(patience):
            (self.cgroup / "cgroup.kill").write_text("1")  # only processes we started live here
            if not self._wait_cgroup_empty(5):
                raise InstanceError(f"processes remain in {self.cgroup} after cgroup.kill")
        for dirpath, _, _ in sorted(os.walk(self.cgroup), key=lambda w: -len(w[0])):
            os.rmdir(dirpath)  # deepest first: cgroup dirs go only once their children have

    def _remove_state(self) -> None:
        """Delete the state directory file by file (never a recursive delete as root)."""
        for fname in ("pid", "pid.tmp", "console.log", "launcher.err"):
            (self.state / fname).unlink(missing_ok=True)
        for path in (self.state / "mnt", self.state):
            if path.is_dir():
                path.rmdir()


# --- command line -----------------------------------------------------------------------


def parse_env(pairs: list[str]) -> dict[str, str]:
    """Turn K=V strings into a dict."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"sysinstance: --env wants K=V, got {pair!r}")
        env[key] = value
    return env


def exit_code(returncode: int) -> int:
    """Map a subprocess return code to a shell-style exit code."""
    return 128 - returncode if returncode < 0 else returncode


def run_foreground(inst: Instance, argv: list[str], cwd: str | None, env: dict[str, str]) -> int:
    """Run argv in inst, leaving Ctrl-C and Ctrl-\\ to argv as a shell does for its job."""
    seen: list[int] = []
    keys = (signal.SIGINT, signal.SIGQUIT)
    previous = {signum: signal.signal(signum, lambda signum, _frame: seen.append(signum))
                for signum in keys}
    try:
        returncode = inst.exec(argv, cwd=cwd, env=env).returncode
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # nsenter ignores these signals, so when argv dies of one it can only report 1.
    if returncode == 1 and seen:
        return 128 + seen[-1]
    return exit_code(returncode)


def raise_exit(signum: int, _frame) -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so the finally blocks clean up."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one subcommand."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_stage2"]:  # internal: the PID 1 side, started by Instance._launch
        stage2(*argv[1:4])
    parser = argparse.ArgumentParser(description="Boot a private systemd system instance "
                                     "over an overlay of / and run commands in it.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="boot, run CMD, power off; exit with CMD's code")
    p_start = sub.add_parser("start", help="boot and leave running")
    p_exec = sub.add_parser("exec", help="run CMD in a started instance")
    p_stop = sub.add_parser("stop", help="power off a started instance and clean up")
    for p in (p_run, p_start):
        p.add_argument("--name", help="instance name, also its hostname (default: run-RANDOM)")
        p.add_argument("--timeout", type=float, default=30.0, help="boot deadline in seconds")
        p.add_argument("--keep", action="append", default=[], metavar="DIR:PATH",
                       help="bind DIR (here) over PATH inside, so what is written there "
                            "outlives the instance (e.g. a state directory across a "
                            "poweroff and a second boot); repeatable")
    for p in (p_exec, p_stop):
        p.add_argument("--name", required=True)
    for p in (p_run, p_exec):
        p.add_argument("--cwd", help="working directory inside (default: the current one)")
        p.add_argument("--env", action="append", default=[], metavar="K=V")
        p.add_argument("cmd", nargs="+", metavar="CMD")
    args = parser.parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_exit)

    try:
        kept = tuple(tuple(k.split(":", 1)) for k in getattr(args, "keep", []))
        if any(len(k) != 2 for k in kept):
            raise InstanceError("--keep takes DIR:PATH")
        if args.command == "start":
            inst = Instance(args.name, boot_timeout=args.timeout, kept=kept).start()
            print(inst.pid, inst.state)
            return 0
        if args.command == "stop":
            inst = Instance(args.name)
            if not inst.state.exists() and not inst.cgroup.exists():
                raise InstanceError(f"no instance named {args.name}")
            inst.stop()
            return 0
        env = parse_env(args.env)
        if args.command == "exec":
            return run_foreground(Instance(args.name), args.cmd, args.cwd, env)
        with Instance(args.name, boot_timeout=args.timeout, kept=kept) as inst:
            return run_foreground(inst, args.cmd, args.cwd, env)
    except InstanceError as exc:
        print(f"sysinstance: {exc}", file=sys.stderr)
        return 125
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
