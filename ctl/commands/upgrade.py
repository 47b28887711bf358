"""clowderctl upgrade --check: would the running host hand off to the installed code?"""

import json

import clowder_wire as protocol

from .. import exits
from ..client import Client


def add_parser(sub):
    p = sub.add_parser("upgrade", help="check an upgrade of the running host", epilog=f"""\
It exits {exits.OK} when the hand-off would be accepted (`systemctl reload clowder-ptyhost`
then hands off in place), {exits.REFUSED} when the host refuses it, saying why.

--json prints one object: {{"ok": true|false, "message": why, "version": the running
  host's, "new_version": the installed code's}}

examples:
  clowderctl upgrade --check && systemctl reload clowder-ptyhost
  clowderctl upgrade --check --json
""")
    p.add_argument("--check", action="store_true", required=True,
                   help="run the hand-off pre-check (changes nothing)")
    p.add_argument("--json", action="store_true", help="print the check's answer as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    with Client(args.socket) as c:
        rep = c.request(protocol.UpgradeCheck(), protocol.CheckReport)
    code = exits.OK if rep.ok else exits.REFUSED
    if args.json:
        print(json.dumps({"ok": bool(rep.ok), "message": rep.message,
                          "version": rep.version, "new_version": rep.new_version}))
    elif rep.ok:
        print(f"ok: running {rep.version}, installed {rep.new_version}: {rep.message}; "
              f"`systemctl reload clowder-ptyhost` hands off in place")
    else:
        print(f"refused: running {rep.version}: {rep.message}")
    return code
