"""The registry file: round trips, crash leftovers, damage detection and fallback."""

import glob
import json
import os
import stat

import pytest

from controld import registry as R
from controld.registry import AgentRecord, Registry, RegistryError


def agent(name="api", **kw) -> AgentRecord:
    fields = dict(session="s-1", shells={"build": "s-2"}, layout={"split": "right"},
                  last_exit={"status": "exited", "code": 0}, cause="config", spawned_at=1.5,
                  spawns=2)
    return AgentRecord(name=name, **{**fields, **kw})


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "state" / "registry.json")


def saved(path, *records) -> Registry:
    reg = Registry(path)
    for rec in records:
        reg.set(rec)
    reg.save()
    return reg


def rewrite(path, mutate) -> None:
    """Change the body of the file and keep its checksum right: a well-formed but wrong file."""
    doc = json.load(open(path))
    mutate(doc["body"])
    doc["sha256"] = R._digest(doc["body"])
    open(path, "w").write(json.dumps(doc))


def test_round_trip(path):
    saved(path, agent("api"), agent("web", session=None, last_exit=None, spawned_at=3))
    got = Registry.load(path).agents
    assert got == {"api": agent("api"),
                   "web": agent("web", session=None, last_exit=None, spawned_at=3.0)}
    assert isinstance(got["web"].spawned_at, float)
    doc = json.load(open(path))
    assert doc["format"] == R.FORMAT and doc["sha256"] == R._digest(doc["body"])


def test_set_remove_and_resave(path):
    reg = saved(path, agent("api"), agent("web"))
    assert reg.remove("api") == agent("api") and reg.remove("api") is None
    reg.save()
    assert list(Registry.load(path).agents) == ["web"]
    assert list(R.load(path + ".prev")) == ["api", "web"]  # the copy it replaced


def test_missing_file_is_an_empty_registry(path):
    assert Registry.load(path).agents == {}
    assert R.load_with_fallback(path) == ({}, None)
    assert not os.path.exists(os.path.dirname(path))  # loading creates nothing


def test_default_dir(monkeypatch):
    assert R.default_dir("system") == "/var/lib/clowder"
    monkeypatch.setenv("XDG_STATE_HOME", "/x/state")
    assert R.default_path("user") == "/x/state/clowder/registry.json"
    monkeypatch.setenv("XDG_STATE_HOME", "relative")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", "/home/u")
    assert R.default_dir("user") == "/home/u/.local/state/clowder"
    with pytest.raises(ValueError):
        R.default_dir("global")


def test_crash_mid_write_falls_back_to_prev(path):
    saved(path, agent("api"))
    saved(path, agent("api"), agent("web"))  # .prev now holds just "api"
    good = open(path, "rb").read()
    # The crash: a half-written temp file, and (as if the rename had not been atomic)
    # a registry.json cut short.
    tmp = os.path.join(os.path.dirname(path), ".registry.json.tmp-crash")
    open(tmp, "wb").write(good[:40])
    open(path, "wb").write(good[:len(good) // 2])
    with pytest.raises(RegistryError, match=r"registry\.json: not valid JSON"):
        R.load(path)
    records, warning = Registry.load_with_fallback(path)
    assert list(records.agents) == ["api"]
    assert "not valid JSON" in warning and "registry.json.prev" in warning
    assert open(path, "rb").read() == good[:len(good) // 2]  # loading left it alone
    records.save()
    assert not os.path.exists(tmp)  # the writer cleans up crash leftovers


def test_checksum_mismatch(path):
    saved(path, agent("api"))
    doc = json.load(open(path))
    doc["body"]["agents"][0]["spawns"] = 99  # a hand edit
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(RegistryError, match=r"registry\.json: checksum mismatch"):
        R.load(path)


@pytest.mark.parametrize("field,value,message", [
    ("session", 5, "field 'session' must be a string or null"),
    ("shells", {"build": 1}, "field 'shells' must be an object of strings"),
    ("layout", [], "field 'layout' must be an object"),
    ("spawns", True, "field 'spawns' must be a non-negative integer"),
    ("spawns", -1, "field 'spawns' must be a non-negative integer"),
    ("spawned_at", "yesterday", "field 'spawned_at' must be a finite number"),
    ("name", "", "field 'name' must be a non-empty string"),
])
def test_wrong_types(path, field, value, message):
    saved(path, agent("api"))
    rewrite(path, lambda body: body["agents"][0].__setitem__(field, value))
    with pytest.raises(RegistryError, match=message) as exc:
        R.load(path)
    assert path in str(exc.value)


@pytest.mark.parametrize("mutate,message", [
    (lambda b: b["agents"][0].pop("cause"), r"missing fields \['cause'\]"),
    (lambda b: b["agents"][0].update(extra=1), r"unknown fields \['extra'\]"),
    (lambda b: b["agents"].append(dict(b["agents"][0])), "listed twice"),
    (lambda b: b.update(agents={}), "'agents' array"),
])
def test_wrong_shape(path, mutate, message):
    saved(path, agent("api"))
    rewrite(path, mutate)
    with pytest.raises(RegistryError, match=message):
        R.load(path)


@pytest.mark.parametrize("content,message", [
    (b"", "empty"),
    (b'{"format": 2, "sha256": "", "body": {}}', "format version 2 is not supported"),
    (b'{"sha256": "", "body": {}}', "no integer 'format'"),
    (b"[1]", "top level must be an object"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"format": 1, "sha256": "", "body": {"x": NaN}}', "not valid JSON"),
])
def test_damaged_files(path, content, message):
    os.makedirs(os.path.dirname(path))
    open(path, "wb").write(content)
    with pytest.raises(RegistryError, match=message):
        R.load(path)


def test_both_damaged_names_both(path):
    saved(path, agent("api"))
    saved(path, agent("web"))
    open(path, "w").write("{")
    open(path + ".prev", "w").write("")
    with pytest.raises(RegistryError) as exc:
        R.load_with_fallback(path)
    assert "registry.json: not valid JSON" in str(exc.value)
    assert "registry.json.prev: the file is empty" in str(exc.value)


def test_corrupt_file_is_preserved_by_the_next_write(path):
    saved(path, agent("api"))
    saved(path, agent("web"))
    open(path, "w").write('{"format": 1, "truncat')
    reg, warning = Registry.load_with_fallback(path)
    assert list(reg.agents) == ["api"] and warning
    assert not glob.glob(path + ".corrupt-*")  # loading keeps its hands off
    reg.set(agent("db"))
    reg.save()
    kept = glob.glob(path + ".corrupt-*")
    assert len(kept) == 1 and open(kept[0]).read() == '{"format": 1, "truncat'
    assert list(R.load(path)) == ["api", "db"]
    assert list(R.load(path + ".prev")) == ["api"]  # the damaged file was not rotated in


def test_refuses_to_write_what_it_could_not_read(path):
    reg = Registry(path)
    with pytest.raises(RegistryError):
        reg.set(agent("api", shells={"build": None}))
    reg.agents["api"] = agent("api", layout={"bad": {1, 2}})  # a set is not JSON
    with pytest.raises(RegistryError, match="refusing to write"):
        reg.save()
    assert not os.path.exists(path)


def test_permissions(tmp_path):
    path = str(tmp_path / "a" / "b" / "registry.json")
    old = os.umask(0o022)
    try:
        saved(path, agent("api"))
        saved(path, agent("web"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    for name in (path, path + ".prev"):
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.json", "registry.json.prev"]


def test_unchanged_save_keeps_prev(path):
    saved(path, agent("api"))
    reg = saved(path, agent("web"))
    reg.save()  # nothing changed: .prev must still be the older, different copy
    assert list(R.load(path + ".prev")) == ["api"]


def test_unreadable_file_without_prev(path):
    os.makedirs(path)  # something that cannot be read as a file
    with pytest.raises(RegistryError, match=r"registry\.json: cannot read") as exc:
        R.load_with_fallback(path)
    assert "registry.json.prev: missing" in str(exc.value)


def test_missing_current_uses_prev(path):
    saved(path, agent("api"))
    saved(path, agent("web"))
    os.unlink(path)  # writes never do this, so it is not a first start
    records, warning = R.load_with_fallback(path)
    assert list(records) == ["api"] and "registry.json: missing" in warning


def test_failed_write_leaves_the_old_file_whole(path, monkeypatch):
    saved(path, agent("api"))
    before = open(path, "rb").read()
    real = os.replace

    def crash(src, dst):
        if dst == path:
            raise OSError(28, "No space left on device")
        real(src, dst)
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        saved(path, agent("web"))
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(os.path.dirname(path))) == ["registry.json", "registry.json.prev"]
