"""clowderctl upgrade --check: would the running host hand off to the installed code?"""

import clowder_wire as protocol

from ..client import Client


def add_parser(sub):
    p = sub.add_parser("upgrade", help="check an upgrade of the running host")
    p.add_argument("--check", action="store_true", required=True,
                   help="run the hand-off pre-check (changes nothing)")
    p.set_defaults(run=run)


def run(args) -> int:
    with Client(args.socket) as c:
        rep = c.request(protocol.UpgradeCheck(), protocol.CheckReport)
    if rep.ok:
        print(f"ok: running {rep.version}, installed {rep.new_version}: {rep.message}; "
              f"`systemctl reload clowder-ptyhost` hands off in place")
        return 0
    print(f"refused: running {rep.version}: {rep.message}")
    return 1
