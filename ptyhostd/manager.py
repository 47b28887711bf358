"""The service manager over D-Bus: transient session units, their state, their end.

We talk peer-to-peer to systemd's private socket (``/run/systemd/private``, or
``$XDG_RUNTIME_DIR/systemd/private`` for a user manager), so no bus daemon is needed and
a call takes ~1.5 ms instead of ~10 ms for ``systemd-run``.  That socket has no
``org.freedesktop.DBus`` object: we must not send ``Hello`` (jeepney's high-level
opener does), so the connection is set up by hand (dbuslink.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Awaitable, Callable, Optional

from .linkerror import LinkLost, ManagerError

if TYPE_CHECKING:
    from jeepney import Message

    from .dbuslink import Link

log = logging.getLogger("ptyhostd")

# A D-Bus object and interface: (path, interface); the messages themselves are made by
# dbuslink.py, which imports jeepney (~4 ms) when the link is first opened, after READY.
_SYSTEMD = "org.freedesktop.systemd1"
_ROOT = "/org/freedesktop/systemd1"
_MANAGER = (_ROOT, _SYSTEMD + ".Manager")
_PROPS = "org.freedesktop.DBus.Properties"
_NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"

# Exit codes systemd's own executor uses when it fails before the program runs
# (systemd.exec(5), "PROCESS EXIT CODES").
EXEC_FAILURES = {
    200: "cannot change to the working directory",
    203: "cannot execute the program (not found or not executable)",
    204: "cannot set up standard input/output (the terminal)",
    216: "cannot set up the group",
    217: "cannot set up the user (unknown user?)",
}
# Every status systemd's executor uses for its own failures (EXIT_CHDIR .. EXIT_*).
SETUP_FAILURES = range(200, 246)


class UnitState:
    """What systemd knows of one session unit (a plain class: see host.Config)."""

    __slots__ = ("name", "active", "sub", "main_pid", "exec_code", "exec_status", "result")

    def __init__(self, name: str, active: str, sub: str, main_pid: int, exec_code: int,
                 exec_status: int, result: str):
        self.name = name
        self.active = active  # ActiveState: active, failed, inactive, activating, ...
        self.sub = sub  # SubState: running, exited, failed, dead, ...
        self.main_pid = main_pid
        # ExecMainCode: 0 still running/unknown, 1 exited, 2 killed, 3 dumped
        self.exec_code = exec_code
        self.exec_status = exec_status  # exit code, or signal number
        self.result = result

    def __repr__(self) -> str:
        return "UnitState(%s)" % ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)

    def __eq__(self, other) -> bool:
        return isinstance(other, UnitState) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    @property
    def finished(self) -> bool:
        """The main process has ended and systemd has recorded how."""
        return self.exec_code != 0 and self.main_pid == 0

    @property
    def loaded(self) -> bool:
        return self.active != "not-found"


def _read_own_cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def unit_of_cgroup(text: str) -> Optional[str]:
    """The service a /proc/PID/cgroup puts its process in (the unified hierarchy's line,
    else systemd's own named one), or None: not a service's main cgroup."""
    lines = text.splitlines()
    unified = [line for line in lines if line.startswith("0::")]
    named = [line for line in lines if line.split(":", 2)[1:2] == ["name=systemd"]]
    for line in unified + named:
        name = line.rsplit("/", 1)[-1]
        if name.endswith(".service"):
            return name
    return None


def private_socket_path(user: bool) -> str:
    """Where the manager's private socket is."""
    if user:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if not runtime:
            raise ManagerError("XDG_RUNTIME_DIR is not set: cannot find the user manager")
        return os.path.join(runtime, "systemd", "private")
    return "/run/systemd/private"


# How long a call waits for the link to come back (a daemon-reexec takes well under a
# second; a loaded machine can stretch that) before it fails with ManagerError.
LINK_WAIT = 15.0
CALL_TIMEOUT = 30.0


class _JobWait:
    """A caller waiting for the JobRemoved signal of one job."""

    __slots__ = ("future", "unit", "kind")

    def __init__(self, future: asyncio.Future, unit: str, kind: str):
        self.future = future
        self.unit = unit
        self.kind = kind  # "start" or "stop"


FIRST_LINK_AFTER = 0.5  # seconds from the start to the first link, unless a call needs it


class Manager:
    """The link to the service manager, kept open in the background.

    The host must not wait for D-Bus before it serves: adopting running sessions needs
    no call to systemd, and authenticating plus the first round trip are a noticeable
    part of a restart's blackout.  So the link is opened by a task started here (at the
    first call, at ``link_now``, or FIRST_LINK_AFTER at the latest), and every call
    waits for it (up to LINK_WAIT).  The same task re-opens it whenever it drops:
    ``systemctl daemon-reexec`` (every systemd upgrade) closes every connection
    to the private socket.  Signals sent meanwhile are lost, so after a reconnect the
    jobs still awaited are looked up, and ``on_reconnect`` lets the host catch up on
    the units.
    """

    def __init__(self, user: bool):
        self.path = private_socket_path(user)
        self.on_reconnect: Optional[Callable[[], Awaitable[None]]] = None
        self._link: Optional[Link] = None
        self._up = asyncio.Event()
        self._last_error = "not connected yet"
        self._jobs: dict[str, _JobWait] = {}
        self._done_jobs: dict[str, str] = {}
        self._catching_up: Optional[asyncio.Task] = None
        self._closed = False
        self._wanted = asyncio.Event()  # a call waits for the link
        self._keeper = asyncio.ensure_future(self._keep_linked())
        self._keeper.add_done_callback(self._keeper_done)

    @classmethod
    async def connect(cls, user: bool) -> "Manager":
        """A manager whose link is already open (ManagerError if it cannot be)."""
        self = cls(user)
        await self.ready()
        return self

    def link_now(self) -> None:
        """Open the first link now (the host's start calls it at its first quiet moment)."""
        self._wanted.set()

    async def ready(self) -> None:
        """Wait until the link is open; ManagerError if it is not within LINK_WAIT."""
        await self._linked()

    async def _linked(self) -> Link:
        link = self._link
        if link is not None and link.alive:
            return link
        if link is not None:
            self._up.clear()  # dropped; the keeper has not seen it yet
        self._wanted.set()
        try:
            await asyncio.wait_for(self._up.wait(), LINK_WAIT)
        except asyncio.TimeoutError:
            raise ManagerError(f"no link to the service manager at {self.path} for "
                               f"{LINK_WAIT:g} s: {self._last_error}") from None
        return self._link

    def _keeper_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the service manager link keeper failed: %r", task.exception(),
                      exc_info=task.exception(), extra={"CLOWDER_CAUSE": "manager-link"})

    async def _keep_linked(self) -> None:
        """Open the link, and open it again each time it drops, until closed."""
        loop = asyncio.get_running_loop()
        delay = 0.02
        lost_at: Optional[float] = None
        failures = 0
        # The first link waits until a call needs it, link_now, or FIRST_LINK_AFTER:
        # importing jeepney and authenticating are ~5 ms of the loop, which the clients
        # that reconnect in a restart's first milliseconds would otherwise wait behind.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wanted.wait(), FIRST_LINK_AFTER)
        while not self._closed:
            try:
                from .dbuslink import open_link  # jeepney: imported at the first link
                link = await open_link(self.path, self._job_removed)
            except Exception as exc:  # whatever it was, try again: calls wait for a link
                self._last_error = str(exc)
                failures += 1
                # A re-exec refuses the first tries as a rule: say so only if it lasts.
                if (failures == 1 and lost_at is None) or failures % 50 == 0:
                    log.error("service manager unreachable (attempt %d, retrying): %s",
                              failures, exc, extra={"CLOWDER_CAUSE": "manager-unreachable"})
                await asyncio.sleep(delay)
                # Capped low: a refused connect is cheap, and during a re-exec every
                # try that comes late loses the race to clients with queued requests.
                delay = min(delay * 2, 0.1)
                continue
            if self._closed:
                await link.close()
                return
            delay, failures = 0.02, 0
            self._link = link
            self._up.set()
            if lost_at is not None:
                log.info("link to the service manager at %s is back after %.2f s",
                         self.path, loop.time() - lost_at,
                         extra={"CLOWDER_CAUSE": "manager-reconnect"})
                self._catching_up = asyncio.ensure_future(self._catch_up())
                self._catching_up.add_done_callback(self._caught_up)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(link.task)
            if self._closed or not link.task.done():
                return  # we were cancelled (close)
            self._up.clear()
            self._last_error = f"the link dropped ({link.why})"
            lost_at = loop.time()
            log.warning("link to the service manager at %s dropped (%s): reconnecting",
                        self.path, link.why, extra={"CLOWDER_CAUSE": "manager-disconnect"})
            await link.close()

    async def close(self) -> None:
        self._closed = True
        self._keeper.cancel()
        if self._catching_up is not None:
            self._catching_up.cancel()
        if self._link is not None:
            await self._link.close()

    # --- calls --------------------------------------------------------------------------

    async def _call(self, addr: tuple[str, str], method: str, sig: Optional[str] = None,
                    body: tuple = (), what: str = "") -> tuple:
        """Call ``method``; a call cut off by a dropped link is sent again on the next."""
        return (await self._call_on(addr, method, sig, body, what))[0]

    async def _call_on(self, addr: tuple[str, str], method: str, sig: Optional[str] = None,
                       body: tuple = (), what: str = "", resend: bool = True
                       ) -> tuple[tuple, Link]:
        """The reply's body and the link it came on (``resend=False``: LinkLost instead
        of sending again, for a call that must not be done twice)."""
        what = what or method
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINK_WAIT
        while True:
            link = await self._linked()
            try:
                reply = await asyncio.wait_for(
                    link.call(link.method_call(addr, method, sig, body)), CALL_TIMEOUT)
                break
            except LinkLost as exc:
                if not resend:
                    raise LinkLost(f"{what}: {exc}") from exc
                if loop.time() > deadline:
                    raise ManagerError(f"{what}: {exc}") from exc
            except asyncio.TimeoutError:
                raise ManagerError(f"{what}: service manager not answering within "
                                   f"{CALL_TIMEOUT:g} s") from None
        refused = link.error_of(reply)
        if refused is not None:
            name, text = refused
            raise ManagerError(f"{what}: {text or name}", name) from None
        return reply.body, link

    # --- jobs ---------------------------------------------------------------------------

    def _job_removed(self, msg: Message) -> None:
        _id, job, _unit, result = msg.body
        wait = self._jobs.pop(job, None)
        if wait is not None:
            if not wait.future.done():
                wait.future.set_result(result)
        else:
            # The signal can overtake our handling of the reply that named the job.
            self._done_jobs[job] = result
            if len(self._done_jobs) > 4096:
                self._done_jobs.pop(next(iter(self._done_jobs)))

    async def _wait_job(self, job: str, unit: str, kind: str, link: Optional[Link],
                        timeout: float = 30) -> str:
        """The result of ``job``; ``link`` is the one its reply came on (None: unknown)."""
        if job in self._done_jobs:
            return self._done_jobs.pop(job)
        wait = _JobWait(asyncio.get_running_loop().create_future(), unit, kind)
        self._jobs[job] = wait
        try:
            if link is None or link is not self._link or not link.alive:
                # Its JobRemoved may have gone with that link: ask where it is now.
                self._resolve_soon(job, wait)
            return await asyncio.wait_for(asyncio.shield(wait.future), timeout)
        except asyncio.TimeoutError:
            raise ManagerError(f"job {job} ({kind} {unit}) did not finish within "
                               f"{timeout} s") from None
        finally:
            if self._jobs.get(job) is wait:
                del self._jobs[job]

    def _resolve_soon(self, job: str, wait: _JobWait) -> None:
        task = asyncio.ensure_future(self._resolve_job(job, wait))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _resolve_job(self, job: str, wait: _JobWait) -> None:
        """Settle a job wait whose JobRemoved signal may have been lost with a link."""
        try:
            await self._call((job, _PROPS), "Get",
                             "ss", (_SYSTEMD + ".Job", "State"), what=f"looking up {job}")
            return  # still queued or running: the current link's JobRemoved will say
        except ManagerError as exc:
            if not exc.name:
                log.warning("cannot look up job %s of %s: %s", job, wait.unit, exc,
                            extra={"CLOWDER_UNIT": wait.unit,
                                   "CLOWDER_CAUSE": "manager-reconnect"})
                return  # the wait's own timeout ends it
        # The job is gone: it finished while no link was there to tell us how.
        try:
            state = await self.unit_state(wait.unit)
        except ManagerError as exc:
            log.warning("cannot read %s after losing its job's signal: %s", wait.unit, exc,
                        extra={"CLOWDER_UNIT": wait.unit, "CLOWDER_CAUSE": "manager-reconnect"})
            return
        if wait.kind == "start":
            ran = state.loaded and (state.main_pid or state.exec_code or state.active == "active")
            result = "done" if ran else "failed"
        else:
            result = "done" if not state.loaded or state.active in ("inactive", "failed") \
                else "failed"
        log.info("job %s (%s %s) ended unseen across a reconnect; from the unit's state "
                 "(%s/%s): %s", job, wait.kind, wait.unit, state.active, state.sub, result,
                 extra={"CLOWDER_UNIT": wait.unit, "CLOWDER_CAUSE": "manager-reconnect"})
        if not wait.future.done():
            wait.future.set_result(result)

    async def _catch_up(self) -> None:
        """After a reconnect: settle the job waits whose signals may have been lost, then
        let the host reconcile its sessions with the units."""
        for job, wait in list(self._jobs.items()):
            if not wait.future.done():
                await self._resolve_job(job, wait)
        if self.on_reconnect is not None:
            await self.on_reconnect()

    def _caught_up(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("catching up after a reconnect failed: %r", task.exception(),
                      exc_info=task.exception(), extra={"CLOWDER_CAUSE": "manager-reconnect"})

    async def _unit_job(self, unit: str) -> str:
        """The path of the job pending on ``unit``, or "" if none."""
        (path,) = await self._call(_MANAGER, "GetUnit", "s", (unit,), what=f"GetUnit {unit}")
        addr = (path, _PROPS)
        (job,) = await self._call(addr, "Get", "ss", (_SYSTEMD + ".Unit", "Job"),
                                  what=f"reading {unit}")
        job_id, job_path = job[1]
        return job_path if job_id else ""

    async def start_session(self, unit: str, argv: list[str], tty: str, cwd: str | None,
                            env: list[str], user: str | None, description: str,
                            search_path: list[str] = (), slice_: str | None = None) -> str:
        """Start ``argv`` as transient service ``unit`` on terminal ``tty``; the job result.

        ``search_path``: where a bare ``argv[0]`` is looked for (ExecSearchPath=), else
        systemd's own fixed path.  ``slice_``: the unit's slice (Slice=), else the
        manager's default.

        ``RemainAfterExit`` keeps the unit, and so its exit status, until we stop it:
        that is how an exit is still known after the host was down when it happened.
        """
        props = [
            ("Description", ("s", description)),
            ("Type", ("s", "exec")),
            # systemd substitutes $VAR in ExecStart even over D-Bus: "$$" keeps a "$".
            ("ExecStart", ("a(sasb)", [(argv[0], [a.replace("$", "$$") for a in argv],
                                        False)])),
            ("TTYPath", ("s", tty)),
            ("StandardInput", ("s", "tty")),
            ("StandardOutput", ("s", "tty")),
            ("StandardError", ("s", "tty")),
            ("RemainAfterExit", ("b", True)),
            # Stopping a session is a hang-up, as when a terminal window closes.
            ("KillSignal", ("i", 1)),
            ("SendSIGHUP", ("b", True)),
            # A stop SIGKILLs what ignored the hang-up after 5 s, not systemd's 90 s
            # default: the host's own stop (TimeoutStopSec=30) waits on its sessions'.
            ("TimeoutStopUSec", ("t", 5_000_000)),
            ("Environment", ("as", env)),
        ]
        if cwd:
            props.append(("WorkingDirectory", ("s", cwd)))
        if search_path:
            props.append(("ExecSearchPath", ("as", list(search_path))))
        if user is not None:
            props.append(("User", ("s", user)))
        if slice_ is not None:
            props.append(("Slice", ("s", slice_)))
        for _attempt in range(3):
            try:
                (job,), link = await self._call_on(
                    _MANAGER, "StartTransientUnit", "ssa(sv)a(sa(sv))",
                    (unit, "fail", props, []), what=f"starting {unit}", resend=False)
                return await self._wait_job(job, unit, "start", link)
            except LinkLost as exc:
                # The request may have been done before systemd went away: what exists
                # now says (a resend for a unit that exists would fail, not start twice).
                log.warning("%s: the link dropped before the reply; checking the unit",
                            exc, extra={"CLOWDER_UNIT": unit,
                                        "CLOWDER_CAUSE": "manager-reconnect"})
                state = await self.unit_state(unit)
                if state.loaded:
                    job = await self._unit_job(unit)
                    log.info("%s exists (%s/%s, job %s): it was started before the drop",
                             unit, state.active, state.sub, job or "none",
                             extra={"CLOWDER_UNIT": unit, "CLOWDER_CAUSE": "manager-reconnect"})
                    if job:
                        return await self._wait_job(job, unit, "start", None)
                    ran = state.main_pid or state.exec_code or state.active == "active"
                    return "done" if ran else "failed"
                log.info("%s does not exist: starting it again", unit,
                         extra={"CLOWDER_UNIT": unit, "CLOWDER_CAUSE": "manager-reconnect"})
            except ManagerError as exc:  # after LinkLost, a ManagerError too
                if exc.name != _NO_SUCH_UNIT:
                    raise
                raise ManagerError(self._not_written(unit, exc), exc.name) from None
        raise ManagerError(f"starting {unit}: the link to the service manager kept "
                           f"dropping")

    def _not_written(self, unit: str, exc: ManagerError) -> str:
        """Why systemd says a unit it was just asked to create is "not found".

        Measured on 252: systemd writes a transient unit's file under its runtime
        directory and loads it back; when that write fails (a full /run: ENOSPC, or no
        inodes left) it only says "Unit ... not found".  Its real reason is there.
        """
        where = os.path.join(os.path.dirname(self.path), "transient")
        try:
            st = os.statvfs(where)
        except OSError as err:
            return f"{exc}: systemd cannot write its transient units in {where} ({err.strerror})"
        if st.f_bavail == 0 or (st.f_files and st.f_ffree == 0):
            what = "space" if st.f_bavail == 0 else "inodes"
            return (f"starting {unit}: no {what} left on the filesystem of {where}: systemd "
                    f"could not write the session's unit file (it said: {exc})")
        return (f"{exc} (systemd could not load the unit it was asked to create: is "
                f"{where} writable?)")

    async def unit_state(self, unit: str) -> UnitState:
        """The unit's state; ``active == "not-found"`` if systemd no longer has it."""
        try:
            (path,) = await self._call(_MANAGER, "GetUnit", "s", (unit,), what=f"GetUnit {unit}")
        except ManagerError as exc:
            if "not loaded" in str(exc) or "NoSuchUnit" in str(exc):
                return UnitState(unit, "not-found", "dead", 0, 0, 0, "")
            raise
        addr = (path, _PROPS)
        (unit_props,) = await self._call(addr, "GetAll", "s", (_SYSTEMD + ".Unit",),
                                         what=f"reading {unit}")
        (svc,) = await self._call(addr, "GetAll", "s", (_SYSTEMD + ".Service",),
                                  what=f"reading {unit}")
        return UnitState(unit, unit_props["ActiveState"][1], unit_props["SubState"][1],
                         svc["MainPID"][1], svc["ExecMainCode"][1], svc["ExecMainStatus"][1],
                         svc["Result"][1])

    async def wait_finished(self, unit: str, timeout: float = 10) -> UnitState:
        """The state once systemd has recorded the main process's end.

        Called when the process is already gone (its pidfd polled readable), so this
        only waits out systemd's handling of SIGCHLD, typically under a millisecond.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.001
        while True:
            state = await self.unit_state(unit)
            if state.finished or not state.loaded or state.active in ("inactive", "failed"):
                return state
            if loop.time() > deadline:
                raise ManagerError(f"{unit}: main process ended but systemd did not record "
                                   f"it within {timeout} s (state {state.active}/{state.sub})")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def stop(self, unit: str, wait: bool = True) -> None:
        """Stop the unit (its processes get SIGHUP) and forget it if it failed."""
        try:
            (job,), link = await self._call_on(_MANAGER, "StopUnit", "ss", (unit, "replace"),
                                               what=f"stopping {unit}")
            if wait:
                await self._wait_job(job, unit, "stop", link)
        except ManagerError as exc:
            if "not loaded" not in str(exc) and exc.name != "org.freedesktop.systemd1.NoSuchUnit":
                raise
        await self.reset_failed(unit)

    async def clear_own_result(self) -> None:
        """Forget the failure systemd keeps for our unit after a main process died while
        the unit ran on (a standby took over, standby.py): with it, the end of the next
        reload stops the whole unit (seen: "Failed with result 'signal'", then a restart),
        and the next stop leaves it failed.  ResetFailedUnit, which zeroes NRestarts too."""
        unit = unit_of_cgroup(_read_own_cgroup())
        if unit is not None:
            await self._call(_MANAGER, "ResetFailedUnit", "s", (unit,),
                             what="clearing our unit's failure after a takeover")

    async def reset_failed(self, unit: str) -> None:
        """Let systemd garbage-collect a failed unit."""
        try:
            await self._call(_MANAGER, "ResetFailedUnit", "s", (unit,))
        except ManagerError:
            pass  # not failed, or already gone: nothing to collect

    async def kill(self, unit: str, signal: int) -> None:
        """Send ``signal`` to every process of the unit."""
        await self._call(_MANAGER, "KillUnit", "ssi", (unit, "all", signal),
                         what=f"signalling {unit}")

    async def list_units(self, pattern: str) -> list[tuple[str, str, str]]:
        """(name, active state, sub state) of loaded units matching ``pattern``."""
        (units,) = await self._call(_MANAGER, "ListUnitsByPatterns", "asas", ([], [pattern]))
        return [(u[0], u[3], u[4]) for u in units]

    async def own_job_type(self) -> str:
        """The type of the job pending on our own unit ("stop", "restart", ... or "").

        Asked as SIGTERM comes, so a restart's blackout waits for it: one ListJobs
        (our unit named by our cgroup) instead of finding our unit, its job and the
        job's type, three round trips (with Manifest.mark, the old host's exit at 1,000
        sessions went from 2.6 to 1.2 ms here)."""
        unit = unit_of_cgroup(_read_own_cgroup())
        if unit is not None:
            (jobs,) = await self._call(_MANAGER, "ListJobs", what="listing the jobs")
            return next((job[2] for job in jobs if job[1] == unit), "")
        (path,) = await self._call(_MANAGER, "GetUnitByPID", "u", (os.getpid(),))
        addr = (path, _PROPS)
        (job,) = await self._call(addr, "Get", "ss", (_SYSTEMD + ".Unit", "Job"))
        job_id, job_path = job[1]
        if not job_id:
            return ""
        jaddr = (job_path, _PROPS)
        (jtype,) = await self._call(jaddr, "Get", "ss", (_SYSTEMD + ".Job", "JobType"))
        return jtype[1]

    async def system_state(self) -> str:
        """The manager's SystemState: "stopping" while it goes down (a poweroff or
        reboot, or a user manager's own end), else "running", "degraded", ..."""
        (value,) = await self._call((_ROOT, _PROPS), "Get", "ss",
                                    (_SYSTEMD + ".Manager", "SystemState"),
                                    what="reading the manager's state")
        return value[1]

    async def fd_store(self) -> tuple[int, int]:
        """(FileDescriptorStoreMax, NFileDescriptorStore) of our own unit, as systemd has
        them now: a daemon-reload changes the max of the running service at once."""
        props = await self._own_service("reading our FD store's size")
        return int(props["FileDescriptorStoreMax"][1]), int(props["NFileDescriptorStore"][1])

    async def standby_allowed(self) -> bool:
        """Whether our unit lets a standby take over (standby.py): ExitType=cgroup (systemd
        250 and later; older ones have no such property) and NotifyAccess=all."""
        props = await self._own_service("reading our unit's ExitType")
        return props.get("ExitType", (None, ""))[1] == "cgroup" \
            and props.get("NotifyAccess", (None, ""))[1] == "all"

    async def _own_service(self, what: str) -> dict:
        (path,) = await self._call(_MANAGER, "GetUnitByPID", "u", (os.getpid(),),
                                   what="finding our own unit")
        (props,) = await self._call((path, _PROPS), "GetAll", "s", (_SYSTEMD + ".Service",),
                                    what=what)
        return props
