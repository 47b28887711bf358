"""One-time login tokens and the cookies they are exchanged for, each bound to a uid.

A token is minted for the uid that asked on the token socket (``SO_PEERCRED``,
mint.py), lives TOKEN_TTL seconds and is good once: /login?token= trades it for a
cookie (HttpOnly, SameSite=Strict) that lives COOKIE_TTL.  Both tables are bounded:
a uid holds at most PER_UID of each (its oldest goes first) and all uids together at
most TOTAL, so asking in a loop costs the daemon a fixed amount of memory
(tests/test_web.py::test_minting_in_a_loop_stays_bounded).
"""

from __future__ import annotations

import os
import time
from typing import Optional

TOKEN_TTL = 120.0  # seconds from `clowderctl web` to the browser opening the URL
COOKIE_TTL = 12 * 3600.0  # a browser's login lasts a working day
PER_UID = 8  # outstanding tokens (and cookies) of one uid
TOTAL = 1024  # of all uids together


class Table:
    """Secrets -> (uid, expiry), bounded per uid and in total."""

    def __init__(self, ttl: float, per_uid: int = PER_UID, total: int = TOTAL):
        self.ttl, self.per_uid, self.total = ttl, per_uid, total
        self._entries: dict[str, tuple[int, float]] = {}  # in insertion (age) order

    def __len__(self) -> int:
        return len(self._entries)

    def count(self, uid: int) -> int:
        return sum(1 for u, _ in self._entries.values() if u == uid)

    def add(self, uid: int) -> str:
        """A new secret for ``uid``; the uid's oldest (or anyone's oldest) goes if full."""
        self._expire()
        mine = [k for k, (u, _) in self._entries.items() if u == uid]
        for key in mine[:max(0, len(mine) - self.per_uid + 1)]:
            del self._entries[key]
        while len(self._entries) >= self.total:
            del self._entries[next(iter(self._entries))]
        secret = os.urandom(32).hex()
        self._entries[secret] = (uid, time.monotonic() + self.ttl)
        return secret

    def get(self, secret: str) -> Optional[int]:
        """The uid ``secret`` was made for, None if unknown or expired."""
        entry = self._entries.get(secret)
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def take(self, secret: str) -> Optional[int]:
        """``get``, and the secret is gone (a token is good once)."""
        uid = self.get(secret)
        self._entries.pop(secret, None)
        return uid

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, (_, t) in self._entries.items() if t < now]:
            del self._entries[key]


class Tokens:
    """The daemon's two tables: one-time tokens and the cookies they became."""

    def __init__(self):
        self.tokens = Table(TOKEN_TTL)
        self.cookies = Table(COOKIE_TTL)

    def mint(self, uid: int) -> str:
        return self.tokens.add(uid)

    def redeem(self, token: str) -> Optional[str]:
        """A cookie for the token's uid, or None: unknown, used, or expired."""
        uid = self.tokens.take(token)
        return None if uid is None else self.cookies.add(uid)

    def uid_of(self, cookie: str) -> Optional[int]:
        return self.cookies.get(cookie)
