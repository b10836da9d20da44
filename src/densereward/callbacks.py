"""SB3 callbacks: reward-quality tracking, replay-buffer relabelling, learning curves, W&B output.

* :class:`VerifierDynamicsCallback`: as the policy strengthens, how good is the verifier's
  reward? Logs, over the last ``window`` episodes, ``verifier/voc`` (value-order
  correlation), ``verifier/tpr``, ``verifier/tnr``, ``verifier/balanced_accuracy`` of the
  thresholded final progress against ``is_success`` (threshold ``auto``: Youden's J on the
  earlier episodes, as GRPO's tracker and eval-verifier calibrate it), mean progress of
  successful and failed episodes, verifier calls and seconds per environment step, and the
  returns side by side (``rollout/ep_training_rew_mean``: the reward the agent trains on, the
  verifier's shaping or progress with its base reward, summed over a training episode;
  ``rollout/ep_env_rew_mean``, the environment's own reward per training episode, which
  ``eval/mean_reward`` need not be).
* :class:`ReplayRelabelCallback`: writes episode-end verifier rewards over the placeholder
  rewards in ``model.replay_buffer`` (``reward.timing="episode_end"``, as VLM-RM does).
* :class:`LearningCurveCallback`: appends the training episodes' success rate (without
  ``is_success``: their mean training return) to a JSONL file, each row naming its ``metric``.
* :class:`EvaluationCallback`: deterministic evaluation episodes on a separate environment
  every ``every`` environment steps (SB3's ``evaluate_policy``); its JSONL curve is the one
  ``densereward compare`` reads.
* :class:`WandbOutputFormat`: an SB3 logger output that forwards scalars to ``wandb.log``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter
from stable_baselines3.common.vec_env import unwrap_vec_normalize

from .errors import ConfigError, DataError
from .io import append_jsonl
from .metrics.classification import balanced_accuracy, best_threshold, tnr, tpr
from .metrics.progress import value_order_correlation
from .progress_reward import VerifierCallStats
from .wandb_config import WandbService

__all__ = [
    "VerifierDynamicsCallback",
    "ReplayRelabelCallback",
    "LearningCurveCallback",
    "EvaluationCallback",
    "WandbOutputFormat",
    "find_verifier_stats",
    "FALLBACK_THRESHOLD",
    "MIN_EPISODES",
    "UNDEFINED_REASONS",
    "undefined_reasons",
]

logger = logging.getLogger(__name__)

_SAID: set[str] = set()  # warnings given once per process (a comparison runs many callbacks)

FALLBACK_THRESHOLD = 0.5
"""The accept threshold of ``threshold="auto"`` until earlier episodes hold a success and a
failure (logged as ``verifier/threshold_fallback`` = 1, and said once)."""


MIN_EPISODES = 10
"""Fewer episodes of a class in the window than this and the rates resting on that class
(``verifier/tpr``, ``verifier/voc_success``: successes; ``verifier/tnr``: failures;
``verifier/balanced_accuracy``: both; ``verifier/voc``: episodes of any outcome with a defined
VOC) are logged as null (NaN, left out of SB3's table) beside the counts they would rest on
(``verifier/n_success_episodes``, ``verifier/n_failure_episodes``,
``verifier/n_voc_success_episodes``, ``verifier/n_voc_episodes``), never as a rate of one or two episodes. The same minimum
per class as ``densereward.eval_verifier.MIN_PER_CLASS``."""

UNDEFINED_REASONS = {
    "verifier/tpr": f"fewer than {MIN_EPISODES} successful episodes with a final progress in "
    "the window (verifier/n_success_episodes)",
    "verifier/tnr": f"fewer than {MIN_EPISODES} failed episodes with a final progress in the "
    "window (verifier/n_failure_episodes)",
    "verifier/balanced_accuracy": "TPR or TNR is undefined",
    "verifier/voc": f"fewer than {MIN_EPISODES} episodes with a defined VOC in the window "
    "(verifier/n_voc_episodes; an episode whose progress stays constant has none)",
    "verifier/voc_success": f"fewer than {MIN_EPISODES} successful episodes with a defined VOC "
    "in the window (verifier/n_voc_success_episodes)",
    "verifier/progress_success_mean": "no successful episode with a final progress in the window",
    "verifier/progress_failure_mean": "no failed episode with a final progress in the window",
    "verifier/final_progress_mean": "no episode in the window has a final progress (its last "
    "read abstained)",
    "rollout/ep_env_rew_mean": "no training episode had ended",
    "rollout/ep_training_rew_mean": "no training episode had ended",
}
"""Why each metric of :class:`VerifierDynamicsCallback` can be null (NaN), in words; the plot's
note under its panels. :func:`undefined_reasons` says it with the counts of one window."""

# the rates that need MIN_EPISODES: (the count they rest on, what it counts)
_RESTS_ON = {
    "verifier/voc": ("verifier/n_voc_episodes", "episodes with a defined VOC"),
    "verifier/voc_success": (
        "verifier/n_voc_success_episodes",
        "successful episodes with a defined VOC",
    ),
    "verifier/tpr": ("verifier/n_success_episodes", "successful episodes with a final progress"),
    "verifier/tnr": ("verifier/n_failure_episodes", "failed episodes with a final progress"),
}


def undefined_reasons(
    metrics: dict[str, float], min_episodes: int = MIN_EPISODES
) -> dict[str, str]:
    """``{metric: why it is null}`` for every NaN in ``metrics`` (one window of
    :meth:`VerifierDynamicsCallback.metrics`), with the counts a rate rests on: a null is never
    written without its reason (``summary.json``'s ``undefined``, the console of ``train sac``).

    >>> why = undefined_reasons({"verifier/voc": float("nan"), "verifier/n_voc_episodes": 6.0})
    >>> print(why["verifier/voc"])
    6 episodes with a defined VOC in the window (verifier/n_voc_episodes), need 10 (densereward.callbacks.MIN_EPISODES)
    """
    out = {}
    for key, v in metrics.items():
        if v == v:
            continue
        rests = _RESTS_ON.get(key)
        if key == "verifier/balanced_accuracy":
            nan = [
                k
                for k in ("verifier/tpr", "verifier/tnr")
                if metrics.get(k, 0.0) != metrics.get(k, 0.0)
            ]
            why = f"{' and '.join(nan) or 'TPR or TNR'} undefined"
        elif rests is not None and metrics.get(rests[0]) is not None:
            why = (
                f"{int(metrics[rests[0]])} {rests[1]} in the window ({rests[0]}), need "
                f"{min_episodes}"
                + (" (densereward.callbacks.MIN_EPISODES)" if min_episodes == MIN_EPISODES else "")
            )
        else:
            why = UNDEFINED_REASONS.get(key, "not measured in this window")
        out[key] = why
    return out


def find_verifier_stats(env: Any) -> list[VerifierCallStats]:
    """The :class:`VerifierCallStats` of every verifier wrapper in a (vectorised) environment.

    Walks ``VecEnvWrapper.venv`` links (``VecVerifierProgressReward``) and, at the base
    ``VecEnv``, asks each sub-environment for ``verifier_stats`` (``VerifierProgressReward``).
    Each wrapper's stats appear once (an outer ``VecEnvWrapper`` forwards ``core`` to the
    wrapper inside it).
    """
    found: list[VerifierCallStats] = []
    node = env
    while node is not None:
        core = getattr(node, "core", None)
        stats = getattr(core, "stats", None)
        if isinstance(stats, VerifierCallStats) and all(s is not stats for s in found):
            found.append(stats)
        nxt = getattr(node, "venv", None)
        if nxt is None:
            with contextlib.suppress(AttributeError, ValueError):
                found += [
                    s for s in node.get_attr("verifier_stats") if isinstance(s, VerifierCallStats)
                ]
        node = nxt
    return found


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return float(np.mean(xs)) if xs else float("nan")


class VerifierDynamicsCallback(BaseCallback):
    """Track the verifier's reward quality and the environment vs verifier returns during training.

    Reads ``info["verifier_episode"]`` (set by the verifier wrappers at each episode end) and
    ``info["true_reward"]``; without a verifier only the environment return and success are
    logged. Metrics are means over the last ``window`` episodes, recorded once at each step
    where episodes end (SB3 writes them at its next log dump):

    * ``verifier/voc``: mean per-episode VOC over all episodes
      (:func:`densereward.metrics.value_order_correlation` of the progress against the scored
      environment steps; an episode whose own VOC is undefined, ``None`` (its progress stays
      constant), is skipped, and ``verifier/voc_undefined_episode_frac`` is the fraction of the
      window's episodes that are; resting on ``verifier/n_voc_episodes``, the episodes with a
      defined VOC, null below ``min_episodes`` of them: a null ``verifier/voc`` beside a
      ``voc_undefined_episode_frac`` of 0 means too few episodes, each with a defined VOC;
      :func:`undefined_reasons` says which),
      and ``verifier/voc_success`` over successful episodes only (GVL's setting: progress of a
      trajectory that reaches the goal should rise with time; a failing one need not), resting
      on ``verifier/n_voc_success_episodes`` (successful episodes with a defined VOC).
    * ``verifier/tpr``, ``verifier/tnr``, ``verifier/balanced_accuracy``: final progress
      ``>= threshold`` as the prediction of ``is_success`` (:func:`densereward.metrics.tpr`,
      :func:`~densereward.metrics.tnr`, :func:`~densereward.metrics.balanced_accuracy` =
      (TPR + TNR) / 2; episodes whose final progress abstained are left out). Each episode is
      judged at the threshold in force when it ended. ``verifier/threshold`` is the one in
      force now: with ``"auto"``, Youden's J (:func:`densereward.metrics.best_threshold`) of
      the final progress of every earlier judged episode against its success, so each episode
      is judged out of sample; until those hold a success and a failure it is
      :data:`FALLBACK_THRESHOLD`, logged as ``verifier/threshold_fallback`` = 1 and said once.
    * ``verifier/progress_success_mean``, ``verifier/progress_failure_mean``: mean final
      progress of successful / failed episodes.
    * ``verifier/calls_per_step``, ``verifier/seconds_per_step``, ``verifier/queries_per_step``,
      ``verifier/cache_hit_rate``, ``verifier/abstain_rate``: cost of the verifier per
      environment step (cumulative); with ``reward.render_frames`` also
      ``verifier/frames_per_step`` and ``verifier/render_seconds_per_step`` (frames rendered
      for the verifier and the seconds that took).
    * ``rollout/success_rate`` (the training episodes' success, in the JSONL and the summary; SB3
      logs it to its table itself, over ``stats_window_size`` episodes, so it is not recorded
      twice; :data:`~densereward.callbacks.EvaluationCallback`'s evaluation episodes are
      ``eval/success_rate``), ``rollout/ep_training_rew_mean`` (the verifier reward the agent
      trains on, e.g. the base reward plus the verifier's shaping, summed over an episode: not
      the verifier's progress alone; named ``rollout/ep_verifier_rew_mean`` before issue 41's
      third rerun), ``rollout/ep_env_rew_mean``.
    * Without ``info["is_success"]`` (``Pendulum-v1``: the episodes' ``is_success`` is ``None``)
      the metrics above that need success are left out, never computed as if all had failed.
    * with ``engine_stats``: ``verifier/total/n_low_mass`` (reads that abstained below
      ``VerifierConfig.min_mass``), ``verifier/mean_mass``, ``verifier/total/n_engine_abstained``
      (counters of the verifier engine, cumulative since it was built: ``total/``).

    With ``path``, every :meth:`record` also appends ``{"step", **metrics}`` to that JSONL file
    (NaN as ``null``), the verifier curves of the run's plot.

    Args:
        threshold: accept threshold on the final progress (``VerifierConfig.threshold``):
            ``"auto"``, a number in ``[0, 1]``, or an eval-verifier ``metrics.json`` (see
            :func:`densereward.config.resolve_threshold`).
        window: episodes averaged (SB3 uses 100 for ``rollout/*``).
        verbose: SB3 verbosity.
        engine_stats: the verifier engine's :class:`~densereward.verifier.VerifierStats`
            (``Verifier.stats``), or ``None``.
        path: JSONL file of the recorded metrics (appended to), or ``None``.
        min_episodes: episodes of a class a rate needs (:data:`MIN_EPISODES`).

    The window, the episode count and the calibration of ``"auto"`` live in memory;
    :meth:`state_dict` and :meth:`load_state_dict` carry them across a resume (``train sac``
    saves them beside each checkpoint, ``sac_verifier_dynamics_<steps>_steps.json``). The
    verifier's cost per step (``verifier/calls_per_step``, ...) is counted over the steps of
    this process (a resumed run's from its resume step).

    Raises:
        ConfigError: on an invalid threshold or ``window < 1``.
    """

    def __init__(
        self,
        threshold: float | str = "auto",
        window: int = 100,
        verbose: int = 0,
        *,
        engine_stats: Any = None,
        path: str | Path | None = None,
        min_episodes: int = MIN_EPISODES,
    ) -> None:
        from .config import resolve_threshold

        super().__init__(verbose)
        if min_episodes < 1:
            raise ConfigError(f"min_episodes must be >= 1, got {min_episodes}")
        self.min_episodes = min_episodes
        self.engine_stats = engine_stats
        self._fixed_threshold, self.threshold_source = resolve_threshold(threshold)
        if window < 1:
            raise ConfigError(f"window must be >= 1 episode, got {window}")
        self.threshold: float = (
            FALLBACK_THRESHOLD if self._fixed_threshold is None else self._fixed_threshold
        )
        """The accept threshold in force for the next episode."""
        self.threshold_fallback = self._fixed_threshold is None
        """True while ``auto`` has not seen a success and a failure (the threshold is 0.5)."""
        self._judged: tuple[list[float], list[float]] = ([], [])  # (final progress, success)
        self.path = Path(path) if path is not None else None
        self.window = window
        self.episodes: deque[dict[str, Any]] = deque(maxlen=window)
        self.true_returns: deque[float] = deque(maxlen=window)
        # every training episode's info["is_success"] (None: not reported), verifier or not
        self.successes: deque[bool | None] = deque(maxlen=window)
        self.n_episodes = 0
        self._true_sum: np.ndarray | None = None
        self._stats: list[VerifierCallStats] = []
        self._written_step: int | None = None  # the step of the last JSONL row

    def _on_training_start(self) -> None:
        self._true_sum = np.zeros(self.training_env.num_envs)
        self._stats = find_verifier_stats(self.training_env)

    def _on_step(self) -> bool:
        infos: list[dict[str, Any]] = self.locals["infos"]
        dones = self.locals["dones"]
        rewards = self.locals["rewards"]
        if self._true_sum is None:
            self._on_training_start()
        for i, info in enumerate(infos):
            self._true_sum[i] += float(info.get("true_reward", rewards[i]))
            if not dones[i]:
                continue
            self.true_returns.append(float(self._true_sum[i]))
            success = info.get("is_success")
            self.successes.append(None if success is None else bool(success))
            self._true_sum[i] = 0.0
            self.n_episodes += 1
            ep = info.get("verifier_episode")
            if ep is not None:
                self.add_episode(ep)
        if np.any(dones):  # once per step, after every episode that ended at it
            self.record()
        return True

    def add_episode(self, episode: dict[str, Any]) -> None:
        """Add a finished episode (``info["verifier_episode"]``) at the threshold in force,
        then recalibrate ``auto`` with it (so it only judges later episodes)."""
        self.episodes.append({**episode, "threshold": self.threshold})
        if episode.get("is_success") is None:
            return  # the environment reports no success: nothing to judge the progress against
        if self.threshold_fallback and "threshold_fallback" not in _SAID:
            _SAID.add("threshold_fallback")
            logger.warning(
                "verifier.threshold=auto: Youden's J needs earlier episodes with a success and "
                "a failure; until then verifier/tpr, verifier/tnr and verifier/balanced_accuracy "
                "judge the final progress at %g (verifier/threshold_fallback = 1; said once per "
                "process)",
                FALLBACK_THRESHOLD,
            )
        if episode["final_progress"] is None:
            return
        self._judged[0].append(float(episode["final_progress"]))
        self._judged[1].append(float(bool(episode["is_success"])))
        if self._fixed_threshold is None:
            t = best_threshold(*self._judged)["threshold"]
            if math.isfinite(t):
                if self.threshold_fallback:
                    logger.info(
                        "verifier.threshold=auto: Youden's J on %d episodes: %.4g",
                        len(self._judged[1]),
                        t,
                    )
                self.threshold, self.threshold_fallback = t, False

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue the window (JSON-able): the window's episodes
        (without their relabelled ``rewards``, which no metric reads) and environment returns,
        the episodes counted so far, and ``auto``'s calibration (the final progress and success
        of every judged episode, the threshold in force)."""
        return {
            "version": 1,
            "episodes": [{k: v for k, v in e.items() if k != "rewards"} for e in self.episodes],
            "true_returns": list(self.true_returns),
            "successes": list(self.successes),
            "n_episodes": self.n_episodes,
            "judged": [list(self._judged[0]), list(self._judged[1])],
            "threshold": self.threshold,
            "threshold_fallback": self.threshold_fallback,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (of a run with any window: the newest ``window``
        episodes are kept). A fixed threshold stays this callback's; each kept episode keeps
        the threshold it was judged at.

        Raises:
            DataError: for a state of another format.
        """
        if not isinstance(state, dict) or state.get("version") != 1:
            raise DataError("not a verifier-dynamics state (version 1)")
        nan = float("nan")  # written as null
        self.episodes = deque((dict(e) for e in state["episodes"]), maxlen=self.window)
        self.true_returns = deque(
            (nan if r is None else float(r) for r in state["true_returns"]), maxlen=self.window
        )
        # a state written before "successes" was kept: the window's success starts afresh
        self.successes = deque(state.get("successes") or (), maxlen=self.window)
        self.n_episodes = int(state["n_episodes"])
        self._judged = tuple([float(x) for x in xs] for xs in state["judged"])  # type: ignore[assignment]
        if self._fixed_threshold is None:
            self.threshold = float(state["threshold"])
            self.threshold_fallback = bool(state["threshold_fallback"])

    def metrics(self) -> dict[str, float]:
        """The current window's metrics (keys as logged; NaN where undefined)."""
        out: dict[str, float] = {"rollout/ep_env_rew_mean": _mean(self.true_returns)}
        reported = [float(x) for x in self.successes if x is not None]
        if reported:  # a run without the verifier has no verifier episodes to take it from
            out["rollout/success_rate"] = _mean(reported)
        eps = list(self.episodes)
        vocs = [value_order_correlation(e["progress"], steps=e["scored_steps"]) for e in eps]
        if eps:
            defined = [v for v in vocs if v is not None]
            out["verifier/n_voc_episodes"] = float(len(defined))
            out["verifier/voc"] = (
                _mean(defined) if len(defined) >= self.min_episodes else float("nan")
            )
            out["verifier/voc_undefined_episode_frac"] = 1.0 - len(defined) / len(vocs)
            out["rollout/ep_training_rew_mean"] = _mean(e["verifier_return"] for e in eps)
            finals = [e["final_progress"] for e in eps if e["final_progress"] is not None]
            out["verifier/final_progress_mean"] = _mean(finals)
        # what needs success: over episodes whose environment reports it (None: it does not)
        known = [(v, e) for v, e in zip(vocs, eps, strict=True) if e["is_success"] is not None]
        if known:
            voc_success = [v for v, e in known if v is not None and e["is_success"]]
            out["rollout/success_rate"] = _mean(float(e["is_success"]) for _, e in known)
            judged = [e for _, e in known if e["final_progress"] is not None]
            final = [e["final_progress"] for e in judged]
            success = [float(e["is_success"]) for e in judged]
            at = [e.get("threshold", self.threshold) for e in judged]
            n_pos, n_neg = int(sum(success)), len(success) - int(sum(success))
            enough_pos, enough_neg = n_pos >= self.min_episodes, n_neg >= self.min_episodes
            nan = float("nan")  # too few episodes of the class: the count alone, not a rate
            out["verifier/n_success_episodes"] = float(n_pos)
            out["verifier/n_failure_episodes"] = float(n_neg)
            out["verifier/n_voc_success_episodes"] = float(len(voc_success))
            out["verifier/voc_success"] = (
                _mean(voc_success) if len(voc_success) >= self.min_episodes else nan
            )
            out["verifier/tpr"] = tpr(final, success, at) if enough_pos else nan
            out["verifier/tnr"] = tnr(final, success, at) if enough_neg else nan
            out["verifier/balanced_accuracy"] = (
                balanced_accuracy(final, success, at) if enough_pos and enough_neg else nan
            )
            out["verifier/threshold"] = self.threshold
            out["verifier/threshold_fallback"] = float(self.threshold_fallback)
            pos = [p for p, s in zip(final, success, strict=True) if s]
            neg = [p for p, s in zip(final, success, strict=True) if not s]
            out["verifier/progress_success_mean"] = _mean(pos)
            out["verifier/progress_failure_mean"] = _mean(neg)
        if self._stats:
            steps = sum(s.n_env_steps for s in self._stats)
            queries = sum(s.n_queries for s in self._stats)
            answered = sum(s.n_scored + s.n_abstained for s in self._stats)
            if steps:
                out["verifier/calls_per_step"] = sum(s.n_calls for s in self._stats) / steps
                out["verifier/queries_per_step"] = queries / steps
                out["verifier/seconds_per_step"] = sum(s.seconds for s in self._stats) / steps
                frames = sum(getattr(s, "n_frames", 0) for s in self._stats)
                if frames:
                    out["verifier/frames_per_step"] = frames / steps
                    render = sum(s.render_seconds for s in self._stats)
                    out["verifier/render_seconds_per_step"] = render / steps
            if queries:
                out["verifier/cache_hit_rate"] = sum(s.n_cache_hits for s in self._stats) / queries
            if answered:
                out["verifier/abstain_rate"] = sum(s.n_abstained for s in self._stats) / answered
        if self.engine_stats is not None:
            d = self.engine_stats.as_dict()
            out["verifier/total/n_low_mass"] = float(d.get("n_low_mass", 0))
            out["verifier/mean_mass"] = float(d.get("mean_mass", float("nan")))
            out["verifier/total/n_engine_abstained"] = float(d.get("n_abstained", 0))
        return out

    def record(self) -> None:
        """Record :meth:`metrics` in the SB3 logger (NaN = undefined in this window, skipped)
        and, with ``path``, in its JSONL file: one row per step, so a second record at the
        step of the last row (the trainer's after ``learn``) writes none."""
        metrics = self.metrics()
        for k, v in metrics.items():
            # skip NaN (undefined in this window, or too few episodes) and the training success
            # rate SB3 records itself under the same key
            if v == v and k != "rollout/success_rate":
                self.logger.record(k, v)
        step = int(self.num_timesteps)
        if self.path is not None and step != self._written_step:  # one row per step
            append_jsonl(self.path, {"step": step, **metrics})
            self._written_step = step


class ReplayRelabelCallback(BaseCallback):
    """Write episode-end verifier rewards into ``model.replay_buffer.rewards`` (VLM-RM style).

    At every step it remembers, per environment, the replay-buffer row where SB3 is about
    to store the transition (``replay_buffer.pos``: callbacks run before
    ``_store_transition``). When ``info["verifier_episode"]["rewards"]`` arrives at an
    episode end, those ``(T,)`` rewards overwrite the rows of that episode once the last
    transition is stored (at the next step or at the end of the rollout).

    Works with SB3's ``ReplayBuffer`` and ``DictReplayBuffer`` (rewards shaped
    ``(buffer_size, n_envs)``). Not with HER, which recomputes rewards from goals.

    Raises:
        ConfigError: at training start if the model has no replay buffer or uses HER.
        DataError: when a relabelled episode gets another number of rewards than it has steps.
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._rows: list[list[int]] = []
        self._pending: list[tuple[int, list[int], np.ndarray]] = []
        self.n_relabelled_episodes = 0
        self.n_relabelled_steps = 0

    def _on_training_start(self) -> None:
        buf = getattr(self.model, "replay_buffer", None)
        if buf is None:
            raise ConfigError(
                "ReplayRelabelCallback needs an off-policy model with a replay buffer"
            )
        if type(buf).__name__ == "HerReplayBuffer":
            raise ConfigError(
                "episode-end relabelling is incompatible with HER (HER recomputes rewards)"
            )
        self._rows = [[] for _ in range(self.training_env.num_envs)]

    def _flush(self) -> None:
        buf = self.model.replay_buffer
        for i, rows, rewards in self._pending:
            if len(rows) != len(rewards):
                raise DataError(
                    f"episode of {len(rows)} stored steps got {len(rewards)} relabelled rewards"
                )
            if len(rows) > buf.buffer_size:
                continue  # the episode's start has been overwritten already
            buf.rewards[np.asarray(rows), i] = rewards
            self.n_relabelled_episodes += 1
            self.n_relabelled_steps += len(rows)
        self._pending.clear()

    def _on_step(self) -> bool:
        if not self._rows:
            self._on_training_start()
        self._flush()
        pos = self.model.replay_buffer.pos
        for i, (info, done) in enumerate(
            zip(self.locals["infos"], self.locals["dones"], strict=True)
        ):
            self._rows[i].append(pos)
            if done:
                ep = info.get("verifier_episode") or {}
                if "rewards" in ep:
                    self._pending.append(
                        (i, self._rows[i], np.asarray(ep["rewards"], dtype=np.float32))
                    )
                self._rows[i] = []
        return True

    def _on_rollout_end(self) -> None:
        self._flush()


class LearningCurveCallback(BaseCallback):
    """Append ``{"step": env_steps, "value": success_rate, "metric", "n_episodes",
    "n_episodes_total"}`` to a JSONL curve file.

    The success rate is the mean ``is_success`` of the last ``window`` finished training
    episodes (SB3's ``rollout/success_rate``), written every ``every`` environment steps
    once an episode has finished (one without ``is_success`` is left out, not counted as a
    failure); ``densereward compare`` reads this file. With ``success=False`` (no ``is_success``:
    ``Pendulum-v1``) the value is their mean return of the environment's own reward
    (``rollout/ep_env_rew_mean``: ``info["true_reward"]`` where a wrapper replaced or shaped the
    reward, else the reward) instead: never the training reward (SB3's ``rollout/ep_rew_mean``),
    which for the verifier reward includes the potential-shaping term, so that conditions with
    different rewards have curves on one scale (issue 41 third rerun F2). Each row says which:
    ``metric`` is ``"rollout/success_rate"`` or ``"rollout/ep_env_rew_mean"`` (:attr:`metric`),
    and a return row also has ``reward``, ``reward_label`` in words. ``n_episodes`` is the
    point's window (the last ``window`` episodes, fewer at first), ``n_episodes_total`` the
    episodes finished so far in the run (a resumed run continues both from the episodes that
    ended by its checkpoint: :meth:`continue_from`): the windows of successive points overlap,
    and the two counts say how many distinct episodes a stretch of the curve rests on
    (:func:`densereward.sample_efficiency.report.final_rests_on`).

    Args:
        path: the JSONL file (appended to, so a resumed run continues the curve).
        every: environment steps between points (summed over vectorised environments).
        window: episodes in the success-rate window.
        success: the environment reports ``info["is_success"]``.
        reward_label: the training reward, in words (the ``reward`` of a return row).

    Raises:
        ConfigError: if ``every < 1`` or ``window < 1``.
    """

    def __init__(
        self,
        path: str | Path,
        every: int = 1000,
        window: int = 100,
        verbose: int = 0,
        *,
        success: bool = True,
        reward_label: str = "the environment's own reward, summed over a training episode",
    ) -> None:
        super().__init__(verbose)
        if every < 1 or window < 1:
            raise ConfigError(f"curve every/window must be >= 1, got {every}/{window}")
        self.path = Path(path)
        self.every = every
        self.success = success
        self.metric = "rollout/success_rate" if success else "rollout/ep_env_rew_mean"
        self.reward_label = reward_label
        self.successes: deque[float] = deque(maxlen=window)  # or returns, without success
        self.curve: list[dict[str, Any]] = []
        self.n_episodes_total = 0  # episodes that entered the window (continue_from on resume)
        self._next = None
        self._env_return: np.ndarray | None = None  # per environment, the episode so far

    def _on_step(self) -> bool:
        infos, dones = self.locals["infos"], self.locals["dones"]
        if not self.success:
            rewards = np.asarray(self.locals["rewards"], dtype=float)
            if self._env_return is None:
                self._env_return = np.zeros(len(infos))
            for i, info in enumerate(infos):
                self._env_return[i] += float(info.get("true_reward", rewards[i]))
        for i, (info, done) in enumerate(zip(infos, dones, strict=True)):
            if done and self.success and "is_success" in info:
                self.successes.append(float(bool(info["is_success"])))
                self.n_episodes_total += 1
            elif done and not self.success:
                self.successes.append(float(self._env_return[i]))
                self._env_return[i] = 0.0
                self.n_episodes_total += 1
        if self._next is None:
            self._next = (self.num_timesteps // self.every + 1) * self.every
        if self.num_timesteps >= self._next and self.successes:
            self._write()
            self._next = (self.num_timesteps // self.every + 1) * self.every
        return True

    def continue_from(self, values: Iterable[float], n_episodes_total: int) -> None:
        """Continue a resumed run's curve from the episodes of its stopped predecessor.

        Args:
            values: the window's values of the episodes that ended by the checkpoint, oldest
                first (success as 0.0/1.0, or the environment's return without ``is_success``);
                the last ``window`` of them are kept. Empty: the window starts empty.
            n_episodes_total: the episodes that ended by the checkpoint (>= 0), counted on.
        """
        self.successes.extend(float(v) for v in values)
        self.n_episodes_total = int(n_episodes_total)

    def _on_training_end(self) -> None:
        if self.successes and (not self.curve or self.curve[-1]["step"] != self.num_timesteps):
            self._write()

    def _write(self) -> None:
        point: dict[str, Any] = {
            "step": int(self.num_timesteps),
            "value": float(np.mean(self.successes)),
            "metric": self.metric,
            "n_episodes": len(self.successes),
            "n_episodes_total": self.n_episodes_total,
        }
        if not self.success:
            point["reward"] = self.reward_label
        self.curve.append(point)
        append_jsonl(self.path, point)


class EvaluationCallback(BaseCallback):
    """Deterministic evaluation episodes on a separate environment, as the field reports them.

    The learning curve of the HER paper (Andrychowicz et al. 2017, Sec. 4), the RL Zoo and
    rliable's protocols is the success rate of *evaluation* episodes -- deterministic actions
    (SAC: the mean of the squashed Gaussian), no exploration, a separate environment -- not the
    success of the stochastic training episodes. This callback runs ``n_episodes`` such
    episodes with SB3's :func:`~stable_baselines3.common.evaluation.evaluate_policy` at the
    start of a fresh run (step 0), every ``every`` environment steps and at the end of
    training, logs ``eval/success_rate``, ``eval/mean_reward`` and ``eval/mean_ep_length``
    (the keys of SB3's ``EvalCallback``) and ``eval/reward`` (``reward_label``: which reward
    ``eval/mean_reward`` sums) and appends
    ``{"step", "value", "metric", "n_episodes", "mean_reward", "reward"}`` (``value`` = success
    rate in ``[0, 1]``, ``metric`` ``"eval/success_rate"``) to ``path``; with ``success=False`` (no ``is_success``: ``Pendulum-v1``) no
    success rate is logged, never a made-up 0, and ``value`` is ``mean_reward`` (``metric``
    ``"eval/mean_reward"``).

    The two measure different things: ``success_rate`` is the fraction of episodes whose *last*
    step is a success (Fetch's ``info["is_success"]``), ``mean_reward`` the evaluation
    environment's reward summed over each episode and averaged. With the sparse success reward
    a policy that passes through the goal and leaves it scores ``mean_reward`` 0.8 beside
    ``success_rate`` 0.0. The evaluation environment never carries the verifier, so its reward
    is the environment's (or the sparse success reward), never the shaped training reward.

    Observation normalisation: when the training environment has a ``VecNormalize``, the
    evaluation environment must have one too (``training=False``, ``norm_reward=False``);
    its running mean/std (``obs_rms``) is replaced by a copy of the training statistics
    before every evaluation, so the policy sees observations normalised exactly as in
    training and evaluation does not move the statistics. This is what SB3's
    ``EvalCallback`` does with ``sync_envs_normalization``; that function walks the two
    wrapper chains in lockstep and so requires identical chains, while the training chain
    here carries the verifier wrapper that evaluation must not have (evaluation episodes
    never call the verifier: the environment's success flag is the measure). Hence the copy
    of the ``VecNormalize`` statistics alone.

    Evaluation does not change training: it uses its own environment (its own seeds and
    resets) and deterministic actions, which draw no random numbers.

    Args:
        eval_env: the evaluation ``VecEnv`` (wrapped in ``VecMonitor`` so episode ends are
            counted as SB3 counts them; with ``VecNormalize`` outermost when training has it).
        path: JSONL file of the evaluation curve (appended to, so a resumed run continues it).
        every: environment steps between evaluations (summed over vectorised environments).
        n_episodes: evaluation episodes per evaluation (split over the ``eval_env``'s envs).
        deterministic: deterministic actions (the field's protocol; ``False`` only for study).
        reward_label: what the evaluation environment's reward is, in words (logged as
            ``eval/reward``, stored as ``reward`` in each point).
        success: the environment reports ``info["is_success"]``.

    Raises:
        ConfigError: if ``every < 1`` or ``n_episodes < 1``; at training start if exactly one of
            the training and evaluation environments has a ``VecNormalize``.
    """

    def __init__(
        self,
        eval_env: Any,
        path: str | Path,
        *,
        every: int,
        n_episodes: int = 10,
        deterministic: bool = True,
        reward_label: str = "the evaluation environment's reward",
        verbose: int = 0,
        success: bool = True,
    ) -> None:
        super().__init__(verbose)
        if every < 1 or n_episodes < 1:
            raise ConfigError(f"evaluation every/n_episodes must be >= 1, got {every}/{n_episodes}")
        self.success = success
        self.metric = "eval/success_rate" if success else "eval/mean_reward"
        self.eval_env = eval_env
        self.path = Path(path)
        self.every = every
        self.n_episodes = n_episodes
        self.deterministic = deterministic
        self.reward_label = reward_label
        self.curve: list[dict[str, float]] = []
        self.seconds = 0.0
        self._next: int | None = None

    def _on_training_start(self) -> None:
        train_norm = self.model.get_vec_normalize_env()
        if (train_norm is None) != (unwrap_vec_normalize(self.eval_env) is None):
            raise ConfigError(
                "the evaluation environment must have a VecNormalize exactly when the training "
                "environment has one (the policy reads normalised observations)"
            )
        if self.num_timesteps == 0:
            self._evaluate()
        self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        if self._next is not None and self.num_timesteps >= self._next:
            self._evaluate()
            self._next = (self.num_timesteps // self.every + 1) * self.every
        return True

    def _on_training_end(self) -> None:
        if not self.curve or self.curve[-1]["step"] != self.num_timesteps:
            self._evaluate()

    def _evaluate(self) -> None:
        import copy
        import time

        from stable_baselines3.common.evaluation import evaluate_policy

        t0 = time.perf_counter()
        train_norm = self.model.get_vec_normalize_env()
        if train_norm is not None:
            eval_norm = unwrap_vec_normalize(self.eval_env)
            eval_norm.obs_rms = copy.deepcopy(train_norm.obs_rms)
            eval_norm.training = False
            eval_norm.norm_reward = False
        successes: list[float] = []

        def on_step(locals_: dict[str, Any], _globals: dict[str, Any]) -> None:
            info = locals_["info"]
            if locals_["done"] and "episode" in info and "is_success" in info:  # a real end
                successes.append(float(bool(info["is_success"])))

        rewards, lengths = evaluate_policy(
            self.model,
            self.eval_env,
            n_eval_episodes=self.n_episodes,
            deterministic=self.deterministic,
            return_episode_rewards=True,
            callback=on_step,
        )
        self.seconds += time.perf_counter() - t0
        rate = float(np.mean(successes)) if successes else float("nan")
        point = {
            "step": int(self.num_timesteps),
            "value": rate if self.success else float(np.mean(rewards)),
            "metric": self.metric,
            "n_episodes": len(rewards),
            "mean_reward": float(np.mean(rewards)),
            "reward": self.reward_label,
        }
        self.curve.append(point)
        append_jsonl(self.path, point)
        if self.success:
            self.logger.record("eval/success_rate", point["value"])
        self.logger.record("eval/mean_reward", point["mean_reward"])
        self.logger.record("eval/reward", self.reward_label, exclude="tensorboard")
        self.logger.record("eval/mean_ep_length", float(np.mean(lengths)))
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)


class WandbOutputFormat(KVWriter):
    """SB3 logger output that sends numeric values to ``wandb.log`` at SB3's step.

    Use with ``stable_baselines3.common.logger.Logger(folder, [..., WandbOutputFormat(run)])``.

    Args:
        run: an initialised ``wandb`` run (``wandb.init(...)``; offline mode works).
        service: a :class:`densereward.wandb_config.WandbService` watching the run's W&B
            service: once it has ended, the values are no longer sent (one warning says so)
            and the other outputs go on; ``None``: a ``ConnectionError`` of ``run.log``
            propagates.
    """

    def __init__(self, run: Any, service: WandbService | None = None) -> None:
        self.run = run
        self.service = service

    def write(
        self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0
    ) -> None:
        data = {
            k: float(v)
            for k, v in key_values.items()
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        }
        if data and self.service is not None:
            self.service.call(int(step), self.run.log, data, step=int(step))
        elif data:
            self.run.log(data, step=int(step))

    def close(self) -> None:
        """Nothing to close; the trainer finishes the run."""
