"""Issue 14, points 2, 3 and 11: the outer terminal of ``clowderctl attach``.

Acceptance 2: after detaching from vim, and from a program that enabled mouse, keypad,
bracketed paste, kitty keyboard flags and more, the outer terminal reports none of those
modes; checked with tmux 3.3a as the outer terminal (its own socket, ended by the test),
whose format variables say what modes its pane is in.  Acceptance 3: Ctrl-\\ sent as
``ESC[92;5u`` detaches, and so do its other encodings, whole or split across two writes.
The rest runs through a real pty as the outer terminal (tests/test_attach.py's Attach).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess

import pytest

from conftest import PYTHON, wait_for
from ctl.outer import ENTER, LEAVE_TITLE, RESET
from test_repaint_tmux import Tmux
from test_attach import DETACH, Attach, attach, ready, shell  # noqa: F401  (attach: fixture)


def _no_trace_of(host, sid: str, text: bytes) -> None:
    """Nothing of ``text`` reached the session: its backlog, once a marker is through."""
    host.ctl("send", sid, "echo marker-$((2+5))\r")
    wait_for(lambda: b"marker-7" in host.backlog(sid), 10, "the shell to answer the marker")
    backlog = host.backlog(sid)
    assert text not in backlog, backlog


# --- the detach key in every encoding (acceptance 3) --------------------------------------

@pytest.mark.parametrize("parts", [
    (b"\x1c",),
    (b"\x1b[92;5u",),  # kitty keyboard protocol (and xterm formatOtherKeys=1)
    (b"\x1b[92;5:1u",),  # kitty, with the event type (a press)
    (b"\x1b[92:124;5u",),  # kitty, with the shifted key
    (b"\x1b[1593::92;5u",),  # kitty, another layout's key with its US-layout key
    (b"\x1b[92;69u",),  # kitty, caps lock on (bit 64)
    (b"\x1b[27;5;92~",),  # xterm modifyOtherKeys
    (b"\x1b[92;", b"5u"),  # split across two writes
    (b"\x1b[", b"92;5:1u"),
    (b"\x1b[27;5", b";92~"),
], ids=["legacy", "kitty", "kitty-event", "kitty-shifted", "kitty-base-layout",
        "kitty-capslock", "modifyOtherKeys", "kitty-split", "kitty-event-split",
        "modifyOtherKeys-split"])
def test_detach_key_in_each_encoding_detaches(host, attach, parts):
    sid = shell(host)
    a = attach(sid, separate_stderr=True)
    ready(a)
    a.type(b"echo before-$((1+2))\r")
    a.expect(b"before-3", what="the shell's answer before the detach")
    for i, part in enumerate(parts):
        if i:
            # The client reads the first part on its own (and waits for the rest, as
            # long as the sequence is whole) before the next is typed.
            a.wait_read()
        a.type(part)
    assert a.finish() == 0, "the key did not detach"
    assert b"detached" in a.stderr()
    assert not a.raw(), "the terminal was left in raw mode"
    _no_trace_of(host, sid, parts[-1][-3:])  # the sequence's end was not typed into sh


def test_detach_key_matcher_at_every_split_point():
    """The matcher alone (pure): each encoding, cut at every byte, detaches and sends
    only what was typed around it; a lone ESC goes through once its moment has passed."""
    from ctl.detachkey import DOUBLE_PRESS, HOLD_ESC, DetachKey
    for seq in (b"\x1c", b"\x1b[92;5u", b"\x1b[92;5:1u", b"\x1b[27;5;92~"):
        data = b"ab\x1b[A" + seq
        for cut in range(1, len(data)):
            key = DetachKey(0x1c)
            sent, detach = key.feed(data[:cut], 0.0)
            more, detach2 = key.feed(data[cut:], 0.0)
            assert not detach and not detach2
            assert sent + more == b"ab\x1b[A", (seq, cut)
            assert key.expire(DOUBLE_PRESS) == (b"", True), (seq, cut)
    key = DetachKey(0x1c)
    long = b"\x1b[" + b"1" * 100_000  # unfinished and far too long for a key: not held
    assert key.feed(long, 0.0) == (long, False) and key.deadline() is None
    assert key.feed(b"\x1b", 0.0) == (b"", False)
    assert key.expire(HOLD_ESC) == (b"\x1b", False) and key.deadline() is None


@pytest.mark.parametrize("seq", [b"\x1b[92;6u", b"\x1b[93;5u", b"\x1b[27;5;93~",
                                 b"\x1b[92;5:3u"],
                         ids=["ctrl-shift", "ctrl-]", "modifyOtherKeys-ctrl-]", "release"])
def test_other_keys_do_not_detach(host, attach, seq):
    """Ctrl-Shift-\\, Ctrl-] and a release event are not a press of the detach key."""
    sid = shell(host)
    a = attach(sid)
    ready(a)
    a.type(seq + b"\recho still-$((3+3))\r")  # the sequence is a command line of its own
    a.expect(b"still-6", what="the shell to answer: still attached")
    assert a.proc.poll() is None
    a.type(DETACH)
    assert a.finish() == 0


def test_detach_key_twice_sends_it_once(host, attach):
    """For a nested attach: the key pressed twice reaches the program once, and the
    attach stays; pressed once it detaches."""
    sid = host.spawn("sh", "-c", "stty raw -echo; echo raw-$((1+1)); head -c 2 | od -An -tx1; "
                     "echo got-$((2+2)); exec sleep 100000")
    a = attach(sid)
    a.wait_raw()
    a.expect(b"raw-2", what="the session's terminal in raw mode")
    a.type(DETACH + DETACH)
    a.type(b"x")
    a.expect(re.compile(rb"1c 78\s+got-4"), what="one Ctrl-\\ and the x, in the session")
    assert a.proc.poll() is None, "the double press detached"
    a.type(DETACH)
    assert a.finish() == 0


# --- the reset on every way out -----------------------------------------------------------

def _ends_handed_back(a: Attach, code: int) -> None:
    assert a.finish() == code
    out = bytes(a.out)
    assert out.find(ENTER) >= 0, "the title was not pushed at attach"
    assert out.rfind(RESET + LEAVE_TITLE) > out.find(ENTER), \
        f"the outer terminal was not reset at the end: {out[-600:]!r}"
    assert not a.raw(), "the terminal was left in raw mode"


@pytest.mark.parametrize("how", ["detach", "exit", "SIGTERM", "SIGHUP", "SIGINT"])
def test_every_end_hands_the_terminal_back(host, attach, how):
    sid = shell(host)
    a = attach(sid)
    ready(a)
    if how == "detach":
        a.type(DETACH)
        code = 0
    elif how == "exit":
        a.type(b"exit 3\r")
        code = 3
    else:
        sig = getattr(signal, how)
        os.kill(a.client_pid(), sig)
        code = 128 + sig
    _ends_handed_back(a, code)  # through runuser too: clowderctl exits, not killed
    if how.startswith("SIG"):
        assert re.search(how.encode() + rb": detached from " + sid.encode(), a.out), a.out[-300:]
        assert host.ps()[sid]["state"] == "running"


# --- rough edges (point 11) ---------------------------------------------------------------

def test_no_such_session_is_said_without_a_banner(host, attach):
    a = attach("no-such-session-x", separate_stderr=True)
    assert a.finish() == 1
    err = a.stderr()
    assert b"no-such-session-x" in err and b"attached to" not in err, err
    assert RESET not in bytes(a.out), "a reset was written though nothing was attached"


def test_no_terminal_is_a_clear_error_and_read_only_works_without_one(host):
    sid = shell(host)
    proc = host.ctl("attach", sid, stdin=subprocess.DEVNULL, check=False, timeout=30)
    assert proc.returncode == 2, proc
    assert b"Traceback" not in proc.stderr and b"not a terminal" in proc.stderr, proc.stderr
    assert b"--read-only" in proc.stderr, proc.stderr
    ended = host.spawn("sh", "-c", "echo ro-out-$((4+4)); exit 3")
    wait_for(lambda: host.ps()[ended]["state"] == "exited", 15, f"session {ended} to end")
    proc = host.ctl("attach", "--read-only", ended, stdin=subprocess.DEVNULL, check=False,
                    timeout=30)
    assert proc.returncode == 3 and b"ro-out-8" in proc.stdout, proc
    assert RESET not in proc.stdout, "modes reset on an output that is not a terminal"


def test_read_only_says_keys_are_not_sent(host, attach):
    sid = shell(host)
    a = attach(sid, "--read-only", separate_stderr=True)
    ready(a)
    a.type(b"x")
    a.expect(b"\a", what="the bell for a key not sent")
    a.type(b"yz")
    a.type(DETACH)
    assert a.finish() == 0
    assert b"read-only: keys you type are not sent" in a.stderr()
    assert a.out.count(b"\a") == 1, "the bell rang more than once"


# --- through tmux as the outer terminal (acceptance 2) ------------------------------------

@pytest.fixture
def tmux(tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("these tests need tmux (make deps installs it)")
    t = OuterTmux(tmp_path)
    yield t
    t.close()


# What the outer pane reports, and what it reports when nothing was changed (100x30).
FLAGS = ("alternate_on", "mouse_any_flag", "mouse_standard_flag", "mouse_button_flag",
         "mouse_all_flag", "mouse_sgr_flag", "keypad_flag", "keypad_cursor_flag",
         "insert_flag", "origin_flag", "wrap_flag", "cursor_flag", "scroll_region_upper",
         "scroll_region_lower", "pane_title")
CLEAN = {"alternate_on": "0", "mouse_any_flag": "0", "mouse_standard_flag": "0",
         "mouse_button_flag": "0", "mouse_all_flag": "0", "mouse_sgr_flag": "0",
         "keypad_flag": "0", "keypad_cursor_flag": "0", "insert_flag": "0",
         "origin_flag": "0", "wrap_flag": "1", "cursor_flag": "1",
         "scroll_region_upper": "0", "scroll_region_lower": "29",
         "pane_title": "outer-title"}


class OuterTmux(Tmux):
    """A private tmux server whose one pane runs ``clowderctl attach``, then ``cat -v``."""

    def start(self, host, sid: str) -> None:
        argv = host._as([PYTHON, "-m", "ctl", "--socket", host.socket, "attach", sid])
        script = self.tmp / "outer.sh"
        # The title first (the attach pushes it); after the attach, cat -v shows what
        # the terminal sends (a bracketed paste's ESC[200~ as ^[[200~).
        env = [f"{k}={v}" for k, v in host.env.items()]
        script.write_text("printf '\\033]2;outer-title\\007'\n" +
                          shlex.join(["env", "-i", *env, *argv]) +
                          "\necho attach-ended-$?\nexec cat -v\n")
        self.run("new-session", "-d", "-s", "outer", "-c", "/", "-x", "100", "-y", "30",
                 "sh " + shlex.quote(str(script)))

    def flags(self) -> dict:
        out = self.run("display", "-p", "-t", "outer", "\t".join(f"#{{{f}}}" for f in FLAGS))
        return dict(zip(FLAGS, out.rstrip("\n").split("\t")))

    def screen(self) -> str:
        """The pane's text, its scrollback included (where the banner soon scrolls to)."""
        return self.run("capture-pane", "-p", "-S", "-", "-t", "outer")

    def keys(self, data: bytes) -> None:
        self.run("send-keys", "-t", "outer", "-H", *(f"{b:02x}" for b in data))

    def wait_screen(self, text: str, what: str) -> None:
        wait_for(lambda: text in self.screen(), 20, what)

    def close(self) -> None:
        subprocess.run(self.argv + ["kill-server"], capture_output=True, timeout=10)


def _handed_back(tmux: OuterTmux) -> None:
    """The outer pane is as it was: every flag clean, and a paste is not bracketed."""
    tmux.wait_screen("attach-ended-0", "the attach to end with status 0")
    assert tmux.flags() == CLEAN
    tmux.run("set-buffer", "-b", "t", "pasted-text")
    tmux.run("paste-buffer", "-p", "-b", "t", "-t", "outer")
    tmux.keys(b"\r")
    tmux.wait_screen("pasted-text", "the paste to reach cat -v")
    assert "200~" not in tmux.screen(), "bracketed paste is still on: " + tmux.screen()


MODES = ("\\033[?1049h\\033[?1000h\\033[?1002h\\033[?1006h\\033[?1h\\033=\\033[?2004h"
         "\\033[>1u\\033[>4;2m\\033[?1004h\\033[3;10r\\033[?25l\\033[4h\\033[?6h"
         "\\033]2;inner-title\\007\\033[1;31m\\033[5 q")


@pytest.mark.parametrize("key", [b"\x1c", b"\x1b[92;5u"], ids=["legacy", "kitty"])
def test_detach_from_a_program_that_set_modes_leaves_none_in_tmux(host, tmux, key):
    # The modes are set once attached (not only in the repaint), as a program does.
    sid = host.spawn("sh", "-c", f"read x; printf '{MODES}'; echo modes-on; "
                     "exec sleep 100000", size="100x30")
    tmux.start(host, sid)
    tmux.wait_screen("detach with", "the attach banner")
    tmux.keys(b"\r")
    want_on = {"alternate_on": "1", "mouse_any_flag": "1", "mouse_sgr_flag": "1",
               "keypad_flag": "1", "keypad_cursor_flag": "1", "insert_flag": "1",
               "origin_flag": "1", "cursor_flag": "0", "scroll_region_upper": "2",
               "scroll_region_lower": "9", "pane_title": "inner-title"}
    wait_for(lambda: all(tmux.flags()[k] == v for k, v in want_on.items()), 20,
             f"the program's modes in the outer tmux pane ({want_on})")
    tmux.keys(key)
    _handed_back(tmux)


def test_detach_from_vim_leaves_no_mode_in_tmux(host, tmux):
    sid = host.spawn("sh", "-c", "read x; exec vim -u NONE -N -n", size="100x30",
                     env="TERM=xterm-256color")
    tmux.start(host, sid)
    tmux.wait_screen("detach with", "the attach banner")
    tmux.keys(b"\r")
    wait_for(lambda: tmux.flags()["alternate_on"] == "1" and
             tmux.flags()["keypad_flag"] == "1", 20, "vim on the alternate screen, keypad on")
    tmux.keys(b"\x1c")
    _handed_back(tmux)
