#!/usr/bin/env python3
"""A real ssh "remote host" for tests: a second systemd instance running sshd.

Recipe: /work/shared/notes/systemd.md, section 6. The box is a private systemd system
instance (tools/sysinstance.py) in its own network namespace, running Debian's sshd with
a host key made here and pinned in a known_hosts file, key-only login as root. The
client side is a network namespace of its own too, held open by a file descriptor of
this process (no process is left to kill, no /run/netns mount is made): ssh runs in it
through ``nsenter --net=/proc/<our pid>/fd/<fd>``, which is part of the ssh command this
module hands out (``CLOWDER_SSH``), so the caller's own namespace is never touched.
A veth pair joins the two, with addresses that exist only in them:

    client namespace  clw-c 169.254.77.1/30  <-- veth -->  clw-s 169.254.77.2/30  box

Several boxes can run at once (a fleet's tests): box N (``index=N``) has the /30 at
169.254.77.4N and the interfaces clw-cN / clw-sN (box 0 keeps the names above), and a
box started with ``client=`` an earlier one shares that one's client namespace and keys,
so one ssh command (one $CLOWDER_SSH) reaches them all.

    sshhost.py fetch [--cache DIR]       download the debs (on the host: the box has no
                                         network); run once before the tests
    sshhost.py run [--cache DIR] -- CMD  boot a box, run CMD here with CLOWDER_SSH and
                                         CLOWDER_SSH_TARGET set, power the box off

It works from the host and from inside a sysinstance (instances nest: the box then runs
inside the test instance, where tests/test_remote.py starts it).

From Python:

    with SshHost() as box:
        subprocess.run([*box.ssh_command, box.target, "hostname"])
        box.exec(["systemctl", "is-active", "ssh"])
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sysinstance import Instance, InstanceError  # noqa: E402

DEFAULT_CACHE = Path("/opt/clowder-dev/debs")
PACKAGES = ("openssh-server",)  # with what apt says they need that is not installed
LIST = "sshhost.list"  # in the cache: the files of the last fetch, in install order
CLIENT_ADDR, BOX_ADDR, PREFIX = "169.254.77.1", "169.254.77.2", 30  # box 0's
CLIENT_IF, BOX_IF = "clw-c", "clw-s"
MAX_BOXES = 64  # 169.254.77.0/24 in /30s
SSHD_CONF = """\
# clowder test box: key-only login, with a host key pinned by the client.
HostKey /etc/ssh/clowder_host_ed25519_key
AuthorizedKeysFile /etc/ssh/clowder_authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthenticationMethods publickey
UseDNS no
"""


class SshHostError(Exception):
    """The box could not be prepared, reached or stopped."""


# --- fetch (on the host) ----------------------------------------------------------------


def _simulate() -> subprocess.CompletedProcess:
    return subprocess.run(["apt-get", "install", "--simulate", "--no-install-recommends",
                           *PACKAGES], capture_output=True, text=True,
                          env={**os.environ, "LANG": "C"})


def fetch(cache: Path) -> list[str]:
    """Download the debs sshd needs on this machine into ``cache``; their file names."""
    sim = _simulate()
    if sim.returncode != 0 or "Inst " not in sim.stdout:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        sim = _simulate()
    if sim.returncode != 0:
        raise SshHostError(f"apt-get cannot plan {' '.join(PACKAGES)}: {sim.stderr.strip()}")
    # "Inst NAME [OLD] (VERSION ...)": every package to install or upgrade, in apt's order
    # (openssh-client too when its installed version is not the one the server wants).
    wanted = re.findall(r"^Inst (\S+) (?:\[[^]]*\] )?\((\S+) ", sim.stdout, re.M)
    if not wanted:
        raise SshHostError("apt-get plans nothing to install: is openssh-server installed "
                           "on the host already? (the box needs its debs)")
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "-q", *[f"{n}={v}" for n, v in wanted]],
                   cwd=cache, check=True, capture_output=True)
    files = []
    for name, version in wanted:
        arch_files = list(cache.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
        if len(arch_files) != 1:
            raise SshHostError(f"apt-get download left no single deb for {name} {version} "
                               f"in {cache}")
        files.append(arch_files[0].name)
    (cache / LIST).write_text("".join(f + "\n" for f in files))
    return files


def cached_debs(cache: Path) -> list[Path]:
    """The debs of the last fetch; SshHostError saying how to get them if missing."""
    try:
        names = (cache / LIST).read_text().split()
    except FileNotFoundError:
        names = []
    debs = [cache / n for n in names]
    if not debs or not all(d.exists() for d in debs):
        raise SshHostError(f"no openssh-server debs in {cache}: run `python3 "
                           f"tools/sshhost.py fetch` on the host first (the box has no "
                           f"network, and the host's packages are left alone)")
    return debs


# --- the box ----------------------------------------------------------------------------


class SshHost:
    """A booted box with sshd, reachable as ``target`` through ``ssh_command``."""

    def __init__(self, name: str = "sshbox", cache: Path = DEFAULT_CACHE, index: int = 0,
                 client: SshHost | None = None):
        if not 0 <= index < MAX_BOXES:
            raise SshHostError(f"box index {index}: expected 0 to {MAX_BOXES - 1}")
        self.name = name
        self.cache = Path(cache)
        self.index = index
        self.client_addr, self.box_addr = f"169.254.77.{4 * index + 1}", \
            f"169.254.77.{4 * index + 2}"
        suffix = str(index) if index else ""
        self.client_if, self.box_if = CLIENT_IF + suffix, BOX_IF + suffix
        self.target = f"root@{self.box_addr}"
        # A box sharing an earlier one's client side (its namespace and keys): that one
        # owns them, and must be stopped after this one.
        self.client = client
        self.instance: Instance | None = None
        self.netns = -1  # fd of the client-side network namespace
        self.dir: Path | None = None  # keys and known_hosts, ours only (0700)
        self.ssh_command: list[str] = []

    def __enter__(self) -> SshHost:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- start ----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> SshHost:
        """Boot the box, install and configure sshd, wire the network; wait for login."""
        if os.geteuid() != 0:
            raise SshHostError("sshhost needs root")
        for tool in ("ssh", "ssh-keygen", "nsenter", "unshare", "ip"):
            if not shutil.which(tool):
                raise SshHostError(f"{tool} is not installed on this side")
        debs = cached_debs(self.cache)
        try:
            self._keys()
            # A loaded machine (two cores, other instances) can take a while to boot.
            self.instance = Instance(self.name, boot_timeout=timeout).start()
            self._install_sshd(debs)
            self._network()
            self._wait_login(time.monotonic() + timeout)
        except subprocess.CalledProcessError as exc:
            self.stop()
            out = exc.stderr or exc.stdout or b""
            raise SshHostError(f"{shlex.join(map(str, exc.cmd))} failed (status "
                               f"{exc.returncode}): {out.decode(errors='replace').strip()}") \
                from None
        except BaseException:
            self.stop()
            raise
        return self

    def _keys(self) -> None:
        """A host key (pinned in known_hosts) and a client key, made here (or the
        client box's, with this box's address added to its known_hosts)."""
        if self.client is not None:
            if self.client.dir is None:
                raise SshHostError(f"box {self.client.name} (the client side) is not started")
            self.dir = self.client.dir
            host_pub = (self.dir / "host_key.pub").read_text().split()
            with open(self.dir / "known_hosts", "a") as f:
                f.write(f"{self.box_addr} {host_pub[0]} {host_pub[1]}\n")
            return
        self.dir = Path(tempfile.mkdtemp(prefix=f"clowder-sshhost-{self.name}-"))
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            f"clowder-sshhost-{key}", "-f", str(self.dir / key)], check=True)
        host_pub = (self.dir / "host_key.pub").read_text().split()
        (self.dir / "known_hosts").write_text(f"{self.box_addr} {host_pub[0]} {host_pub[1]}\n")

    def put(self, path: str, data: bytes, mode: str = "0644") -> None:
        """Write a file inside the box (whatever of ours it can or cannot see)."""
        self.exec(["install", "-D", "-m", mode, "/dev/stdin", path], input=data, check=True,
                  capture_output=True)

    def _install_sshd(self, debs: list[Path]) -> None:
        # Masked at boot when the lower layer has them installed; harmless otherwise.
        self.exec(["systemctl", "unmask", "ssh.service", "ssh.socket"], capture_output=True)
        r = self.exec(["dpkg", "-i", *map(str, debs)], capture_output=True,
                      env={"DEBIAN_FRONTEND": "noninteractive"})
        if r.returncode != 0:
            raise SshHostError(f"dpkg -i in the box failed: "
                               f"{(r.stdout + r.stderr).decode(errors='replace')[-2000:]}")
        self.put("/etc/ssh/clowder_host_ed25519_key", (self.dir / "host_key").read_bytes(),
                  "0600")
        self.put("/etc/ssh/clowder_authorized_keys",
                  (self.dir / "client_key.pub").read_bytes(), "0644")
        self.put("/etc/ssh/sshd_config.d/clowder-test.conf", SSHD_CONF.encode(), "0644")
        # ssh.service checks the configuration (sshd -t) before it starts sshd.
        r = self.exec(["systemctl", "restart", "ssh.service"], capture_output=True)
        if r.returncode != 0:
            log = self.exec(["journalctl", "--no-pager", "-n", "20", "-u", "ssh.service"],
                            capture_output=True)
            raise SshHostError(f"sshd in the box did not start: "
                               f"{(r.stderr + log.stdout).decode(errors='replace')}")

    def _network(self) -> None:
        """The client namespace, held by an fd; a veth pair into the box, by pid."""
        if self.client is not None:
            self.netns = self.client.netns
        else:
            self._client_namespace()
        enter = ["nsenter", f"--net={self.netns_path}"]
        for argv in (["ip", "link", "set", "lo", "up"],
                     ["ip", "link", "add", self.client_if, "type", "veth", "peer", "name",
                      self.box_if, "netns", str(self.instance.pid)],
                     ["ip", "addr", "add", f"{self.client_addr}/{PREFIX}", "dev",
                      self.client_if],
                     ["ip", "link", "set", self.client_if, "up"]):
            subprocess.run(enter + argv, check=True, capture_output=True)
        for argv in (["ip", "addr", "add", f"{self.box_addr}/{PREFIX}", "dev", self.box_if],
                     ["ip", "link", "set", self.box_if, "up"]):
            self.exec(argv, check=True, capture_output=True)
        self.ssh_command = [
            "nsenter", f"--net={self.netns_path}", "ssh", "-F", "/dev/null",
            "-i", str(self.dir / "client_key"), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={self.dir / 'known_hosts'}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]

    def _client_namespace(self) -> None:
        """A network namespace of our own for the client side, held by an fd."""
        holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"])
        try:
            ours = os.readlink("/proc/self/ns/net")
            deadline = time.monotonic() + 10
            while os.readlink(f"/proc/{holder.pid}/ns/net") == ours:
                if time.monotonic() > deadline or holder.poll() is not None:
                    raise SshHostError("unshare --net did not make a network namespace")
                time.sleep(0.01)
            self.netns = os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            holder.kill()
            holder.wait()

    @property
    def netns_path(self) -> str:
        """The client namespace, as a path any root process here can nsenter."""
        return f"/proc/{os.getpid()}/fd/{self.netns}"

    def _wait_login(self, deadline: float) -> None:
        while True:
            try:
                r = self.ssh(["true"], timeout=max(1.0, deadline - time.monotonic()))
                said = r.stderr.decode(errors="replace").strip()
                if r.returncode == 0:
                    return
            except subprocess.TimeoutExpired:
                said = "no answer"
            if time.monotonic() > deadline:
                raise SshHostError(f"ssh {self.target} does not log in: {said}")
            time.sleep(0.1)

    # --- use ------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """What clowderctl --host needs to reach the box (beside $CLOWDER_REMOTE_CTL)."""
        return {"CLOWDER_SSH": shlex.join(self.ssh_command), "CLOWDER_SSH_TARGET": self.target}

    def exec(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run argv as root inside the box (not over ssh), like subprocess.run."""
        kw.setdefault("cwd", "/")
        return self.instance.exec(argv, **kw)

    def ssh(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        """Run a command in the box over ssh (argv quoted for the remote shell)."""
        kw.setdefault("capture_output", True)
        return subprocess.run([*self.ssh_command, self.target, shlex.join(argv)],
                              stdin=subprocess.DEVNULL, **kw)

    def link(self, up: bool) -> None:
        """Cut or restore the network between the client side and the box."""
        subprocess.run(["nsenter", f"--net={self.netns_path}", "ip", "link", "set",
                        self.client_if, "up" if up else "down"], check=True,
                       capture_output=True)

    # --- stop -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Power the box off, drop the client namespace (and the veth), delete the keys."""
        try:
            if self.instance is not None:
                self.instance.stop()
                self.instance = None
        finally:
            if self.client is not None:
                # The client box's namespace and keys: our veth went with our instance.
                self.netns, self.dir = -1, None
            if self.netns >= 0:
                os.close(self.netns)  # the last reference: namespace and veth go with it
                self.netns = -1
            if self.dir is not None:
                for name in ("host_key", "host_key.pub", "client_key", "client_key.pub",
                             "known_hosts"):
                    (self.dir / name).unlink(missing_ok=True)
                self.dir.rmdir()
                self.dir = None


# --- command line -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="A real ssh remote host for clowder's tests.")
    sub = p.add_subparsers(dest="command", required=True)
    p_fetch = sub.add_parser("fetch", help="download the debs the box installs")
    p_run = sub.add_parser("run", help="boot a box, run CMD beside it, power it off")
    for q in (p_fetch, p_run):
        q.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p_run.add_argument("--name", default="sshbox")
    p_run.add_argument("cmd", nargs="+", metavar="CMD")
    args = p.parse_args(argv)
    try:
        if args.command == "fetch":
            for name in fetch(args.cache):
                print(args.cache / name)
            return 0
        with SshHost(args.name, args.cache) as box:
            return subprocess.run(args.cmd, env={**os.environ, **box.env()}).returncode
    except (SshHostError, InstanceError) as exc:
        print(f"sshhost: {exc}", file=sys.stderr)
        return 125
    except subprocess.CalledProcessError as exc:  # from fetch
        print(f"sshhost: {shlex.join(map(str, exc.cmd))} failed: "
              f"{(exc.stderr or b'').decode(errors='replace').strip()}", file=sys.stderr)
        return 125


if __name__ == "__main__":
    sys.exit(main())
