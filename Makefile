# The README's two commands are `make demo` and `make test`; both do all set-up first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= $(abspath ../shared/data)
DEMO_DIR ?= runs/grpo-demo
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-fast lint format clean-demo

setup:
	@bash scripts/setup.sh

## Command 1: a short GRPO run with the dense verifier reward on the embedded default model (W&B offline):
## one-digit sums, which the 135M policy sometimes gets right, so the reward-quality plot has both classes.
demo: setup
	@rm -rf $(DEMO_DIR)
	$(VENV)/bin/densereward train grpo --config configs/grpo_dynamics_cpu.yaml --max-steps 5 --reward dense \
		--output-dir $(DEMO_DIR) heldout.data=null training.save_steps=5

## Command 2: the layering contracts (.importlinter), then the whole test suite (unit, doctests,
## real model, vLLM on CPU, loopback servers, real envs).
test: setup
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check src trainers envs tests benchmarks
	$(VENV)/bin/ruff format --check src trainers envs tests benchmarks

format: setup
	$(VENV)/bin/ruff format src trainers envs tests benchmarks
