"""Repaint faults of issue 13, checked in a real terminal: tmux 3.3a as the client's.

One tmux pane is fed a program's own bytes, another the repaint of a model fed the
same bytes; the two panes' contents (``capture-pane -e``: text and attributes) must be
the same.  tmux runs on a private socket and is ended by the test.  The model-level
checks of the same faults are in tests/test_screen.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import wait_for
from ptyhostd.screen import Screen

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _tmux_installed():
    # `make deps` installs it: a missing tmux is a broken set-up, not a test to skip.
    if shutil.which("tmux") is None:
        pytest.fail("these tests need tmux (make deps installs it)")


class Tmux:
    """A private tmux server whose panes show files written into them."""

    def __init__(self, tmp_path):
        # A socket of each test's own: a server being killed by the test before still
        # answers on a shared name for a moment.
        self.argv = ["tmux", "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
        self.tmp = tmp_path

    def run(self, *args) -> str:
        proc = subprocess.run(self.argv + list(args), capture_output=True, text=True,
                              timeout=10)
        if proc.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def show(self, name: str, data: bytes, cols: int, rows: int) -> None:
        path = self.tmp / f"{name}.bin"
        path.write_bytes(data)
        self.run("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows),
                 f"cat {path}; exec cat")

    def lines(self, name: str, keep_trailing: bool = False) -> list:
        args = ["capture-pane", "-p", "-e", "-t", name] + (["-N"] if keep_trailing else [])
        return self.run(*args).split("\n")

    def close(self) -> None:
        subprocess.run(self.argv + ["kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.close()


def live_and_repainted(tmux, data: bytes, cols: int, rows: int, ready: str, row=None,
                       keep_trailing=False):
    """Wait until both panes show ``ready``, then until they are the same (all rows, or
    ``row``); fail with both if they never are."""
    screen = Screen(cols, rows)
    screen.feed(data)
    tmux.show("live", data, cols, rows)
    tmux.show("repaint", screen.repaint() + screen.pending, cols, rows)

    def both():
        got = [tmux.lines(name, keep_trailing) for name in ("live", "repaint")]
        if row is not None:
            got = [[lines[row]] for lines in got]
        return got

    wait_for(lambda: all(any(ready in line for line in lines) for lines in both()), 15,
             f"both panes to show {ready!r}")
    try:
        wait_for(lambda: both()[0] == both()[1], 5, "the repaint to show what the bytes did")
    except BaseException:
        live, repainted = both()
        diff = [f"row {i}:\n  live    {a!r}\n  repaint {b!r}"
                for i, (a, b) in enumerate(zip(live, repainted), row or 0) if a != b]
        pytest.fail("the repaint differs in tmux:\n" + "\n".join(diff))


def test_top_header_keeps_its_last_column_in_tmux(tmux):
    with open(os.path.join(HERE, "recordings", "top.bin"), "rb") as f:
        data = f.read()
    first_frame = data[:data.index(b"\x1b[7m  PID") + 2000]
    # Trailing cells kept (-N): the header's reverse spaces run to the last column.
    live_and_repainted(tmux, first_frame, 100, 30, "COMMAND", row=6, keep_trailing=True)


def test_grapheme_clusters_lay_out_as_the_bytes_did_in_tmux(tmux):
    data = ("A\U0001f469\u200d\U0001f4bbB\r\n"  # ZWJ sequence
            "C\U0001f1eb\U0001f1f7D\r\n"  # a flag
            "E\u2764\ufe0fF\r\n"  # VS16
            "G\U0001f468\u200d\U0001f469\u200d\U0001f467H end").encode()
    live_and_repainted(tmux, data, 20, 5, "end")
