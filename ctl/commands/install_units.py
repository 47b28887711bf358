"""clowderctl install-units: write the units for this installation and start the socket."""

import os
import shutil
import subprocess

from clowder_common.interpreter import module_command

from .. import units


def add_parser(sub):
    p = sub.add_parser("install-units", help="install and start the systemd units")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--system", dest="scope", action="store_const", const="system")
    scope.add_argument("--user", dest="scope", action="store_const", const="user")
    p.add_argument("--dest", help="write the files here and do nothing else")
    p.add_argument("--exec-start", default=module_command("ptyhostd"),
                   help="the host command (default: this Python with -m ptyhostd, from "
                        "where this clowderctl's packages are)")
    p.add_argument("--control-exec-start", default=None,
                   help="the control daemon's command (default: the host command with "
                        "ptyhostd replaced by controld)")
    p.set_defaults(run=run)


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"clowderctl install-units: {' '.join(cmd)} failed: "
                         f"{proc.stderr.strip() or proc.stdout.strip()}")


def run(args) -> int:
    scope = args.scope or ("system" if os.getuid() == 0 else "user")
    files = units.render(scope, args.exec_start, args.control_exec_start)
    if args.dest:
        dest = args.dest
    elif scope == "system":
        dest = "/etc/systemd/system"
    else:
        config = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        dest = os.path.join(config, "systemd", "user")
    os.makedirs(dest, exist_ok=True)
    for name, text in files.items():
        path = os.path.join(dest, name)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"wrote {path}")
    if args.dest:
        return 0
    if scope == "system":
        if os.getuid() != 0:
            raise SystemExit("clowderctl install-units --system: must be root")
        if subprocess.run(["getent", "group", "clowder"], capture_output=True).returncode:
            # Members of this group may reach the host's socket (0660, root:clowder).
            _run([shutil.which("groupadd") or "groupadd", "--system", "clowder"])
            print("created group clowder (add users to it to let them use clowder)")
    ctl = ["systemctl"] + (["--user"] if scope == "user" else [])
    _run(ctl + ["daemon-reload"])
    _run(ctl + ["enable", "--now", "clowder-ptyhost.socket", "clowder-control.socket"])
    # The control daemon runs from boot: it is what brings the agents back.
    _run(ctl + ["enable", "clowder-control.service"])
    print(f"enabled and started clowder-ptyhost.socket and clowder-control.socket ({scope})")
    return 0
