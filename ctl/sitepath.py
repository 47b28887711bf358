"""Python's `site`, run when a command needs more than clowderctl's quick paths.

clowderctl's script (bin/clowderctl, and the packages' wrapper, install-tree.sh) starts
the interpreter with -S: without `site`, whose .pth files and user directory cost ~1.5 ms
of every command on these machines, while `ps` and `attach` need only the standard
library and clowder's own packages (quickps.py, firstpaint.py).  Every other command line
goes through cli.py, which calls ``complete`` first: its subcommands may import what only
site puts on the path (PyYAML in Debian's dist-packages, a user's installs)."""

import sys


def complete() -> None:
    """Run site as the interpreter would have at start, once; nothing without -S."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site
        site.main()
