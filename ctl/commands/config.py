"""clowderctl config: work with the agents configuration (clowder.yaml) of clowder-control."""

import os
import sys


EPILOG = """\
examples:
  clowderctl config check
  clowderctl config check ~/.config/clowder/clowder.yaml --json
"""


def add_parser(sub):
    p = sub.add_parser("config", help="check the agents configuration", epilog=EPILOG)
    actions = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="validate a configuration file without "
                               "applying it", epilog=EPILOG)
    check.add_argument("file", nargs="?", metavar="FILE",
                       help="the file (default: the user's if it exists and you are not "
                            "root, else the system's)")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(config_run=run_check)
    p.set_defaults(run=run)


def run(args) -> int:
    return args.config_run(args)


def run_check(args) -> int:
    """Hand over to controld's own check, in this process (exec): the schema is
    clowder-control's, and ctl imports nothing of it (tests/test_layering.py).  The
    packages are those beside this ctl, whatever the current directory holds (-P)."""
    tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    argv = [sys.executable, "-P", "-m", "controld.check", "--prog", "clowderctl config check"]
    if args.json:
        argv.append("--json")
    if args.file:
        argv += ["--", args.file]
    sys.stdout.flush()
    os.execve(sys.executable, argv, env)
