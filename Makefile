# clowder: set-up, tests and demo.  Everything runs as root on a machine where systemd
# may or may not be PID 1: where it is not (a container, CI), a private systemd instance
# is booted over an overlay of / (tools/sysinstance.py) and the work runs inside it.

VENV    ?= /opt/clowder-dev/venv
STAGE   ?= /opt/clowder-dev/src
PYTHON  := $(VENV)/bin/python
APT_PKGS := libsystemd-dev pkg-config gcc python3-venv python3-dev vim less man-db procps git tmux zsh fish \
	    asciinema nodejs chromium python3-aiohttp
PYTEST_ARGS ?= -q
# Which tests `make test` runs, and the name of its systemd instance (several can run
# side by side under different names, each with its own VENV and STAGE).
TESTS ?= tests
INSTANCE ?= clowder-test
# The instance `make run` leaves running (where systemd is not PID 1) until `make stop`.
RUN_INSTANCE ?= clowder-run

.PHONY: deps venv stage test test-unit test-faults test-soak test-hostile test-run demo run stop units clean

# CLOWDER_* variables of the caller's environment reach the tests inside the instance
# (e.g. CLOWDER_SOAK_SECONDS, CLOWDER_FAULT_TRIALS).
INSTANCE_ENV = $(foreach v,$(filter CLOWDER_%,$(.VARIABLES)),--env $(v)=$($(v)))

# Debian packages the build of systemd-python and the tests need (zsh and fish: the
# completions run in them, tests/test_manpages.py; asciinema, 240 KB of Python: it reads
# what `clowderctl export` writes, tests/test_export.py; nodejs's npm fetches xterm.js,
# webd/vendor.sh; chromium shows the web view, driven over its DevTools protocol
# (tests/browser.py: no chromedriver needed); python3-aiohttp is
# what the .deb depends on, for its install tests).
deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# A venv of Debian's python3, outside any private home directory, so that the test
# users inside the instance can run clowderctl too.  The project is installed (not
# linked), for the same reason.
venv: deps
	@[ -x $(PYTHON) ] || /usr/bin/python3 -m venv $(VENV)
	rm -rf build *.egg-info  # a stale build/ would be packaged instead of the sources
	sh webd/vendor.sh  # xterm.js from the npm registry into webd/static/vendor
	$(PYTHON) -m pip install -q --disable-pip-version-check ".[test]"
	$(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --force-reinstall .
	rm -rf build *.egg-info

# The tests run from a copy on the root filesystem: the instance sees / as an overlay,
# which does not include other mounts or the host's /tmp.
stage:
	rm -rf $(STAGE) && mkdir -p $(STAGE)
	tar --exclude=.git -cf - . | tar -C $(STAGE) -xf -

test-unit: venv
	$(PYTHON) -m pytest $(PYTEST_ARGS) tests/test_protocol.py tests/test_ring.py tests/test_units.py \
	  tests/test_layering.py tests/test_portable.py tests/test_web_access.py tests/test_ratelog.py \
	  tests/test_gate.py tests/test_peer.py

test: venv stage
	python3 tools/sshhost.py fetch  # the ssh test box's debs: instances have no network
	@if [ "$$(cat /proc/1/comm)" = systemd ]; then \
	  cd $(STAGE) && $(PYTHON) -m pytest $(PYTEST_ARGS) $(TESTS); \
	else \
	  cd $(STAGE) && python3 tools/sysinstance.py run --name $(INSTANCE) $(INSTANCE_ENV) -- \
	    $(PYTHON) -m pytest $(PYTEST_ARGS) -p no:cacheprovider --ignore=tests/host $(TESTS); \
	fi
	@if [ "$(TESTS)" = tests ]; then $(HOST_TESTS); fi

# The tests that run on this machine's side, outside any instance (tests/host/): `make
# run` and `make stop` from a fresh clone, in a real pty, with an instance of their own
# (named after INSTANCE, so parallel runs do not collide).  Part of `make test`.
HOST_TESTS = CLOWDER_RUN_SOURCE=$(CURDIR) CLOWDER_RUN_VENV=$(VENV) \
	  CLOWDER_RUN_STAGE=$(STAGE)-run CLOWDER_RUN_INSTANCE=$(INSTANCE)-run \
	  $(PYTHON) -m pytest $(PYTEST_ARGS) -p no:cacheprovider tests/host
test-run: venv
	$(HOST_TESTS)

# The hostile-neighbour suite alone (it is part of `make test` too): every request kind
# flooded by a client that never reads, tried by a second user, and the escape bombs.
test-hostile:
	$(MAKE) test TESTS="$(sort $(wildcard tests/test_hostile_*.py)) tests/test_access.py"

# The chaos run at length (a short one is part of `make test`): CLOWDER_SOAK_SECONDS per
# scope (default 600), CLOWDER_SOAK_SEED to replay a run.  Its soak-report lines (in
# pytest's closing summary) are the counts of docs/bench.md.
SOAK_SECONDS = $(or $(CLOWDER_SOAK_SECONDS),600)
SOAK_SEED = $(if $(CLOWDER_SOAK_SEED),--env CLOWDER_SOAK_SEED=$(CLOWDER_SOAK_SEED))
test-soak: venv stage
	@if [ "$$(cat /proc/1/comm)" = systemd ]; then \
	  cd $(STAGE) && CLOWDER_SOAK_SECONDS=$(SOAK_SECONDS) \
	    $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_soak.py; \
	else \
	  cd $(STAGE) && python3 tools/sysinstance.py run --name clowder-soak \
	    --env CLOWDER_SOAK_SECONDS=$(SOAK_SECONDS) $(SOAK_SEED) -- \
	    $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_soak.py; \
	fi

# The fault suite's full count (the default suite runs a fast subset).
test-faults: venv stage
	cd $(STAGE) && python3 tools/sysinstance.py run --name clowder-faults \
	  --env CLOWDER_FAULT_TRIALS=$${TRIALS:-100} -- \
	  $(PYTHON) -m pytest $(PYTEST_ARGS) -p no:cacheprovider tests/test_faults.py

demo: venv stage
	@if [ "$$(cat /proc/1/comm)" = systemd ]; then \
	  sh $(STAGE)/tools/demo.sh $(PYTHON); \
	else \
	  cd $(STAGE) && python3 tools/sysinstance.py run --name clowder-demo -- \
	    sh tools/demo.sh $(PYTHON); \
	fi

# A shell session inside clowder that outlives the make: where systemd is not PID 1 it
# boots the instance RUN_INSTANCE and leaves it running (tools/run.py).  Detach with
# Ctrl-\; `make run` again comes back to the same session; `make stop` ends it all.
# venv and stage are refreshed only when no instance is up (it sees / as at its boot).
run:
	@python3 tools/run.py running --name $(RUN_INSTANCE) || \
	  $(MAKE) --no-print-directory venv stage
	@python3 tools/run.py attach --name $(RUN_INSTANCE) --python $(PYTHON) --stage $(STAGE)

stop:
	@python3 tools/run.py stop --name $(RUN_INSTANCE) --python $(PYTHON)

# Regenerate units/ from ctl/units.py (their one source).
units: venv
	$(PYTHON) -m ctl install-units --system --dest units --exec-start /usr/bin/ptyhostd \
	  --control-exec-start /usr/bin/clowder-control --web --web-exec-start /usr/bin/clowder-web
	$(PYTHON) -m ctl install-units --user --dest units/user --exec-start /usr/bin/ptyhostd \
	  --control-exec-start /usr/bin/clowder-control

clean:
	rm -rf build dist *.egg-info .pytest_cache
include packaging/packaging.mk
