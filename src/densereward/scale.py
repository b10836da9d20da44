"""Ordered score scales: the G score tokens a verifier grades with.

A scale maps level ``g`` (0-based, ``0 <= g < G``) to a token string ``v_g`` and a value
``phi(v_g)``. Higher values always mean better / more complete, in every mode.
The default is G = 20 letters ``A..T`` where ``T`` is best (LLM-as-a-Verifier,
Kwok et al. 2026, sec. 3: granularity axis).

Example:
    >>> s = ScoreScale.letters(5)
    >>> s.tokens
    ('A', 'B', 'C', 'D', 'E')
    >>> s.normalize(s.values[-1]), s.normalize(s.values[0])
    (1.0, 0.0)
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np

from .errors import ConfigError

__all__ = ["ScoreScale"]

SUPPORTED_GRANULARITIES = tuple(range(2, 27))


@dataclass(frozen=True)
class ScoreScale:
    """An ordered set of G score tokens with values ``phi``.

    Attributes:
        tokens: the G score tokens, worst first; ``tokens[g]`` is level ``g``.
        values: ``phi(v_g)`` for each level, strictly increasing. Default ``0..G-1``.
        spellings: for each level, every surface form of the token that is summed into
            that level's probability (e.g. ``("A", " A")``). The first spelling is the
            canonical one; alternative spellings that the tokenizer cannot produce as a
            single token are dropped by the engine at start-up.
    """

    tokens: tuple[str, ...]
    values: tuple[float, ...] = ()
    spellings: tuple[tuple[str, ...], ...] = field(default=(), compare=True)

    def __post_init__(self) -> None:
        g = len(self.tokens)
        if g < 2:
            raise ConfigError(f"a score scale needs at least 2 tokens, got {g}")
        if len(set(self.tokens)) != g:
            raise ConfigError(f"score tokens must be distinct, got {self.tokens}")
        if not self.values:
            object.__setattr__(self, "values", tuple(float(i) for i in range(g)))
        if len(self.values) != g:
            raise ConfigError(f"{g} score tokens but {len(self.values)} values")
        if any(b <= a for a, b in zip(self.values, self.values[1:], strict=False)):
            raise ConfigError("score values must be strictly increasing (higher = better)")
        if not self.spellings:
            object.__setattr__(self, "spellings", tuple((t, " " + t) for t in self.tokens))
        if len(self.spellings) != g or any(
            sp[0] != t for sp, t in zip(self.spellings, self.tokens, strict=False)
        ):
            raise ConfigError("spellings must hold one tuple per level, canonical token first")
        flat = [s for sp in self.spellings for s in sp]
        if len(set(flat)) != len(flat):
            raise ConfigError(f"a spelling appears under two levels: {flat}")

    @classmethod
    def letters(cls, granularity: int = 20) -> ScoreScale:
        """The first ``granularity`` capital letters, ``A`` worst, values ``0..G-1``.

        Raises:
            ConfigError: if ``granularity`` is not in ``[2, 26]``.
        """
        if granularity not in SUPPORTED_GRANULARITIES:
            raise ConfigError(
                f"granularity must be in [2, 26] for letter scales, got {granularity}"
            )
        return cls(tokens=tuple(string.ascii_uppercase[:granularity]))

    @property
    def granularity(self) -> int:
        """G, the number of score levels."""
        return len(self.tokens)

    @property
    def phi(self) -> np.ndarray:
        """``phi(v_g)`` as a float64 array of shape ``(G,)``."""
        return np.asarray(self.values, dtype=np.float64)

    def normalize(self, r: float) -> float:
        """Map an expected value ``R`` in ``[phi_min, phi_max]`` to ``[0, 1]``.

        ``(R - phi_min) / (phi_max - phi_min)`` (Kwok et al. 2026, eq. 1 normalisation).
        """
        lo, hi = self.values[0], self.values[-1]
        return float((r - lo) / (hi - lo))

    def describe(self) -> str:
        """Human text of the mapping, used in prompts (``A`` = worst ... ``T`` = best)."""
        return (
            f"{self.tokens[0]} (worst) to {self.tokens[-1]} (best), "
            f"{self.granularity} levels in order {''.join(self.tokens) if all(len(t) == 1 for t in self.tokens) else ', '.join(self.tokens)}"
        )

    def all_spellings(self) -> tuple[str, ...]:
        """Every spelling of every level, flattened in level order."""
        return tuple(s for sp in self.spellings for s in sp)
