"""Where clowderctl finds things: the daemons' sockets, the client configuration, and
the ``--socket PATH`` a plain command line starts with.

Apart from ctl/client.py and ctl/fleet.py because the commands answered before the rest
of clowderctl is imported (attach's first paint, ctl/firstpaint.py; ps, ctl/quickps.py)
need them first, and may import nothing that costs start-up time: this imports only os.
"""

import os

CONFIG_ENV = "CLOWDER_CLIENT_CONFIG"


def _socket(name: str, env_var: str) -> str:
    """$env_var, else the user's socket (when not root and it exists), else the system's."""
    env = os.environ.get(env_var)
    if env:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if os.getuid() != 0 and runtime and os.path.exists(f"{runtime}/clowder/{name}"):
        return f"{runtime}/clowder/{name}"
    return f"/run/clowder/{name}"


def default_socket() -> str:
    """The PTY host's socket."""
    return _socket("ptyhost.sock", "CLOWDER_SOCKET")


def default_control_socket() -> str:
    """clowder-control's socket."""
    return _socket("control.sock", "CLOWDER_CONTROL_SOCKET")


def config_path() -> str:
    """The client configuration's file (ctl/fleet.py reads it): $CLOWDER_CLIENT_CONFIG,
    else $XDG_CONFIG_HOME/clowder/client.yaml, else ~/.config/clowder/client.yaml."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return given
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return os.path.join(base, "clowder", "client.yaml")


def after_socket(argv: list[str]) -> tuple[str | None, list[str]] | None:
    """(the PATH of a leading ``--socket PATH`` or ``--socket=PATH``, or None; the rest of
    ``argv``); None when the option is given without a path (argparse's to report)."""
    if argv[:1] == ["--socket"]:
        ok = len(argv) > 1 and argv[1] and not argv[1].startswith("-")
        return (argv[1], argv[2:]) if ok else None
    if argv[:1] and argv[0].startswith("--socket="):
        path = argv[0][len("--socket="):]
        return (path, argv[1:]) if path else None
    return None, argv
