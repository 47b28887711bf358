#!/usr/bin/env python3
"""Record a program's terminal output under a pty of a fixed size, for screen tests.

    tools/record.py NAME [--cols 80] [--rows 24] [--step DELAY:KEYS ...] -- COMMAND...
    tools/record.py --corpus [NAME ...]     # (re)make tests/recordings from RECIPES

Writes ``tests/recordings/NAME.bin`` (the raw output, every byte the program wrote)
and ``NAME.json`` (size, command, keystrokes).  Each ``--step`` waits DELAY seconds and
then types KEYS, written with Python escapes (``\\r``, ``\\x1b``).  After the last step
the program gets ``--timeout`` seconds to exit before it is killed.

The program runs with TERM=xterm-256color, LANG=C.UTF-8 and a private HOME and working
directory.  Terminal queries it sends (device attributes, cursor position, colour
queries, mode reports) are answered as a terminal would, the cursor position from a
``ptyhostd.screen.Screen`` fed the same output, so programs behave as under a real
terminal.  The answers are input, so they are not in the recording.
"""

from __future__ import annotations

import argparse
import codecs
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from ptyhostd.screen import Screen  # noqa: E402

OUT_DIR = os.path.join(ROOT, "tests", "recordings")
MAX_BYTES = 200 * 1024

_QUERY = re.compile(rb"\x1b\[(?:[>=]?0?c|6n|\?(\d+)\$p)|\x1b\](1[01]);\?(\x07|\x1b\\)")


def answer(match: re.Match, screen: Screen) -> bytes:
    """What an xterm-like terminal answers to one query."""
    text = match.group(0)
    if text.endswith(b"6n"):
        g = screen._grid
        return f"\x1b[{g.cursor.y + 1};{min(g.cursor.x, g.columns - 1) + 1}R".encode()
    if text.endswith(b"$p"):
        return b"\x1b[?" + match.group(1) + b";2$y"
    if text.startswith(b"\x1b]"):
        colour = b"ffff/ffff/ffff" if match.group(2) == b"10" else b"0000/0000/0000"
        return b"\x1b]" + match.group(2) + b";rgb:" + colour + match.group(3)
    if text.startswith(b"\x1b[>"):
        return b"\x1b[>41;380;0c"
    if text.startswith(b"\x1b[="):
        return b""
    return b"\x1b[?62;22c"


def record(cmd: list, cols: int, rows: int, steps: list, timeout: float = 3.0,
           cwd: str = None, env: dict = None, answer_queries: bool = True) -> bytes:
    """Run ``cmd`` in a pty of cols x rows, type ``steps`` [(delay, bytes)], return its output."""
    pid, master = pty.fork()
    if pid == 0:
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            if cwd:
                os.chdir(cwd)
            os.execvpe(cmd[0], cmd, env or os.environ)
        finally:
            os._exit(127)
    screen = Screen(cols, rows)
    out = bytearray()
    answered = 0
    start = time.monotonic()
    due, queue = start, list(steps)
    deadline = None
    while True:
        now = time.monotonic()
        if queue and now >= due + queue[0][0]:
            due = now
            os.write(master, queue.pop(0)[1])
            continue
        if not queue and deadline is None:
            deadline = now + timeout
        if deadline is not None and now > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        wait = (due + queue[0][0] - now) if queue else 0.1
        ready, _, _ = select.select([master], [], [], max(0.0, min(wait, 0.1)))
        if not ready:
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        # Answer queries that end in this chunk, with the screen fed up to each one.
        base = len(out)
        out += chunk
        fed = base
        for match in _QUERY.finditer(out, max(0, base - 64)) if answer_queries else ():
            if match.end() <= answered:
                continue
            screen.feed(bytes(out[fed:match.end()]))
            fed = answered = match.end()
            os.write(master, answer(match, screen))
        screen.feed(bytes(out[fed:]))
    os.close(master)
    os.waitpid(pid, 0)
    return bytes(out)


def parse_step(text: str):
    """``DELAY:KEYS`` with Python escapes in KEYS."""
    delay, _, keys = text.partition(":")
    return float(delay), codecs.escape_decode(keys.encode())[0]


def save(name: str, data: bytes, meta: dict) -> None:
    """Write NAME.bin and NAME.json into tests/recordings."""
    os.makedirs(OUT_DIR, exist_ok=True)
    if len(data) > MAX_BYTES:
        raise SystemExit(f"{name}: {len(data)} bytes, over the {MAX_BYTES} limit")
    with open(os.path.join(OUT_DIR, name + ".bin"), "wb") as f:
        f.write(data)
    with open(os.path.join(OUT_DIR, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{name}: {len(data)} bytes")


def environment(home: str) -> dict:
    """A small, fixed environment for recorded programs."""
    return {"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home,
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "SHELL": "/bin/bash",
            "USER": "user", "LOGNAME": "user", "PAGER": "less", "MANPAGER": "less",
            "LESSHISTFILE": "-",
            "PS1": "\\[\\e[1;32m\\]user@box\\[\\e[0m\\]:\\[\\e[1;34m\\]\\w\\[\\e[0m\\]\\$ "}


# Scripts for the printf-made recordings: each piece is printed, then a short sleep, so
# the pty delivers them as separate chunks, as a program's writes would be.
_ALT_PIECES = [
    r"\e]0;printf-alt\a\e[1mprimary\e[0m screen: line one\r\nline two \e7saved here\r\n",
    r"\e[?1049h\e[?2004h\e[?1000h\e[?1002h\e[?1006h\e[?1h\e=\e[5 q\e[>1u\e[H\e[2J",
    r"\e[44m\e[2J\e[1;1H\e[1;33mTITLE BAR\e[K\e[0m\e[24;1H\e[7mstatus line\e[K\e[0m",
    r"\e[2;23r\e[2;1Hregion top\e[23;1Hregion bottom\e[2S\e[1T",
    r"\e[?4m\e[>4;2mafter private sgr \e[2mdim\e[22m \e[8mhidden\e[28m \e[105mbg105\e[0m",
    r"\eP+q544e;636f6c6f7273\e\\\e[c\e[>c\e[6n\e]10;?\e\\\e]11;?\a\e[?2004$p\e[>0q",
    r"\e[22;0t\e]2;inner title\a\e]4;1;rgb:ff/00/00\e\\\e]11;#202020\a",
    r"\e[10;5Hx\e[9b \e[11;5Habcdef\e[11;6H\e[2P\e[11;5H\e[3@\e[12;5H0123456789\e[12;7H\e[4X",
    r"\e[?6h\e[1;1Horigin home\e[?6l\e[?7l\e[14;70H0123456789ABCDEF\e[?7h",
    r"\e[15;1H\e]8;;http://example.com\e\\link\e]8;;\e\\ "
    r"\e[4:3mcurly\e[4:0m \e[38:2::10:200:30mtc\e[0m",
    r"\e[16;1H\e[38;5;208m256\e[48;2;30;60;90mtrue\e[0m\e[?25l\e[20;10H\e[1;35mcursor here",
    r"\e[?2026h\e[17;1Hsync frame\e[?2026l\e[21;3H\e[32mprompt> ",
    r"\e[?2004l\e[?2004h",
]
_LEGACY_PIECES = [
    r"\e]2;legacy\aprimary text\r\n\e[31mred on primary\e[0m\r\n",
    r"\e[?47halt47 text\e[5;5H\e7in alt47\e[?47l\r\nback on primary (47 keeps alt)\r\n",
    r"\e[?1047h\e[2;2Halt1047 again\e[?1047l\r\nafter 1047l (alt cleared)\r\n",
    r"\e[?1048h\e[10;10Hmoved\e[?1048lrestored\r\n\e[?47hre-entered 47\e8\e[?47l",
    r"\e(0lqqqk\r\nx  x\r\nmqqqj\e(B\r\n\x0e\e)0lqk\x0f plain\r\n",
    r"\e[3J\e[?5h\e[?5l\e[20h\e[20l\e[4hins\e[4l\e[3g\e[5G\eH\e[15G\eH\r\tA\tB\r\n",
    r"\e[?1049h\e[3;10r\e[?6h\e[5;1Hinside origin\e7\e[?6l\e[1;1H",
    r"\e]0;end\a\ec\e[1;1Hafter reset\r\n\e[?1049hagain alt\e[?1049l",
]
_WIDE_PIECES = [
    r"CJK: 中文字符 日本語テキスト 한국어 텍스트\r\n",
    r"emoji: 😀 🎉 ❤️ 👍🏽 family 👨\u200d👩\u200d👧 flag 🇯🇵 end\r\n",
    r"combining: e\u0301 a\u0308 n\u0303 | zwsp: a\u200bb\u200bc | after\r\n",
    r"fullwidth: ＡＢＣ１２３ half: ｱｲｳ\r\n",
    r"\e[5;79H中wrapped\r\n\e[?7l\e[7;78H文字末\e[?7h\r\n",
    r"\e[9;1H中中中中\e[9;2Hx\e[9;5Hyy\e[10;1H日本\e[10;2H\e[1P|\e[11;1H语言\e[11;3H\e[K",
    r"\e[12;1H\e[41m表\e[0m\e[44m格\e[0m 1234567890\e[12;3H\e[2@\r\n",
]


def _printf_cmd(pieces: list, delay: float = 0.05) -> list:
    """A shell command that prints each piece (printf syntax), sleeping between them."""
    script = "".join(f"printf '%b' '{p}'; sleep {delay}; " for p in pieces)
    return ["bash", "-c", script + "sleep 0.2"]


_DEMO_PY = '''"""A small module to edit in vim."""

import os
import sys


def greet(name: str) -> str:
    """Say hello to ``name``."""
    return f"hello, {name}"


class Counter:
    """Counts things."""

    def __init__(self):
        self.count = 0

    def add(self, n: int = 1) -> int:
        self.count += n
        return self.count


def main(argv):
    counter = Counter()
    for arg in argv[1:]:
        counter.add(len(arg))
        print(greet(arg))
    return 0 if counter.count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

RECIPES = {
    "vim": dict(cols=80, rows=24, cmd=[
        "vim", "-N", "-u", "NONE", "-i", "NONE", "--cmd", "syntax on",
        "--cmd", "set nocp laststatus=2 ruler showcmd number mouse=a t_Co=256", "demo.py"],
        steps=[(1.5, b"jjjj"), (0.3, b"o# an inserted line\x1b"), (0.3, b":set cursorline\r"),
               (0.3, b"/def\r"), (0.3, b"n"),
               (0.3, b"o\x1b[200~pasted line one\npasted line two\x1b[201~\x1b"),
               (0.3, b":vsplit\r"), (0.3, b"\x17w"), (0.3, b"G"), (0.3, b"gg"),
               (0.3, b":!printf 'shell out\\n'\r"), (0.8, b"\r"),
               (0.5, b":q!\r"), (0.3, b":q!\r")]),
    "less": dict(cols=80, rows=24, cmd=["less", "-R", "lines.txt"],
                 steps=[(1.0, b" "), (0.3, b" "), (0.3, b"/line 1[0-9]0\r"), (0.3, b"n"),
                        (0.3, b"G"), (0.3, b"g"), (0.3, b"q")]),
    "top": dict(cols=100, rows=30, cmd=["top", "-d", "0.4"],
                steps=[(1.5, b"c"), (1.0, b"1"), (1.0, b"q")]),
    "shell": dict(cols=100, rows=30, cmd=["bash", "--norc", "--noprofile", "-i"],
                  steps=[(0.8, b'eval "$(dircolors -b)"\r'),
                         (0.3, b"ls --color=always -la --time-style=+ . sub\r"),
                         (0.3, b"printf '\\e[1mbold\\e[0m \\e[2mdim\\e[0m \\e[3mitalic\\e[0m "
                               b"\\e[4munder\\e[0m \\e[7mreverse\\e[0m \\e[8mhidden\\e[0m "
                               b"\\e[9mstrike\\e[0m\\n'\r"),
                         (0.3, b"for i in $(seq 0 15); do printf '\\e[48;5;%dm %3d ' $i $i; "
                               b"done; printf '\\e[0m\\n'\r"),
                         (0.3, b"for i in $(seq 16 6 231); do printf '\\e[38;5;%dm#' $i; done; "
                               b"printf '\\e[0m\\n'\r"),
                         (0.3, b"for i in $(seq 0 8 255); do printf '\\e[48;2;%d;%d;%dm ' $i "
                               b"$((255-i)) 128; done; printf '\\e[0m\\n'\r"),
                         (0.3, b"printf '\\e[31mred\\e[91mbright\\e[42mgreen bg"
                               b"\\e[105mbg105\\e[39;49m default\\n'\r"),
                         (0.3, b"\x1b[200~echo pasted via bracketed paste\x1b[201~"),
                         (0.3, b"\r"),
                         (0.3, b"seq 1 40 | paste -sd' ' | fold -w 130\r"),
                         (0.3, b"printf 'a\\tb\\tc\\td\\n'\r"),
                         (0.3, b"exit\r")]),
    "man": dict(cols=80, rows=24, cmd=["man", "ls"],
                steps=[(2.5, b" "), (0.3, b"/sort\r"), (0.3, b"n"), (0.3, b"q")]),
    "printf-alt": dict(cols=80, rows=24, cmd=_printf_cmd(_ALT_PIECES), steps=[], answer=False),
    "printf-legacy": dict(cols=80, rows=24, cmd=_printf_cmd(_LEGACY_PIECES), steps=[],
                          answer=False),
    "wide": dict(cols=80, rows=24, cmd=_printf_cmd(_WIDE_PIECES), steps=[], answer=False),
    # htop: colours, mouse tracking, the alternate screen, a meter header redrawn in place;
    # tree view, sort by CPU, the help screen, back, quit.
    # Only its own processes are listed (-p), not the recording machine's.
    "htop": dict(cols=100, rows=30,
                 cmd=["bash", "-c", "sleep 30 & exec htop -d 5 -p $!,$$"],
                 steps=[(1.5, b"t"), (1.0, b"P"), (1.0, b"\x1bOP"), (1.0, b"q"),
                        (0.8, b"q")]),
    # A prompt_toolkit app (as ipython's, ptpython's and many agents' prompts): cursor
    # position reports, a completion menu drawn under the line and erased, a bottom
    # toolbar, a right prompt.  "python3" is the recorder's own interpreter (make_corpus),
    # which needs prompt_toolkit.
    "prompt_toolkit": dict(cols=80, rows=24, cmd=["python3", "ptk_demo.py"],
                           steps=[(1.5, b"he"), (0.5, b"\t"), (0.3, b"\t"), (0.3, b" world"),
                                  (0.3, b"\r"), (0.5, b"wi"), (0.5, b"\t"), (0.3, b"\r"),
                                  (0.5, b"\x04")]),
}

_PTK_DEMO = '''"""A prompt_toolkit prompt to record (tools/record.py)."""
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import WordCompleter
from prompt_toolkit.formatted_text import HTML
from prompt_toolkit.styles import Style

words = WordCompleter(["hello", "help", "helium", "history", "world", "width", "widget"])
style = Style.from_dict({"bottom-toolbar": "#ffffff bg:#333333",
                         "rprompt": "fg:#00aa00 italic", "prompt": "bold ansicyan"})
session = PromptSession(completer=words, style=style, complete_while_typing=True)
toolbar = HTML("<b>F1</b> help  <u>tab</u> complete  <style bg='ansired'>ctrl-d</style> quit")
while True:
    try:
        text = session.prompt([("class:prompt", "ptk> ")], bottom_toolbar=toolbar,
                              rprompt="[right]")
    except EOFError:
        break
    print(f"you said: {text!r}")
'''


def prepare(workdir: str) -> None:
    """The files recorded programs open."""
    with open(os.path.join(workdir, "demo.py"), "w") as f:
        f.write(_DEMO_PY)
    with open(os.path.join(workdir, "ptk_demo.py"), "w") as f:
        f.write(_PTK_DEMO)
    with open(os.path.join(workdir, "lines.txt"), "w") as f:
        for i in range(1, 301):
            colour = 31 + i % 6
            f.write(f"line {i:3d} \x1b[{colour}mcoloured\x1b[0m \x1b[1mbold\x1b[0m "
                    f"{'lorem ipsum dolor sit amet ' * (i % 3)}\n")
    os.makedirs(os.path.join(workdir, "sub", "dir"), exist_ok=True)
    for name, mode in (("script.sh", 0o755), ("notes.txt", 0o644), ("archive.tar.gz", 0o644),
                       ("sub/readme.md", 0o644), ("sub/run", 0o755), ("中文.txt", 0o644)):
        path = os.path.join(workdir, name)
        with open(path, "w") as f:
            f.write("x\n")
        os.chmod(path, mode)
    os.symlink("notes.txt", os.path.join(workdir, "link"))
    os.symlink("missing", os.path.join(workdir, "broken"))


def make_corpus(names: list) -> None:
    """Record every recipe named (all if none)."""
    for name in names or sorted(RECIPES):
        recipe = RECIPES[name]
        workdir = tempfile.mkdtemp(prefix="clowder-rec-")
        try:
            home = os.path.join(workdir, "home")
            os.makedirs(home)
            prepare(workdir)
            cmd = [sys.executable if recipe["cmd"][0] == "python3" else recipe["cmd"][0],
                   *recipe["cmd"][1:]]
            data = record(cmd, recipe["cols"], recipe["rows"], recipe["steps"],
                          cwd=workdir, env=environment(home),
                          answer_queries=recipe.get("answer", True))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        save(name, data, {"cols": recipe["cols"], "rows": recipe["rows"], "cmd": recipe["cmd"],
                          "steps": [[d, k.decode("utf-8", "backslashreplace")]
                                    for d, k in recipe["steps"]]})


def main() -> None:
    argv = sys.argv[1:]
    command = []
    if "--" in argv:  # what follows is the command, options and all
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?")
    parser.add_argument("--corpus", nargs="*", metavar="NAME")
    parser.add_argument("--cols", type=int, default=80)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--step", action="append", default=[], type=parse_step)
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    if args.corpus is not None:
        make_corpus(args.corpus)
        return
    if not args.name or not command:
        parser.error("NAME and -- COMMAND are needed (or --corpus)")
    data = record(command, args.cols, args.rows, args.step, args.timeout)
    save(args.name, data, {"cols": args.cols, "rows": args.rows, "cmd": command,
                           "steps": [[d, k.decode("utf-8", "backslashreplace")]
                                     for d, k in args.step]})


if __name__ == "__main__":
    main()
