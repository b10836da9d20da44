#!/usr/bin/env bash
# GPU smoke test of the Qwen3-8B path (one GPU, no network, under 10 minutes); not part of CI.
# Random weights with Qwen3-8B's exact configuration and the real Qwen3 tokenizer: it prints
# verifier scoring throughput through vLLM, the time of 3 GRPO steps of
# configs/grpo_math_qwen3_8b.yaml with colocated vLLM generation, the reward's share of the
# step and peak GPU memory -- speed, not quality. See scripts/gpu_smoke.py for the phases.
#   bash scripts/gpu_smoke.sh             # on a GPU machine (CUDA torch + vllm installed)
#   bash scripts/gpu_smoke.sh --dry-run   # anywhere: validates arguments and configs
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export WANDB_MODE=${WANDB_MODE:-offline}
exec "$PY" scripts/gpu_smoke.py "$@"
