"""clowderctl install-units: write the units for this installation and start the socket."""

import os
import pwd
import shutil
import sys
import subprocess

from clowder_common.interpreter import module_command

from .. import units


def add_parser(sub):
    p = sub.add_parser("install-units", help="install and start the systemd units",
                       epilog="""\
examples:
  sudo clowderctl install-units --system
  clowderctl install-units --user
  clowderctl install-units --user --dest /tmp/units
  sudo clowderctl install-units --system --web
""")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--system", dest="scope", action="store_const", const="system",
                       help="system units in /etc/systemd/system (default as root)")
    scope.add_argument("--user", dest="scope", action="store_const", const="user",
                       help="your own user units (default when not root)")
    p.add_argument("--dest", metavar="DIR",
                   help="write the files here and do nothing else")
    p.add_argument("--exec-start", default=module_command("ptyhostd"), metavar="COMMAND",
                   help="the host command (default: this Python with -m ptyhostd, from "
                        "where this clowderctl's packages are)")
    p.add_argument("--control-exec-start", default=None, metavar="COMMAND",
                   help="the control daemon's command (default: the host command with "
                        "ptyhostd replaced by controld)")
    p.add_argument("--web", action="store_true",
                   help="--system: also install and start the web view "
                        "(clowder-web.socket, 127.0.0.1:7380)")
    p.add_argument("--web-exec-start", default=None, metavar="COMMAND",
                   help="the web view's command (default: the host command with "
                        "ptyhostd replaced by webd)")
    p.add_argument("--no-linger", action="store_true",
                   help="--user: do not enable lingering (the units then stop when your "
                        "last login session ends)")
    p.set_defaults(run=run)

LINGER_DIR = "/var/lib/systemd/linger"  # logind's record of who lingers
# loginctl's words (systemd 252) when there is no logind to ask, and when polkit says no.
NO_LOGIND = ("org.freedesktop.login1", "systemd-logind", "Failed to connect to bus",
             "masked", "not found")
REFUSED = ("Access denied", "authentication", "Authorization", "not authorized",
           "Permission denied")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"clowderctl install-units: {' '.join(cmd)} failed: "
                         f"{proc.stderr.strip() or proc.stdout.strip()}")


def run(args) -> int:
    scope = args.scope or ("system" if os.getuid() == 0 else "user")
    files = units.render(scope, args.exec_start, args.control_exec_start)
    if args.web:
        if scope != "system":
            raise SystemExit("clowderctl install-units --web: the web view has system "
                             "units only, so far")
        files.update(units.render_web(args.web_exec_start
                                      or args.exec_start.replace("ptyhostd", "webd")))
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
    if args.web:
        _run(ctl + ["enable", "--now", "clowder-web.socket"])
        print("enabled and started clowder-web.socket: `clowderctl web` prints a login URL")
    if scope == "user" and not args.no_linger:
        enable_linger()
    return 0


def enable_linger() -> bool:
    """Ask logind to keep our user manager (and so the units) running without a login
    session, as `loginctl enable-linger` does; say exactly why not if it cannot.  Not
    an error: the units work until the last session ends."""
    user = pwd.getpwuid(os.getuid()).pw_name
    if os.path.exists(os.path.join(LINGER_DIR, user)):
        print(f"lingering is enabled for {user}: the units keep running after you log out")
        return True
    fix = (f"your user units stop when your last login session ends; to keep them, an "
           f"administrator can run: loginctl enable-linger {user}")
    try:
        proc = subprocess.run(["loginctl", "--no-ask-password", "enable-linger", user],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        print(f"clowderctl install-units: cannot enable lingering for {user}: loginctl is "
              f"not installed; {fix}", file=sys.stderr)
        return False
    if proc.returncode:
        err = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
        # (/run/systemd/seats cannot tell: tmpfiles makes it whether logind runs or not.)
        if any(w in err for w in NO_LOGIND):
            why = "systemd-logind is not running here"
        elif any(w in err for w in REFUSED):
            why = "polkit refused it"
        else:
            why = "logind refused it"
        print(f"clowderctl install-units: cannot enable lingering for {user}: {why} "
              f"(loginctl: {err}); {fix}", file=sys.stderr)
        return False
    print(f"enabled lingering for {user} (loginctl enable-linger): the units keep running "
          f"after you log out")
    return True
