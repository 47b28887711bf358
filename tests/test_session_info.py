"""A session's ps entry is encoded once and kept while its values stay the same
(Session.info_text, for ptyhostd's ps at a thousand sessions): it must never be stale."""

import time

import clowder_wire as P
from ptyhostd.session import Session


def _session() -> Session:
    return Session("s1", name="one", argv=["/bin/sh", "-c", "x"], cwd="/tmp", uid=1000,
                   cols=80, rows=24, created=time.time(), ring=None, state="starting")


def test_the_kept_text_follows_every_value_ps_shows():
    s = _session()
    first = s.info_text()
    assert first == P.encode_json(s.info())
    assert s.info_text() is first  # unchanged: the text kept, not encoded again
    changes = {"name": "renamed", "pid": 42, "state": "exited", "exit_code": 3,
               "signal": 9, "cols": 120, "rows": 40, "created": 1.5, "uid": 0,
               "cwd": "/", "agent": True, "ended_by": "reboot"}
    assert set(changes) | {"argv", "id", "unit"} == set(P.SESSION_FIELDS)
    for field, value in changes.items():
        setattr(s, field, value)
        assert s.info_text() == P.encode_json(s.info()), field
    s.argv.append("changed in place")
    assert s.info_text() == P.encode_json(s.info())
