"""clowderctl config: work with the agents configuration (clowder.yaml) of clowder-control."""

import json
import os
import sys


def add_parser(sub):
    p = sub.add_parser("config", help="check the agents configuration")
    actions = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="validate a configuration file without applying it")
    check.add_argument("file", nargs="?", metavar="FILE",
                       help="the file (default: the user's if it exists and you are not "
                            "root, else the system's)")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(config_run=run_check)
    p.set_defaults(run=run)


def run(args) -> int:
    return args.config_run(args)


def _config():
    # Imported here: YAML is a quarter of clowderctl's start-up, and only this needs it.
    from controld import config
    return config


def default_file() -> tuple[str, list[str]]:
    """The file to check, and every file that was considered (for the error message)."""
    config = _config()
    (system,) = config.default_paths("system")
    if os.getuid() == 0:
        return system, [system]
    (user,) = config.default_paths("user")
    return (user if os.path.exists(user) else system), [user, system]


def run_check(args) -> int:
    config = _config()
    path, considered = (args.file, [args.file]) if args.file else default_file()
    try:
        from controld import configfile
        cfg = configfile.load(path)
    except FileNotFoundError:
        missing = (f"{path}: no such file" if len(considered) == 1 else
                   f"no configuration file: neither {' nor '.join(considered)} exists")
        print(f"clowderctl config check: {missing}", file=sys.stderr)
        return 2
    except OSError as exc:  # a directory, no permission...
        print(f"clowderctl config check: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    except config.ConfigError as exc:
        if args.json:
            print(json.dumps({"file": path, "ok": False, "errors": exc.errors}))
        else:
            for message in exc.errors:
                print(message, file=sys.stderr)
        return 1
    warnings = config.check_paths(cfg)
    if args.json:
        print(json.dumps({"file": path, "ok": True, "warnings": warnings,
                          "config": config.to_dict(cfg)}))
        return 0
    n = len(cfg.agents)
    print(f"{path}: OK ({n} agent{'' if n == 1 else 's'})")
    for warning in warnings:
        print(f"{path}: warning: {warning}", file=sys.stderr)
    return 0
