"""Reward-quality metrics of one GRPO batch (pure functions; the tracker that logs them is
:class:`~densereward.rewards.tracking.RewardQualityTracker`).

Threshold-free keys come first: ``auroc``, ``score_gap`` (mean score of correct minus incorrect
completions), ``pairwise_accuracy`` (within a GRPO group, the fraction of (correct, incorrect)
pairs the verifier orders correctly: the signal a group-relative reward uses). The rates
``tpr``, ``tnr``, ``balanced_accuracy``, ``precision`` and ``verifier_gain`` (precision - pass
rate, Lu et al. 2025 eq. 1) are taken at the accept threshold in force (``threshold``: fixed,
read from an eval-verifier ``metrics.json``, or ``auto``; see the tracker). Every
classification rate comes from :mod:`densereward.metrics`.

``pass_rate`` is the *pooled* pass rate: the fraction of completions that Math-Verify finds
correct (the policy's accuracy, generator capability), every completion counting once. It is
not the mean over problems of per-problem pass rates
(:func:`densereward.metrics.mean_problem_pass_rate`, eval-verifier's
``mean_problem_pass_rate``).

Other keys: ``tie_rate`` (within-group completion pairs whose dense scores tie, whatever their
labels; undefined in a batch the verifier read none of), ``mean_mass``, ``n_abstained``, ``frac_zero_spread_sparse``,
``frac_zero_spread_dense``, ``tpr/level_<k>`` and ``tnr/level_<k>`` (MATH level k = 1..5),
``n``, ``n_valid``, ``n_read``, ``n_unread``, ``frac_no_answer_sparse`` and ``frac_unclosed_thinking_sparse`` (the share
of this batch's completions in which the sparse check, Math-Verify's answer extraction, finds no
final answer / unclosed thinking; :func:`format_metrics`). The tracker logs them under
``verifier/`` and the labelled ones also over a rolling window (``verifier/window/<key>`` for
every key of :data:`WINDOW_KEYS`). The labelled metrics rest on the verifier's reads only
(``n_read``); ``n_unread`` counts the batch's completions it scored without a read (no final
answer under the ``answer_match`` prompt, an empty response), whose running sum is the verifier
engine's ``verifier/total/n_unread_no_answer`` (0 under any other prompt, however many
completions lack an answer).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from ._common import check_lengths

__all__ = [
    "labelled_metrics",
    "reward_quality_metrics",
    "format_metrics",
    "undefined_reasons",
    "WINDOW_KEYS",
    "BATCH_ONLY_KEYS",
    "MIN_PER_CLASS",
    "LENGTH_SETTING",
]

MIN_PER_CLASS = 5
"""The fewest read completions of a class a GRPO verifier-quality rate is reported from (as SAC's
``MIN_EPISODES``): below it the rate is ``NaN`` (``null`` in ``reward_quality.jsonl``, not logged)
and :func:`undefined_reasons` says "fewer than 5 correct read completions in the window (k)".
TPR needs ``MIN_PER_CLASS`` correct read completions, TNR as many incorrect ones, and the metrics
that compare the classes (AUROC, pairwise accuracy, score gap, balanced accuracy) both;
precision and the verifier gain rest on the accepted read completions (score >= the threshold)
and need ``MIN_PER_CLASS`` of those ("fewer than 5 accepted read completions in the window (1)").
The counts are logged beside (``n_read_correct``, ``n_read_incorrect``, ``n_accepted``, and
``window/n_read_correct``, ``window/n_read_incorrect``, ``window/n_accepted``)."""

LENGTH_SETTING = (
    "the completion length limit (training.max_completion_length in a densereward config, "
    "GRPOConfig(max_completion_length=...) in your own script)"
)
"""The completion-length setting the format warning names by default (:func:`format_metrics`)."""

WINDOW_KEYS = (
    "auroc",
    "pairwise_accuracy",
    "score_gap",
    "tpr",
    "tnr",
    "balanced_accuracy",
    "precision",
    "verifier_gain",
    "read_pass_rate",
)
"""Metrics also computed over the tracker's rolling window (``verifier/window/<key>``). The
window holds the verifier's *read* completions only: ``window/read_pass_rate`` is the share of
them that is correct (records before this name called it ``window/pass_rate``), unlike
``verifier/pass_rate``, the batch's share over every completion, read or not. The window's counts
are ``verifier/window/n_read``, ``window/n_read_correct``, ``window/n_read_incorrect`` and
``window/n_accepted`` (the read completions scored >= the threshold in force)."""

_NAN = float("nan")

_RATES = ("tpr", "tnr", "precision", "balanced_accuracy", "verifier_gain")
_NEED_CORRECT = {"tpr"}
_NEED_INCORRECT = {"tnr"}
_NEED_BOTH = {"auroc", "pairwise_accuracy", "score_gap", "balanced_accuracy"}
_NEED_ACCEPTED = {"precision", "verifier_gain"}


def _few(n: Any, minimum: int) -> bool:
    """A known class count that is positive but below ``minimum``."""
    return n is not None and 0 < n < minimum


BATCH_ONLY_KEYS = ("pass_rate", "tie_rate", "mean_mass")
"""Per-batch metrics with no window counterpart that can be undefined (``NaN``):
:func:`undefined_reasons` explains them beside the labelled ones. ``tie_rate`` and
``mean_mass`` rest on the verifier's reads: a batch it read none of has neither."""


def undefined_reasons(
    metrics: dict[str, Any], prefix: str = "verifier/", *, batch: bool = False
) -> dict[str, str]:
    """Why each undefined (``NaN`` / ``None``) quality metric of one record is undefined.

    Explains the rolling-window metrics (``window/<key>``) when the record has them, else the
    batch's labelled ones, and always the per-batch :data:`BATCH_ONLY_KEYS`; with ``batch``
    also the batch's labelled metrics beside the window's (the tracker's once-per-run notice:
    every metric that is not logged is named). Keys are returned without ``prefix``. The
    record's ``min_per_class`` (default :data:`MIN_PER_CLASS`) is the class count below which
    a metric was left undefined.

    >>> undefined_reasons({"verifier/tpr": float("nan"), "verifier/tnr": 1.0, "verifier/n_valid": 4.0})
    {'tpr': 'no correct completion (Math-Verify) in the batch'}
    >>> undefined_reasons({"verifier/tnr": None, "verifier/n": 4.0, "verifier/n_read": 0.0,
    ...                    "verifier/n_unread": 4.0})["tnr"]
    'no completion in the batch was read by the verifier (4 of 4 in this batch were scored 0 without a read: no final answer)'
    >>> sorted(undefined_reasons({"verifier/tpr": None, "verifier/window/tpr": None,
    ...                           "verifier/n_read": 0.0, "verifier/window/n_read": 0.0},
    ...                          batch=True))
    ['tpr', 'window/tpr']
    """
    # records written before unread completions were left out name the counts n / n_valid
    window_n = metrics.get(prefix + "window/n_read", metrics.get(prefix + "window/n"))
    scopes = ["window/"] if window_n is not None else []
    if batch or not scopes:
        scopes.append("")
    out = {}
    for scope in scopes:
        out.update(_scope_reasons(metrics, prefix, scope))
    out.update(_batch_only_reasons(metrics, prefix))
    out.update(_level_reasons(metrics, prefix))
    return out


def _level_reasons(metrics: dict[str, Any], prefix: str) -> dict[str, str]:
    """Reasons for the undefined per-level rates ``tpr/level_<k>`` and ``tnr/level_<k>``."""
    minimum = metrics.get("min_per_class", MIN_PER_CLASS)
    out = {}
    for key in metrics:
        m = re.fullmatch(re.escape(prefix) + r"(tpr|tnr)/level_\w+", key)
        if m is None or not _nan(metrics, key):
            continue
        rate = m.group(1)
        if prefix + "threshold" in metrics and _nan(metrics, prefix + "threshold"):
            why = "no accept threshold yet (threshold=auto waits for correct and incorrect completions)"
        else:
            label = "correct" if rate == "tpr" else "incorrect"
            why = (
                f"no {label} read completion of that level in the batch"
                if minimum <= 1
                else f"fewer than {minimum:g} {label} read completions of that level in the batch"
            )
        out[key[len(prefix) :]] = why
    return out


_NO_VERDICT = (
    "no reference answer, or its check abstained: timed out, or the reference could not be parsed"
)
"""Why a completion has no Math-Verify verdict, in the undefined notice's words."""


def _nan(metrics: dict[str, Any], key: str) -> bool:
    v = metrics.get(key)
    return v is None or (isinstance(v, float) and math.isnan(v))


def _no_read(metrics: dict[str, Any], prefix: str, where: str) -> str:
    """The reason of a metric that rests on reads when the verifier read none."""
    unread = metrics.get(prefix + "n_unread") or 0
    return (
        f"no completion {where} was read by the verifier ({unread:.0f} of "
        f"{metrics.get(prefix + 'n', 0):.0f} in this batch were scored 0 without a read: "
        "no final answer)"
    )


def _batch_only_reasons(metrics: dict[str, Any], prefix: str) -> dict[str, str]:
    """Reasons for the undefined :data:`BATCH_ONLY_KEYS` of one record."""
    no_read = metrics.get(prefix + "n_read") == 0 and (metrics.get(prefix + "n_unread") or 0) > 0
    out = {}
    for key in BATCH_ONLY_KEYS:
        if prefix + key not in metrics or not _nan(metrics, prefix + key):
            continue
        if key == "pass_rate":
            out[key] = f"no completion in the batch has a Math-Verify verdict ({_NO_VERDICT})"
        elif no_read:
            out[key] = _no_read(metrics, prefix, "in the batch")
        elif key == "tie_rate":
            out[key] = "no GRPO group in the batch has two scored completions"
        else:
            out[key] = "no score-token probability mass was given for the batch"
    return out


def _scope_reasons(metrics: dict[str, Any], prefix: str, scope: str) -> dict[str, str]:
    """Reasons for the undefined labelled metrics of one scope (``"window/"`` or ``""``)."""

    def nan(key: str) -> bool:
        return _nan(metrics, prefix + key)

    where = "in the window" if scope else "in the batch"
    n = (
        metrics.get(prefix + "window/n_read", metrics.get(prefix + "window/n"))
        if scope
        else metrics.get(prefix + "n_read", metrics.get(prefix + "n_valid"))
    )
    unread = metrics.get(prefix + "n_unread") or 0
    minimum = metrics.get("min_per_class", MIN_PER_CLASS)
    n_pos = metrics.get(prefix + scope + "n_read_correct")
    n_neg = metrics.get(prefix + scope + "n_read_incorrect")
    n_acc = metrics.get(prefix + scope + "n_accepted")
    out = {}
    for key in ("tpr", "tnr", "auroc", "pairwise_accuracy", "score_gap", *_RATES[2:]):
        if prefix + scope + key not in metrics or not nan(scope + key):
            continue
        if not n and unread:
            why = _no_read(metrics, prefix, where)
        elif not n:
            why = (
                f"no completion {where} has both a verifier score and a Math-Verify verdict "
                f"({_NO_VERDICT})"
            )
        elif key in _RATES and prefix + "threshold" in metrics and nan("threshold"):
            why = "no accept threshold yet (threshold=auto waits for correct and incorrect completions)"
        elif few := [
            (label, k)
            for label, k, need in (
                ("correct", n_pos, _NEED_CORRECT | _NEED_BOTH),
                ("incorrect", n_neg, _NEED_INCORRECT | _NEED_BOTH),
                ("accepted", n_acc, _NEED_ACCEPTED),
            )
            if key in need and _few(k, minimum)
        ]:
            label, k = few[0]
            why = f"fewer than {minimum} {label} read completions {where} ({k:.0f})"
        else:
            why = {
                "tpr": f"no correct completion (Math-Verify) {where}",
                "tnr": f"no incorrect completion (Math-Verify) {where}",
                "auroc": f"it needs both correct and incorrect completions {where}",
                "score_gap": f"it needs both correct and incorrect completions {where}",
                "pairwise_accuracy": (
                    f"no problem has both a correct and an incorrect completion {where}"
                ),
                "precision": f"the verifier accepted no completion {where} (no score >= the threshold)",
                "balanced_accuracy": "TPR or TNR is undefined",
                "verifier_gain": "precision is undefined",
            }[key]
        out[scope + key] = why
    return out


def group_by_reason(reasons: Iterable[tuple[str, Hashable]]) -> list[tuple[list[str], Any]]:
    """``[(metrics, reason)]``: the metrics of ``(metric, reason)`` pairs grouped by their reason,
    reasons and metrics in the order first seen. A reason shared by several metrics (no read
    completion leaves all eight rates undefined for one cause) is said once, naming them all.

    >>> group_by_reason([("tpr", "no read"), ("tnr", "no read"), ("precision", "none accepted")])
    [(['tpr', 'tnr'], 'no read'), (['precision'], 'none accepted')]
    """
    grouped: dict[Hashable, list[str]] = {}
    for metric, why in reasons:
        grouped.setdefault(why, []).append(metric)
    return [(metrics, why) for why, metrics in grouped.items()]


def _zero_spread(values: Sequence[float | None], groups: list[slice], eps: float = 1e-6) -> float:
    """Fraction of groups whose non-abstained rewards all agree within ``eps`` (no GRPO signal)."""
    if not groups:
        return _NAN
    flat = 0
    for g in groups:
        v = [x for x in values[g] if x is not None and not math.isnan(x)]
        if len(v) < 2 or max(v) - min(v) <= eps:
            flat += 1
    return flat / len(groups)


def _tie_rate(values: Sequence[float | None], groups: list[slice], eps: float) -> float:
    """Fraction of within-group completion pairs whose scores differ by at most ``eps``."""
    ties = pairs = 0
    for g in groups:
        v = [x for x in values[g] if x is not None and not math.isnan(x)]
        for a, b in itertools.combinations(v, 2):
            pairs += 1
            ties += abs(a - b) <= eps
    return ties / pairs if pairs else _NAN


def labelled_metrics(
    scores: np.ndarray,
    labels: np.ndarray,
    problem_ids: Sequence[Any],
    threshold: float | np.ndarray | None,
    min_per_class: int = 1,
) -> dict[str, float]:
    """The metrics of scored, labelled completions.

    Args:
        scores: ``(m,)`` verifier scores in ``[0, 1]`` (no abstentions).
        labels: ``(m,)`` ground truth in ``{0, 1}``.
        problem_ids: ``(m,)`` problem (GRPO group) of each completion, for the within-problem
            pairwise accuracy.
        threshold: Accept threshold of the rates: one number, or ``(m,)`` per completion (the
            threshold in force when it was scored); ``None`` / ``NaN`` = not yet calibrated,
            such completions are left out of the rates.
        min_per_class: below this many correct (incorrect) completions the metrics that need
            them are ``NaN`` (:data:`MIN_PER_CLASS` says which; the tracker passes it, 1 = any).

    Returns:
        ``auroc`` (Hanley & McNeil 1982), ``pairwise_accuracy`` (ties count 0;
        :func:`densereward.metrics.pairwise_accuracy`), ``score_gap`` (mean score of correct
        minus mean score of incorrect completions, in ``[-1, 1]``), ``tpr, tnr,
        balanced_accuracy, precision`` at the threshold (Zhou et al. 2025, sec. 3),
        ``verifier_gain`` (precision - pass rate, Lu et al. 2025 eq. 1), ``pass_rate`` (pooled:
        the fraction of these completions that are correct), ``n``, ``n_correct``,
        ``n_incorrect`` and ``n_accepted`` (scored >= the threshold in force, the completions
        precision and the verifier gain rest on); undefined ones ``NaN`` (e.g. TPR without a
        correct completion, or with fewer than ``min_per_class``; precision with fewer than
        ``min_per_class`` accepted).

    >>> m = labelled_metrics(np.array([0.9, 0.2, 0.4]), np.array([1.0, 0.0, 0.0]), [0, 0, 1], 0.5)
    >>> m["tpr"], m["tnr"], m["auroc"], m["pairwise_accuracy"], round(m["score_gap"], 2)
    (1.0, 1.0, 1.0, 1.0, 0.6)
    """
    from ..metrics.classification import auroc
    from ..metrics.pairwise import mean_score_gap, pairwise_accuracy
    from ..metrics.report import classification_report

    thr = np.broadcast_to(
        np.asarray(_NAN if threshold is None else threshold, dtype=np.float64), scores.shape
    )
    decided = np.isfinite(thr)
    rates = (
        classification_report(scores[decided], labels[decided], thr[decided])
        if decided.any()
        else {}
    )
    out = {
        k: float(rates.get(k, _NAN))
        for k in ("tpr", "tnr", "balanced_accuracy", "precision", "verifier_gain")
    }
    out["auroc"] = auroc(scores, labels)
    out["score_gap"] = mean_score_gap(scores, labels)
    out["pairwise_accuracy"] = (
        pairwise_accuracy(scores, labels, list(problem_ids)) if len(scores) else _NAN
    )
    out["pass_rate"] = float(labels.mean()) if len(labels) else _NAN
    out["n"] = float(len(scores))
    out["n_correct"] = float((labels == 1).sum())
    out["n_incorrect"] = float(len(labels) - out["n_correct"])
    out["n_accepted"] = float((scores[decided] >= thr[decided]).sum())
    for need, k in (
        (_NEED_CORRECT | _NEED_BOTH, out["n_correct"]),
        (_NEED_INCORRECT | _NEED_BOTH, out["n_incorrect"]),
        (_NEED_ACCEPTED, out["n_accepted"]),
    ):
        if k < min_per_class:
            out.update(dict.fromkeys(need, _NAN))
    return out


def reward_quality_metrics(
    scores: Sequence[float | None],
    correct: Sequence[float | None],
    *,
    threshold: float | None = 0.5,
    groups: list[slice] | None = None,
    levels: Sequence[Any] | None = None,
    masses: Sequence[float | None] | None = None,
    tie_eps: float = 1e-3,
    read: Sequence[bool] | None = None,
    min_per_class: int = MIN_PER_CLASS,
) -> dict[str, float]:
    """Reward-quality metrics of one batch of completions (keys without the ``verifier/`` prefix).

    Args:
        scores: ``(n,)`` verifier scores in ``[0, 1]`` (``None`` = abstained).
        correct: ``(n,)`` ground truth in ``{0, 1}`` (``None`` = unknown, e.g. unparseable reference).
        threshold: Accept threshold for TPR / TNR / precision; ``None`` = not calibrated
            (those metrics ``NaN``).
        groups: GRPO groups (slices of the ``n`` completions); default: one group.
        levels: ``(n,)`` MATH difficulty levels (``None`` entries skipped).
        masses: ``(n,)`` probability mass on the score tokens (``None`` entries skipped).
        tie_eps: Two scores within ``tie_eps`` count as a tie.
        read: ``(n,)`` False where the verifier gave the score without a model read (no final
            answer, empty response): left out of the labelled metrics, counted in ``n_unread``;
            still a reward, so still in ``tie_rate`` and ``frac_zero_spread_dense`` (but a
            batch with no read at all has ``tie_rate`` ``NaN``: no verifier score to tie).
            ``None``: every score was read.
        min_per_class: the fewest read completions of a class a metric that needs it is given
            from (:data:`MIN_PER_CLASS`); below it, ``NaN``.

    Returns:
        ``tpr, tnr, balanced_accuracy, precision, auroc, verifier_gain, score_gap,
        pairwise_accuracy`` (on read completions with both a score and a ground truth,
        ``n_read`` of them; see :func:`labelled_metrics`), ``pass_rate`` (pooled over every completion with a known
        ground truth, scored or not), ``tie_rate`` (in ``[0, 1]``; ``NaN`` without a
        within-group pair, or when ``read`` says no completion was read),
        ``mean_mass``, ``n_abstained``, ``frac_zero_spread_sparse``, ``frac_zero_spread_dense``,
        ``n``, ``n_valid`` (scored and labelled, read or not), ``n_read``, ``n_read_correct``,
        ``n_read_incorrect``, ``n_accepted`` (read, scored >= the threshold), ``n_unread``, and
        ``tpr/level_<k>``, ``tnr/level_<k>`` per level present. Undefined
        metrics are ``NaN`` (e.g. TNR when every completion is correct).

    Raises:
        ValueError: if the per-completion sequences differ in length.

    >>> m = reward_quality_metrics([0.9, 0.2, None, 0.7], [1, 0, 1, 0], groups=[slice(0, 2), slice(2, 4)],
    ...                            min_per_class=1)
    >>> m["tpr"], m["tnr"], m["n_abstained"], m["pass_rate"]
    (1.0, 0.5, 1.0, 0.5)
    >>> m = reward_quality_metrics([0.9, 0.2, None, 0.7], [1, 0, 1, 0])
    >>> m["tpr"], m["n_read_correct"]
    (nan, 1.0)
    """
    n = len(scores)
    check_lengths(completions=scores, correct=correct, levels=levels, masses=masses, read=read)
    groups = groups if groups is not None else [slice(0, n)]
    scored = [
        i
        for i in range(n)
        if scores[i] is not None and correct[i] is not None and not math.isnan(scores[i])
    ]
    unread = [i for i in range(n) if read is not None and not read[i] and scores[i] is not None]
    valid = [i for i in scored if read is None or read[i]]
    s = np.array([scores[i] for i in valid], dtype=np.float64)
    y = np.array([correct[i] for i in valid], dtype=np.float64)
    group_of = np.zeros(n, dtype=np.int64)
    for j, g in enumerate(groups):
        group_of[g] = j
    out = labelled_metrics(s, y, group_of[valid].tolist(), threshold, min_per_class)
    del out["n"]
    out["n_read_correct"] = out.pop("n_correct")
    out["n_read_incorrect"] = out.pop("n_incorrect")
    known = [c for c in correct if c is not None]
    out["pass_rate"] = float(np.mean(known)) if known else _NAN
    # the tie rate says how finely the verifier's reads separate the rewards: with no read
    # every reward is the same unread 0, and the ties are the rule's, not the verifier's
    no_read = read is not None and not any(
        read[i] and scores[i] is not None and not math.isnan(scores[i]) for i in range(n)
    )
    out["tie_rate"] = _NAN if no_read else _tie_rate(scores, groups, tie_eps)
    m = [x for x in (masses or []) if x is not None and not math.isnan(x)]
    out["mean_mass"] = float(np.mean(m)) if m else _NAN
    out["n_abstained"] = float(sum(x is None or math.isnan(x) for x in scores))
    out["frac_zero_spread_sparse"] = _zero_spread(correct, groups)
    out["frac_zero_spread_dense"] = _zero_spread(scores, groups)
    out["n"] = float(n)
    out["n_valid"] = float(len(scored))
    out["n_read"] = float(len(valid))
    out["n_unread"] = float(len(unread))
    if levels is not None:
        lv = [levels[i] for i in valid]
        for level in sorted({x for x in lv if x is not None}):
            idx = [j for j, x in enumerate(lv) if x == level]
            sub = labelled_metrics(
                s[idx], y[idx], group_of[valid][idx].tolist(), threshold, min_per_class
            )
            out[f"tpr/level_{level}"] = sub["tpr"]
            out[f"tnr/level_{level}"] = sub["tnr"]
    return out


def format_metrics(
    reasons: Sequence[str | None],
    scores: Sequence[float | None],
    length_setting: str = LENGTH_SETTING,
    read: Sequence[bool] | None = None,
) -> tuple[dict[str, float], str | None]:
    """Share of completions with no extractable final answer, and a warning when it is a format problem.

    Args:
        reasons: ``(n,)`` the sparse check's reason (``"no_answer"``, ``"unclosed_thinking"``,
            anything else or ``None`` = an answer was found).
        scores: ``(n,)`` verifier scores (``None`` = abstained).
        length_setting: the setting that bounds the completions' length, named by the
            warning (default :data:`LENGTH_SETTING`, both the config key and TRL's
            ``GRPOConfig`` field; a reward server names its clients' settings).
        read: ``(n,)`` False where the verifier gave the score without a read (``None``: all
            read).

    Returns:
        ``({"frac_no_answer_sparse", "frac_unclosed_thinking_sparse"}, warning)``: shares of
        the ``n`` completions, in ``[0, 1]`` (the first includes the second). ``warning`` is a message
        when at least half the completions have no answer and either the verifier read none of
        them (it gave them 0 without a model call: the message says so) or it scored the ones it
        read at least 0.8x the batch mean (the policy fails on *format*, which the
        sparse reward and every verifier metric count as wrong); else ``None``.

    >>> format_metrics(["no_answer"] * 4, [0.0] * 4, read=[False] * 4)[1].split(";")[0]
    '4 of 4 completions had no final answer and were not read'

    >>> format_metrics(["no_answer", None, "unclosed_thinking", "no_answer"], [0.5] * 4)[0]
    {'frac_no_answer_sparse': 0.75, 'frac_unclosed_thinking_sparse': 0.25}
    """
    n = len(reasons)
    if not n:
        return {}, None
    none_idx = [i for i, r in enumerate(reasons) if r in ("no_answer", "unclosed_thinking")]
    out = {
        "frac_no_answer_sparse": len(none_idx) / n,
        "frac_unclosed_thinking_sparse": sum(r == "unclosed_thinking" for r in reasons) / n,
    }
    if out["frac_no_answer_sparse"] < 0.5:
        return out, None
    unread = [i for i in none_idx if read is not None and not read[i]]
    if unread and len(unread) == len(none_idx):  # the verifier read none of them
        return out, (
            f"{len(unread)} of {n} completions had no final answer and were not read; they get "
            "the reward of an answer the sparse check marks wrong, without a verifier read"
            f"{_thinking_note(reasons, unread)}, and the verifier/* quality metrics leave them out "
            f"(verifier/n_unread). Fix: raise {length_setting} if the answers are cut off, or "
            "check the answer format (the system prompt, reward.answer_format: a \\boxed{} or "
            "final-answer line). (Said once.)"
        )
    vals = [s for s in scores if s is not None and not math.isnan(s)]
    none_vals = [
        scores[i]
        for i in set(none_idx) - set(unread)
        if scores[i] is not None and not math.isnan(scores[i])
    ]
    if (
        out["frac_no_answer_sparse"] < 0.5
        or not none_vals
        or np.mean(none_vals) < 0.8 * np.mean(vals)
    ):
        return out, None
    return out, (
        f"{100 * out['frac_no_answer_sparse']:.0f}% of completions have no extractable final answer "
        f"({100 * out['frac_unclosed_thinking_sparse']:.0f}% unclosed thinking) while the verifier "
        f"scores them {np.mean(none_vals):.3f} on average (batch mean {np.mean(vals):.3f}): the "
        "likely cause is the answer *format* (no \\boxed{} or final-answer line, or thinking cut "
        "by the completion length limit), not correctness; the sparse reward and every "
        "verifier/* metric count these as wrong. Check the system prompt, reward.answer_format "
        f"and {length_setting}. (Said once.)"
    )


def _thinking_note(reasons: Sequence[str | None], idx: Sequence[int]) -> str:
    """`` (k with unclosed thinking)`` when some of ``idx`` never closed their thinking."""
    k = sum(reasons[i] == "unclosed_thinking" for i in idx)
    return f" ({k} with unclosed thinking)" if k else ""
