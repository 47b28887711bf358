#!/bin/sh
# Copy xterm.js from the npm registry into webd/static/vendor: run at build time (make
# venv, packaging/build.sh), never by the browser.  `npm ci` installs exactly what
# webd/js/package-lock.json pins (its integrity hashes checked); node_modules stays out
# of git.  A copy made from the same lock file is kept (its hash is in vendor/.lock):
# builds inside the test instance, which has no network, find it done.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
lock=$(sha256sum "$here/js/package-lock.json" | cut -d' ' -f1)
if [ -f "$here/static/vendor/xterm.js" ] && [ "$(cat "$here/static/vendor/.lock" 2>/dev/null)" = "$lock" ]; then
	exit 0
fi
command -v npm >/dev/null || { echo "webd/vendor.sh: npm is needed to fetch xterm.js (Debian: npm, or nodejs from NodeSource)" >&2; exit 1; }
cd "$here/js"
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
mkdir -p "$here/static/vendor"
cp node_modules/@xterm/xterm/lib/xterm.js node_modules/@xterm/xterm/css/xterm.css \
   node_modules/@xterm/xterm/LICENSE "$here/static/vendor/"
echo "$lock" > "$here/static/vendor/.lock"
