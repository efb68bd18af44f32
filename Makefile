# The two entry points of the README, and the chores behind them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint protos clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "meshplane needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/meshplane demo

test: $(STAMP) lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check meshplane tests bench
	$(BIN)/ruff format --check meshplane tests bench

protos: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH scripts/gen-protos

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
