# pykubevirt: two commands do all the set-up on a Debian 12 machine, as root: `make up` and `make test`.
SHELL := /bin/bash
VENV := .venv
DATA_DIR ?= $(or $(PYKUBEVIRT_DATA_DIR),/var/lib/pykubevirt)

.PHONY: setup test test-stress lint typecheck up down crds guest-image images test-images

GUEST_IMAGE := _output/guest/demo-guest.img

setup:
	@scripts/setup-host.sh

guest-image: $(GUEST_IMAGE)

$(GUEST_IMAGE): scripts/build-guest-image.sh | setup
	scripts/build-guest-image.sh _output/guest

# The pykubevirt and virt-launcher images (OCI layouts and docker-archives), built without a daemon; not part of `test`.
IMAGES_DIR ?= _output/images
images: setup
	scripts/build-images.sh $(IMAGES_DIR)

# Unpacks the built images and runs their entrypoints and tools in a chroot (after `make images`).
test-images:
	PYKUBEVIRT_IMAGES_DIR=$(abspath $(IMAGES_DIR)) $(VENV)/bin/pytest -q tests/images

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: setup
	$(VENV)/bin/mypy

# Test modules run on TEST_WORKERS processes, a module (and so its one shared cluster) on one of them.
TEST_WORKERS ?= 2
test: setup guest-image
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q --durations=30 -n $(TEST_WORKERS) --dist loadfile

# The integration and e2e suites RUNS times with both cores loaded by busy loops (races show up under load).
RUNS ?= 5
test-stress: setup guest-image
	scripts/stress-test.sh $(RUNS) -n $(TEST_WORKERS) --dist loadfile tests/integration tests/e2e

# The generated parts of deploy/: the CRDs (API model) and the RBAC (the embedded server's shipped policy).
crds: setup
	$(VENV)/bin/pykubevirt crds --output-dir deploy/crds
	$(VENV)/bin/python -m pykubevirt.virtapi.deploy_rbac > deploy/rbac/rbac.yaml

up: setup guest-image
	@PYKUBEVIRT_DATA_DIR=$(DATA_DIR) scripts/demo-up.sh

down: setup
	$(VENV)/bin/pykubevirt down --data-dir $(DATA_DIR)
