# The README's two commands are `make demo` and `make test`; both do all set-up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= $(abspath ../shared/data)
DEMO_DIR ?= runs/grpo-demo
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-fast lint format docs clean-demo

setup:
	@bash scripts/setup.sh

## Command 1: a 5-step GRPO run (W&B offline) of the embedded SmolLM2-135M policy on one-digit sums, which
## it sometimes gets right (so the reward-quality plot has both classes), with the dense reward of the
## Qwen2.5-Coder-0.5B verifier (reference-guided answer_match, G = 20): configs/grpo_demo_cpu.yaml.
demo: setup
	@rm -rf $(DEMO_DIR)
	$(VENV)/bin/densereward train grpo --config configs/grpo_demo_cpu.yaml --output-dir $(DEMO_DIR)

## Command 2: the layering contracts (.importlinter), then the whole test suite (unit, doctests,
## real model, vLLM on CPU, loopback servers, real envs); the 30 slowest tests are listed at the end.
test: setup
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q -p no:cacheprovider --durations=30 $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

## The documentation site (mkdocs.yml) into site/; `make test` builds it too (tests/test_docs.py).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: setup
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check src trainers envs tests benchmarks
	$(VENV)/bin/ruff format --check src trainers envs tests benchmarks

format: setup
	$(VENV)/bin/ruff format src trainers envs tests benchmarks
