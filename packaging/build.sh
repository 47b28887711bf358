#!/bin/sh
# Build the clowder .deb or .rpm from a temporary copy of the tree; never in the tree.
#
#   packaging/build.sh deb|rpm VERSION DIST     (run from the tree's root)
#
# VERSION (digits and dots, e.g. 0.1.0 or 0.1.0.1) is stamped into the copy's
# pyproject.toml and clowder_common.__version__, the top debian/changelog entry and the spec's
# Version; the package lands in DIST.  Debian 12's tools: see packaging/README.md.
set -eu

kind=${1:?deb or rpm}
version=${2:?version}
dist=${3:?output directory}
case "$version" in
	*[!0-9.]* | .* | *. | *..* | "") echo "build.sh: version '$version': digits and dots only" >&2; exit 2 ;;
esac
[ -f pyproject.toml ] && [ -d packaging/debian ] || { echo "build.sh: run from the tree's root" >&2; exit 2; }

# pybuild and rpmbuild must see Debian's python3, not a pyenv/venv one first on PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PYENV_VERSION 2>/dev/null || true

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/clowder-$kind.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
src=$work/clowder-$version
mkdir "$src"
# xterm.js from the npm registry (pinned with its hash in webd/js/package-lock.json) into
# webd/static/vendor, here and not in the package build, which downloads nothing.
sh webd/vendor.sh
tar --exclude=./webd/js/node_modules --exclude=./.git --exclude=./build --exclude=./dist --exclude=./debian \
    --exclude='*.egg-info' --exclude=__pycache__ --exclude=./.pytest_cache \
    --exclude=./.hypothesis --exclude=./.ci -cf - . | tar -C "$src" -xf -

sed -i "s/^version = \".*\"/version = \"$version\"/" "$src/pyproject.toml"
sed -i "s/^__version__ = \".*\"/__version__ = \"$version\"/" "$src/clowder_common/__init__.py"
grep -q "^version = \"$version\"" "$src/pyproject.toml" || { echo "build.sh: could not stamp pyproject.toml" >&2; exit 1; }

case "$kind" in
deb)
	cp -r "$src/packaging/debian" "$src/debian"
	# clowder-ghostty is built where dpkg builds amd64 packages, from the pinned wheel.
	ghostty=
	if [ "$(dpkg-architecture -qDEB_HOST_ARCH)" = amd64 ]; then
		wheel=$(sh packaging/ghostty-wheel.sh) || { echo "build.sh: no pyghostty wheel for clowder-ghostty (above)" >&2; exit 1; }
		mkdir "$src/ghostty-wheel"
		cp "$wheel" "$src/ghostty-wheel/"
		ghostty=clowder-ghostty_${version}_amd64.deb
	fi
	top=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
	if [ "$top" != "$version" ]; then
		{
			echo "clowder ($version) unstable; urgency=medium"
			echo
			echo "  * Build of $version from the source tree (packaging/build.sh)."
			echo
			echo " -- clowder developers <clowder@example.org>  $(date -R)"
			echo
			cat "$src/packaging/debian/changelog"
		} > "$src/debian/changelog"
	fi
	(cd "$src" && dpkg-buildpackage -us -uc -b) > "$work/build.log" 2>&1 || {
		tail -n 60 "$work/build.log" >&2
		echo "build.sh: dpkg-buildpackage failed (log above)" >&2
		exit 1
	}
	for deb in clowder_${version}_all.deb $ghostty; do
		cp "$work/$deb" "$dist/"
		echo "$dist/$deb"
	done
	;;
rpm)
	mkdir -p "$work/rpmbuild/SOURCES"
	tar -C "$work" -czf "$work/rpmbuild/SOURCES/clowder-$version.tar.gz" "clowder-$version"
	cp "$src/packaging/debian/clowder.sysusers" "$work/rpmbuild/SOURCES/clowder.sysusers"
	# --nodeps: Debian has no rpm database of the build dependencies.
	rpmbuild -bb --nodeps --define "_topdir $work/rpmbuild" --define "clowder_version $version" \
		"$src/packaging/rpm/clowder.spec" > "$work/build.log" 2>&1 || {
		tail -n 60 "$work/build.log" >&2
		echo "build.sh: rpmbuild failed (log above)" >&2
		exit 1
	}
	# clowder-ghostty (x86_64 whatever this machine is: the wheel is x86_64's).
	wheel=$(sh packaging/ghostty-wheel.sh) || { echo "build.sh: no pyghostty wheel for clowder-ghostty (above)" >&2; exit 1; }
	cp "$wheel" "$work/rpmbuild/SOURCES/"
	cp "$src/packaging/debian/copyright" "$work/rpmbuild/SOURCES/clowder-ghostty.copyright"
	rpmbuild -bb --nodeps --target x86_64 --define "_topdir $work/rpmbuild" \
		--define "clowder_version $version" \
		"$src/packaging/rpm/clowder-ghostty.spec" > "$work/build-ghostty.log" 2>&1 || {
		tail -n 60 "$work/build-ghostty.log" >&2
		echo "build.sh: rpmbuild of clowder-ghostty failed (log above)" >&2
		exit 1
	}
	for f in "$work"/rpmbuild/RPMS/noarch/clowder-"$version"-*.noarch.rpm \
	         "$work"/rpmbuild/RPMS/x86_64/clowder-ghostty-"$version"-*.x86_64.rpm; do
		cp "$f" "$dist/"
		echo "$dist/$(basename "$f")"
	done
	;;
*)
	echo "build.sh: deb or rpm, not '$kind'" >&2
	exit 2
	;;
esac
