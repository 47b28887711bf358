import os, statistics, time
from conftest import wait_for
from test_access import system_host  # noqa
from test_hostile_screen import Echo
from test_hostile_screen_memory import coloured

def q(t):
    x = statistics.quantiles(t, n=100)
    return f"p50 {x[49]*1e3:.1f} p90 {x[89]*1e3:.1f} p99 {x[98]*1e3:.1f} max {max(t)*1e3:.1f} n {len(t)}"

def test_echo(system_host):
    h = system_host
    flood = "/home/alice/flood.bin"
    with open(flood, "wb") as f:
        f.write(coloured(3000))
    os.chmod(flood, 0o644)
    echo = Echo(h)
    with echo:
        time.sleep(3)
    print(f"\nidle echo {q(echo.times)}")
    for n in (8, 32):
        sids = [h.spawn("sh", "-c", f"while :; do cat {flood}; done", user="alice", cwd="/home/alice") for _ in range(n)]
        time.sleep(2)
        echo.times.clear()
        with echo:
            time.sleep(5)
        print(f"\n{n} floods echo {q(echo.times)}")
        for s in sids:
            h.ctl("kill", s, user="alice")
    echo.close()
    os.unlink(flood)
