# pykubevirt: two commands do all the set-up on a Debian 12 machine, as root: `make up` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DATA_DIR ?= /var/lib/pykubevirt

.PHONY: setup test lint typecheck unit up down crds

setup:
	@scripts/setup-host.sh

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: setup
	$(VENV)/bin/mypy

test: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q

crds: setup
	$(VENV)/bin/pykubevirt crds --output-dir deploy/crds

up: setup
	$(VENV)/bin/pykubevirt validate -f examples/vm-demo.yaml
