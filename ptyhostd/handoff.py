"""In-place hand-off: ``systemctl reload clowder-ptyhost`` runs newly installed code in the
same process (same main PID), carrying every parked fd.

The sequence (``Host.handoff`` in host.py, with ``run_check`` and ``execute`` here), each
failure it catches leaving the old code serving (a stop during the check is a stop, and a
kill is a crash that systemd restarts: docs/design.md, "Hand-off"):
1. check: the *new* code runs once as a separate process (``--check-handoff``) on a copy
   of the manifest and on the rings (read-only); it must parse them, restore them in a
   dry run, and report a version that is not older than ours;
2. the manifest is written, close-on-exec is cleared on every fd to keep, and their names
   go into ``$CLOWDER_HANDOFF`` (``name=fd,...``);
3. the bridge is forked (bridge.py), then ``execve`` of the same interpreter and
   arguments; the new code stops the bridge, adopts the fds exactly as it adopts those
   systemd gives back after a restart, then sends READY=1.
A failed exec returns here with nothing lost.  A new code that passes the check and then
fails its real restore exits; systemd restarts it (Restart=always) from the FD store,
which still holds everything: only the time of the restart is lost.
Client connections are not carried: a bridge (bridge.py) serves the attached ones until
the new code is about to adopt; then they reconnect and are repainted.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import struct
import subprocess
import sys

from clowder_common import __version__
from clowder_common.interpreter import module_argv
from clowder_common.log import flush as flush_log

from . import bridge, engine, faults
from .manifest import SLOTS, Manifest, ManifestError
from .ring import Ring, RingError

log = logging.getLogger("ptyhostd")

# Bump when what crosses the exec changes meaning.  2: a bridge may be serving
# ($CLOWDER_HANDOFF_BRIDGE, bridge.py) and the new code must stop it before it adopts
# anything, so code that does not know it (1) is refused as a hand-off's target.
HANDOFF_VERSION = 2
ENV = "CLOWDER_HANDOFF"
CHECK_ENV = "CLOWDER_HANDOFF_CHECK"
CHECK_TIMEOUT = 10.0


class HandoffError(Exception):
    """The hand-off was refused; the message says why, the old code keeps serving."""


class HandoffFailed(Exception):
    """The hand-off could not be carried out on our side (not the new code's refusal);
    nothing was lost, the old code keeps serving."""


def _version_tuple(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in text.split("."))


def encode_fds(fds: dict[str, list[int]]) -> str:
    return ",".join(f"{name}={fd}" for name, group in fds.items() for fd in group)


def decode_fds(text: str) -> dict[str, list[int]]:
    """``name=fd,...`` as {name: [fd, ...]}; raises ValueError on a malformed value."""
    out: dict[str, list[int]] = {}
    for item in filter(None, text.split(",")):
        name, _, fd = item.rpartition("=")
        if not name:
            raise ValueError(f"malformed hand-off entry {item!r}")
        out.setdefault(name, []).append(int(fd))
    return out


def inherited() -> dict[str, list[int]] | None:
    """The fds a previous instance of us handed over by exec, if this is a hand-off."""
    text = os.environ.pop(ENV, None)
    if text is None:
        return None
    fds = decode_fds(text)
    for group in fds.values():
        for fd in group:
            os.set_inheritable(fd, False)
    return fds


# --- screens cross as VT bytes, never as objects (two versions share no object format) ---

SCREENS = "screens"  # the name of the memfd that carries them across the exec
_LEN = struct.Struct("<Q")


def pack_screens(screens: dict[str, dict]) -> int:
    """A memfd holding each session's repaint bytes: {id: {"pos", "cols", "rows", "vt"}}."""
    faults.maybe_fail("screens")
    index, blobs, offset = {}, [], 0
    for sid, sc in screens.items():
        index[sid] = {"pos": sc["pos"], "cols": sc["cols"], "rows": sc["rows"],
                      "at": offset, "len": len(sc["vt"])}
        blobs.append(sc["vt"])
        offset += len(sc["vt"])
    head = json.dumps(index).encode()
    fd = os.memfd_create("clowder-screens", os.MFD_CLOEXEC)
    os.write(fd, _LEN.pack(len(head)) + head + b"".join(blobs))
    return fd


def unpack_screens(fd: int) -> dict[str, dict]:
    """The inverse of pack_screens; the fd is closed.  Damage yields no screens, not an
    error: a screen is rebuilt from the ring when it is missing."""
    try:
        data = os.pread(fd, 1 << 31, 0)
        (hlen,) = _LEN.unpack_from(data)
        index = json.loads(data[_LEN.size:_LEN.size + hlen])
        base = _LEN.size + hlen
        return {sid: {**e, "vt": data[base + e["at"]:base + e["at"] + e["len"]]}
                for sid, e in index.items()}
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        log.warning("screens from the hand-off are unusable, rebuilding them: %s", exc)
        return {}
    finally:
        os.close(fd)


# --- the check, run by the new code as its own process ------------------------------------

def check_main() -> int:
    """``ptyhostd --check-handoff``: dry-run restore of what $CLOWDER_HANDOFF_CHECK names."""
    try:
        fds = decode_fds(os.environ.get(CHECK_ENV, ""))
        manifest_fds = {n: g[0] for n, g in fds.items() if n in SLOTS}
        sessions = []
        if manifest_fds:
            _, content = Manifest.adopt(manifest_fds)
            sessions = content.get("sessions", [])
        for name, group in fds.items():
            if name.startswith("r."):
                Ring.inspect(group[0], name[2:])
        if not isinstance(sessions, list):
            raise ManifestError("sessions is not a list")
        # The host imports the terminal model only when a screen is first needed, but the
        # screens carried across the hand-off need it: code that cannot run it is refused.
        engine.choose(os.environ.get("CLOWDER_SCREEN_ENGINE") or None)
        engine.new_screen(80, 24).feed(b"\x1b[1mcheck\x1b[0m")
    except (ManifestError, RingError, ValueError, OSError, ImportError,
            engine.EngineError) as exc:
        print(f"hand-off check failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"version": __version__, "handoff": HANDOFF_VERSION,
                      "sessions": len(sessions)}))
    return 0


def run_check(parked: dict[str, list[int]], manifest: Manifest) -> dict:
    """Run the installed code's check on a copy of our state; its report, or HandoffError."""
    copies = {}
    try:
        faults.maybe_fail("check")  # as when no memfd can be made (EMFILE)
        for slot, holder in manifest.fds.items():
            copy = os.memfd_create(f"clowder-check-{slot}", os.MFD_CLOEXEC)
            copies[slot] = [copy]  # closed below even if the copy fails
            os.write(copy, os.pread(holder.fileno(), 1 << 30, 0))
        rings = {n: g[:1] for n, g in parked.items() if n.startswith("r.")}
        passed = {**copies, **rings}
        keep = [fd for g in passed.values() for fd in g]
        env = {**os.environ, CHECK_ENV: encode_fds(passed)}
        if engine.chosen:  # the check loads the engine this host runs (--screen-engine)
            env["CLOWDER_SCREEN_ENGINE"] = engine.chosen
        # The check must not talk to systemd as us, nor feed our watchdog: a check that
        # hangs is ended by CHECK_TIMEOUT, a host that hangs by the watchdog.
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            env.pop(name, None)
        log.debug("hand-off: checking the installed code on a copy of %d manifest slots "
                  "and %d rings", len(copies), len(rings), extra={"CLOWDER_CAUSE": "handoff"})
        try:
            proc = subprocess.run(module_argv("ptyhostd", "--check-handoff"),
                                  env=env, pass_fds=keep, capture_output=True, text=True,
                                  timeout=CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise HandoffError(f"the new code's check did not finish in {CHECK_TIMEOUT} s") \
                from None
        except OSError as exc:
            raise HandoffError(f"the new code cannot be started: {exc}") from None
    finally:
        for group in copies.values():
            os.close(group[0])
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise HandoffError(f"the new code failed its check: {why}")
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        new_version, new_handoff = str(report["version"]), int(report["handoff"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise HandoffError(f"the new code's check answered nonsense: {proc.stdout!r}") \
            from None
    if _version_tuple(new_version) < _version_tuple(__version__):
        raise HandoffError(f"refusing a downgrade from {__version__} to {new_version}")
    if new_handoff < HANDOFF_VERSION:
        raise HandoffError(f"the new code speaks hand-off {new_handoff}, "
                           f"this one {HANDOFF_VERSION}")
    return report


def execute(keep: dict[str, list[int]], plan: "bridge.Plan | None" = None) -> None:
    """Exec the installed code with ``keep`` inherited; returns only by raising
    HandoffFailed, with every change it made undone (nothing is inherited by mistake).
    With ``plan``, a bridge (bridge.py) serves its clients while the new code starts."""
    fds = [fd for group in keep.values() for fd in group]
    child = None
    try:
        for fd in fds:
            os.set_inheritable(fd, True)
        os.environ[ENV] = encode_fds(keep)
        if plan is not None:
            child = bridge.fork(plan)
            if child is not None:
                os.environ[bridge.ENV] = str(child.pid)
        faults.maybe_fail("exec")
        # The rest of the environment crosses as it is: systemd's $WATCHDOG_USEC and
        # $WATCHDOG_PID (this same PID) tell the new code to keep feeding the watchdog,
        # which keeps running through the exec ($LISTEN_* were unset at adoption).
        # A SIGTERM (a stop) during the new code's start-up stays pending until it can
        # handle it: the mask survives exec, and main() unblocks it once its handler is set.
        # So does a SIGHUP (a second reload), which main() then ignores instead of dying.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
        log.debug("hand-off: exec of %s -m ptyhostd with %d fds inherited%s", sys.executable,
                  len(fds), f", bridge {child.pid}" if child else "",
                  extra={"CLOWDER_CAUSE": "handoff"})
        flush_log()  # what waits for the log's writer thread would die with the exec
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, module_argv("ptyhostd", *sys.argv[1:]))
    except Exception as exc:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGHUP})
        os.environ.pop(ENV, None)
        os.environ.pop(bridge.ENV, None)
        if child is not None:
            child.cancel()  # it never started: it waits for the exec
        for fd in fds:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # a closed fd is inherited by no one
        raise HandoffFailed(f"exec of the new code failed: {exc}") from exc
