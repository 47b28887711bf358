"""Where clowderctl finds the daemons' sockets.

Apart from ctl/client.py because attach's first paint (ctl/firstpaint.py) needs the
path before it may import anything that costs start-up time: this imports only os.
"""

import os


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
