# Gotthard developer entry points. Quick start: `make sandbox`, then `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: sandbox sandbox-down test lint generate bench system-deps venv image clean

# the product with every role and the test tools, and the test doubles (testing/: the
# emulated Kubernetes API and the simulated Velero, a distribution of their own)
$(STAMP): pyproject.toml testing/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# the distribution was once named "gotthard" (an unrelated project's name on PyPI)
	$(BIN)/python -m pip uninstall --quiet --yes gotthard 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -e '.[test]' -e ./testing
	touch $@

venv: $(STAMP)

system-deps:
	scripts/install-system-deps

## Install everything, then run a local single-node site (Slurm, exporter, Prometheus).
sandbox: system-deps venv
	$(BIN)/gotthard sandbox up

sandbox-down: venv
	$(BIN)/gotthard sandbox down

## Install everything, then run the whole test suite (starts and stops its own services):
## parallel workers first, then the RBAC proof on the API calls they recorded
## (scripts/run-tests; GOTTHARD_TEST_WORKERS=N sets the workers).
test: system-deps venv
	PYTHON=$(BIN)/python scripts/run-tests

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## Write every file derived from the code: docs/runbooks/, the tables of docs/alerts.md and
## docs/exporter.md, fixture copies of package data (scripts/generate.py; tests compare).
generate: venv
	$(BIN)/python scripts/generate.py

bench: venv
	$(BIN)/python benchmarks/slurm_scale.py
	$(BIN)/python benchmarks/gpu_scrape.py
	$(BIN)/python benchmarks/node_scrape.py
	$(BIN)/python benchmarks/dr_scale.py
	$(BIN)/python benchmarks/policy_eval.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/serve_attack.py
	$(BIN)/python benchmarks/cardinality.py --check
	$(BIN)/python benchmarks/site_scale.py --scale 0.01 --second-site 0.25 --history-hours 24

## Build the container image (Containerfile) and smoke-run it; opt-in, not part of `make test`
## (installs podman, runc and mmdebstrap with apt-get when they are missing).
image: venv
	PYTHON=$(abspath $(BIN))/python scripts/build-image

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
