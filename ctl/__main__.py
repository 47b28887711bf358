"""clowderctl's entry point: `attach ID` is drawn before the rest of clowderctl is
imported (firstpaint.py); every command line then runs through cli.py."""

from .firstpaint import main

if __name__ == "__main__":
    main()
