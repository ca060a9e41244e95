# Tidemark: two commands on a fresh Debian machine with Python 3.11.
#   make demo   run the main job on the embedded defaults
#   make test   run the whole test suite
# Each creates .venv, installs the project and what it needs (Java 17, Prometheus,
# docker-compose from Debian when missing), then runs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tidemark-installed
PYTEST_ARGS ?=

.PHONY: demo test install system-deps bench clean

demo: install system-deps
	$(VENV)/bin/tidemark demo

test: install system-deps
	$(PY) -m pytest $(PYTEST_ARGS)

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Tidemark needs Python 3.11 (python3 is %d.%d); set PYTHON=python3.11" % sys.version_info[:2])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --progress-bar off -e '.[test]'
	touch $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

bench: install system-deps
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .tidemark .pytest_cache .hypothesis build src/*.egg-info
