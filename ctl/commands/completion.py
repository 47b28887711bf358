"""clowderctl completion SHELL: print the shell completion script (ctl/completion.py).

For installs without the packages (pip, pipx); the packages ship the same scripts
where each shell looks (examples below).
"""

from __future__ import annotations

import argparse
import sys

from ..completion import SHELLS

EXAMPLES = """\
examples:
  clowderctl completion bash > ~/.local/share/bash-completion/completions/clowderctl
  clowderctl completion zsh > ~/.zfunc/_clowderctl    # a directory on $fpath
  clowderctl completion fish > ~/.config/fish/completions/clowderctl.fish
"""


def add_parser(sub):
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or "
                       "fish)", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS, metavar="SHELL",
                   help=f"the shell to complete for: {', '.join(SHELLS)}")
    p.set_defaults(run=run)


def run(args) -> int:
    from .. import completion
    from ..cli import build_parser
    sys.stdout.write(completion.script(args.shell, build_parser()))
    return 0
