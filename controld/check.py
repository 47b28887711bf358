"""``python -m controld.check [--json] [--prog NAME] [FILE]``: validate a configuration
file (clowder.yaml) as clowder-control would load it, applying nothing.

``clowderctl config check`` runs this (ctl imports nothing of controld: the schema is
controld's, tests/test_layering.py).  Exit status: 0 valid, 1 invalid (the errors on
stderr, or in the JSON), 2 the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import config, configfile


def default_file() -> tuple[str, list[str]]:
    """The file to check, and every file that was considered (for the error message)."""
    (system,) = config.default_paths("system")
    if os.getuid() == 0:
        return system, [system]
    (user,) = config.default_paths("user")
    return (user if os.path.exists(user) else system), [user, system]


def check(path: str | None, as_json: bool, prog: str) -> int:
    path, considered = (path, [path]) if path else default_file()
    try:
        cfg = configfile.load(path)
    except FileNotFoundError:
        missing = (f"{path}: no such file" if len(considered) == 1 else
                   f"no configuration file: neither {' nor '.join(considered)} exists")
        print(f"{prog}: {missing}", file=sys.stderr)
        return 2
    except OSError as exc:  # a directory, no permission...
        print(f"{prog}: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    except config.ConfigError as exc:
        if as_json:
            print(json.dumps({"file": path, "ok": False, "errors": exc.errors}))
        else:
            for message in exc.errors:
                print(message, file=sys.stderr)
        return 1
    warnings = config.check_paths(cfg) + config.check_users(cfg)
    if as_json:
        print(json.dumps({"file": path, "ok": True, "warnings": warnings,
                          "config": config.to_dict(cfg)}))
        return 0
    n = len(cfg.agents)
    print(f"{path}: OK ({n} agent{'' if n == 1 else 's'})")
    for warning in warnings:
        print(f"{path}: warning: {warning}", file=sys.stderr)
    return 0


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m controld.check")
    p.add_argument("file", nargs="?")
    p.add_argument("--json", action="store_true")
    p.add_argument("--prog", default="clowder-control check", help="the name in messages")
    args = p.parse_args(argv)
    sys.exit(check(args.file, args.json, args.prog))


if __name__ == "__main__":
    main()
