"""clowderctl's entry point: `ps` is answered (quickps.py) and `attach [ID]` drawn
(firstpaint.py) before the rest of clowderctl is imported; every other command line,
and those when anything is unusual, runs through cli.py."""

import sys


def main(argv: list[str] | None = None):
    argv = sys.argv[1:] if argv is None else argv
    if "ps" in argv:  # the plain `ps` only (quickps.plain_ps); not imported otherwise
        from .quickps import attempt
        code = attempt(argv)
        if code is not None:
            return code
    from .firstpaint import main as run_command_line
    return run_command_line(argv)


if __name__ == "__main__":
    sys.exit(main())
