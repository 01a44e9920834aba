# One virtualenv in .venv; every target installs what it needs first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
TOOLS  := $(VENV)/.tools-installed
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
# The image the Deployment in deploy/webhooks names.
IMAGE  ?= ghcr.io/tenantgate/tenantgate:$(VERSION)

.PHONY: help install kube cluster run test check format lint typecheck contracts bench bench-quick manifests image image-test clean

help:
	@echo "make run         install and start the webhook on the embedded defaults (https://localhost:8443)"
	@echo "make test        install with test extras, build Kubernetes (make kube) and run the whole suite"
	@echo "make kube        build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl v1.37 (needs Go 1.26+)"
	@echo "make cluster     a real control plane with tenantgate installed, until Ctrl-C (CONFIG=FILE)"
	@echo "make check       format check, lint, mypy --strict, import contracts, tests"
	@echo "make format      rewrite files with ruff format"
	@echo "make bench       full benchmark run (writes bench/results/latest.json)"
	@echo "make bench-quick benchmark run under two minutes"
	@echo "make manifests   refresh the config copy in deploy/webhooks from examples/tenantgate.yaml"
	@echo "make image       build the container image $(IMAGE) with buildah (root)"
	@echo "make image-test  build the image, then run its --version and a serve smoke test (root)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# promtool for the alert rule tests (scripts/install-tools.sh: with root and apt only).
$(TOOLS): scripts/install-tools.sh | $(BIN)/python
	scripts/install-tools.sh
	touch $(TOOLS)

install: $(STAMP) $(TOOLS)

run: install
	$(BIN)/tenantgate serve

# One binary for the control plane, built from testcluster/kube into ~/.cache/tenantgate/kube/<pins>/
# and reused while the pins are unchanged.
kube: install
	$(BIN)/python -m testcluster build

CONFIG ?= examples/tenantgate.yaml
cluster: install
	$(BIN)/python -m testcluster up --config $(CONFIG)

# Two workers: the control-plane tests stay on one (the xdist group "kube", tests/conftest.py)
# while the others run on the second. PYTHONDONTWRITEBYTECODE is cleared so that the workers and
# every tenantgate process the tests start reuse compiled modules and pytest's rewritten tests.
test: install kube
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy admission tenants classifier certs testcluster tests bench

contracts: install
	$(BIN)/lint-imports

check: lint typecheck contracts test

bench: install
	$(BIN)/python -m bench

bench-quick: install
	$(BIN)/python -m bench --quick

manifests:
	cp examples/tenantgate.yaml deploy/webhooks/tenantgate.yaml
	sed 's/^  backend: memory.*$$/  backend: kubernetes  # replicas share TenantLedger objects (deploy\/webhooks\/overlays\/ha)/' \
	    deploy/webhooks/tenantgate.yaml > deploy/webhooks/overlays/ha/tenantgate.yaml

image: install
	IMAGE=$(IMAGE) PYTHON=$(abspath $(BIN)/python) scripts/image.sh build

image-test: install
	IMAGE=$(IMAGE) PYTHON=$(abspath $(BIN)/python) scripts/image.sh test

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info
