"""Verifiers that survive pickling: a recipe, and a holder that builds from it on first use.

TRL's async GRPO rollout worker forwards the reward functions to a spawned child process, and
SB3's ``SubprocVecEnv`` pickles the environment factories with everything they hold (TRL
writes its rewards as callable classes "so the reward stays picklable",
``trl/rewards/accuracy_rewards.py``). A built :class:`~densereward.verifier.Verifier` holds a
model or an HTTP client, neither of which crosses a process boundary, so:

* :class:`VerifierFactory` is the recipe: ``VerifierFactory(config)()`` is ``Verifier(config)``.
  It pickles as plain data (a :class:`~densereward.config.VerifierConfig`).
* A ``Verifier`` pickles as the same recipe (``Verifier.__reduce__``): the copy builds its
  own backend from the config as it is unpickled. A backend or cache passed in explicitly is
  pickled as it is.
* :class:`VerifierHolder` is the base of the reward and progress functions: it holds a
  ``Verifier`` or a zero-argument factory, builds the verifier on first use, and pickles a
  built verifier as its recipe and no lock, so the unpickled copy builds its own verifier
  lazily, at its first call in the process that received it.

Example:
    >>> import pickle
    >>> from densereward import VerifierConfig
    >>> f = pickle.loads(pickle.dumps(VerifierFactory(VerifierConfig(granularity=5))))
    >>> f.config.granularity
    5
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import VerifierConfig
from .engine import Verifier

if TYPE_CHECKING:
    from ..cache import ScoreCache
    from ..scale import ScoreScale

__all__ = ["VerifierFactory", "VerifierHolder", "portable"]


@dataclass(frozen=True, eq=False)
class VerifierFactory:
    """A zero-argument callable that builds ``Verifier(config, ...)``: the picklable verifier.

    Pass it wherever a verifier factory goes (:func:`densereward.rewards.build_reward_funcs`,
    the reward classes, :func:`densereward.progress_reward.verifier_progress_fn`): each process
    that calls it builds its own verifier, so a dry run or a process that never scores loads
    no weights.

    Args:
        config: the verifier's configuration.
        backend: an already built backend to share (pickled as it is); ``None`` builds the one
            ``config.backend`` names, in the calling process.
        scale: the score scale; ``None``: ``ScoreScale.letters(config.granularity)``.
        cache: a :class:`~densereward.cache.ScoreCache`; ``None``: the one at
            ``config.cache_dir`` if set.
    """

    config: VerifierConfig = field(default_factory=VerifierConfig)
    backend: Any = None
    scale: ScoreScale | None = None
    cache: ScoreCache | None = None

    def __call__(self) -> Verifier:
        return Verifier(self.config, backend=self.backend, scale=self.scale, cache=self.cache)

    @classmethod
    def of(cls, verifier: Verifier) -> VerifierFactory:
        """The recipe of a built verifier: its config and scale, and the backend and cache
        it was given (``None`` for the ones it built itself, which are rebuilt): what
        ``Verifier.__reduce__`` pickles."""
        config, backend, scale, cache = verifier.__reduce__()[1]
        return cls(config, backend=backend, scale=scale, cache=cache)


def portable(verifier: Any) -> Any:
    """What is pickled in place of ``verifier``: a built ``Verifier`` becomes its
    :class:`VerifierFactory` (built again on first use after unpickling); anything else (a
    factory, a duck-typed verifier) is pickled as it is."""
    return VerifierFactory.of(verifier) if isinstance(verifier, Verifier) else verifier


class VerifierHolder:
    """Holds a verifier, or a zero-argument factory built on first access; survives pickling.

    The built verifier is pickled as its recipe (:func:`portable`) and the lock is created
    afresh, so the unpickled copy builds its own verifier at its first use.

    Args:
        verifier: a :class:`~densereward.verifier.Verifier` (or anything with ``score_batch``
            or ``progress_batch``), or a zero-argument factory returning one
            (e.g. :class:`VerifierFactory`).
    """

    def __init__(self, verifier: Any) -> None:
        self._verifier = verifier
        self._verifier_lock = threading.Lock()

    @property
    def verifier(self) -> Any:
        """The verifier (built from the factory on first access)."""
        with self._verifier_lock:
            v = self._verifier
            if callable(v) and not (hasattr(v, "score_batch") or hasattr(v, "progress_batch")):
                self._verifier = v()
            return self._verifier

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_verifier_lock", None)
        state["_verifier"] = portable(state.get("_verifier"))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._verifier_lock = threading.Lock()
