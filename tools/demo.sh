#!/bin/sh
# The README's run command: install the units, spawn a session, restart the host under
# it (gracefully, then with kill -9), and show the session is still the same process.
set -eu
PY=${1:-python3}
ctl() { "$PY" -m ctl "$@"; }
cd /
echo "== install-units --system"
ctl install-units --system --exec-start "$PY -m ptyhostd"
echo "== spawn a demo session"
id=$(ctl spawn --name demo -- sh -c 'i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.2; done')
sleep 1
ctl ps
before=$(ctl ps --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["pid"])')
echo "== systemctl restart clowder-ptyhost"
systemctl restart clowder-ptyhost.service
echo "== kill -9 of the host's main process"
kill -9 "$(systemctl show -p MainPID --value clowder-ptyhost.service)"
sleep 1
ctl ps
after=$(ctl ps --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)[0]["pid"])')
echo "== backlog (last lines)"
ctl backlog "$id" | tail -n 3
if [ "$before" = "$after" ]; then
  echo "== the session survived both: same pid $after, output never interrupted"
else
  echo "== FAILED: pid changed from $before to $after"; exit 1
fi
ctl kill "$id" --signal HUP
ctl wait "$id" || true
