#!/bin/sh
# The pyghostty wheel that clowder-ghostty ships, pinned by version and sha256; prints
# its path.
#
#   packaging/ghostty-wheel.sh            (from the tree's root; `make ghostty-wheel`)
#
# It is looked for in the wheel cache, $CLOWDER_WHEELS (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/clowder/wheels), and downloaded there from PyPI by
# `pip download --require-hashes` if it is missing.  A cached file is checked against the
# same sha256.  So a build needs the network once (`make pkg-deps` fetches it before a
# test instance boots; the instance has none), and never again.  A wheel that is
# neither cached nor downloadable is an error that says how to put it there.
#
# Bumping pyghostty: change pyproject.toml's pin, PYGHOSTTY_VERSION and PYGHOSTTY_SHA256
# here (PyPI's "view hashes" of the x86_64 wheel), and debian/copyright if its licences
# changed.
set -eu

PYGHOSTTY_VERSION=0.1.3
PYGHOSTTY_WHEEL=pyghostty-$PYGHOSTTY_VERSION-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
PYGHOSTTY_SHA256=e215282798435d0db2042f4c61ecc9231bf66ea7ec68dbb16a43fe84e9685269

cache=${CLOWDER_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/clowder/wheels}
wheel=$cache/$PYGHOSTTY_WHEEL

verified() {
	[ -f "$wheel" ] && [ "$(sha256sum "$wheel" | cut -d' ' -f1)" = "$PYGHOSTTY_SHA256" ]
}

if [ -f "$wheel" ] && ! verified; then
	echo "ghostty-wheel.sh: $wheel is not the pinned wheel (sha256 differs from $PYGHOSTTY_SHA256); removing it" >&2
	rm -f "$wheel"
fi
if ! verified; then
	mkdir -p "$cache"
	req=$(mktemp "${TMPDIR:-/tmp}/pyghostty-req.XXXXXX")
	trap 'rm -f "$req"' EXIT INT TERM
	echo "pyghostty==$PYGHOSTTY_VERSION --hash=sha256:$PYGHOSTTY_SHA256" > "$req"
	# The x86_64 wheel whatever this machine is (py3-none: any Python 3.10+).
	/usr/bin/python3 -m pip download --quiet --retries 1 --no-deps --require-hashes --only-binary=:all: \
		--platform manylinux_2_28_x86_64 --dest "$cache" -r "$req" >&2 || true
	if ! verified; then
		echo "ghostty-wheel.sh: the pyghostty $PYGHOSTTY_VERSION wheel (sha256 $PYGHOSTTY_SHA256) is not in $cache and could not be downloaded from PyPI." >&2
		echo "ghostty-wheel.sh: put $PYGHOSTTY_WHEEL there (e.g. pip download --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 pyghostty==$PYGHOSTTY_VERSION -d $cache on a machine with the network), or set CLOWDER_WHEELS to a directory that has it." >&2
		exit 1
	fi
fi
echo "$wheel"
