"""The web view's rules without a daemon: who sees what (the host's own rule, checked
against ptyhostd's function itself) and the token and cookie tables' bounds."""

from __future__ import annotations

import itertools
import types

import pytest

from ptyhostd.connection import Connection
from webd import access, tokens


@pytest.mark.parametrize("viewer,owner", list(itertools.product((0, 1000, 1001, 65534),
                                                                (0, 1000, 1001))))
def test_may_see_is_the_hosts_rule(viewer, owner):
    host_says = Connection._may(types.SimpleNamespace(uid=viewer),
                                types.SimpleNamespace(uid=owner))
    assert access.may_see(viewer, {"uid": owner}) == host_says


def test_visible_and_may_type():
    sessions = [{"id": "a", "uid": 1000}, {"id": "b", "uid": 1001}]
    assert [s["id"] for s in access.visible(1000, sessions)] == ["a"]
    assert [s["id"] for s in access.visible(0, sessions)] == ["a", "b"]
    assert access.visible(1002, sessions) == []
    typists = frozenset({1000})
    assert access.may_type(1000, sessions[0], typists)
    assert not access.may_type(1000, sessions[1], typists)  # allowed to type, not to see
    assert not access.may_type(1001, sessions[1], typists)  # sees it, not allowed to type
    assert access.input_uids(["0", "root"]) == frozenset({0})
    with pytest.raises(ValueError, match="no such user"):
        access.input_uids(["no-such-user-here"])


def test_a_token_is_good_once_and_becomes_a_cookie():
    t = tokens.Tokens()
    token = t.mint(1000)
    cookie = t.redeem(token)
    assert cookie and t.uid_of(cookie) == 1000
    assert t.redeem(token) is None
    assert t.redeem("") is None and t.uid_of("") is None


def test_tokens_expire(monkeypatch):
    t = tokens.Tokens()
    token = t.mint(1000)
    now = tokens.time.monotonic()
    monkeypatch.setattr(tokens.time, "monotonic", lambda: now + tokens.TOKEN_TTL + 1)
    assert t.redeem(token) is None


def test_the_tables_are_bounded_per_uid_and_in_all():
    table = tokens.Table(ttl=60, per_uid=8, total=100)
    first = table.add(1000)
    for _ in range(1000):
        table.add(1000)
    assert table.count(1000) == 8 and table.get(first) is None
    for uid in range(2000, 2200):
        table.add(uid)
    assert len(table) == 100


def test_may_see_agent_is_clowder_controls_rule():
    assert access.may_see_agent(0, {"user": None})
    assert access.may_see_agent(0, {"user": "root"})
    assert access.may_see_agent(0, {"user": "nobody"})
    nobody = __import__("pwd").getpwnam("nobody").pw_uid
    assert access.may_see_agent(nobody, {"user": "nobody"})
    assert not access.may_see_agent(nobody, {"user": None})  # root's agent
    assert not access.may_see_agent(nobody, {"user": "root"})
    assert not access.may_see_agent(nobody, {"user": "no-such-user-here"})
