# clowder packages: `make deb`, `make rpm` (and `make packages` for both) build into
# dist/ from a temporary copy of the tree (packaging/build.sh); VERSION=X.Y.Z overrides
# the version read from pyproject.toml.  Included by the Makefile; also usable alone:
#   make -f packaging/packaging.mk deb VERSION=0.1.1 DIST=/tmp/out

# Not the default goal of the including Makefile, wherever the include line is.
PKG_SAVED_DEFAULT_GOAL := $(.DEFAULT_GOAL)

PKG_VERSION_DEFAULT := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
VERSION ?= $(PKG_VERSION_DEFAULT)
DIST    ?= dist
# The build tools, and the runtime dependencies the installed package needs (for
# tests/test_packaging.py, which installs the .deb into a private system instance that
# sees / as it was at boot and cannot download anything).
PKG_BUILD_DEPS := debhelper dh-python python3 rpm lintian
PKG_RUNTIME_DEPS := python3-systemd python3-jeepney python3-yaml python3-pyte python3-cffi

.PHONY: deb rpm packages pkg-deps ghostty-wheel lintian gendocs

pkg-deps:
	@missing=$$(for p in $(PKG_BUILD_DEPS) $(PKG_RUNTIME_DEPS); do \
	  dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The pinned pyghostty wheel clowder-ghostty ships, into the wheel cache (downloaded
# once; packaging/ghostty-wheel.sh says from where and how it is checked).  A CLOWDER_*
# make variable, so `make test` hands the same cache to the instance's builds.
CLOWDER_WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/clowder/wheels
export CLOWDER_WHEELS
ghostty-wheel:
	@sh packaging/ghostty-wheel.sh >/dev/null

deb: pkg-deps
	sh packaging/build.sh deb $(VERSION) $(DIST)

rpm: pkg-deps
	sh packaging/build.sh rpm $(VERSION) $(DIST)

packages: deb rpm

# The man pages and shell completions, from the parsers, into $(GENDOCS) (what the .deb
# and .rpm builds run; packaging/gendocs.py).  Debian's python3: it imports the programs.
GENDOCS ?= build/gendocs
gendocs:
	/usr/bin/python3 packaging/gendocs.py $(GENDOCS)

lintian: deb
	lintian -EvIL +pedantic $(DIST)/clowder_$(VERSION)_all.deb \
	  $(wildcard $(DIST)/clowder-ghostty_$(VERSION)_*.deb)

# tests/test_packaging.py builds the .deb and .rpm inside the test instance: the tools
# and the wheel must be on / before it boots (it has no network).
test: pkg-deps ghostty-wheel

.DEFAULT_GOAL := $(PKG_SAVED_DEFAULT_GOAL)
