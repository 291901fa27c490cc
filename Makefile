# stableline: `make run` starts a broker, `make test` runs the whole suite.
# Both create .venv and install what they need from PyPI on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= ./stableline-data

CLUSTER_DIR ?= ./stableline-cluster
BROKERS ?= 3

.PHONY: run cluster test bench bench-topics demo lint format proto docs clean

$(VENV)/.base-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.all-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,spark]"
	touch $(VENV)/.base-installed $@

run: $(VENV)/.base-installed
	$(PY) -m stableline serve --data-dir $(DATA_DIR)

# An etcd and $(BROKERS) brokers on 127.0.0.1 (etcd-server from Debian); Ctrl-C stops them.
cluster: $(VENV)/.base-installed
	$(PY) -m stableline cluster up --brokers $(BROKERS) --data-dir $(CLUSTER_DIR)

# Test files run on TEST_WORKERS processes, each file whole on one (its module-wide
# brokers are started once): tests spend most of their time waiting on brokers, so
# two workers halve the run on two cores. TEST_WORKERS=0 runs everything in one.
TEST_WORKERS ?= 2
# The lint runs first: a suite that is green but not clean is not green.
test: $(VENV)/.all-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	bash scripts/dev/install_test_servers.sh
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# The whole suite, one table: bench-results/RESULTS.md and results.json (about 11 min),
# and the results section of docs/benchmarks.md.
bench: $(VENV)/.all-installed
	$(PY) scripts/bench/bench_all.py --out bench-results --docs-page docs/benchmarks.md

# 100,000 topics on one broker at 1,024 open files (about 10 min): creation, memory
# and files per idle topic, restart to healthy, first read after the restart.
bench-topics: $(VENV)/.all-installed
	mkdir -p bench-results
	$(PY) scripts/bench/bench_topics.py --topics 100000 --json bench-results/topics-100k.json

demo: $(VENV)/.all-installed
	$(PY) -m stableline demo bank

lint: $(VENV)/.all-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.all-installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

proto: $(VENV)/.all-installed
	$(PY) scripts/dev/gen_proto.py

# The generated pages of docs/ (the configuration reference, from config.py; the
# error codes, from stableline/error_codes.py).
docs: $(VENV)/.base-installed
	$(PY) scripts/dev/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
