# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What serving needs (`make run`) and what the tests add (`make test`), installed separately.
RUN_STAMP := $(VENV)/.installed-run
# The tests that take the screenshots committed in docs/screens.
SCREENSHOT_TESTS := tests/test_board_screens.py tests/test_board_auth.py tests/test_board_drawer.py \
                    tests/test_a2ui_render.py tests/test_account.py tests/test_intake_board.py \
                    tests/test_sinks_board.py tests/test_board_teams.py tests/test_hooks_board.py

.PHONY: run test lint bench bench-peers install browser nginx interop clean screenshots soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

# Debian's Chromium for the browser tests; installed when missing and we are root.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "chromium is missing: browser tests will be skipped (install Debian's chromium)"; \
	  fi; \
	fi

# Debian's nginx for the deployment test (tests/test_deploy_nginx.py); installed when missing and we are root.
nginx:
	@if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "installing Debian's nginx for the deployment test"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; \
	  else \
	    echo "nginx is missing: the deployment test will be skipped (install Debian's nginx)"; \
	  fi; \
	fi

# The real MCP clients of tests/interop (TypeScript SDK, MCP Inspector, MCP Apps SDK), pinned by its
# package-lock.json; reinstalled when that lock is newer than the install.
INTEROP := tests/interop/node_modules/.package-lock.json
$(INTEROP): tests/interop/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "node and npm are required by tests/interop (Debian: nodejs npm)"; exit 1; }
	cd tests/interop && npm ci --no-audit --no-fund --loglevel=error
	touch $(INTEROP)

interop: $(INTEROP)

run: $(RUN_STAMP)
	$(BIN)/switchboard serve

# Tests write their screenshots under build/screens (ignored); `make screenshots` refreshes the
# committed ones in docs/screens.
# The suite runs on TEST_WORKERS processes (pytest-xdist), each with its own embedded PostgreSQL; a
# test file stays on one worker, so its module fixtures (servers, databases) start once.
TEST_WORKERS ?= 2
test: $(STAMP) lint browser nginx interop
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# ruff and mypy, configured in pyproject.toml; `make test` runs this first.
lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

screenshots: $(STAMP) browser
	SWITCHBOARD_SCREENS_DIR=$(CURDIR)/docs/screens $(BIN)/python -m pytest $(SCREENSHOT_TESTS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/mcp_bench.py
	$(BIN)/python bench/doorbell_bench.py

# The peer benchmark (bench/peers_bench.py, docs/benchmarks.md "Peers"): installs the peers (the [bench]
# extras) first. PEERS_ARGS="--write-doc docs/benchmarks.md" also rewrites that section.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench-peers: $(BENCH_STAMP)
	$(BIN)/python bench/peers_bench.py $(PEERS_ARGS)

# The chaos soak (bench/soak.py, docs/reliability.md): 10 minutes of faults over 3 serving processes
# and 30 agents; exits non-zero on any violation. `make test` runs a short one.
soak: $(STAMP)
	$(BIN)/python bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
