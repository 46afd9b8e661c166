# make run  - install into .venv, start the default cluster, show a round trip and status
# make test - install into .venv and run the whole test suite

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

DEMO := .mqctl/demo

# Until the broker lands, `make run` shows the store: write records, dump them, verify them.
run: install
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	@echo "== writing 2,000 records into a store under $(DEMO)"
	@$(BIN)/mqctl bench store --records 2000 --sync-records 500 --rounds 1 --dir $(DEMO) --keep > /dev/null
	@echo "== its first records"
	$(BIN)/mqctl dump $$(ls -d $(DEMO)/mqctl-bench-*/round-0/async/commitlog) --limit 5
	@echo "== every record verified"
	$(BIN)/mqctl dump $$(ls -d $(DEMO)/mqctl-bench-*/round-0/async/commitlog) --verify

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/mqctl bench store

clean:
	rm -rf $(VENV) .mqctl .pytest_cache
