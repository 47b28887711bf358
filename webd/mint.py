"""The token socket: `clowderctl web` connects, and is handed a one-time login URL for
its own uid.

The uid comes from the kernel (``SO_PEERCRED``), never from what the client says: the
client sends nothing at all.  The answer is one JSON line, then the connection is
closed: {"url": ..., "token": ..., "expires_in": seconds}.  A client that never reads
costs one line in its socket buffer; one that asks in a loop holds at most
tokens.PER_UID tokens, and the journal gets a line per uid every ratelog.INTERVAL at
most, saying how many were minted since the last
(tests/test_web.py::test_minting_in_a_loop_stays_bounded).
"""

from __future__ import annotations

import asyncio
import json
import logging

from clowder_common.peercred import peer_creds
from clowder_common.ratelog import RateLimitedLog

from . import tokens as tokens_mod

log = logging.getLogger("clowder-web")
minted = RateLimitedLog(log)  # "login token minted" lines: one per uid an interval


class Mint(asyncio.Protocol):
    def __init__(self, tokens: tokens_mod.Tokens, base_url: str):
        self.tokens, self.base_url = tokens, base_url

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        pid, uid, _gid = peer_creds(sock)
        token = self.tokens.mint(uid)
        minted.info(uid, "login token minted for uid %d (pid %d)", uid, pid,
                    extra={"CLOWDER_CAUSE": "web-token"})
        line = {"url": f"{self.base_url}/login?token={token}", "token": token,
                "expires_in": tokens_mod.TOKEN_TTL}
        transport.write(json.dumps(line).encode() + b"\n")
        transport.close()  # flushes first; whatever the client sends is never read

    def data_received(self, data: bytes) -> None:
        pass
