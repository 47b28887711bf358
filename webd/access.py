"""Who may see and type into what: the PTY host's own rules, applied to a browser's uid.

clowder-web connects to the host as root (the host then shows it every session) and
filters each answer by the uid its cookie was minted for, with the host's rule
(``ptyhostd/connection.py``, ``Connection._may``): root sees everything, anyone else
only the sessions that run as them.  Typing needs more: the web unit's own
``--input-for`` list must name the user (read-only is the default for everyone).
"""

from __future__ import annotations

import pwd


def may_see(uid: int, info: dict) -> bool:
    """Whether the user ``uid`` may see the session described by ``info`` (the host's
    SessionInfo dict): the host's rule for its own clients."""
    return uid == 0 or info.get("uid") == uid


def visible(uid: int, sessions: list[dict]) -> list[dict]:
    """The sessions of ``sessions`` that ``uid`` may see."""
    return [s for s in sessions if may_see(uid, s)]


def input_uids(names: list[str], option: str = "--input-for") -> frozenset[int]:
    """The uids of the users the web unit lets type (``--input-for``): names or numbers.
    An unknown name is an error at start, not a silent read-only."""
    uids = set()
    for name in names:
        if name.isdigit():
            uids.add(int(name))
            continue
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            raise ValueError(f"{option} {name!r}: no such user") from None
    return frozenset(uids)


def may_see_agent(uid: int, agent: dict) -> bool:
    """Whether ``uid`` sees agent ``agent`` (a StatusReport entry): clowder-control's rule
    (``Supervisor.may_drive``): root, and the agent's ``user:``.  (Its own uid is root
    here: clowder-web serves the system scope.)"""
    if uid == 0:
        return True
    user = agent.get("user")
    if not user:
        return False
    try:
        return pwd.getpwnam(user).pw_uid == uid
    except KeyError:
        return False


def may_type(uid: int, info: dict, typists: frozenset[int]) -> bool:
    """Whether ``uid`` may send input to the session ``info`` through the web view: it
    may see it, and the web unit's configuration lets that user type."""
    return uid in typists and may_see(uid, info)
