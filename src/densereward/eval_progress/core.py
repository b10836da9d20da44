"""Roll out scripted Fetch episodes, read progress along them, and score the reads.

The robot counterpart of ``eval-verifier``: can this verifier (model, prompt, read mode, state
text) read task progress? Episodes of scripted policies (:mod:`.policies`: ``success``,
``short``, ``wrong``, ``random``) start from the same ``seed + i`` initial states, so that the
successful and failed episodes pose the same problems. Every ``stride``-th state (and the last)
is read with one of :data:`READ_MODES`:

* ``pointwise``: the verifier's progress prompt on the state text
  (:meth:`densereward.Verifier.progress_batch`): the expected score in ``[0, 1]``. Text form
  ``state`` (``describer.describe_state``, what SAC's shaping reads) or ``trajectory``
  (``describer.describe``, with the distance at the start and recent distances).
* ``pairwise``: the state against the episode's start state, in both orders, on the criterion
  "closer to completing the task" (:meth:`~densereward.Verifier.compare_batch`); progress is the
  mean Bradley-Terry preference ``p(s_t > s_0)`` over the two orders (0.5 = no change).
* ``complete``: the probability the verifier puts on "the task is complete" (the form of
  TOPReward, arXiv 2602.19313, which reads P("True") of a completion question): the progress
  prompt read at granularity 2 on :data:`COMPLETE_CRITERION`, so the expected score is
  ``P(complete)``.

Metrics (:func:`progress_metrics`):

* **VOC** per successful episode: Spearman of progress against time (GVL, Ma et al. 2024,
  :func:`densereward.metrics.progress.value_order_correlation`), and its mean;
* **final-progress AUROC**: the last read of each episode, successful (``is_success`` at the
  end) vs failed episodes (Mann-Whitney; ``sklearn.metrics.roc_auc_score``);
* **closeness correlation**: Spearman of progress against true closeness over every read
  (reach: minus the gripper-target distance; push: minus the gripper-block plus block-target
  distance, the path still to travel), which tells a read that follows the geometry from one
  that follows the clock;
* reads per second.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = [
    "READ_MODES",
    "TEXT_FORMS",
    "COMPLETE_CRITERION",
    "PAIR_CRITERION",
    "EvalProgressConfig",
    "Episode",
    "rollout",
    "rollouts",
    "read_progress",
    "read_reward_model",
    "progress_metrics",
]

READ_MODES = ("pointwise", "pairwise", "complete")
TEXT_FORMS = ("state", "trajectory")
PAIR_CRITERION = (
    "Which state is closer to completing the task? Judge only how far the task has progressed."
)
"""The criterion of the ``pairwise`` read (the state that is further along wins)."""
COMPLETE_CRITERION = "The task is complete: the success condition holds in this state."
"""The criterion of the ``complete`` read (read at granularity 2: the score is P(complete))."""


@dataclass(frozen=True)
class EvalProgressConfig:
    """What ``densereward eval-progress`` rolls out and reads (YAML top level; ``verifier:`` apart).

    Attributes:
        env_id: ``FetchReach-v4`` or ``FetchPush-v4`` (any ``FetchReach*`` / ``FetchPush*`` id).
        policies: scripted policy kinds to roll out (:data:`.policies.POLICY_KINDS`).
        episodes: episodes per policy kind, ``>= 1``; episode ``i`` starts from ``seed + i``.
        seed: the first environment seed.
        max_steps: steps per episode (Fetch's own limit is 50).
        stride: read every ``stride``-th state (``t = 0, stride, ...``) and the last one.
        read_mode: one of :data:`READ_MODES`.
        form: the state text, one of :data:`TEXT_FORMS`.
        stop_fraction: where the ``short`` policy stops, a share of the way in ``(0, 1)``.
    """

    env_id: str = "FetchReach-v4"
    policies: tuple[str, ...] = ("success", "short", "wrong", "random")
    episodes: int = 6
    seed: int = 0
    max_steps: int = 50
    stride: int = 5
    read_mode: str = "pointwise"
    form: str = "state"
    stop_fraction: float = 0.5

    def __post_init__(self) -> None:
        from .policies import POLICY_KINDS

        object.__setattr__(self, "policies", tuple(self.policies))
        bad = [p for p in self.policies if p not in POLICY_KINDS]
        if bad or not self.policies:
            raise ConfigError(f"policies {list(self.policies)}: use some of {list(POLICY_KINDS)}")
        if self.episodes < 1 or self.max_steps < 1 or self.stride < 1:
            raise ConfigError("episodes, max_steps and stride must be >= 1")
        if self.read_mode not in READ_MODES:
            raise ConfigError(f"read_mode {self.read_mode!r}; use one of {READ_MODES}")
        if self.form not in TEXT_FORMS:
            raise ConfigError(f"form {self.form!r}; use one of {TEXT_FORMS}")
        if not 0.0 < self.stop_fraction < 1.0:
            raise ConfigError(f"stop_fraction must be in (0, 1), got {self.stop_fraction}")
        name = self.env_id.split("/")[-1].lower()
        if not name.startswith(("fetchreach", "fetchpush")):
            raise ConfigError(
                f"env_id {self.env_id!r}: eval-progress has scripted policies for FetchReach-* "
                "and FetchPush-* only"
            )


@dataclass
class Episode:
    """One rolled-out episode: observations ``s_0..s_T``, actions, and the final success."""

    index: int
    policy: str
    seed: int
    observations: list[Any]
    actions: list[np.ndarray]
    success: bool
    reads: list[int] = field(default_factory=list)
    """The steps ``t`` that are read."""


def rollout(env: Any, env_id: str, policy: str, seed: int, cfg: EvalProgressConfig) -> Episode:
    """One episode of a scripted ``policy`` from ``env.reset(seed=seed)``."""
    from .policies import make_policy

    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    act = make_policy(
        env_id,
        policy,
        obs,
        action_space=env.action_space,
        stop_fraction=cfg.stop_fraction,
        seed=seed,
    )
    observations, actions, info = [obs], [], {}
    for _ in range(cfg.max_steps):
        a = act(obs)
        obs, _, terminated, truncated, info = env.step(a)
        observations.append(obs)
        actions.append(a)
        if terminated:
            break
    steps = list(range(0, len(observations), cfg.stride))
    if steps[-1] != len(observations) - 1:
        steps.append(len(observations) - 1)
    return Episode(0, policy, seed, observations, actions, bool(info.get("is_success", 0)), steps)


def rollouts(cfg: EvalProgressConfig) -> list[Episode]:
    """Every policy's ``cfg.episodes`` episodes (policy-major), numbered ``0..``."""
    from ..envs import make_env

    env = make_env(cfg.env_id, reward="env", monitor=False)
    try:
        out = []
        for policy in cfg.policies:
            for i in range(cfg.episodes):
                ep = rollout(env, cfg.env_id, policy, cfg.seed + i, cfg)
                ep.index = len(out)
                out.append(ep)
        return out
    finally:
        env.close()


def distances(env_id: str, obs: dict[str, Any]) -> dict[str, float]:
    """The describer's distances of a state, in cm: reach ``gripper_target_cm``; push
    ``block_target_cm`` and ``gripper_block_cm``; and ``closeness`` (minus the path left, cm)."""
    grip = np.asarray(obs["observation"][:3], dtype=np.float64)
    goal = np.asarray(obs["desired_goal"], dtype=np.float64)
    if env_id.split("/")[-1].lower().startswith("fetchreach"):
        d = 100 * float(np.linalg.norm(grip - goal))
        return {"gripper_target_cm": round(d, 2), "closeness": -round(d, 2)}
    block = np.asarray(obs["observation"][3:6], dtype=np.float64)
    bt = 100 * float(np.linalg.norm(block - goal))
    gb = 100 * float(np.linalg.norm(grip - block))
    return {
        "block_target_cm": round(bt, 2),
        "gripper_block_cm": round(gb, 2),
        "closeness": -round(bt + gb, 2),
    }


def _texts(describer: Any, ep: Episode, form: str) -> list[str]:
    if form == "state":
        return [describer.describe_state(ep.observations[t]) for t in ep.reads]
    return [describer.describe(ep.observations[: t + 1], ep.actions[:t]) for t in ep.reads]


def read_progress(
    verifier: Any, episodes: Sequence[Episode], cfg: EvalProgressConfig
) -> tuple[list[dict[str, Any]], float]:
    """Read progress at every read step of every episode.

    Args:
        verifier: a :class:`densereward.Verifier` (for ``complete``: one at granularity 2).
        episodes: from :func:`rollouts`.
        cfg: the read mode and text form.

    Returns:
        ``(rows, seconds)``: one row per read (``episode``, ``policy``, ``seed``, ``t``,
        ``progress`` in ``[0, 1]`` or ``None`` with ``reason``, ``success``, the distances of
        :func:`distances`), and the wall time of the reads.
    """
    from ..envs import default_describer

    describer = default_describer(cfg.env_id)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for ep in episodes:
        task = describer.task(ep.observations[0])
        texts = _texts(describer, ep, cfg.form)
        n = len(texts)
        if cfg.read_mode == "pairwise":
            start = texts[0]  # reads start at t = 0: the start state's text in either form
            fwd = verifier.compare_batch(
                problems=[task] * n, a=texts, b=[start] * n, criteria=[PAIR_CRITERION]
            )
            back = verifier.compare_batch(
                problems=[task] * n, a=[start] * n, b=texts, criteria=[PAIR_CRITERION]
            )
            values, reasons = [], []
            for f, b in zip(fwd, back, strict=True):
                if f.preference is None or b.preference is None:
                    values.append(None)
                    r = f.result_a or f.result_b or b.result_a or b.result_b
                    reasons.append(getattr(r, "reason", None) or "pairwise read abstained")
                else:
                    values.append(0.5 * (f.preference + 1.0 - b.preference))
                    reasons.append(None)
        else:
            criteria = [COMPLETE_CRITERION] if cfg.read_mode == "complete" else None
            res = verifier.progress_batch(tasks=[task] * n, trajectories=texts, criteria=criteria)
            values = [r.value for r in res]
            reasons = [None if r.value is not None else (r.reason or "abstained") for r in res]
        for t, text, value, reason in zip(ep.reads, texts, values, reasons, strict=True):
            row = {
                "episode": ep.index,
                "policy": ep.policy,
                "seed": ep.seed,
                "t": t,
                "progress": None if value is None else round(float(value), 6),
                "success": ep.success,
                **distances(cfg.env_id, ep.observations[t]),
                "text": text,
            }
            if reason is not None:
                row["reason"] = reason
            rows.append(row)
    return rows, time.perf_counter() - t0


def read_reward_model(
    model: Any, episodes: Sequence[Episode], cfg: EvalProgressConfig
) -> tuple[list[dict[str, Any]], float]:
    """Progress from a distilled reward model (:class:`densereward.reward_model.RewardModel`):
    its potential ``Phi(s)`` in ``[0, 1]`` at every read step, one batched call per episode.

    Returns:
        ``(rows, seconds)`` as :func:`read_progress`; ``text`` is the state text the verifier
        would have read (the model reads the raw observation).
    """
    from ..envs import default_describer

    describer = default_describer(cfg.env_id)
    rows: list[dict[str, Any]] = []
    seconds = 0.0
    for ep in episodes:
        obs = [ep.observations[t] for t in ep.reads]
        batch = (
            {k: np.stack([o[k] for o in obs]) for k in obs[0]}
            if isinstance(obs[0], dict)
            else np.stack(obs)
        )
        t0 = time.perf_counter()
        values = model.potential(batch)
        seconds += time.perf_counter() - t0
        for t, o, value in zip(ep.reads, obs, values.tolist(), strict=True):
            rows.append(
                {
                    "episode": ep.index,
                    "policy": ep.policy,
                    "seed": ep.seed,
                    "t": t,
                    "progress": round(float(value), 6),
                    "success": ep.success,
                    **distances(cfg.env_id, o),
                    "text": describer.describe_state(o),
                }
            )
    return rows, seconds


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    rho = float(spearmanr(x, y).statistic)
    return rho if math.isfinite(rho) else None


def progress_metrics(
    rows: Sequence[dict[str, Any]], seconds: float | None = None
) -> dict[str, Any]:
    """VOC on successful episodes, final-progress AUROC and closeness correlation of the reads.

    Args:
        rows: the rows of :func:`read_progress` (or of a ``scores.jsonl``).
        seconds: the wall time of the reads (for ``reads_per_second``), or ``None``.

    Returns:
        ``voc_per_episode`` (episode -> VOC or ``None``), ``voc_mean`` (over defined VOCs of
        successful episodes; ``None`` if none), ``n_voc_undefined``, ``final_auroc`` (``None``
        with one class only), ``closeness_spearman``, ``mean_final_progress`` per policy, counts
        of reads and abstentions, ``progress_range`` (``[min, max]`` of the reads; ``None``
        when every read abstained), ``reads_per_second``.
    """
    from sklearn.metrics import roc_auc_score

    from ..metrics.progress import value_order_correlation

    by_ep: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_ep.setdefault(int(r["episode"]), []).append(r)
    voc: dict[int, float | None] = {}
    finals, labels, per_policy = [], [], {}
    for e, rs in sorted(by_ep.items()):
        rs = sorted(rs, key=lambda r: r["t"])
        if rs[0]["success"]:
            voc[e] = value_order_correlation(
                [r["progress"] for r in rs], steps=[r["t"] for r in rs]
            )
        last = rs[-1]["progress"]
        per_policy.setdefault(rs[0]["policy"], []).append(last)
        if last is not None:
            finals.append(float(last))
            labels.append(int(bool(rs[0]["success"])))
    defined = [v for v in voc.values() if v is not None]
    scored = [r for r in rows if r["progress"] is not None]
    auroc = roc_auc_score(labels, finals) if len(set(labels)) == 2 else None
    n_reads = len(rows)
    return {
        "n_episodes": len(by_ep),
        "n_successful": sum(1 for rs in by_ep.values() if rs[0]["success"]),
        "n_reads": n_reads,
        "n_abstained": n_reads - len(scored),
        "voc_per_episode": {str(k): v for k, v in voc.items()},
        "voc_mean": float(np.mean(defined)) if defined else None,
        "n_voc_undefined": len(voc) - len(defined),
        "final_auroc": None if auroc is None else float(auroc),
        "closeness_spearman": _spearman(
            [r["closeness"] for r in scored], [float(r["progress"]) for r in scored]
        ),
        "mean_final_progress": {
            p: (
                float(np.mean([v for v in vs if v is not None]))
                if any(v is not None for v in vs)
                else None
            )
            for p, vs in per_policy.items()
        },
        "progress_range": (
            [min(float(r["progress"]) for r in scored), max(float(r["progress"]) for r in scored)]
            if scored
            else None
        ),
        "reads_per_second": (n_reads / seconds) if seconds else None,
    }
