# rayrig: the two commands are `make demo` and `make test`. Both set up what they need.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch for the tests and the lab image (the default PyPI build is CUDA, several GB).
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint venv docker lab-up lab-down clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' '$(TORCH)'
	touch $@

venv: $(VENV)/.installed

docker:
	@scripts/ensure-docker.sh

demo: venv docker
	$(PY) -m rayrig demo

test: venv docker
	$(PY) scripts/run_tests.py $(PYTEST_ARGS)

test-fast: venv
	$(PY) scripts/run_tests.py unit plan cloud $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

lab-up: venv docker
	$(PY) -m rayrig lab up

lab-down: venv
	$(PY) -m rayrig lab down

clean: lab-down
	rm -rf $(VENV) .pytest_cache .ruff_cache
