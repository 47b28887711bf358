#!/bin/sh
# Copy xterm.js from the npm registry into webd/static/vendor: run at build time (make
# venv, the packages' builds), never by the browser.  `npm ci` installs exactly what
# webd/js/package-lock.json pins (its integrity hashes checked); node_modules stays out
# of git.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/js"
npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
mkdir -p "$here/static/vendor"
cp node_modules/@xterm/xterm/lib/xterm.js node_modules/@xterm/xterm/css/xterm.css \
   node_modules/@xterm/xterm/LICENSE "$here/static/vendor/"
