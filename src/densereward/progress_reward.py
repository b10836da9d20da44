"""Verifier progress as a dense reward: configuration, per-episode bookkeeping, the cache.

This module needs no Gymnasium and no SB3: :class:`ProgressRewardCore` is what the Gymnasium
wrapper (:class:`densereward.wrappers.VerifierProgressReward`) and the SB3 VecEnv wrapper
(:class:`densereward.vec_env.VecVerifierProgressReward`) share; the arithmetic is in
:mod:`densereward.shaping`.

A *progress function* estimates how far a trajectory has come towards finishing a task,
``progress_fn(tasks, trajectories) -> list[float | None]`` with values in ``[0, 1]`` and
``None`` for an abstention (:data:`densereward.progress_fn.ProgressFn`).
:func:`verifier_progress_fn` adapts the engine
(:meth:`densereward.verifier.Verifier.progress_batch`); any pure function with the same
signature plugs in as well (a scripted oracle, a learned value model, ...).

Frames (``render_frames``): the wrappers render an ``rgb_array`` frame of each state that is
scored (``s_0``, every ``score_every``-th, the last) and pass ``images=`` per read: in
``shaping`` the frame of the state alone (a potential of the state), in ``progress`` and
``mixture`` the frames of the trajectory's scored states up to the read one, the last
``max_frames`` of them, oldest first. The describer's text goes beside them
(``frames_with_text``) or not (then the trajectory text is ``""``; the verifier's prompt says
the frames carry the state). The cache key
holds a content hash of the frames (:func:`densereward.progress_fn.frames_digest`), so
identical frames with identical text hit.

The progress ``Phi`` becomes a reward in one of three modes (:class:`ProgressRewardConfig`):

* ``"shaping"``: potential-based shaping added to the environment reward,
  ``r'_t = r_t + F_t`` with ``F_t = gamma * Phi(s_{t+1}) - Phi(s_t)`` (Ng, Harada & Russell
  1999, eq. 2). The sum of ``gamma^t F_t`` over an episode telescopes to
  ``gamma^T Phi(s_T) - Phi(s_0)``, and a policy that hovers near the goal earns nothing
  from it. Ng et al.'s guarantee (the optimal policy is unchanged) needs ``Phi`` to be a
  function of the current state, so in this mode the verifier reads
  ``describer.describe_state(s_t)`` -- the current state alone (Fetch: goal, gripper and
  object positions, distances), with no history and no step count -- and the same state
  reached by two histories gets the same ``Phi`` (and hits the cache). The task text comes
  from the episode's first observation, so it may only use what stays fixed during an
  episode and is part of every state (Fetch: the goal). With ``score_every > 1`` the
  potential used between scorings is *held* (next item), which is an approximation.
* ``"progress"``: the raw progress ``Phi(s_{t+1})`` (as VLM-RM uses its CLIP reward;
  Rocamonde et al. 2024). Not policy invariant.
* ``"mixture"``: ``alpha * r_t + (1 - alpha) * Phi(s_{t+1})``.

Choices, documented once:

* ``Phi(terminal) = 0`` on a true termination (``terminated=True``), as Ng et al. require
  for episodic tasks. On a time-limit truncation the last state is *not* terminal: the
  agent bootstraps from it (SB3's ``handle_timeout_termination``), so its potential is the
  scored progress. (Fetch tasks never terminate; they truncate after 50 steps.)
* ``score_every = k``: the verifier scores ``s_0`` (at reset), every ``k``-th state and the
  last state of an episode. In between, ``Phi`` is held at the last scored value, so with
  ``gamma = 1`` shaping is 0 except at scored steps; with ``gamma < 1`` a held step earns
  ``-(1 - gamma) * Phi``. What holding approximates: the potential actually used at step
  ``t`` is ``Phi(s_tau)``, ``tau = k * floor(t / k)`` (or ``t`` at the episode's end), the
  potential of a state up to ``k - 1`` steps old, in place of ``Phi(s_t)``. That is exact
  potential-based shaping for the augmented state ``(s_t, t mod k, s_tau)``, so the
  episode's discounted shaping still telescopes to ``gamma^T Phi(s_T) - Phi(s_0)`` (both
  scored states) and an optimal policy over augmented states is unchanged; but the agent
  (policy and critic) sees only ``s_t``, and to it the held term is a non-Markov error of
  up to ``|Phi(s_t) - Phi(s_tau)|`` per step, larger the more ``Phi`` moves in ``k`` steps.
  ``score_every = 1`` gives the exact potential of the state ``Phi(s_t)`` (each distinct
  state text is scored once; repeated ones hit the cache) at ``k`` times the verifier calls.
* An abstained score (``None``) keeps the previous potential and is counted in
  :class:`VerifierCallStats` (with its reason) and in the episode summary. An abstention on
  ``s_0`` (no previous potential) starts the episode at ``Phi = 0`` ("no progress"), also
  counted. Never 0.5. A verifier that abstains on most reads leaves only the base reward, so
  the first window of :data:`ABSTAIN_WINDOW_READS` reads at least half abstained warns, once.
* ``timing="episode_end"``: nothing is scored during the episode; at its end all the
  checkpoints (``0, k, 2k, ..., T``) are scored in one batch, the per-step rewards are
  computed with the same arithmetic and returned in ``info["verifier_episode"]["rewards"]``,
  and :class:`densereward.callbacks.ReplayRelabelCallback` writes them over the placeholder
  rewards in the replay buffer (as VLM-RM relabels its episodes). The placeholder emitted
  during the episode is the environment-reward part of the mode (``r_t``, ``r_t``,
  ``alpha * r_t``).

The wrapper order, the environment's own reward in ``info["true_reward"]`` and an example:
:mod:`densereward.wrappers` (README, "Python API", has a runnable one).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from .abstentions import AbstentionAlarm, reason_kind
from .errors import ConfigError, DataError, StateError
from .progress_fn import (
    ProgressFn,
    check_render_mode,
    frames_digest,
    load_triton_before_gl,
    verifier_progress_fn,
)
from .shaping import (
    combine_reward,
    held_potentials,
    placeholder_reward,
    potential_shaping,
    shaped_rewards,
)

__all__ = [
    "ProgressFn",
    "TrajectoryDescriber",
    "ProgressRewardConfig",
    "VerifierCallStats",
    "ProgressCache",
    "ProgressRewardCore",
    "verifier_progress_fn",
    "check_render_mode",
    "ABSTAIN_WINDOW_READS",
]

logger = logging.getLogger(__name__)

ABSTAIN_WINDOW_READS = 8
"""Progress reads per window of the abstention warning (a window never splits one batch)."""


class TrajectoryDescriber(Protocol):
    """Turns an episode so far, or one state, into compact text (see :mod:`densereward.envs.describers`).

    ``mode: shaping`` reads :meth:`describe_state` (a potential of the state); ``progress``
    and ``mixture`` read :meth:`describe` (the trajectory, history included).
    """

    def task(self, observation: Any) -> str:
        """One-paragraph task description from the first observation of an episode."""
        ...

    def describe(self, observations: Sequence[Any], actions: Sequence[np.ndarray]) -> str:
        """Text of the trajectory ``s_0 .. s_t`` (``t + 1`` observations, ``t`` actions)."""
        ...

    def describe_state(self, observation: Any) -> str:
        """Text of the state ``s_t`` alone: a function of ``observation`` only (no history,
        no step count), so that a potential read from it is a potential of the state."""
        ...


# --------------------------------------------------------------------------------------
# Configuration, statistics, cache
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressRewardConfig:
    """How verifier progress becomes a reward (YAML section ``reward:``)."""

    mode: Literal["shaping", "progress", "mixture"] = "shaping"
    """``shaping``: ``r + gamma Phi(s') - Phi(s)``; ``progress``: ``Phi(s')``; ``mixture``: ``alpha r + (1-alpha) Phi(s')``."""
    timing: Literal["online", "episode_end"] = "online"
    """``online``: score during the episode; ``episode_end``: score once at the end and relabel the replay buffer."""
    score_every: int = 10
    """Score every k-th state (environment steps); the last state is always scored."""
    gamma: float | None = None
    """Discount in the shaping term; ``None`` = the agent's gamma (filled in by the trainer)."""
    alpha: float = 0.5
    """Weight of the environment reward in ``mixture``, in ``[0, 1]``."""
    cache_size: int = 4096
    """Entries of the in-memory (task, trajectory text) -> progress LRU cache; 0 disables it."""
    render_frames: bool = False
    """Render an ``rgb_array`` frame of each scored state and pass ``images=`` to the progress
    function (the environments must be made with ``render_mode="rgb_array"``)."""
    max_frames: int = 4
    """Most frames per read in ``progress`` / ``mixture`` (the last scored states', oldest
    first); ``shaping`` reads the state's own frame only. The verifier may bound them further."""
    frames_with_text: bool = True
    """With ``render_frames``: the describer's text beside the frames; ``false``: frames only
    (the trajectory text is ``""``; the task text still comes from the describer)."""

    def __post_init__(self) -> None:
        if self.mode not in ("shaping", "progress", "mixture"):
            raise ConfigError(f"reward.mode={self.mode!r}; use shaping | progress | mixture")
        if self.timing not in ("online", "episode_end"):
            raise ConfigError(f"reward.timing={self.timing!r}; use online | episode_end")
        if self.score_every < 1:
            raise ConfigError(
                f"reward.score_every must be >= 1 environment step, got {self.score_every}"
            )
        if self.gamma is not None and not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(
                f"reward.gamma must be in [0, 1] (or null for the agent's), got {self.gamma}"
            )
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"reward.alpha must be in [0, 1], got {self.alpha}")
        if self.cache_size < 0:
            raise ConfigError(f"reward.cache_size must be >= 0, got {self.cache_size}")
        if self.max_frames < 1:
            raise ConfigError(f"reward.max_frames must be >= 1, got {self.max_frames}")


@dataclass
class VerifierCallStats:
    """Accounting of the progress function across all environments of one wrapper.

    Attributes:
        n_env_steps: environment steps taken (summed over vectorised environments).
        n_queries: (task, trajectory) scores requested, cache hits included.
        n_cache_hits: queries answered from the cache.
        n_calls: calls of ``progress_fn`` (one per batch).
        n_scored: values the progress function returned (not ``None``).
        n_abstained: ``None`` values returned (each keeps the previous potential).
        seconds: wall-clock seconds spent inside ``progress_fn``.
        abstain_reasons: abstained reads (one per distinct text of a call) by the kind of
            reason (:func:`densereward.abstentions.reason_kind`): ``{"low score-token mass": 9}``.
        n_frames: frames rendered for the progress function (``render_frames``).
        render_seconds: wall-clock seconds spent rendering them.
    """

    n_env_steps: int = 0
    n_queries: int = 0
    n_cache_hits: int = 0
    n_calls: int = 0
    n_scored: int = 0
    n_abstained: int = 0
    seconds: float = 0.0
    abstain_reasons: dict[str, int] = field(default_factory=dict)
    n_frames: int = 0
    render_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """All counters (and ``abstain_reasons``) as a dict."""
        return dataclasses.asdict(self)


class ProgressCache:
    """In-memory LRU map ``key -> progress`` (abstentions are not cached); the wrappers' key
    is ``(task, trajectory text, frames_digest(frames))`` (``""`` without frames).

    Describers round positions (to cm), so a revisited state has the same text and is not
    re-scored; with frames, only identical pixels hit.

    >>> c = ProgressCache(2); c.put(("t", "a"), 0.1); c.put(("t", "b"), 0.2); c.put(("t", "c"), 0.3)
    >>> c.get(("t", "a")) is None, c.get(("t", "c"))
    (True, 0.3)
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = int(max_size)
        self._data: OrderedDict[tuple[str, ...], float] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> float | None:
        """The cached value, or ``None`` when absent (refreshes its recency)."""
        if key not in self._data:
            return None
        self._data.move_to_end(key)
        return self._data[key]

    def put(self, key: tuple[str, ...], value: float) -> None:
        """Store ``value``, evicting the least recently used entry beyond ``max_size``."""
        if self.max_size <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# --------------------------------------------------------------------------------------
# The shared core: episode bookkeeping, batched + cached scoring, reward arithmetic
# --------------------------------------------------------------------------------------


@dataclass
class _Episode:
    task: str
    observations: list[Any]
    actions: list[np.ndarray] = field(default_factory=list)
    env_rewards: list[float] = field(default_factory=list)
    true_rewards: list[float] = field(default_factory=list)
    frames: dict[int, Any] = field(default_factory=dict)
    scores: dict[int, float | None] = field(default_factory=dict)
    phi: float = 0.0
    training_return: float = 0.0

    @property
    def t(self) -> int:
        return len(self.actions)


@dataclass
class _Query:
    episode: _Episode
    step: int
    task: str
    text: str
    images: list[Any] | None = None
    key: tuple[str, str, str] = ("", "", "")


class ProgressRewardCore:
    """Episode bookkeeping and reward arithmetic shared by the gymnasium and VecEnv wrappers.

    One instance serves ``n_envs`` environments. Per step, each environment reports its
    transition (:meth:`advance`), the wrapper collects the queries that are due across
    environments, :meth:`resolve` answers them with one cached, batched call of the
    progress function, and :meth:`reward` turns the result into the training reward.

    Args:
        progress_fn: see :data:`ProgressFn`.
        describer: a :class:`TrajectoryDescriber`.
        config: :class:`ProgressRewardConfig`.
        gamma: the discount of the shaping term when ``config.gamma`` is ``None``.
        n_envs: number of environments served.

    Raises:
        ConfigError: if neither ``config.gamma`` nor ``gamma`` is given, on bad values, or
            for ``mode="shaping"`` with a describer that has no ``describe_state``.
        DataError: (at run time) when ``progress_fn`` returns a value outside ``[0, 1]``, a
            non-number, or another number of values than trajectories.
        StateError: (at run time) when an environment steps before its ``reset()``.
    """

    def __init__(
        self,
        progress_fn: ProgressFn,
        describer: TrajectoryDescriber,
        config: ProgressRewardConfig,
        *,
        gamma: float | None = None,
        n_envs: int = 1,
    ) -> None:
        if hasattr(progress_fn, "progress_batch"):  # a Verifier: score lists, not progress
            raise ConfigError(
                f"progress_fn is a {type(progress_fn).__name__}, not a progress function: wrap "
                "it as progress_fn=verifier_progress_fn(verifier) (from densereward.wrappers)"
            )
        if not callable(progress_fn):
            raise ConfigError(
                "progress_fn must be callable: (tasks, trajectories) -> list[float | None]"
            )
        g = config.gamma if config.gamma is not None else gamma
        if g is None:
            raise ConfigError(
                "the shaping discount is unset: pass the agent's discount as gamma= (e.g. "
                "gamma=0.99, SB3 SAC's default, or your model's gamma) to the wrapper, or set "
                "ProgressRewardConfig(gamma=...) (reward.gamma in a YAML config)"
            )
        if not 0.0 <= g <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {g}")
        if n_envs < 1:
            raise ConfigError(f"n_envs must be >= 1, got {n_envs}")
        self._state_only = config.mode == "shaping"
        if self._state_only and not callable(getattr(describer, "describe_state", None)):
            raise ConfigError(
                "reward.mode=shaping needs a potential of the state (Ng et al. 1999): the "
                f"describer {type(describer).__name__} must implement describe_state(observation) "
                "-> str (FetchDescriber and BoxDescriber do), or use mode progress | mixture"
            )
        self.progress_fn = progress_fn
        self.describer = describer
        self.config = config
        self.gamma = float(g)
        self.n_envs = n_envs
        self.cache = ProgressCache(config.cache_size)
        self.stats = VerifierCallStats()
        self.episodes: list[_Episode | None] = [None] * n_envs
        self._online = config.timing == "online"
        self._alarm = AbstentionAlarm("verifier progress reads", min_reads=ABSTAIN_WINDOW_READS)
        check = getattr(progress_fn, "check_images", None)
        if config.render_frames and callable(check):
            check()  # a verifier that reads text only is refused now, not at the first read
        if config.render_frames:
            load_triton_before_gl()  # before the first frame renders (a segfault otherwise)

    # -- episode life cycle ------------------------------------------------------------

    def start(self, i: int, observation: Any, frame: Any = None) -> list[_Query]:
        """Begin a new episode in environment ``i``; returns the query for ``Phi(s_0)`` if online.

        ``frame``: the rendered frame of ``s_0`` (always wanted when ``render_frames`` is on).
        """
        ep = _Episode(task=self.describer.task(observation), observations=[observation])
        if frame is not None:
            ep.frames[0] = frame
        self.episodes[i] = ep
        return [self._query(ep, 0)] if self._online else []

    def advance(
        self,
        i: int,
        action: np.ndarray,
        observation: Any,
        env_reward: float,
        done: bool,
        frame: Any = None,
    ) -> list[_Query]:
        """Record one transition of environment ``i``; returns the queries now due.

        Args:
            i: environment index in ``[0, n_envs)``.
            action: the action taken.
            observation: ``s_{t+1}`` (the terminal observation when the episode ended).
            env_reward: the environment's own reward of this step.
            done: the episode ended (terminated or truncated).
            frame: the rendered frame of ``s_{t+1}``: wanted when :meth:`frame_due` said so
                (else ignored); ``None`` when it could not be rendered (a read then takes the
                latest earlier frame).
        """
        ep = self._episode(i)
        ep.actions.append(np.asarray(action))
        ep.observations.append(observation)
        ep.env_rewards.append(float(env_reward))
        if frame is not None:
            ep.frames[ep.t] = frame
        self.stats.n_env_steps += 1
        t = ep.t
        if self._online:
            return [self._query(ep, t)] if (t % self.config.score_every == 0 or done) else []
        if not done:
            return []
        steps = sorted(set(range(0, t + 1, self.config.score_every)) | {t})
        return [self._query(ep, s) for s in steps]

    def frame_due(self, i: int, done: bool) -> bool:
        """Whether the next :meth:`advance` of environment ``i`` wants a frame of ``s_{t+1}``:
        ``render_frames`` is on and ``s_{t+1}`` is scored (every ``score_every``-th or the
        last state), so a wrapper renders only the frames a read will see."""
        if not self.config.render_frames:
            return False
        return done or (self._episode(i).t + 1) % self.config.score_every == 0

    def resolve(self, queries: Sequence[_Query]) -> None:
        """Answer ``queries`` (from any environments) with the cache and one progress call."""
        if not queries:
            return
        self.stats.n_queries += len(queries)
        todo: list[_Query] = []
        for q in queries:
            hit = self.cache.get(q.key)
            if hit is not None:
                q.episode.scores[q.step] = hit
                self.stats.n_cache_hits += 1
            else:
                todo.append(q)
        # identical reads (task, text, frames) in one batch are scored once
        unique: dict[tuple[str, str, str], list[_Query]] = {}
        for q in todo:
            unique.setdefault(q.key, []).append(q)
        if not unique:
            return
        groups = list(unique.values())
        kwargs: dict[str, Any] = {}
        if self.config.render_frames:
            kwargs["images"] = [g[0].images for g in groups]
        t0 = time.perf_counter()
        values = list(
            self.progress_fn([g[0].task for g in groups], [g[0].text for g in groups], **kwargs)
        )
        self.stats.seconds += time.perf_counter() - t0
        self.stats.n_calls += 1
        if len(values) != len(groups):
            raise DataError(
                f"progress_fn returned {len(values)} values for {len(groups)} trajectories"
            )
        reasons = getattr(self.progress_fn, "last_reasons", None)
        if not isinstance(reasons, list) or len(reasons) != len(values):
            reasons = [None] * len(values)
        abstained: list[str | None] = []
        for g, v, why in zip(groups, values, reasons, strict=True):
            v = _check_progress(v)
            if v is None:
                self.stats.n_abstained += len(g)
                abstained.append(why)
                kind = reason_kind(why)
                self.stats.abstain_reasons[kind] = self.stats.abstain_reasons.get(kind, 0) + 1
            else:
                self.stats.n_scored += 1
                self.stats.n_cache_hits += len(g) - 1
                self.cache.put(g[0].key, v)
            for q in g:
                q.episode.scores[q.step] = v
        warning = self._alarm.observe(len(groups), abstained)
        if warning:  # an abstention holds the last potential: the reward is the base reward
            logger.warning("%s (said once)", warning)

    def reward(self, i: int, *, terminated: bool, done: bool, info: dict[str, Any]) -> float:
        """Training reward of environment ``i``'s last step; fills ``info`` (after :meth:`resolve`).

        Sets ``info["true_reward"]`` (unless an inner wrapper already set it),
        ``info["verifier_progress"]`` (held ``Phi(s_{t+1})``; ``None`` before episode-end
        scoring), ``info["verifier_reward"]`` (the reward returned), and at the end of an
        episode ``info["verifier_episode"]`` (see :meth:`_summary`).
        """
        ep = self._episode(i)
        t = ep.t
        r_env = ep.env_rewards[-1]
        info.setdefault("true_reward", r_env)
        ep.true_rewards.append(float(info["true_reward"]))
        if self._online:
            if t == 1:
                ep.phi = _initial_potential(ep.scores)
            v = ep.scores.get(t)
            phi_next = ep.phi if v is None else v
            f = potential_shaping(ep.phi, phi_next, self.gamma, terminated=terminated)
            r = float(combine_reward(self.config.mode, r_env, phi_next, f, self.config.alpha))
            ep.phi = phi_next
            info["verifier_progress"] = phi_next
            info["verifier_shaping"] = f
        else:
            r = placeholder_reward(self.config.mode, r_env, self.config.alpha)
            info["verifier_progress"] = None
        info["verifier_reward"] = r
        ep.training_return += r
        if done:
            info["verifier_episode"] = self._summary(ep, terminated=terminated, info=info)
        return r

    # -- helpers -------------------------------------------------------------------------

    def _episode(self, i: int) -> _Episode:
        ep = self.episodes[i]
        if ep is None:
            raise StateError(f"environment {i} stepped before reset()")
        return ep

    def _query(self, ep: _Episode, step: int) -> _Query:
        images = None
        if self.config.render_frames:  # frames of scored states up to `step`, oldest first
            steps = sorted(s for s in ep.frames if s <= step)
            # a potential of the state sees its own frame only (the latest earlier one when
            # its frame could not be rendered); a trajectory its last max_frames
            images = [
                ep.frames[s] for s in steps[-(1 if self._state_only else self.config.max_frames) :]
            ]
        if images is not None and not self.config.frames_with_text:
            text = ""  # the frames alone carry the state
        elif self._state_only:  # Phi(s_step): the state alone, however it was reached
            text = self.describer.describe_state(ep.observations[step])
        else:
            text = self.describer.describe(ep.observations[: step + 1], ep.actions[:step])
        key = (ep.task, text, frames_digest(images))
        return _Query(episode=ep, step=step, task=ep.task, text=text, images=images, key=key)

    def _summary(self, ep: _Episode, *, terminated: bool, info: dict[str, Any]) -> dict[str, Any]:
        """Episode record: progress per scored step, returns, success, abstentions, relabelled rewards."""
        phis, n_abstained = held_potentials(ep.scores, ep.t)
        summary: dict[str, Any] = {
            "length": ep.t,
            "scored_steps": sorted(ep.scores),
            "progress": [ep.scores[s] for s in sorted(ep.scores)],
            "final_progress": ep.scores.get(ep.t),
            "n_abstained": n_abstained,
            # None: the environment reports no success (a success rate would be made up)
            "is_success": bool(info["is_success"]) if "is_success" in info else None,
            "true_return": float(np.sum(ep.true_rewards)),
            "terminated": terminated,
        }
        if not self._online:
            f = shaped_rewards(phis, self.gamma, terminated=terminated)
            rewards = combine_reward(
                self.config.mode, np.asarray(ep.env_rewards), phis[1:], f, self.config.alpha
            )
            summary["rewards"] = np.asarray(rewards, dtype=np.float32)
            summary["verifier_return"] = float(np.sum(rewards))
        else:
            summary["verifier_return"] = ep.training_return
        return summary


def _initial_potential(scores: dict[int, float | None]) -> float:
    v = scores.get(0)
    return 0.0 if v is None else v


def _check_progress(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise DataError(f"progress_fn returned {v!r}; expected a float in [0, 1] or None") from None
    if f != f:  # NaN = abstention the function did not label
        return None
    if not 0.0 <= f <= 1.0:
        raise DataError(
            f"progress_fn returned {f}; progress must be in [0, 1] (or None to abstain)"
        )
    return f
