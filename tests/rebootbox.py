"""The chaos run's reboot box: a machine powered off and booted again under live
sessions (issue 17, "Reboot"), and what a reboot promises, counted.

One nested system instance (tests/nested.py) is booted once by the run and kept across
its reboots with the host's and clowder-control's state directories and /etc/clowder.
It is a system-scope box whatever the scope of the run that throws the event: what is
tested is the host's saving and restoring, which is the same code in both scopes (the
user scope's state directory: test_reboot.py, with a file given another boot).

In each boot the box runs COUNTERS sessions printing numbered lines (the soak's
counter, slower: every TEMPO s, so that the 2,000 lines a file keeps span 20 s, far
more than the moment between the last line noted and the poweroff), an agent of
clowder-control doing the same with a ``resume:`` command, and a full-screen program
that redraws a coloured frame in place on the alternate screen.  A reboot notes the
last line (or frame) each session's backlog holds, powers the box off, writes the
resume command of the next boot (its tag names the boot), boots it again, and counts:

- ``reboot_sessions_missing``: sessions of the previous boot not listed as ended by
  the reboot (``ended_by: reboot``, ``state: lost``);
- ``reboot_last_line_missing``: saved histories that do not hold the last line noted
  before the poweroff;
- ``reboot_gaps_or_duplicates``: gaps or duplicates among a saved history's numbered
  lines of its own session;
- ``reboot_screens_wrong``: the redrawing program's saved screen not all of one frame
  at least as new as the one noted, or without its colours;
- ``reboot_crossed``: lines of another session of the same boot in a saved history or
  screen;
- ``reboot_agent_not_resumed``: the agent not running again, in a new session, with
  the resume command as its argv;
- ``reboot_saved_lost``: sessions saved in an earlier boot and not removed that are no
  longer listed as ended by the reboot.

A power cut (``reboot(cut=True)``, the chaos run's ``power-cut``) kills the box's
PID 1 with SIGKILL instead of powering it off, once every session of the boot has
been saved once: nothing is written at the end, so what comes back is the files of the
last periodic round (at most INTERVAL old with these few sessions).  The same counts
hold, except that a saved history need only reach STALE lines before the last one
noted (the lines a counter prints in 3 x INTERVAL) and the redrawn screen need only be
one whole frame, of any age.

The sessions of a boot are checked at the next reboot and removed (``rm``) at the one
after it, so the state directory holds at most two boots' files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

from conftest import PYTHON, poll, wait_for
from nested import Instance, Nested, kept_dirs, remove_kept
from test_control import COUNTER
from ptyhostd import statedir

COUNTERS = 3
TEMPO = 0.01  # seconds between two numbered lines of a box session
# How far behind the last line noted a power cut's saved history may end: the lines a
# counter prints in 3 x INTERVAL (one round's age, a round's making, the noting).
STALE = int(3 * statedir.INTERVAL / TEMPO)
ROWS = 20  # rows of the redrawing program's frame
# A full-screen program: the alternate screen, every row of a frame rewritten in place
# with its colour (no clear), so any moment's screen is one frame or the next.
REDRAW = ("import sys, time\n"
          "sys.stdout.write('\\x1b[?1049h\\x1b[?25l')\n"
          "n = 0\n"
          "while True:\n"
          "    n += 1\n"
          f"    sys.stdout.write(''.join(f'\\x1b[{{r + 1}};1H\\x1b[3{{1 + r % 6}}m'\n"
          f"                             f'frame-{{n}} row-{{r}}\\x1b[0m\\x1b[K'\n"
          f"                             for r in range({ROWS})))\n"
          "    sys.stdout.flush()\n"
          "    time.sleep(0.05)\n")
KEYS = ("reboot_sessions_missing", "reboot_last_line_missing", "reboot_gaps_or_duplicates",
        "reboot_screens_wrong", "reboot_crossed", "reboot_agent_not_resumed",
        "reboot_saved_lost")


def counter(tag: str) -> list[str]:
    return [PYTHON, "-c", COUNTER.replace("{TAG}", tag).replace("0.002", str(TEMPO))]


def numbers(text: str, tag: str) -> list[int]:
    """``tag``'s numbered lines in a backlog (CRLF) or a history (LF), in order."""
    return [int(n) for n in re.findall(rf"^{re.escape(tag)}(\d+)\r?$", text, re.M)]


def breaks(nums: list[int]) -> int:
    """Gaps or duplicates in a run of numbered lines."""
    return sum(1 for a, b in zip(nums, nums[1:]) if b != a + 1)


def frames(text: str) -> dict[int, int]:
    """Row -> frame number of the redrawing program's rows on a screen."""
    return {int(r): int(n) for n, r in re.findall(r"frame-(\d+) row-(\d+)", text)}


def config(boot: int) -> str:
    """clowder.yaml of ``boot``: the agent's resume command prints the boot's tag."""
    return ("agents:\n  - name: bot\n"
            f"    command: {json.dumps(counter('bot0-'))}\n"
            f"    resume: {json.dumps(counter(f'bot{boot}-'))}\n"
            "    cwd: /\n")


class RebootBox:
    """The nested instance, its sessions of the current boot, and the counts."""

    def __init__(self):
        self.kept, binds = kept_dirs("clowder-soak-box-")
        self.inst = Instance("clowder-soak-box", boot_timeout=90, kept=binds)
        self.box = Nested(self.inst)
        self.boot = 0
        self.tags: dict[str, str] = {}  # live session id -> its tag ("" for the redraw)
        self.agent: str | None = None  # the agent's session of this boot
        self.earlier: list[str] = []  # sessions of the previous boot, ended by the reboot
        self.counts = dict.fromkeys(KEYS, 0)
        self.counts.update(reboots=0, reboot_sessions_checked=0, reboot_lines_checked=0,
                           reboot_earlier_checked=0, reboot_seconds=0.0)
        self.problems: list[str] = []  # what was counted under KEYS, the first few
        self.cut = False  # the last reboot was a power cut

    # --- the box ----------------------------------------------------------------------

    def start(self) -> None:
        with open(f"{self.kept}/etc/clowder.yaml", "w") as f:
            f.write(config(0))
        self._up()
        self._workload()

    def close(self) -> None:
        """Power the box off and remove the kept directories (whatever happened)."""
        try:
            self.inst.stop(timeout=60)
        finally:
            remove_kept(self.kept)

    def _up(self) -> None:
        self.inst.start()
        self.box.install()  # the units lived in the overlay, gone with the poweroff
        self.box.run("systemctl", "start", "clowder-control.service")

    def _workload(self) -> None:
        """This boot's sessions: counters, the redrawing program, and the agent's."""
        b = self.boot
        for i in range(COUNTERS):
            tag = f"b{b}c{i}-"
            sid = self.box.ctl("spawn", "--name", tag.rstrip("-"), "--",
                               *counter(tag)).stdout.decode().strip()
            self.tags[sid] = tag
        sid = self.box.ctl("spawn", "--name", f"b{b}redraw", "--", PYTHON, "-c",
                           REDRAW).stdout.decode().strip()
        self.tags[sid] = ""
        self.agent = self._agent()
        if self.agent:
            self.tags[self.agent] = f"bot{b}-"

    def _agent(self, seconds: float = 60) -> str | None:
        """The agent's running session once clowder-control has spawned it, if its argv
        is this boot's command (the resume command after a reboot); else None, counted."""
        want = counter("bot0-") if self.boot == 0 else counter(f"bot{self.boot}-")
        found = poll(lambda: [s for s in self.box.ps().values()
                              if s["name"] == "agent:bot" and s["state"] == "running"],
                     seconds, interval=0.2)
        if found and found[0]["argv"] == want:
            return found[0]["id"]
        self._bad("reboot_agent_not_resumed", 1, f"the agent's running session: "
                  f"{found[0]['argv'] if found else None}, not {want}")
        return None

    # --- the event --------------------------------------------------------------------

    def _last(self, sid: str, tag: str) -> int:
        """The last whole numbered line (or frame) ``sid``'s backlog holds; -1 if none
        within 15 s of the event."""
        def held() -> list[int]:
            text = self.box.ctl("backlog", sid).stdout.decode(errors="replace")
            if tag:
                return numbers(text, tag)
            # The last frame whose every row was written.
            return [int(n) for n in re.findall(rf"frame-(\d+) row-{ROWS - 1}\x1b", text)]
        got = poll(held, 15, interval=0.1)
        return got[-1] if got else -1

    def reboot(self, cut: bool = False) -> None:
        """Note the sessions' last lines, power off (``cut``: kill PID 1 once every
        session was saved once), boot again, count what was kept."""
        began = time.monotonic()
        if cut:
            saved = f"{self.kept}/ptyhost/{statedir.SUBDIR}"
            wait_for(lambda: all(os.path.exists(f"{saved}/{sid}{statedir.SUFFIX}")
                                 for sid in self.tags), 3 * statedir.INTERVAL,
                     "every session of the box to be saved once before the power cut")
        noted = {sid: self._last(sid, tag) for sid, tag in self.tags.items()}
        if cut:  # nothing stops, nothing is written: the power is gone
            os.kill(self.inst.pid, signal.SIGKILL)
        self.inst.stop(timeout=60)  # a poweroff: systemd stops every unit, the host too
        self.cut = cut
        self.boot += 1
        with open(f"{self.kept}/etc/clowder.yaml", "w") as f:
            f.write(config(self.boot))
        self._up()
        ps = self.box.ps()
        listed = self._check(ps, noted)
        for sid in self.earlier:  # saved one boot earlier, still listed until removed
            info = ps.get(sid)
            self.counts["reboot_earlier_checked"] += 1
            self._bad("reboot_saved_lost", not info or info.get("ended_by") != "reboot",
                      f"{sid}, saved a boot earlier, listed as {info and info.get('ended_by')}")
        if [sid for sid in self.earlier if sid in ps]:  # checked twice: removed
            self.box.ctl("rm", *[sid for sid in self.earlier if sid in ps])
        odd = [sid for sid in noted if sid in ps and sid not in listed]
        if odd:  # listed otherwise (counted): removed if they can be, not checked again
            self.box.ctl("rm", *odd, check=False)
        self.earlier = listed
        self.tags = {}
        self._workload()
        self.counts["reboots"] += 1
        self.counts["reboot_seconds"] = round(self.counts["reboot_seconds"]
                                              + time.monotonic() - began, 1)

    def _bad(self, key: str, n: int, what: str) -> None:
        """Count ``n`` under ``key``; say what, for the report (the first few)."""
        if n:
            self.counts[key] += n
            if len(self.problems) < 12:
                self.problems.append(f"reboot {self.counts['reboots'] + 1}: {what}")

    def _check(self, ps: dict, noted: dict[str, int]) -> list[str]:
        """Count what the sessions of the boot that ended kept; those listed as ended by
        the reboot."""
        others = [tag for tag in self.tags.values() if tag]
        listed = []
        for sid, tag in self.tags.items():
            info = ps.get(sid)
            if not info or info.get("ended_by") != "reboot" or info.get("state") != "lost":
                self._bad("reboot_sessions_missing", 1, f"{sid} ({tag or 'redraw'}) listed as "
                          f"{info and {k: info.get(k) for k in ('state', 'ended_by')}}")
                continue
            listed.append(sid)
            self.counts["reboot_sessions_checked"] += 1
            if not tag:
                self._check_screen(sid, noted[sid], others)
                continue
            lines = json.loads(self.box.ctl("history", "--lines", "2500", "--json",
                                            sid).stdout)["lines"]
            text = "\n".join(lines)
            nums = numbers(text, tag)
            self.counts["reboot_lines_checked"] += len(nums)
            held = f"{len(nums)} lines {nums[:1]}..{nums[-1:]}"
            missing = noted[sid] not in nums if not self.cut else \
                not nums or nums[-1] < noted[sid] - STALE
            self._bad("reboot_last_line_missing", missing,
                      f"{sid} ({tag}) saved {held}, not {tag}{noted[sid]} noted before"
                      + (f" (less {STALE}: a power cut)" if self.cut else ""))
            bad = breaks(nums)
            self._bad("reboot_gaps_or_duplicates", bad, f"{sid} ({tag}) saved {held} with "
                      f"{bad} breaks: {[(a, b) for a, b in zip(nums, nums[1:]) if b != a + 1][:3]}")
            crossed = [t for t in others if t != tag and numbers(text, t)]
            self._bad("reboot_crossed", bool(crossed), f"{sid} ({tag}) holds {crossed}")
        return listed

    def _check_screen(self, sid: str, noted: int, others: list[str]) -> None:
        """The redrawing program's saved screen: every row of one frame or the next,
        none older than the frame noted, with its colours."""
        text = self.box.ctl("snapshot", sid).stdout.decode(errors="replace")
        rows = frames(text)
        ansi = self.box.ctl("snapshot", "--format", "ansi", sid).stdout.decode(errors="replace")
        coloured = re.search(r"\x1b\[(?:[0-9;]*;)?(?:3[1-6]|38;5;[1-6])[;m]", ansi)
        self._bad("reboot_screens_wrong", bool(
            sorted(rows) != list(range(ROWS)) or (min(rows.values()) < noted and not self.cut)
            or max(rows.values()) - min(rows.values()) > 1 or not coloured),
            f"{sid} (redraw) saved rows {sorted(set(rows.values()))} of {len(rows)}, "
            f"frame {noted} noted before, coloured: {bool(coloured)}")
        crossed = [t for t in others if numbers(text, t)]
        self._bad("reboot_crossed", bool(crossed), f"{sid} (redraw) holds {crossed}")

    def report(self) -> dict:
        return {**self.counts, **({"reboot_problems": self.problems} if self.problems else {})}
