"""A restarted host loads the ghostty binding from its cache (ptyhostd/ghostty_abi.py).

Parsing pyghostty's declarations was most of the time between a restart and the first
repaint of a reattaching client; the first host of a unit parses them once into its
CacheDirectory=, and every later start loads them from there.  Both scopes (the
``host`` fixture): /var/cache/clowder-ptyhost, or the user's ~/.cache/clowder-ptyhost.
"""

from __future__ import annotations

import os
import pwd
import re

from conftest import TEST_USER, use_engine, wait_for


def _binding(host, pid: int) -> tuple[str, str]:
    """(how, cache file) the host ``pid`` said it loaded the binding."""
    said = []

    def logged() -> bool:
        out = host.run(["journalctl", "--no-pager", "-o", "cat",
                        "CLOWDER_CAUSE=screen-engine-binding", f"_PID={pid}"]
                       ).stdout.decode(errors="replace")
        said[:] = re.findall(r"ghostty binding loaded in \d+ ms \(([^:)]+)(?:: ([^)]+))?\)",
                             out)
        return bool(said)
    wait_for(logged, 30, f"host {pid} to say how it loaded the ghostty binding")
    return said[0]


def test_a_restarted_host_loads_the_binding_from_its_cache(host):
    use_engine(host, "ghostty")
    cache_dir = "/var/cache/clowder-ptyhost" if host.scope == "system" else \
        os.path.join(pwd.getpwnam(TEST_USER).pw_dir, ".cache", "clowder-ptyhost")
    how, path = _binding(host, host.main_pid())
    assert how in ("parsed, cached", "cache"), how
    assert os.path.dirname(path) == cache_dir, path
    pid = host.restart()
    how, again = _binding(host, pid)
    assert (how, again) == ("cache", path), (how, again)
    mode = host.run(["stat", "-c", "%a %U", cache_dir]).stdout.decode().split()
    owner = "root" if host.scope == "system" else TEST_USER
    assert mode == ["700", owner], mode
    sid = host.spawn("sh", "-c", "printf 'cached \\033[1mbinding\\033[0m\\n'; exec sleep 100000")
    wait_for(lambda: "cached binding" in host.ctl("snapshot", sid).stdout.decode(), 20,
             "the model of a host whose binding came from the cache to show the output")
