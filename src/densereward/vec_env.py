"""SB3 ``VecEnvWrapper`` for verifier progress rewards: batched verifier calls per vector step.

Needs stable-baselines3 (``pip install densereward[robotics]``); the reward logic is
:class:`densereward.progress_reward.ProgressRewardCore`, shared with the Gymnasium wrapper.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper

from .errors import ConfigError, StateError
from .progress_reward import (
    ProgressFn,
    ProgressRewardConfig,
    ProgressRewardCore,
    TrajectoryDescriber,
    VerifierCallStats,
    check_render_mode,
)

__all__ = ["VecVerifierProgressReward", "TerminalFrame", "TERMINAL_FRAME"]

TERMINAL_FRAME = "terminal_frame"
"""``info`` key of the frame of an episode's last state (:class:`TerminalFrame`); the seconds
its rendering took are under ``"terminal_frame_seconds"``."""


class TerminalFrame(gym.Wrapper):
    """Renders an episode's last state into ``info["terminal_frame"]`` before it is reset.

    A vectorised environment resets an environment as soon as its episode ends, so the last
    state can no longer be rendered when :class:`VecVerifierProgressReward` sees the step;
    this wrapper, inside each environment, renders it at the step that ends the episode (one
    frame per episode; ``uint8`` ``(H, W, 3)``). :class:`VecVerifierProgressReward` puts it
    around the environments of a ``DummyVecEnv`` itself; for a ``SubprocVecEnv`` wrap each
    environment in its factory (without it the last read takes the latest earlier frame).

    Raises:
        ConfigError: at the end of an episode, if the environment renders no frame.
    """

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            t0 = time.perf_counter()
            frame = _frame_or_raise(self.env.render())
            seconds = time.perf_counter() - t0
            info = {**info, TERMINAL_FRAME: frame, f"{TERMINAL_FRAME}_seconds": seconds}
        return obs, r, terminated, truncated, info


class VecVerifierProgressReward(VecEnvWrapper):
    """SB3 ``VecEnvWrapper``: verifier-progress reward with batched calls per vector step.

    The states of all environments whose scoring is due at a step (every ``score_every``
    steps and the final state) are scored together in one ``progress_fn`` call, after the
    cache; when episodes ended at that step, the first states of the episodes that
    auto-reset are scored in a second call (their ``Phi(s_0)``), so a vector step makes zero
    (every read a cache hit, or none due), one or two calls. Wrap it in ``VecMonitor`` so SB3's
    ``rollout/ep_rew_mean`` is the training reward.

    With ``config.render_frames`` (environments made with ``render_mode="rgb_array"``) the
    frames of the scored states only are rendered (``env_method("render")`` on the
    environments due, the last state of an episode by :class:`TerminalFrame`, which this
    wrapper puts around each environment of a ``DummyVecEnv``, in place).

    Args:
        venv: the vectorised environment (e.g. ``DummyVecEnv``), with the raw env reward.
        progress_fn: as in :class:`VerifierProgressReward`.
        describer: as in :class:`VerifierProgressReward`.
        config: as in :class:`VerifierProgressReward`.
        gamma: as in :class:`VerifierProgressReward`.

    Raises:
        ConfigError: on invalid configuration.
    """

    def __init__(
        self,
        venv: Any,
        progress_fn: ProgressFn,
        describer: TrajectoryDescriber,
        config: ProgressRewardConfig | None = None,
        *,
        gamma: float | None = None,
    ) -> None:
        super().__init__(venv)
        self.core = ProgressRewardCore(
            progress_fn,
            describer,
            config or ProgressRewardConfig(),
            gamma=gamma,
            n_envs=venv.num_envs,
        )
        check_render_mode(self.core.config, getattr(venv, "render_mode", None))
        self._actions: np.ndarray | None = None
        inner = getattr(venv, "unwrapped", venv)
        if self.core.config.render_frames and isinstance(getattr(inner, "envs", None), list):
            inner.envs = [e if _has_terminal_frame(e) else TerminalFrame(e) for e in inner.envs]

    @property
    def verifier_stats(self) -> VerifierCallStats:
        """Call accounting of the progress function."""
        return self.core.stats

    def __getstate__(self) -> dict[str, Any]:
        # SB3's VecEnvWrapper keeps its class's members (mappingproxies) in class_attributes,
        # which do not pickle (VecNormalize drops them too); the progress function pickles
        # with a built verifier as its recipe. The wrapped venv goes along: a DummyVecEnv of
        # picklable environments does, a SubprocVecEnv does not (its workers are processes).
        state = self.__dict__.copy()
        del state["class_attributes"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.class_attributes = dict(inspect.getmembers(self.__class__))

    def _frames(self, indices: Sequence[int]) -> list[Any]:
        if not self.core.config.render_frames or not len(indices):
            return [None] * len(indices)
        t0 = time.perf_counter()
        frames = [_frame_or_raise(f) for f in self.venv.env_method("render", indices=list(indices))]
        self.core.stats.render_seconds += time.perf_counter() - t0
        self.core.stats.n_frames += len(frames)
        return frames

    def reset(self) -> Any:
        obs = self.venv.reset()
        frames = self._frames(range(self.num_envs))
        queries = []
        for i in range(self.num_envs):
            queries += self.core.start(i, _index_obs(obs, i), frames[i])
        self.core.resolve(queries)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)
        self.venv.step_async(actions)

    def step_wait(self) -> Any:
        obs, r_env, dones, infos = self.venv.step_wait()
        if self._actions is None:
            raise StateError("step_wait() called before step_async()")
        # frames of the states scored now; after an auto-reset the environment shows the next
        # episode, so an episode's last frame comes from TerminalFrame, rendered before it
        due = [i for i in range(self.num_envs) if not dones[i] and self.core.frame_due(i, False)]
        frames = dict(zip(due, self._frames(due), strict=True))
        for i in np.flatnonzero(dones):
            frames[int(i)] = infos[i].pop(TERMINAL_FRAME, None)
            if frames[int(i)] is not None:
                self.core.stats.n_frames += 1
                self.core.stats.render_seconds += infos[i].pop(f"{TERMINAL_FRAME}_seconds", 0.0)
        queries = []
        for i in range(self.num_envs):
            last = (
                infos[i].get("terminal_observation", _index_obs(obs, i))
                if dones[i]
                else _index_obs(obs, i)
            )
            queries += self.core.advance(
                i, self._actions[i], last, float(r_env[i]), bool(dones[i]), frames.get(i)
            )
        self.core.resolve(queries)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        for i in range(self.num_envs):
            terminated = bool(dones[i]) and not infos[i].get("TimeLimit.truncated", False)
            rewards[i] = self.core.reward(
                i, terminated=terminated, done=bool(dones[i]), info=infos[i]
            )
        restarts = []
        done_ids = [int(i) for i in np.flatnonzero(dones)]
        for i, frame in zip(done_ids, self._frames(done_ids), strict=True):
            restarts += self.core.start(i, _index_obs(obs, i), frame)  # s_0 of the next episode
        self.core.resolve(restarts)  # Phi(s_0) of the new episodes, one more batched call
        return obs, rewards, dones, infos


def _frame_or_raise(frame: Any) -> Any:
    if frame is None:
        raise ConfigError("render_frames needs environments made with render_mode='rgb_array'")
    return frame


def _has_terminal_frame(env: Any) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, TerminalFrame):
            return True
        env = env.env
    return False


def _index_obs(obs: Any, i: int) -> Any:
    """Observation of environment ``i`` from a batched (dict of) array(s)."""
    if isinstance(obs, dict):
        return {k: v[i] for k, v in obs.items()}
    return obs[i]
