# context-stream: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Kafka's compatibility target: `make test` runs the worker's end-to-end tests on it too
# (the rest of the suite runs on deploy/kafka.sh's default, the current Kafka 4 line).
KAFKA_COMPAT ?= 3.9.1
# The fold core compiled by mypyc (stream/native.py, docs/notes/012-compiled-core.md), rebuilt
# when any core source changes; `import stream` falls back to Python when it does not match.
NATIVE := stream/_native/manifest.json
NATIVE_SOURCES := stream/native.py stream/output/headers.py $(wildcard stream/contract/*.py \
	stream/pricing/*.py stream/projections/*.py stream/session/*.py)

.PHONY: setup demo test lint types unit oracle integration bench bench-smoke clean

# Everything the project needs on a fresh Debian machine: what the demo needs (the venv, the
# compiled core, a Kafka assembled from Maven Central, redis-server), and for the tests the
# Node oracle, the interface checker's parsers and Chromium.
setup: demo-setup tests/oracle/node_modules/.installed tests/interface/node_modules/.installed
	@KAFKA_VERSION=$(KAFKA_COMPAT) bash deploy/kafka.sh fetch >/dev/null
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# The demo's part of setup: no Node oracle and no Chromium (the page opens in your browser).
.PHONY: demo-setup
demo-setup: $(STAMP) $(NATIVE)
	@bash deploy/kafka.sh fetch >/dev/null
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)

# The venv holds what the locks pin, every file checked against its hash (README:
# "Dependencies and the lock files"): the build tools first (pip itself, setuptools, mypy
# and orjson), then the dev lock (runtime + dev), then the project, editable, without its
# dependencies and without an isolated build, so nothing unpinned is fetched. Rebuilt when
# pyproject.toml or a lock changes.
$(STAMP): pyproject.toml requirements-build.lock requirements-dev.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --require-hashes -r requirements-build.lock
	@$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	@# setuptools' "Editable installation ... !!" notice is information only (a UserWarning
	@# relayed by pip), not a problem: silenced so a first run does not open with a warning.
	@PYTHONWARNINGS=ignore::UserWarning $(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

# Regenerate the locks after editing the dependencies in pyproject.toml: pip-compile
# (pip-tools, from a throwaway venv outside the project) with $(PYTHON), CPython 3.11 on
# Linux x86_64. Pins already in a lock stay; LOCK_ARGS=--upgrade, or
# LOCK_ARGS='--upgrade-package NAME', moves them. The runtime and build locks are resolved
# within the dev lock, so the image runs the versions `make test` tested.
LOCKTOOL ?= /tmp/context-stream-locktool
PIP_TOOLS := pip-tools==7.6.2
LOCK_HEADER := make lock   ($(PIP_TOOLS), CPython 3.11, Linux x86_64; README: "Dependencies and the lock files")
PIP_COMPILE := CUSTOM_COMPILE_COMMAND='$(LOCK_HEADER)' $(LOCKTOOL)/bin/pip-compile --quiet \
	--generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
	--no-emit-trusted-host --no-emit-find-links $(LOCK_ARGS)
.PHONY: lock
lock:
	@test -x $(LOCKTOOL)/bin/pip-compile || ($(PYTHON) -m venv $(LOCKTOOL) \
		&& $(LOCKTOOL)/bin/pip install -q '$(PIP_TOOLS)')
	$(PIP_COMPILE) --extra dev --all-build-deps -o requirements-dev.lock pyproject.toml
	$(PIP_COMPILE) -c requirements-dev.lock -o requirements.lock pyproject.toml
	printf 'pip\nsetuptools\nmypy\norjson\n' \
		| $(PIP_COMPILE) -c requirements-dev.lock -o requirements-build.lock -

$(NATIVE): $(STAMP) $(NATIVE_SOURCES)
	$(PY) -m stream.native build

tests/oracle/node_modules/.installed: tests/oracle/package.json tests/oracle/package-lock.json
	@cd tests/oracle && npm ci --silent --no-audit --no-fund
	@touch $@

# The AsyncAPI and OpenAPI parsers and Ajv that check docs/api/ (tests/interface/check.mjs).
tests/interface/node_modules/.installed: tests/interface/package.json tests/interface/package-lock.json
	@cd tests/interface && npm ci --silent --no-audit --no-fund
	@touch $@

# Start local Kafka + Redis + the worker, feed the example sessions, and watch updates
# (DEMO_SECONDS, DEMO_RATE and the ports: README, "Two commands").
demo: demo-setup
	@bash deploy/demo.sh

test: setup lint types unit chart oracle interface integration integration-compat

lint: $(STAMP)
	$(VENV)/bin/ruff check stream tests benchmarks
	$(VENV)/bin/ruff format --check stream tests benchmarks

types: $(STAMP)
	$(VENV)/bin/mypy

# The README's layout section, redrawn from the modules' docstrings (tests/layout.py);
# tests/unit/test_docs.py fails while the README differs from it.
.PHONY: layout
layout: $(STAMP)
	$(PY) -m tests.layout

# Twice: with the compiled core (checked active first) and as pure Python.
unit: $(STAMP) $(NATIVE)
	@$(PY) -m stream.native status
	$(PY) -m pytest tests/unit -q
	STREAM_PURE_PYTHON=1 $(PY) -m pytest tests/unit -q

oracle: $(STAMP) tests/oracle/node_modules/.installed
	$(PY) -m pytest tests/oracle -q

# The published interface (docs/api/): the documents parse, wrong payloads are refused
# (real messages are checked by tests/integration/test_interface.py).
.PHONY: interface
interface: $(STAMP) tests/interface/node_modules/.installed
	$(PY) -m pytest tests/interface -q

# On the current Kafka 4 line (deploy/kafka.sh's default), then the worker's end-to-end
# tests on the compatibility target, Kafka 3.9 (KAFKA_COMPAT).
integration: setup
	$(PY) -m pytest tests/integration -q

.PHONY: integration-compat
integration-compat: setup
	KAFKA_VERSION=$(KAFKA_COMPAT) $(PY) -m pytest tests/integration/test_worker.py -q \
		-k 'offline_fold or crash_before_commit or two_workers or restores_rows'

# The deployment files: helm lint + helm template + kubeconform over the chart's value sets
# (helm and kubeconform built with Go on first use), and tests/deploy (no Docker needed).
.PHONY: chart
chart: $(STAMP)
	@bash deploy/chart-check.sh
	$(PY) -m pytest tests/deploy -q

# Every performance figure from one run, one table (docs/performance.md); bench-smoke is
# the same code paths on small loads, under a minute, for CI.
# Quix Streams, the bench's Python peer (drain and live), runs from a venv of its own,
# $(PEERS): it caps confluent-kafka below the locked version, so it cannot share $(VENV),
# which stays on the dev lock. benchmarks/peers.py finds it (QUIX_VERSION is its too).
PEERS := build/peers-venv
QUIX_VERSION := 3.28.1
$(PEERS)/.installed: Makefile
	@test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q 'quixstreams==$(QUIX_VERSION)' redis orjson
	@touch $@

bench: setup $(PEERS)/.installed
	$(PY) -m benchmarks.run

bench-smoke: setup
	$(PY) -m benchmarks.run --smoke

# Sessions end (docs/operations.md, "Session expiry"): a compressed year with a 30-day TTL
# and without, month by month (about 30 min; `make bench` runs it too).
.PHONY: bench-lifecycle
bench-lifecycle: setup
	$(PY) -m benchmarks.lifecycle

# The hostile-producer property of the batch fold as a long fuzz run (docs/reliability.md).
.PHONY: fuzz
fuzz: $(STAMP)
	STREAM_FUZZ_EXAMPLES=$${STREAM_FUZZ_EXAMPLES:-20000} $(PY) -m pytest tests/unit/session/test_batch_hostile.py tests/unit/ops/test_census.py -q

# The fault-injection suite scaled up (SIGKILLs, broker bounces, rebalances, Redis outages,
# hostile input, standby takeovers: docs/reliability.md); about an hour on 2 cores.
.PHONY: soak
soak: setup
	SOAK=1 $(PY) -m pytest tests/integration/test_faults.py -q -s

clean:
	rm -rf $(VENV) tests/oracle/node_modules .mypy_cache .ruff_cache .pytest_cache stream/_native
