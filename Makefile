# bugfix-rl: `make run` sets up .venv and runs the capstone; `make test` runs the default test suite.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_WORKERS ?= 2  # pytest-xdist workers: one per core of a 2-core CI machine

.PHONY: run test test-slow test-gpu bench bases docs clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $$( command -v $(PY) || command -v python3 ) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/bugfix-rl train exp=capstone seed=0

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -m gpu

bench: $(STAMP)
	$(BIN)/python scripts/bench_step.py

bases: $(STAMP)  # rebuild the shipped RL bases after a change to the code they depend on (scripts/ship_bases.py)
	$(BIN)/python scripts/ship_bases.py

docs: $(STAMP)
	bash scripts/make_docs.sh

clean:
	rm -rf $(VENV) outputs multirun
