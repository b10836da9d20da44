"""densereward: dense RL rewards from the score-token distribution of an LLM verifier.

A verifier LLM reads a problem and a candidate; instead of one discrete grade we read its
probability distribution over G ordered score tokens and take the expectation, a
fine-grained reward in ``[0, 1]`` (LLM-as-a-Verifier, Kwok et al. 2026).

>>> from densereward import ScoreScale
>>> ScoreScale.letters(3).tokens
('A', 'B', 'C')
"""

from __future__ import annotations

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
    ScoreTokenError,
)
from .results import PairwiseResult, RankResult, ScoreResult
from .scale import ScoreScale
from .tournament import bradley_terry_preference
from .verifier import Verifier, VerifierStats

__version__ = "0.1.0"

__all__ = [
    "Verifier",
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
]
