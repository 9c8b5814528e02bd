# context-stream: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint types unit oracle integration bench bench-smoke clean

# Everything the project needs on a fresh Debian machine: the venv, the Node oracle,
# a Kafka assembled from Maven Central, and redis-server.
setup: $(STAMP) tests/oracle/node_modules/.installed
	@bash deploy/kafka.sh fetch >/dev/null
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $@

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

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

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
	rm -rf $(VENV) tests/oracle/node_modules .mypy_cache .ruff_cache .pytest_cache
