# Tidemark: two commands on a fresh Debian machine with Python 3.11.
#   make demo   run the main job on the embedded defaults
#   make test   run the whole test suite
# Each creates .venv and installs what it needs, one line per step: the demo the project and
# Java 17 + Maven (the embedded Apache Kafka broker is fetched with Maven on its first start);
# the tests also the test extras, Prometheus, docker-compose, Chromium and PostgreSQL. Then it runs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tidemark-installed
DEMO_STAMP := $(VENV)/.tidemark-installed-demo
PIP_LOG := $(VENV)/pip-install.log
PYTEST_ARGS ?=
# three pytest-xdist workers sharing one session broker; a file's tests stay on one worker, in
# the order tests/conftest.py gives (longest files first). Three on the 2-core machine: the 5-minute
# leak run keeps one of them nearly idle, and waits for checkpoints, timeouts and pauses leave the
# machine idle at times with two (16% on average); the suite took 27.5 min with three, 30.5-33 with two
PYTEST_WORKERS ?= 3

.PHONY: demo test install install-demo system-deps system-deps-demo bench clean image test-image system-deps-image

demo: install-demo system-deps-demo
	@$(VENV)/bin/tidemark demo

test: install system-deps
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

install: $(STAMP)
install-demo: $(DEMO_STAMP)

# pip_install EXTRAS: the venv (once) and the project with EXTRAS, pip's output in $(PIP_LOG); then
# the project's sources compiled once (pip compiles the packages it installs, not an editable
# project's sources), so that each of the many short-lived processes a job starts (workers,
# services, supervisors) reads them instead of compiling them again where bytecode is not written
# (PYTHONDONTWRITEBYTECODE)
define pip_install
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Tidemark needs Python 3.11 (python3 is %d.%d); set PYTHON=python3.11" % sys.version_info[:2])'
	@test -x $(PY) || { echo "install: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "install: pip install -e '.$(1)' into $(VENV) (a few minutes the first time; output in $(PIP_LOG))"
	@$(PY) -m pip install --upgrade pip >$(PIP_LOG) 2>&1 && \
	  $(PY) -m pip install --progress-bar off -e '.$(1)' >>$(PIP_LOG) 2>&1 || { tail -n 30 $(PIP_LOG); exit 1; }
	@$(PY) -m compileall -q src >>$(PIP_LOG) 2>&1
endef

$(STAMP): pyproject.toml
	$(call pip_install,[test])
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	$(call pip_install,)
	@touch $(DEMO_STAMP)

system-deps:
	@bash scripts/install-system-deps.sh test

system-deps-demo:
	@bash scripts/install-system-deps.sh demo

# The images (the base and one per component), built with buildah without a container daemon, on a
# Debian base made with debootstrap when no registry is reachable; cached until an input changes
# (scripts/image.sh; docs/operations.md, "The image").
image: system-deps-image
	@bash scripts/image.sh build

# The image test, apart from `make test` (a first build takes about ten minutes): the coordinator,
# the checkpoint-store and a job's worker started from their images (tests/deploy/test_image.py)
test-image: install system-deps system-deps-image
	@bash scripts/image.sh build
	PYTEST_IMAGE_TEST=1 $(PY) -m pytest tests/deploy/test_image.py $(PYTEST_ARGS)

system-deps-image:
	@bash scripts/install-system-deps.sh image

bench: install system-deps
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .venv-bench-quix .tidemark .pytest_cache .hypothesis build src/*.egg-info
