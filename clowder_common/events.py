"""The kinds of lifecycle event both daemons log, each with a fixed journald MESSAGE_ID.

The ids never change once released: scripts and `journalctl MESSAGE_ID=...` filters
depend on them.  packaging/clowder.catalog explains each one (`journalctl -x`); a unit
test checks the two name the same ids.  An event's record also carries
``CLOWDER_EVENT`` (the kind's name, for people) beside ``CLOWDER_CAUSE`` (why, in the
emitter's own words, unchanged).
"""

from __future__ import annotations

IDS = {
    # ptyhostd: a session's life
    "session-started": "50b5a4cd6e30446d851c68bbff440fa1",
    "session-ended": "a06cba2b469043fc848707924e808dbd",
    "session-lost": "f3b60a77bf994aba8e6ba8f27412ee07",
    "session-failed": "6658d6ad54c543308ff1f9c5d817f622",
    "session-removed": "8fd398c9e4374bbc9138977dff0489b7",
    "session-adopted": "0ac3de9a1ed24477a13ee1588612fade",
    "spawn-refused": "bd3c3d4ea5e64ebc906d4f738ba89ae6",
    # ptyhostd: what a session's output says (ptyhostd/sessionevents.py: rate-limited)
    "session-busy": "9ea82ac197f2470b90dcb7b5de7b9275",
    "session-idle": "42bcc7435fde4ac7a54153b5c9259a9c",
    "session-bell": "f041843c740644fca0c99f21266dff00",
    "session-notification": "942bcfab65844df8bf0c61d0a2893ad7",
    # ptyhostd: the host's own life
    "host-started": "b73b8cc6508e44acb607bc9eae736ecf",
    "host-stopping": "1e4675729da84a8ebc03a65d2a541839",
    "host-exiting": "38be8a4fe34a4074af47be3d91a1cf2c",
    "handoff-checked": "dbda0247842e4bef9027f9602eb5af07",
    "handoff-done": "b240e39d0e3446b9b182c22b418d96ab",
    "handoff-refused": "ab723a3a86cc4e13bc382f5d20350355",
    "handoff-failed": "c3d0ba195d39437c9c0729d1ec3a2310",
    "state-dir-problem": "897f278c2e79459cb50dbf408d14ec91",
    "standby-ready": "e43d8d8a46d5442097af006cbf21f39d",
    "standby-takeover": "aa47723e45b74e3daaeea7f3d1434486",
    # clowder-control: an agent's life
    "agent-spawned": "33dd2dd1591c4973b26c8aaa78b5b749",
    "agent-adopted": "4cb2b64f9a124bbd889ae46cf2691da2",
    "agent-exited": "63d9a87a68704be0b1c157ddc5c8352e",
    "agent-not-restarted": "b7c36d2530a744e0b249888d06fbdb9b",
    "agent-stopped": "5e9d6e2e272c48e0a6650b5277b506ab",
    "agent-spawn-failed": "dfd8c7b850fa4a298e062096e35fcbfd",
    "agent-stop-failed": "6be2a8c5eccb4d47a178e46a6580fe99",
    "agent-removed": "37441683c2b6473783cfac2fcb4412a5",
    "session-not-adopted": "6d047114ae33483393b8899c75078d1a",
    # clowder-control: an agent's attention (controld/attention.py, controld/notify.py)
    "agent-attention": "85f2c38ce70741d7a3daa4fbf5523fb3",
    "agent-notified": "7cd6252626c348baa80478b0182c376f",
    "agent-notify-failed": "6535fae684a943dfbd448d109bff79d3",
    "control-stopping": "b8cbf98321ba430d814b56f663109bc9",
}

# clowder-control's Supervisor.event causes -> kinds.
AGENT_CAUSES = {
    "spawn": "agent-spawned", "adopt": "agent-adopted", "exit": "agent-exited",
    "not-restarted": "agent-not-restarted", "stop": "agent-stopped",
    "spawn-failed": "agent-spawn-failed", "stop-failed": "agent-stop-failed",
    "removed": "agent-removed", "not-adopted": "session-not-adopted",
    "attention": "agent-attention",
}

# A session's new state -> its kind (adoption is said by the caller).
SESSION_STATES = {
    "running": "session-started", "exited": "session-ended", "lost": "session-lost",
    "failed": "session-failed", "removed": "session-removed",
}


def fields(kind: str) -> dict[str, str]:
    """The journal fields that mark a record as an event of ``kind`` (KeyError if unknown)."""
    return {"MESSAGE_ID": IDS[kind], "CLOWDER_EVENT": kind}
