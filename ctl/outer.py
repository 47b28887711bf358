"""The outer terminal of an attach: put in raw mode, and handed back as it was.

A session's program sets modes in whatever terminal shows it (the alternate screen,
mouse reporting, keypad, bracketed paste, kitty keyboard flags, a scroll region, a
title ...).  Through ``clowderctl attach`` that is the user's own terminal, and the
program does not get to undo them when the attach ends: a detach, the session's end,
a signal.  tmux keeps a model of its client terminal and restores it; the attach client
stays cheap instead and writes one fixed sequence, ``RESET``, that turns every such mode
off whether or not it was on.  Each part says what it undoes and why it is written so.
"""

import os
import termios
import tty

# At attach: push the terminal's window and icon title (XTWINOPS 22;0), so that the one
# the program sets can be taken back at the end (23;0).  Terminals without a title stack
# ignore both; there the program's title stays.
ENTER = b"\x1b[22;0t"
LEAVE_TITLE = b"\x1b[23;0t"

RESET = b"".join((
    # CAN: an Output frame may end inside an escape sequence (a frame is a pty read);
    # abandon it, so the bytes below are read as sequences of their own.
    b"\x18",
    # End a synchronized update (mode 2026) left open: the display would stay frozen.
    b"\x1b[?2026l",
    # Pop every kitty keyboard flag set pushed on this screen (CSI < N u: popping past
    # the bottom of the stack resets the flags; kitty and ghostty keep one stack per
    # screen, so this runs once on the screen the program was on, once on the main one).
    b"\x1b[<99u",
    # Leave the alternate screen: 1049h is a no-op when already there and 1049l then
    # restores the main screen and the cursor the program's own 1049h saved; on the main
    # screen the pair saves and restores the cursor in place (a bare 1049l would jump
    # to a position saved long ago, e.g. by a vim that has since exited).
    b"\x1b[?1049h\x1b[?1049l",
    b"\x1b[<99u",
    # modifyOtherKeys back to the terminal's default (XTMODKEYS with no value).
    b"\x1b[>4m",
    # Cursor keys and keypad back to normal mode (DECCKM off, DECKPNM).
    b"\x1b[?1l\x1b>",
    # Mouse reporting, every mode: X10 (9), normal, highlight, button and any motion
    # (1000-1003), and the UTF-8, SGR, urxvt and SGR-pixel encodings (1005, 1006, 1015,
    # 1016); one sequence each, as some terminals take one mode per DECRST.
    b"\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l",
    b"\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l",
    # Focus events and bracketed paste off.
    b"\x1b[?1004l\x1b[?2004l",
    # The scroll region back to the whole screen; DECSTBM homes the cursor, so it is
    # saved and restored around it (DECSC, DECRC).
    b"\x1b7\x1b[r\x1b8",
    # Origin mode off, autowrap on, insert mode off, reverse video off (DECRC above
    # restored whatever origin mode was saved with the cursor, so this comes after it).
    b"\x1b[?6l\x1b[?7h\x1b[4l\x1b[?5l",
    # The G0 character set ASCII, and shifted into it (no line-drawing letters).
    b"\x1b(B\x0f",
    # Attributes and colours off.
    b"\x1b[m",
    # The cursor's default shape (DECSCUSR 0), and shown.
    b"\x1b[0 q\x1b[?25h",
))


class OuterTerminal:
    """The terminal clowderctl attach runs in: stdin for keys, stdout for the screen."""

    def __init__(self, stdin: int, stdout: int):
        self.stdin = stdin
        self.stdout = stdout
        self.saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
        self.screen = os.isatty(stdout)  # whether there are modes to restore at all
        self.entered = False  # ENTER written: the session's output may follow
        self.is_raw = False

    def described(self) -> dict | None:
        """stdout as the PTY host is asked to write it itself (``described``)."""
        return described(self.stdout) if self.screen else None

    def raw(self) -> None:
        """Keys straight through: no echo, no line editing, no signals from the tty.
        Once: setraw discards input not yet read, and after attach's first paint
        (ctl/firstpaint.py) that is keys typed while the rest of clowderctl loaded."""
        if self.saved is not None and not self.is_raw:
            tty.setraw(self.stdin)
            self.is_raw = True

    def enter(self) -> bytes:
        """What to write before the session's first output (once)."""
        if self.entered or not self.screen:
            return b""
        self.entered = True
        return ENTER

    def restore(self) -> None:
        """Hand the terminal back: modes off, title back, termios as it was.

        Never raises: it runs on every way out, a hung-up terminal (SIGHUP) included.
        """
        if self.entered:
            self.entered = False
            write_all(self.stdout, RESET + LEAVE_TITLE)
        if self.saved is not None:
            self.is_raw = False
            try:
                termios.tcsetattr(self.stdin, termios.TCSADRAIN, self.saved)
            except (termios.error, OSError):
                pass  # the terminal is gone (hung up): nothing left to restore


def described(fd: int) -> dict | None:
    """``fd``'s terminal as the PTY host is asked to write it itself (Attach.terminal,
    ptyhostd/terminal.py): a pseudo-terminal's path, device and inode; None: not one
    (the host sends frames, as always)."""
    try:
        path = os.ttyname(fd)
        st = os.fstat(fd)
    except OSError:
        return None
    if not path.startswith("/dev/pts/"):
        return None
    return {"path": path, "dev": st.st_dev, "ino": st.st_ino}


def write_all(fd: int, data: bytes) -> None:
    """Write ``data`` whole to a blocking fd, or give up quietly if it is gone."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass
