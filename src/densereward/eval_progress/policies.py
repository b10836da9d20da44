"""Scripted Fetch policies for ``densereward eval-progress``: success, failure, random.

Each policy is a callable ``policy(obs) -> action`` (``(4,)`` float32 in ``[-1, 1]``: gripper
displacement ``dx, dy, dz`` and the finger command) built fresh per episode by
:func:`make_policy`. Fetch moves the gripper about 5 cm per unit action per step (``n_substeps``
20, ``Mocap`` control). Observation layout: Gymnasium-Robotics ``MujocoFetchEnv._get_obs``
(``observation[0:3]`` gripper, ``[3:6]`` object; ``desired_goal`` the target; metres).

Policies (``kind``):

* ``success``: FetchReach: a steady approach that arrives about step 40. FetchPush: move behind
  the block (the side away from the target), lower to the block's height, push it onto the
  target, fingers closed.
* ``short``: the same approach stopped at ``stop_fraction`` (0.5) of the way: the gripper
  (reach) or the block (push) halts well outside the 5 cm success radius.
* ``wrong``: FetchReach: moves away from the target; FetchPush: pushes the block away from the
  target (behind it on the target's side).
* ``random``: uniform actions from the action space (seeded).
* ``noisy``: ``success`` with Gaussian action noise (:data:`NOISE_STD`, seeded by the
  episode's seed), clipped: a stand-in for an early policy; it succeeds or fails by chance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["POLICY_KINDS", "make_policy"]

POLICY_KINDS = ("success", "short", "wrong", "random", "noisy")
"""Scripted policy kinds (``success`` succeeds; ``short``, ``wrong``, ``random`` fail;
``noisy`` either)."""

_GAIN = 1.0 / 0.05  # action per metre of displacement (Fetch: ~5 cm per unit action)


def _toward(delta: np.ndarray, max_speed: float = 1.0) -> np.ndarray:
    a = np.clip(np.asarray(delta, dtype=np.float64) * _GAIN, -max_speed, max_speed)
    return a.astype(np.float32)


def _reach(kind: str, first: dict[str, Any], stop_fraction: float) -> Callable[[Any], np.ndarray]:
    start = np.asarray(first["achieved_goal"], dtype=np.float64)
    goal = np.asarray(first["desired_goal"], dtype=np.float64)
    if kind == "wrong":
        away = start - goal
        n = np.linalg.norm(away)
        goal = start + (away / n if n > 1e-9 else np.array([0.0, 0.0, 1.0])) * 0.15
    elif kind == "short":
        goal = start + (goal - start) * stop_fraction
    speed = max(np.linalg.norm(goal - start) / 40 / 0.05, 0.02)  # arrive about step 40

    def act(obs: dict[str, Any]) -> np.ndarray:
        a = np.zeros(4, dtype=np.float32)
        a[:3] = _toward(goal - obs["observation"][:3], max_speed=speed)
        return a

    return act


def _push(kind: str, first: dict[str, Any], stop_fraction: float) -> Callable[[Any], np.ndarray]:
    block0 = np.asarray(first["observation"][3:6], dtype=np.float64)
    goal = np.asarray(first["desired_goal"], dtype=np.float64)
    if kind == "wrong":  # push the block away from the target, as far as it is from it
        goal = block0 - (goal - block0)
    elif kind == "short":
        goal = block0 + (goal - block0) * stop_fraction
    goal = goal.copy()
    goal[2] = block0[2]
    state = {"phase": 0}

    def act(obs: dict[str, Any]) -> np.ndarray:
        grip = np.asarray(obs["observation"][:3], dtype=np.float64)
        block = np.asarray(obs["observation"][3:6], dtype=np.float64)
        d = goal[:2] - block[:2]
        n = float(np.linalg.norm(d))
        u = d / n if n > 1e-9 else np.zeros(2)
        behind = block.copy()
        behind[:2] -= u * 0.06
        a = np.zeros(4, dtype=np.float32)
        a[3] = -1.0  # fingers closed: a flat pusher
        if n < 0.015:  # the block is on the (possibly wrong) target: hold still
            return a
        if state["phase"] == 0:  # up first, then over the point behind the block
            above = behind + np.array([0.0, 0.0, 0.08])
            if grip[2] < block[2] + 0.06 and np.linalg.norm(grip[:2] - behind[:2]) > 0.02:
                above = np.array([grip[0], grip[1], block[2] + 0.08])
            elif np.linalg.norm(above - grip) < 0.015:
                state["phase"] = 1
            a[:3] = _toward(above - grip)
        elif state["phase"] == 1:  # down to the block's height
            low = behind + np.array([0.0, 0.0, 0.005])
            if np.linalg.norm(low - grip) < 0.012:
                state["phase"] = 2
            a[:3] = _toward(low - grip)
        else:  # push: keep on the line through the block to the target, and advance
            side = grip[:2] - block[:2]
            if float(np.dot(side, u)) > -0.02 or abs(grip[2] - block[2]) > 0.04:
                state["phase"] = 0  # lost the block: go around again
            target = block.copy()
            target[:2] += u * (min(n, 0.03) - 0.03)
            target[2] = block[2] + 0.005
            a[:3] = _toward(target - grip, max_speed=0.5)
        return a

    return act


NOISE_STD = 0.5
"""Standard deviation of the ``noisy`` policy's Gaussian action noise (actions are in [-1, 1])."""


def _noisy(act: Callable[[Any], np.ndarray], seed: int) -> Callable[[Any], np.ndarray]:
    rng = np.random.default_rng(seed)

    def noisy(obs: Any) -> np.ndarray:
        a = act(obs) + rng.normal(0.0, NOISE_STD, size=4)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    return noisy


def make_policy(
    env_id: str,
    kind: str,
    first_observation: dict[str, Any],
    *,
    action_space: Any = None,
    stop_fraction: float = 0.5,
    seed: int = 0,
) -> Callable[[Any], np.ndarray]:
    """A scripted policy for one episode of a Fetch environment.

    Args:
        env_id: ``FetchReach-*`` or ``FetchPush-*``.
        kind: one of :data:`POLICY_KINDS`.
        first_observation: the episode's reset observation (dict).
        action_space: the environment's action space (``random`` samples it; seed it first).
        stop_fraction: where ``short`` stops, in ``(0, 1)`` of the way to the target.
        seed: seed of the ``noisy`` policy's action noise.

    Returns:
        ``policy(obs) -> (4,) float32`` action.

    Raises:
        ConfigError: for another environment, kind, or a ``stop_fraction`` outside ``(0, 1)``.
    """
    if kind not in POLICY_KINDS:
        raise ConfigError(f"policy kind {kind!r}; use one of {POLICY_KINDS}")
    if not 0.0 < stop_fraction < 1.0:
        raise ConfigError(f"stop_fraction must be in (0, 1), got {stop_fraction}")
    if kind == "random":
        if action_space is None:
            raise ConfigError("the random policy needs the environment's action_space")
        return lambda obs: np.asarray(action_space.sample(), dtype=np.float32)
    name = env_id.split("/")[-1].lower()
    script = "success" if kind == "noisy" else kind
    if name.startswith("fetchreach"):
        act = _reach(script, first_observation, stop_fraction)
    elif name.startswith("fetchpush"):
        act = _push(script, first_observation, stop_fraction)
    else:
        act = None
    if act is not None and kind == "noisy":
        return _noisy(act, seed)
    if act is not None:
        return act
    raise ConfigError(
        f"no scripted policies for {env_id!r}; eval-progress supports FetchReach-* and FetchPush-*"
    )
