"""Potential-based shaping arithmetic: pure NumPy functions, no Gymnasium, no SB3.

``F_t = gamma * Phi(s_{t+1}) - Phi(s_t)`` (Ng, Harada & Russell 1999, eq. 2), potentials held
between scorings, and the three ways progress becomes a reward (``shaping`` | ``progress`` |
``mixture``). :mod:`densereward.progress_reward` drives them per environment step; the
wrappers (:mod:`densereward.wrappers`, :mod:`densereward.vec_env`) only plug that into
Gymnasium and SB3. ``import densereward.shaping`` needs only NumPy.
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError, DataError

__all__ = [
    "potential_shaping",
    "held_potentials",
    "shaped_rewards",
    "combine_reward",
    "placeholder_reward",
]


def potential_shaping(
    phi: float, phi_next: float, gamma: float, *, terminated: bool = False
) -> float:
    """Potential-based shaping term ``F = gamma * Phi(s') - Phi(s)`` (Ng et al. 1999, eq. 2).

    Args:
        phi: ``Phi(s)`` of the state the action was taken in, in ``[0, 1]``.
        phi_next: ``Phi(s')`` of the state reached, in ``[0, 1]``; ignored when ``terminated``.
        gamma: the agent's discount factor, in ``[0, 1]``.
        terminated: ``s'`` is a true terminal state, whose potential is 0.

    Returns:
        The shaping reward ``F`` in ``[-1, 1]``.

    Raises:
        ConfigError: if ``gamma`` is outside ``[0, 1]``.

    >>> potential_shaping(0.2, 0.5, 0.9)
    0.25
    >>> potential_shaping(0.2, 0.5, 0.9, terminated=True)
    -0.2
    """
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    return float(gamma * (0.0 if terminated else phi_next) - phi)


def held_potentials(scores: dict[int, float | None], length: int) -> tuple[np.ndarray, int]:
    """Potentials ``Phi(s_0) .. Phi(s_T)`` from scores at some steps, held in between.

    Args:
        scores: step ``t`` in ``[0, length]`` -> progress in ``[0, 1]`` or ``None`` (abstained).
        length: ``T``, the number of environment steps of the episode (>= 0).

    Returns:
        ``(potentials, n_abstained)``: ``(T + 1,)`` float array where an unscored or
        abstained step keeps the previous potential (``s_0`` unscored or abstained -> 0),
        and the number of abstentions among ``scores``.

    Raises:
        DataError: if ``length < 0``, a step is outside ``[0, length]`` or a value outside
            ``[0, 1]``.

    >>> held_potentials({0: 0.1, 2: None, 3: 0.7}, 4)
    (array([0.1, 0.1, 0.1, 0.7, 0.7]), 1)
    """
    if length < 0:
        raise DataError(f"episode length must be >= 0, got {length}")
    out = np.zeros(length + 1, dtype=np.float64)
    n_abstained = 0
    for t, v in scores.items():
        if not 0 <= t <= length:
            raise DataError(f"scored step {t} is outside the episode [0, {length}]")
        if v is None:
            n_abstained += 1
        elif not 0.0 <= v <= 1.0 or v != v:
            raise DataError(f"progress must be in [0, 1] or None, got {v!r} at step {t}")
    phi = 0.0
    for t in range(length + 1):
        v = scores.get(t)
        if v is not None:
            phi = float(v)
        out[t] = phi
    return out, n_abstained


def shaped_rewards(potentials: np.ndarray, gamma: float, *, terminated: bool) -> np.ndarray:
    """Per-step shaping ``F_t = gamma * Phi_{t+1} - Phi_t`` of a whole episode.

    Args:
        potentials: ``(T + 1,)`` potentials ``Phi(s_0) .. Phi(s_T)``.
        gamma: discount factor in ``[0, 1]``.
        terminated: the episode ended in a true terminal state (``Phi(s_T)`` is taken as 0).

    Returns:
        ``(T,)`` float array. Its discounted sum ``sum_t gamma^t F_t`` equals
        ``gamma^T Phi_T - Phi_0`` (``-Phi_0`` when terminated).

    Raises:
        ConfigError: if ``gamma`` is outside ``[0, 1]``.
        DataError: if ``potentials`` is not 1-D non-empty.

    >>> shaped_rewards(np.array([0.5, 0.5, 0.5]), 1.0, terminated=False)
    array([0., 0.])
    """
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    phi = np.asarray(potentials, dtype=np.float64)
    if phi.ndim != 1 or phi.size == 0:
        raise DataError(f"potentials must be a non-empty 1-D array, got shape {phi.shape}")
    nxt = phi[1:].copy()
    if terminated and nxt.size:
        nxt[-1] = 0.0
    return gamma * nxt - phi[:-1]


def combine_reward(
    mode: str,
    env_reward: float | np.ndarray,
    phi_next: float | np.ndarray,
    shaping: float | np.ndarray,
    alpha: float,
) -> float | np.ndarray:
    """The training reward of one step (or of arrays of steps) in a given mode.

    Args:
        mode: ``"shaping"`` -> ``r + F`` (Ng et al. 1999); ``"progress"`` -> ``Phi(s')``;
            ``"mixture"`` -> ``alpha * r + (1 - alpha) * Phi(s')``.
        env_reward: the environment's own reward ``r``.
        phi_next: held progress ``Phi(s')`` in ``[0, 1]``.
        shaping: ``F = gamma * Phi(s') - Phi(s)``.
        alpha: weight of the environment reward in ``"mixture"``, in ``[0, 1]``.

    Raises:
        ConfigError: on an unknown mode.

    >>> combine_reward("mixture", -1.0, 0.6, 0.1, 0.5)
    -0.2
    """
    if mode == "shaping":
        return env_reward + shaping
    if mode == "progress":
        return phi_next
    if mode == "mixture":
        return alpha * env_reward + (1.0 - alpha) * phi_next
    raise ConfigError(f"reward mode {mode!r}; use shaping | progress | mixture")


def placeholder_reward(mode: str, env_reward: float, alpha: float) -> float:
    """The environment-reward part of ``mode``, emitted during an episode scored at its end
    (``timing="episode_end"``) until the replay buffer is relabelled: ``r_t`` (shaping),
    ``0`` (progress), ``alpha * r_t`` (mixture)."""
    return {"shaping": env_reward, "progress": 0.0, "mixture": alpha * env_reward}[mode]
