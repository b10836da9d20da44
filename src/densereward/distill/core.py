"""Pairwise verifier labels on robot states, distilled into a reward model.

:func:`collect_states` rolls out scripted and random episodes (:mod:`densereward.eval_progress`
policies, plus ``noisy``: the successful script under action noise, the stand-in for an early
policy) and keeps every ``state_stride``-th state with its text. :func:`select_pairs` draws a
bounded number of distinct *text* pairs (a share within one episode, the rest across
episodes): the verifier sees the text only, so one read labels every pair of states that
share those two texts. :func:`label_pairs` reads each text pair in both orders on
:data:`~densereward.eval_progress.core.PAIR_CRITERION` and appends the rows to
``labels.jsonl`` as it goes (a rerun skips the rows already there). :func:`training_pairs`
expands each labelled text pair into up to ``expand`` state pairs, and
:func:`densereward.reward_model.fit_reward_model` fits the Bradley-Terry ensemble.

The label of a text pair ``(a, b)`` is ``p = (p_ab + 1 - p_ba) / 2``, the Bradley-Terry
preference of ``a`` averaged over both presentation orders; the position bias is
``mean((p_ab + p_ba) / 2) - 0.5`` (positive: the first shown is preferred).

``labels: pointwise`` spends the read budget differently: :func:`read_texts` reads ``texts``
distinct state texts once each with the progress prompt (the read ``eval-progress`` calls
``pointwise``), and :func:`pointwise_pairs` turns two reads into the preference
``p = sigmoid((v_a - v_b) / tau)``: ``n`` reads label ``n (n - 1) / 2`` pairs, where the
pairwise route labels ``n / 2``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from ..eval_progress.core import PAIR_CRITERION, EvalProgressConfig, distances, rollouts
from ..reward_model import obs_vector

__all__ = [
    "DistillConfig",
    "States",
    "collect_states",
    "select_pairs",
    "label_pairs",
    "label_summary",
    "training_pairs",
    "select_texts",
    "read_texts",
    "pointwise_pairs",
    "LABEL_KINDS",
    "LABELS_FILE",
    "READS_FILE",
    "read_labels",
    "closeness_by_text",
]

LABELS_FILE = "labels.jsonl"
READS_FILE = "reads.jsonl"
LABEL_KINDS = ("pairwise", "pointwise")


@dataclass(frozen=True)
class DistillConfig:
    """What ``densereward distill`` collects, asks and fits (YAML top level; ``verifier:`` and
    ``fit:`` apart).

    Attributes:
        env_id: ``FetchReach-*`` or ``FetchPush-*`` (the scripted policies' environments).
        policies: policy kinds rolled out (``success``, ``short``, ``wrong``, ``random``,
            ``noisy``).
        episodes: episodes per policy; episode ``i`` starts from ``seed + i``.
        seed: the first environment seed (keep the evaluation's seeds apart).
        max_steps: steps per episode.
        state_stride: keep every ``state_stride``-th state of an episode (and its last).
        labels: ``pairwise`` (the verifier compares two state texts, both orders) or
            ``pointwise`` (it reads each text's progress once; pairs are derived).
        pairs: ``pairwise``: text pairs the verifier labels, each read twice (both orders): the
            read budget is ``2 * pairs``. ``pointwise``: state pairs derived for the fit.
        texts: ``pointwise``: distinct state texts read (the read budget).
        tau: ``pointwise``: temperature of the derived preference ``sigmoid((v_a - v_b) / tau)``.
        within_episode: share of the pairs drawn from two states of one episode.
        expand: state pairs per labelled text pair in the fit, at most.
        batch_size: text pairs per verifier call (per order).
    """

    env_id: str = "FetchPush-v4"
    policies: tuple[str, ...] = ("success", "short", "wrong", "random", "noisy")
    episodes: int = 8
    seed: int = 1000
    max_steps: int = 50
    state_stride: int = 2
    labels: str = "pairwise"
    pairs: int = 200
    texts: int = 200
    tau: float = 0.1
    within_episode: float = 0.5
    expand: int = 16
    batch_size: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "policies", tuple(self.policies))
        EvalProgressConfig(env_id=self.env_id, policies=self.policies)  # the same checks
        if min(self.episodes, self.max_steps, self.state_stride, self.pairs) < 1:
            raise ConfigError("episodes, max_steps, state_stride and pairs must be >= 1")
        if self.labels not in LABEL_KINDS:
            raise ConfigError(f"labels {self.labels!r}; use one of {LABEL_KINDS}")
        if self.texts < 2 or not self.tau > 0:
            raise ConfigError("texts must be >= 2 and tau > 0")
        if self.expand < 1 or self.batch_size < 1:
            raise ConfigError("expand and batch_size must be >= 1")
        if not 0.0 <= self.within_episode <= 1.0:
            raise ConfigError(f"within_episode must be in [0, 1], got {self.within_episode}")


@dataclass
class States:
    """The collected states: ``x`` ``(N, D)`` observation vectors and, per state, its text,
    episode, step, policy, the episode's success and the true closeness (cm, minus the path
    left; :func:`densereward.eval_progress.core.distances`)."""

    x: np.ndarray
    keys: list[str] | None
    texts: list[str]
    episode: np.ndarray
    t: np.ndarray
    policy: list[str]
    success: np.ndarray
    closeness: np.ndarray
    task: str


def collect_states(cfg: DistillConfig) -> States:
    """Roll out ``cfg.episodes`` episodes of each policy and keep every ``state_stride``-th state.

    Raises:
        ConfigError: from the environment or the policies.
    """
    from ..envs import default_describer

    ecfg = EvalProgressConfig(
        env_id=cfg.env_id,
        policies=cfg.policies,
        episodes=cfg.episodes,
        seed=cfg.seed,
        max_steps=cfg.max_steps,
        stride=cfg.state_stride,
    )
    describer = default_describer(cfg.env_id)
    obs_rows, texts, episode, steps, policy, success, close = [], [], [], [], [], [], []
    episodes = rollouts(ecfg)  # policy-major, numbered 0..; reads every state_stride-th state
    for ep in episodes:
        for t in ep.reads:
            obs = ep.observations[t]
            obs_rows.append(obs)
            texts.append(describer.describe_state(obs))
            episode.append(ep.index)
            steps.append(t)
            policy.append(ep.policy)
            success.append(ep.success)
            close.append(distances(cfg.env_id, obs)["closeness"])
    task = describer.task(episodes[0].observations[0])
    keys = sorted(obs_rows[0]) if isinstance(obs_rows[0], dict) else None
    x = np.stack([obs_vector(o, keys) for o in obs_rows])
    return States(
        x,
        keys,
        texts,
        np.asarray(episode),
        np.asarray(steps),
        policy,
        np.asarray(success),
        np.asarray(close, dtype=np.float64),
        task,
    )


def select_pairs(states: States, n: int, within_episode: float, seed: int) -> list[tuple[str, str]]:
    """``n`` distinct unordered text pairs (as ordered ``(a, b)``, ``a`` the later state of an
    episode pair, else random), a share ``within_episode`` from one episode.

    Returns fewer than ``n`` when the states have fewer distinct text pairs.
    """
    rng = np.random.default_rng(seed)
    by_ep: dict[int, list[int]] = {}
    for i, e in enumerate(states.episode.tolist()):
        by_ep.setdefault(e, []).append(i)
    episodes = [e for e, idx in by_ep.items() if len({states.texts[i] for i in idx}) > 1]
    seen: set[frozenset[str]] = set()
    out: list[tuple[str, str]] = []
    n_within = int(round(n * within_episode))
    for attempt in range(50 * n):
        within = len(out) < n_within and episodes
        if within:
            idx = by_ep[episodes[rng.integers(len(episodes))]]
            i, j = sorted(rng.choice(idx, size=2, replace=False).tolist())
            i, j = j, i  # a = the later state
        else:
            i, j = rng.choice(len(states.texts), size=2, replace=False).tolist()
        a, b = states.texts[i], states.texts[j]
        key = frozenset((a, b))
        if a == b or key in seen:
            if within and attempt > 20 * n:  # few distinct pairs within episodes: go across
                n_within = len(out)
            continue
        seen.add(key)
        out.append((a, b))
        if len(out) == n:
            break
    return out


def read_labels(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for k, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise DataError(f"{path}:{k}: not JSON; delete the file to relabel") from None
    return rows


def label_pairs(
    verifier: Any,
    task: str,
    pairs: Sequence[tuple[str, str]],
    path: str | Path,
    *,
    batch_size: int = 8,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Read every text pair in both orders and append one row per pair to ``path``.

    Rows already in ``path`` (same ``a`` and ``b``) are kept and not read again, so an
    interrupted run resumes. A row: ``a``, ``b``, ``p_ab`` (P(a preferred) with ``a`` shown
    first), ``p_ba`` (P(b preferred) with ``b`` shown first), ``p`` (the order-averaged
    preference of ``a``, ``None`` when either read abstained, with ``reason``), ``seconds``.

    Args:
        verifier: a :class:`densereward.Verifier`.
        task: the task text.
        pairs: from :func:`select_pairs`.
        path: the ``labels.jsonl`` to extend.
        batch_size: pairs per :meth:`~densereward.Verifier.compare_batch` call.
        progress: ``callable(done, total)`` after each batch, or ``None``.

    Returns:
        The rows of ``pairs``, in order.
    """
    path = Path(path)
    done = {(r["a"], r["b"]): r for r in read_labels(path)}
    todo = [pr for pr in pairs if pr not in done]
    with path.open("a") as fh:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            a = [x for x, _ in chunk]
            b = [y for _, y in chunk]
            t0 = time.perf_counter()
            fwd = verifier.compare_batch(
                problems=[task] * len(chunk), a=a, b=b, criteria=[PAIR_CRITERION]
            )
            back = verifier.compare_batch(
                problems=[task] * len(chunk), a=b, b=a, criteria=[PAIR_CRITERION]
            )
            sec = (time.perf_counter() - t0) / len(chunk)
            for (x, y), f, g in zip(chunk, fwd, back, strict=True):
                row: dict[str, Any] = {
                    "a": x,
                    "b": y,
                    "p_ab": f.preference,
                    "p_ba": g.preference,
                    "seconds": round(sec, 3),
                }
                if f.preference is None or g.preference is None:
                    r = f.result_a or f.result_b or g.result_a or g.result_b
                    row["p"] = None
                    row["reason"] = getattr(r, "reason", None) or "pairwise read abstained"
                else:
                    row["p"] = round(0.5 * (f.preference + 1.0 - g.preference), 6)
                done[(x, y)] = row
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            if progress is not None:
                progress(len(pairs) - len(todo) + start + len(chunk), len(pairs))
    return [done[pr] for pr in pairs]


def closeness_by_text(states: States) -> dict[str, float]:
    """Each distinct state text's mean true closeness over the states it describes (cm)."""
    close: dict[str, list[float]] = {}
    for text, c in zip(states.texts, states.closeness.tolist(), strict=True):
        close.setdefault(text, []).append(c)
    return {text: float(np.mean(v)) for text, v in close.items()}


def label_summary(rows: Sequence[dict[str, Any]], states: States) -> dict[str, Any]:
    """Counts, position bias, and how often a clear label (``|p - 0.5| >= 0.1``) orders the
    pair as the true closeness does (the text's mean closeness over the states it describes).
    """
    close = closeness_by_text(states)
    read = [r for r in rows if r.get("p") is not None]
    bias = [0.5 * (r["p_ab"] + r["p_ba"]) - 0.5 for r in read if r.get("p_ab") is not None]
    clear = [r for r in read if abs(r["p"] - 0.5) >= 0.1]
    agree = [
        (r["p"] > 0.5) == (close[r["a"]] > close[r["b"]])
        for r in clear
        if r["a"] in close and r["b"] in close and close[r["a"]] != close[r["b"]]
    ]
    return {
        "n_pairs": len(rows),
        "n_reads": 2 * len(rows),  # pairwise; the pointwise summary gives its own count
        "n_abstained": len(rows) - len(read),
        "position_bias": float(np.mean(bias)) if bias else None,
        "n_clear": len(clear),
        "clear_agree_with_closeness": float(np.mean(agree)) if agree else None,
        "mean_abs_margin": float(np.mean([abs(r["p"] - 0.5) for r in read])) if read else None,
        "seconds_per_pair": float(np.mean([r["seconds"] for r in rows])) if rows else None,
    }


def training_pairs(
    rows: Sequence[dict[str, Any]], states: States, expand: int, seed: int
) -> tuple[list[tuple[int, int, float]], list[int]]:
    """State pairs ``(i, j, p)`` from the labelled text pairs, up to ``expand`` per label, and
    the label each comes from (the fit's held-out groups)."""
    rng = np.random.default_rng(seed)
    by_text: dict[str, list[int]] = {}
    for i, text in enumerate(states.texts):
        by_text.setdefault(text, []).append(i)
    pairs, groups = [], []
    for g, r in enumerate(rows):
        if r.get("p") is None or r["a"] not in by_text or r["b"] not in by_text:
            continue
        ia, ib = by_text[r["a"]], by_text[r["b"]]
        combos = [(i, j) for i in ia for j in ib]
        take = rng.permutation(len(combos))[:expand]
        for k in take.tolist():
            pairs.append((combos[k][0], combos[k][1], float(r["p"])))
            groups.append(g)
    return pairs, groups


def select_texts(states: States, n: int, seed: int) -> list[str]:
    """``n`` distinct state texts, drawn uniformly over the distinct texts (all when fewer)."""
    distinct = sorted(set(states.texts))
    rng = np.random.default_rng(seed)
    take = rng.permutation(len(distinct))[:n]
    return [distinct[k] for k in sorted(take.tolist())]


def read_texts(
    verifier: Any,
    task: str,
    texts: Sequence[str],
    path: str | Path,
    *,
    batch_size: int = 8,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Read each text's progress once (:meth:`~densereward.Verifier.progress_batch`) and append
    one row per text to ``path`` (``text``, ``progress`` in ``[0, 1]`` or ``None`` with
    ``reason``, ``seconds``); rows already there are kept, so a rerun resumes.

    Returns:
        The rows of ``texts``, in order.
    """
    path = Path(path)
    done = {r["text"]: r for r in read_labels(path)}
    todo = [t for t in texts if t not in done]
    with path.open("a") as fh:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            t0 = time.perf_counter()
            res = verifier.progress_batch(tasks=[task] * len(chunk), trajectories=chunk)
            sec = (time.perf_counter() - t0) / len(chunk)
            for text, r in zip(chunk, res, strict=True):
                row: dict[str, Any] = {"text": text, "progress": r.value, "seconds": round(sec, 3)}
                if r.value is None:
                    row["reason"] = r.reason or "abstained"
                done[text] = row
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            if progress is not None:
                progress(len(texts) - len(todo) + start + len(chunk), len(texts))
    return [done[t] for t in texts]


def pointwise_pairs(
    reads: Sequence[dict[str, Any]], states: States, n: int, tau: float, seed: int
) -> tuple[list[tuple[int, int, float]], list[int], list[dict[str, Any]]]:
    """``n`` state pairs with derived preferences ``sigmoid((v_a - v_b) / tau)``.

    Both states of a pair have a read text, and the texts differ. Returns the state pairs
    ``(i, j, p)``, their groups (one per text pair, the fit's held-out unit) and the text-pair
    rows (``a``, ``b``, ``p``) that :func:`label_summary` takes.
    """
    value = {r["text"]: r["progress"] for r in reads if r.get("progress") is not None}
    idx = [i for i, t in enumerate(states.texts) if t in value]
    rng = np.random.default_rng(seed)
    pairs: list[tuple[int, int, float]] = []
    groups: list[int] = []
    group_of: dict[tuple[str, str], int] = {}
    rows: list[dict[str, Any]] = []
    if len({states.texts[i] for i in idx}) < 2:
        return pairs, groups, rows
    for _ in range(20 * n):
        i, j = (idx[k] for k in rng.choice(len(idx), size=2, replace=False))
        a, b = states.texts[i], states.texts[j]
        if a == b:
            continue
        p = float(1.0 / (1.0 + np.exp(-(value[a] - value[b]) / tau)))
        key = (a, b)
        if key not in group_of:
            group_of[key] = len(group_of)
            rows.append({"a": a, "b": b, "p": p, "p_ab": None, "p_ba": None, "seconds": 0.0})
        pairs.append((i, j, p))
        groups.append(group_of[key])
        if len(pairs) == n:
            break
    return pairs, groups, rows
