# Tidemark: two commands on a fresh Debian machine with Python 3.11, 3.12 or 3.13.
#   make demo   run the main job on the embedded defaults
#   make test   run the whole test suite
# Each creates .venv and installs what it needs, one line per step: the demo the project with
# the locked versions of requirements.lock and Java 17 + Maven (the embedded Apache Kafka broker is fetched with Maven on its first start);
# the tests also the test extras (requirements-test.lock), Prometheus, docker-compose, Chromium and PostgreSQL. Then it runs.

# The Python of .venv: one of PYTHON_VERSIONS (`make install PYTHON=python3.13`)
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
# The lock files: pyproject.toml's ranges resolved once for every Python of PYTHON_VERSIONS (its
# requires-python) and every platform (`--universal`: one version of each package; the few
# that only some platforms need, such as colorama on Windows, carry an environment marker), with hashes.
# requirements.lock is what the image and the demo install (every extra but the tests');
# requirements-test.lock adds the test extras (`make install`, `make test`, CI). `make lock` keeps
# the versions already locked where the ranges allow; `make lock LOCK_ARGS=--upgrade` takes the newest.
PYTHON_VERSIONS := 3.11 3.12 3.13
LOCK := requirements.lock
TEST_LOCK := requirements-test.lock
LOCK_ARGS ?=
UV_COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version $(firstword $(PYTHON_VERSIONS)) \
  --generate-hashes --annotation-style line --quiet $(LOCK_ARGS)

.PHONY: demo test install install-demo lock system-deps system-deps-demo bench clean image test-image system-deps-image

demo: install-demo system-deps-demo
	@$(VENV)/bin/tidemark demo

test: install system-deps
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

install: $(STAMP)
install-demo: $(DEMO_STAMP)

# pip_install LOCKFILE: the venv (once), the locked dependencies (hash-checked), then the project
# itself with no dependency of its own to resolve; pip's output in $(PIP_LOG). Then the project's
# sources compiled once (pip compiles the packages it installs, not an editable project's
# sources), so that each of the many short-lived processes a job starts (workers, services,
# supervisors) reads them instead of compiling them again where bytecode is not written
# (PYTHONDONTWRITEBYTECODE)
define pip_install
	@$(PYTHON) -c 'import sys; ok, v = "$(PYTHON_VERSIONS)".split(), "%d.%d" % sys.version_info[:2]; sys.exit(0 if v in ok else "the lock files are for Python %s to %s ($(PYTHON) is %s); set PYTHON, e.g. PYTHON=python%s" % (ok[0], ok[-1], v, ok[-1]))'
	@test -x $(PY) || { echo "install: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "install: pip install -r $(1) and -e . into $(VENV) (a few minutes the first time; output in $(PIP_LOG))"
	@$(PY) -m pip install --upgrade pip >$(PIP_LOG) 2>&1 && \
	  $(PY) -m pip install --progress-bar off --require-hashes -r $(1) >>$(PIP_LOG) 2>&1 && \
	  $(PY) -m pip install --progress-bar off --no-deps -e . >>$(PIP_LOG) 2>&1 && \
	  $(PY) -m pip check >>$(PIP_LOG) 2>&1 || { tail -n 30 $(PIP_LOG); exit 1; }
	@$(PY) -m compileall -q src >>$(PIP_LOG) 2>&1
endef

$(STAMP): pyproject.toml $(TEST_LOCK)
	$(call pip_install,$(TEST_LOCK))
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml $(LOCK)
	$(call pip_install,$(LOCK))
	@touch $(DEMO_STAMP)

# Regenerates both lock files from pyproject.toml (uv, installed into the venv for this); the
# image's lock takes the test lock's versions, so both install the same ones.
lock:
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet 'uv>=0.13.9,<0.14'
	$(UV_COMPILE) --extra all --extra test -o $(TEST_LOCK)
	$(UV_COMPILE) --extra all -c $(TEST_LOCK) -o $(LOCK)

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
