"""Issue 15: `clowderctl install-units --user` enables lingering, or says exactly why not.

The instance masks systemd-logind (tools/sysinstance.py): first that case (no logind),
then with the real logind unmasked and started over the instance's D-Bus, where polkit
decides: an administrator's rule refusing set-self-linger gives a clear message naming
the fix; without it (Debian 12's polkit allows it here) the same command enables
lingering.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import PYTHON, ensure_user, wait_for

USER, UID = "lingerer", 2101
RULE = "/etc/polkit-1/rules.d/49-clowder-test-linger.rules"
LINGER = f"/var/lib/systemd/linger/{USER}"


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, cwd="/", **kw)


@pytest.fixture
def user(systemd_required):
    ensure_user(USER, UID)
    runtime = f"/run/user/{UID}"
    subprocess.run(["systemctl", "start", f"user@{UID}.service"], check=True)
    wait_for(lambda: os.path.exists(f"{runtime}/systemd/private"), 20,
             "the user manager to listen")
    env = {"PATH": os.environ["PATH"], "HOME": f"/home/{USER}", "USER": USER,
           "XDG_RUNTIME_DIR": runtime, "LANG": "C.UTF-8"}
    yield env
    _run(["runuser", "-u", USER, "--", "systemctl", "--user", "stop", "clowder-control.socket",
          "clowder-ptyhost.socket", "clowder-control.service", "clowder-ptyhost.service"],
         env=env)
    _run(["systemctl", "stop", f"user@{UID}.service"])


def install(env) -> subprocess.CompletedProcess:
    return _run(["runuser", "-u", USER, "--", PYTHON, "-m", "ctl", "install-units", "--user",
                 "--exec-start", f"{PYTHON} -m ptyhostd"], env=env)


def test_without_logind_it_says_so(user):
    r = install(user)
    assert r.returncode == 0, r
    assert f"cannot enable lingering for {USER}: systemd-logind is not running" in r.stderr, r
    assert f"loginctl enable-linger {USER}" in r.stderr, r
    assert not os.path.exists(LINGER)


@pytest.fixture
def logind(systemd_required):
    _run(["systemctl", "unmask", "systemd-logind.service"])
    subprocess.run(["systemctl", "start", "systemd-logind.service"], check=True, timeout=60)
    wait_for(lambda: os.path.isdir("/run/systemd/seats"), 20, "logind to run")
    yield
    _run(["loginctl", "disable-linger", USER])
    if os.path.exists(RULE):
        os.unlink(RULE)
    _run(["systemctl", "stop", "systemd-logind.service"])
    _run(["systemctl", "mask", "systemd-logind.service"])


def test_under_logind_polkit_decides_and_the_reason_is_given(user, logind):
    # An administrator's polkit rule that says no (Debian's default says yes).
    with open(RULE, "w") as f:
        f.write('polkit.addRule(function(action, subject) {\n'
                '  if (action.id == "org.freedesktop.login1.set-self-linger" &&\n'
                f'      subject.user == "{USER}") return polkit.Result.NO;\n'
                '});\n')
    os.chmod(RULE, 0o644)

    def refused():
        r = install(user)
        return r if "cannot enable lingering" in r.stderr else None
    r = wait_for(refused, 20, "polkit to load the rule and refuse", interval=0.5)
    assert r.returncode == 0, r
    assert f"cannot enable lingering for {USER}: polkit refused it" in r.stderr, r
    assert f"loginctl enable-linger {USER}" in r.stderr, r
    assert not os.path.exists(LINGER)
    os.unlink(RULE)

    def granted():
        r = install(user)
        return r if "enabled lingering" in r.stdout else None
    r = wait_for(granted, 20, "polkit to drop the rule and logind to enable lingering",
                 interval=0.5)
    assert f"enabled lingering for {USER}" in r.stdout, r
    assert os.path.exists(LINGER)
    shown = _run(["loginctl", "show-user", USER, "-p", "Linger", "--value"]).stdout.strip()
    assert shown in ("yes", ""), shown  # "" where logind has not loaded the user yet
    again = install(user)
    assert f"lingering is enabled for {USER}" in again.stdout, again
