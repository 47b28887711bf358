"""Several hosts seen as one fleet: which hosts, and asking them all at once.

A fleet is a list of host names: ``--host`` given more than once, or the ``hosts:`` list
of the client configuration file (``$CLOWDER_CLIENT_CONFIG``, else
``$XDG_CONFIG_HOME/clowder/client.yaml``, else ``~/.config/clowder/client.yaml``) when no
``--host`` is given.  "local" (or an empty name) is this machine's own sockets; any other
name is reached as with one ``--host``: ``ssh HOST clowderctl relay`` (ctl/transport.py).

``ask(hosts, question)`` runs ``question(target)`` for every host at once, a thread each,
and gives back one ``Answer`` per host, in the order given, by the fleet's deadline: a
host that is cut off, frozen or slow is an answer with an ``error`` then, and never holds
up the others.  Nothing here clusters anything: each box is its own ssh and systemd.
"""

from __future__ import annotations

import os
import time

from . import deadline, exits
from .client import ClientError, UsageError, default_control_socket, default_socket
from .paths import CONFIG_ENV, config_path
from .transport import Remote, end_all

LOCAL = "local"
# A fleet's deadline when neither --timeout nor $CLOWDER_TIMEOUT gives one: a person
# looking at many hosts wants the ones that answer now, and the others named as not.
DEFAULT_TIMEOUT = 5.0
# After the deadline, how long a host's own Client may still take to say why it failed
# (ssh's last words) before the host is marked "no answer" and its ssh is ended.
GRACE = 0.5


class ConfigError(UsageError):
    """The client configuration file cannot be read or is not what it should be."""


def configured_hosts() -> list[str] | None:
    """The ``hosts:`` of the client configuration; None when there is no such file."""
    path = config_path()
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV):
            raise ConfigError(f"${CONFIG_ENV}: no such file: {path}") from None
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    import yaml  # only when there is a file: most commands never read one
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping (e.g. `hosts: [local, box]`), "
                          f"got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - {"hosts"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} (known: hosts)")
    hosts = data.get("hosts")
    if hosts is None:
        return None
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{path}: hosts: expected a list of host names "
                          f"([USER@]HOST, or local)")
    for h in hosts:
        check(h, path)
    return hosts


def check(host: str, where: str = "--host") -> None:
    """A UsageError unless ``host`` can name a host (local, or what ssh takes)."""
    if not is_local(host):
        try:
            Remote(host)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None


def is_local(host: str) -> bool:
    return host in ("", LOCAL)


def shown_name(host: str) -> str:
    return LOCAL if is_local(host) else host


def target(host: str, args, to: str) -> str | Remote:
    """Where to connect for ``host``: the PTY host (to="host") or clowder-control."""
    if to == "host":
        socket = args.socket if isinstance(args.socket, str) else None
        return (socket or default_socket()) if is_local(host) else \
            Remote(host, socket, target="host")
    socket = args.control_socket if isinstance(args.control_socket, str) else None
    return (socket or default_control_socket()) if is_local(host) else \
        Remote(host, socket, target="control")


class Answer:
    """One host's answer: ``value``, or ``error`` (why not) and its exit ``code``."""

    __slots__ = ("host", "value", "error", "code", "seconds")

    def __init__(self, host: str):
        self.host = shown_name(host)
        self.value = None
        self.error: str | None = "no answer"
        self.code = exits.TIMEOUT
        self.seconds: float | None = None

    @property
    def answered(self) -> bool:
        return self.error is None

    def as_json(self) -> dict:
        return {"host": self.host, "answered": self.answered, "error": self.error,
                "seconds": None if self.seconds is None else round(self.seconds, 3)}


def ask(hosts: list[str], question, timeout: float | None = None) -> list[Answer]:
    """``question(host)`` on every host at once; an Answer each, by the deadline."""
    import threading  # here: most clowderctl commands never ask a fleet
    timeout = deadline.seconds() if timeout is None else timeout
    answers = [Answer(h) for h in hosts]
    start = time.monotonic()

    def one(host: str, answer: Answer) -> None:
        try:
            value = question(host)
        except ClientError as exc:
            answer.error, answer.code = str(exc), exc.exit_code
        except Exception as exc:  # one host's surprise is that host's row, not a crash
            answer.error, answer.code = f"{type(exc).__name__}: {exc}", exits.REFUSED
        else:
            answer.value, answer.error, answer.code = value, None, exits.OK
        answer.seconds = time.monotonic() - start

    threads = [threading.Thread(target=one, args=(h, a), daemon=True,
                                name=f"fleet-{a.host}") for h, a in zip(hosts, answers)]
    for t in threads:
        t.start()
    end = start + timeout + GRACE
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    late = [a for t, a in zip(threads, answers) if t.is_alive()]
    for a in late:
        a.error = f"no answer within {timeout:g} s"
        a.code = exits.TIMEOUT
    if late:
        end_all()  # their ssh: a late thread then fails on its own, unheard
    return answers


def exit_code(answers: list[Answer]) -> int:
    """0 when every host answered, PARTIAL when some did, UNREACHABLE when none did."""
    failed = [a for a in answers if a.code != exits.OK]
    if not failed:
        return exits.OK
    return exits.PARTIAL if len(failed) < len(answers) else exits.UNREACHABLE


def set_default_deadline() -> None:
    """The fleet's own default deadline, unless --timeout or $CLOWDER_TIMEOUT gives one."""
    if deadline.given() is None and not os.environ.get(deadline.ENV):
        deadline.set_seconds(DEFAULT_TIMEOUT)
