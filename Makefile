# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-fast lint pytest bench bench-full bench-render clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
		{ echo "taccl_py needs Python >= 3.11 (found: $$($(PYTHON) --version 2>&1))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/taccl synthesize --topology ndv2x2 --collective allgather --size 1GB -o demo-allgather.xml
	$(BIN)/taccl verify demo-allgather.xml

lint: $(VENV)/.installed-test
	$(BIN)/ruff check taccl_py solver_models tests benchmarks
	$(BIN)/mypy

# The suite runs on every core (at most 4, pytest-xdist), then the `serial` tests (live timings) alone.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

pytest: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal -m "not serial"
	$(BIN)/python -m pytest -q -m serial

test: lint pytest

# While editing: everything not marked @pytest.mark.slow (solver runs, large simulations, long property
# tests), under a minute on 2 cores. `make test` (what CI runs) still runs every test.
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow"

# Benchmarks: raw JSON in benchmarks/results/, then RESULTS.md, benchmarks/figures/ and the README headline
# regenerated from it (benchmarks/README.md). Quick mode: under 10 minutes on 2 cores.
bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/run.py

bench-full: $(VENV)/.installed-test
	$(BIN)/python benchmarks/run.py --full

bench-render: $(VENV)/.installed-test
	$(BIN)/python benchmarks/run.py --render

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
