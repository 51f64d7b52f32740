# rayrig: the two commands are `make demo` and `make test`. Both set up what they need:
# scripts/ensure-lab-tools.sh installs the system's programs (as root with apt) or names them.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch for the tests and the lab image (the default PyPI build is CUDA, several GB).
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
# Every Python package the venv gets, pinned: refreshed on purpose with `make lock`, never by hand.
LOCK := requirements.lock
# MkDocs's plugins print a banner about their own future on every build; the docs page on development says it.
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test test-fast lint docs docs-serve docs-reference docs-pictures venv lock tools demo-tools test-tools docker lab-up lab-down clean

# Debian and Ubuntu ship python3's venv apart (python3-venv): installed, or named, before it is used.
# The lock's versions exactly (scripts/lock.py check fails on any other), rayrig editable, and TORCH.
$(VENV)/.installed: pyproject.toml $(LOCK)
	@scripts/ensure-lab-tools.sh venv
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet "$$(grep '^pip==' $(LOCK))"
	$(PY) -m pip install --quiet -c $(LOCK) -r $(LOCK) -e '.[test]' '$(TORCH)'
	$(PY) scripts/lock.py check $(LOCK)
	touch $@

venv: $(VENV)/.installed

# A fresh resolution of pyproject.toml's ranges, written to the lock: review its diff, then commit it.
lock:
	@scripts/ensure-lab-tools.sh venv
	rm -rf .venv-lock
	python3 -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet -e '.[test]' '$(TORCH)'
	.venv-lock/bin/python scripts/lock.py write $(LOCK)
	rm -rf .venv-lock

# The lab's programs (Docker, ssh, debootstrap as root); test-tools adds the tests' own. demo-tools
# and test-tools also ask for python3's venv, so that one message (or one apt-get) covers them all.
tools:
	@scripts/ensure-lab-tools.sh lab

demo-tools:
	@scripts/ensure-lab-tools.sh venv lab

test-tools:
	@scripts/ensure-lab-tools.sh venv test

docker: tools
	@scripts/ensure-docker.sh

demo: demo-tools venv docker
	$(PY) -m rayrig demo

test: test-tools venv docker
	$(PY) scripts/run_tests.py $(PYTEST_ARGS)

test-fast: venv
	$(PY) scripts/run_tests.py unit plan cloud $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir $$(mktemp -d)

# The docs site (mkdocs.yml, docs/): built into site/, strictly (a broken link or a warning fails),
# or served on http://127.0.0.1:8000 while you edit. docs-reference writes the pages generated from the code.
docs: venv
	$(VENV)/bin/mkdocs build --strict

docs-serve: venv
	$(VENV)/bin/mkdocs serve

docs-reference: venv
	$(PY) scripts/docs_reference.py

# The site's pictures (docs/images/) from the local lab: up, deploy with the checks, screenshots, down.
# INVENTORY=inventories/prod.py: from a running cluster instead (its checks, its dashboards; Grafana's too).
docs-pictures: venv
	scripts/docs-pictures.sh $(INVENTORY)

lab-up: venv docker
	$(PY) -m rayrig lab up

lab-down: venv
	$(PY) -m rayrig lab down

clean: lab-down
	rm -rf $(VENV) .venv-lock .pytest_cache .ruff_cache
