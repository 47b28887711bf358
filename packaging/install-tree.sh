#!/bin/sh
# Install clowder's Python packages into a private directory and its three programs into
# /usr/bin, under DESTDIR.  The .deb (debian/rules) and the .rpm (clowder.spec) both use it.
#
#   packaging/install-tree.sh DESTDIR [PYTHON]        (run from the tree's root)
#
# Why private: the packages are named ctl, controld, ptyhostd, clowder_wire and
# clowder_common, and PyPI has unrelated projects named ctl and clowder; in the global
# dist-packages/site-packages they would collide with whatever pip put there.  So they
# live in /usr/share/clowder (architecture-independent, as the packages are), and each
# program is a wrapper that puts that directory first on sys.path and calls the same
# main() as pip's entry point (pyproject.toml [project.scripts]).  A new interpreter
# started from there (the hand-off, the configuration check) is told the directory
# (clowder_common/interpreter.py).  tests/test_packaging.py checks these lists against
# the tree and pyproject.toml.
set -eu

destdir=${1:?DESTDIR}
python=${2:-/usr/bin/python3}
PRIVATE=/usr/share/clowder
PACKAGES="ptyhostd ctl controld webd clowder_wire clowder_common"
# program  module whose main() it runs
PROGRAMS="ptyhostd:ptyhostd.__main__ clowderctl:ctl.__main__ clowder-control:controld.__main__ clowder-web:webd.__main__"

[ -f pyproject.toml ] || { echo "install-tree.sh: run from the tree's root" >&2; exit 2; }
# xterm.js is copied from the npm registry before the package build (webd/vendor.sh, run
# by packaging/build.sh and `make venv`): the build itself downloads nothing.
[ -f webd/static/vendor/xterm.js ] || { echo "install-tree.sh: webd/static/vendor/xterm.js is missing: run sh webd/vendor.sh first" >&2; exit 1; }
install -d "$destdir$PRIVATE" "$destdir/usr/bin"
for pkg in $PACKAGES; do
	[ -f "$pkg/__init__.py" ] || { echo "install-tree.sh: $pkg/__init__.py is missing" >&2; exit 1; }
	cp -R "$pkg" "$destdir$PRIVATE/"
done
find "$destdir$PRIVATE" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$destdir$PRIVATE/webd/js" "$destdir$PRIVATE/webd/vendor.sh" \
       "$destdir$PRIVATE/webd/static/vendor/.lock"  # build inputs only
find "$destdir$PRIVATE" -type d -exec chmod 0755 {} +
find "$destdir$PRIVATE" -type f -exec chmod 0644 {} +

for entry in $PROGRAMS; do
	name=${entry%%:*}
	module=${entry#*:}
	# clowderctl starts without site (-S): its quick paths need only the standard library
	# and the private directory; any other command line runs site first (ctl/sitepath.py).
	flags=
	[ "$name" = clowderctl ] && flags=" -S"
	cat > "$destdir/usr/bin/$name" <<EOF
#!$python$flags
# clowder's $name.  Its Python packages are in $PRIVATE, not on Python's own path
# (PyPI has unrelated projects named ctl and clowder): put it first, then run $module.
import sys

sys.path.insert(0, "$PRIVATE")
from $module import main

sys.exit(main())
EOF
	chmod 0755 "$destdir/usr/bin/$name"
done
