# context-stream: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The fold core compiled by mypyc (stream/native.py, docs/notes/012-compiled-core.md), rebuilt
# when any core source changes; `import stream` falls back to Python when it does not match.
NATIVE := stream/_native/manifest.json
NATIVE_SOURCES := stream/native.py $(wildcard stream/contract/*.py stream/pricing/*.py \
	stream/projections/*.py stream/session/*.py)

.PHONY: setup demo test lint types unit oracle integration bench bench-smoke clean

# Everything the project needs on a fresh Debian machine: the venv, the compiled core, the
# Node oracle, a Kafka assembled from Maven Central, and redis-server.
setup: $(STAMP) $(NATIVE) tests/oracle/node_modules/.installed
	@bash deploy/kafka.sh fetch >/dev/null
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $@

$(NATIVE): $(STAMP) $(NATIVE_SOURCES)
	$(PY) -m stream.native build

tests/oracle/node_modules/.installed: tests/oracle/package.json tests/oracle/package-lock.json
	@cd tests/oracle && npm ci --silent --no-audit --no-fund
	@touch $@

# Start local Kafka + Redis + the worker, feed the example sessions, and watch updates.
demo: setup
	@bash deploy/demo.sh

test: setup lint types unit chart oracle integration

lint: $(STAMP)
	$(VENV)/bin/ruff check stream tests benchmarks
	$(VENV)/bin/ruff format --check stream tests benchmarks

types: $(STAMP)
	$(VENV)/bin/mypy

# Twice: with the compiled core (checked active first) and as pure Python.
unit: $(STAMP) $(NATIVE)
	@$(PY) -m stream.native status
	$(PY) -m pytest tests/unit -q
	STREAM_PURE_PYTHON=1 $(PY) -m pytest tests/unit -q

oracle: $(STAMP) tests/oracle/node_modules/.installed
	$(PY) -m pytest tests/oracle -q

integration: setup
	$(PY) -m pytest tests/integration -q

# The deployment files: helm lint + helm template + kubeconform over the chart's value sets
# (helm and kubeconform built with Go on first use), and tests/deploy (no Docker needed).
.PHONY: chart
chart: $(STAMP)
	@bash deploy/chart-check.sh
	$(PY) -m pytest tests/deploy -q

# Every performance figure from one run, one table (docs/performance.md); bench-smoke is
# the same code paths on small loads, under a minute, for CI.
bench: setup
	@$(PY) -c 'import quixstreams' 2>/dev/null || $(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m benchmarks.run

bench-smoke: setup
	$(PY) -m benchmarks.run --smoke

# The fault-injection suite scaled up (SIGKILLs, broker bounces, rebalances, Redis outages,
# hostile input, standby takeovers: docs/reliability.md); about an hour on 2 cores.
.PHONY: soak
soak: setup
	SOAK=1 $(PY) -m pytest tests/integration/test_faults.py -q -s

clean:
	rm -rf $(VENV) tests/oracle/node_modules .mypy_cache .ruff_cache .pytest_cache stream/_native
