"""Every verification-dynamics metric of scored, labelled responses (:func:`evaluate`).

The metric functions are :mod:`densereward.metrics`'; this module groups the responses
(per generator, per difficulty bin, per family) and collects the results in one dict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import metrics as M
from ..abstentions import count_reasons
from ..config import resolve_threshold
from ..errors import DataError
from ..io import to_jsonable
from ..metrics.format import format_number, format_threshold
from ..results import UNREAD_REASONS

__all__ = [
    "HEADLINE",
    "MIN_PER_CLASS",
    "MOST_ABSTAINED",
    "SCORE_RESOLUTION",
    "abstention_headline",
    "abstention_summary",
    "counts_text",
    "evaluate",
    "evidence",
    "evidence_notes",
    "unread_summary",
]

MOST_ABSTAINED = 0.5
"""Above this share of abstained reads the report and plots lead with the abstentions and the
command exits with :data:`densereward.eval_verifier.cli.EXIT_MOST_ABSTAINED`."""

MIN_PER_CLASS = 10
"""Fewer scored responses than this in a class (correct or incorrect) and the rates that rest
on it are not a verdict on the verifier: the console and ``report.md`` say "too few to rank"
beside them (the numbers are still computed and written, with their counts)."""

SCORE_RESOLUTION = 1e-3
"""A gap between the mean scores of correct and incorrect responses below this is flagged: the
console, the report and the plots show scores and rates to 3 decimals, so a ranking resting on
a smaller difference is not one a reader can see (two reads that differ by 0.0003 are ties to
every figure of the report; AUROC still counts them as ordered)."""

HEADLINE = (
    "auroc",
    "score_gap",
    "pairwise_accuracy",  # threshold-free first
    "tpr",
    "tnr",
    "balanced_accuracy",
    "precision",
    "verifier_gain",
)


def _family_gap(scores, labels, pids, fams, threshold) -> dict[str, Any]:
    """TTS pass rates per family (or generator) and the weak-to-strong gap closed by verification.

    ``mean_problem_pass_rate`` is the mean over problems of each problem's pass rate (the base of
    Zhou et al. eq. 5); the weaker / stronger group is the one with the lower / higher of it.
    """
    per = {}
    for f, ix in M.group_indices(fams).items():
        sub_p = [pids[i] for i in ix]
        per[f] = {
            "mean_problem_pass_rate": M.mean_problem_pass_rate(labels[ix], sub_p),
            "tts_pass_rate": M.tts_pass_rate(scores[ix], labels[ix], sub_p, threshold),
            "tts_verification_gain": M.tts_verification_gain(
                scores[ix], labels[ix], sub_p, threshold
            ),
            **_candidates_per_problem(sub_p),
        }
    out: dict[str, Any] = {"groups": per}
    if len(per) >= 2:
        weak = min(per, key=lambda f: per[f]["mean_problem_pass_rate"])
        strong = max(per, key=lambda f: per[f]["mean_problem_pass_rate"])
        if per[weak]["mean_problem_pass_rate"] == per[strong]["mean_problem_pass_rate"]:
            out["equal_pass_rate"] = per[weak]["mean_problem_pass_rate"]  # no gap to close
            return out
        out.update(
            weak=weak,
            strong=strong,
            gap_closed=M.gap_closed(
                per[weak]["mean_problem_pass_rate"],
                per[weak]["tts_pass_rate"],
                per[strong]["mean_problem_pass_rate"],
            ),
        )
    return out


def _candidates_per_problem(pids: Sequence[str]) -> dict[str, float]:
    """K, the responses per problem: ``k_mean`` and its range ``k_min``..``k_max``, and the
    ``n_problems`` and ``n_responses`` the rates rest on.

    >>> _candidates_per_problem(["a", "a", "b", "c", "c", "c"])
    {'k_mean': 2.0, 'k_min': 1, 'k_max': 3, 'n_problems': 3, 'n_responses': 6}
    """
    from collections import Counter

    counts = Counter(pids).values()
    return {
        "k_mean": len(pids) / len(counts),
        "k_min": min(counts),
        "k_max": max(counts),
        "n_problems": len(counts),
        "n_responses": len(pids),
    }


def unread_summary(
    rows: Sequence[Mapping[str, Any]],
    scores: Sequence[float | None],
    reasons: Sequence[str | None] | None,
) -> dict[str, Any] | None:
    """The responses scored without a model read (0.0: empty, or no final answer to match).

    They are scored, not abstained (a reward gives them the same 0), so every metric counts
    them; this says how many, why, and of which class.

    Args:
        rows: ``(n,)`` rows with ``is_correct``.
        scores: ``(n,)`` scores (``None`` = abstained).
        reasons: ``(n,)`` the verifier's reasons, or ``None`` when unknown.

    Returns:
        ``None`` when the reasons are unknown (a scores file that does not record them), else
        ``{"n", "reasons": {reason: count}, "n_correct", "n_incorrect"}``.

    >>> unread_summary([{"is_correct": False}] * 3, [0.0, 0.0, 0.4], ["no final answer", "empty response", None])
    {'n': 2, 'reasons': {'no final answer': 1, 'empty response': 1}, 'n_correct': 0, 'n_incorrect': 2}
    """
    if reasons is None:
        return None
    ix = [
        i
        for i, (v, r) in enumerate(zip(scores, reasons, strict=True))
        if v is not None and r in UNREAD_REASONS
    ]
    n_correct = sum(bool(rows[i]["is_correct"]) for i in ix)
    return {
        "n": len(ix),
        "reasons": count_reasons(reasons[i] for i in ix),
        "n_correct": n_correct,
        "n_incorrect": len(ix) - n_correct,
    }


def abstention_summary(
    rows: Sequence[Mapping[str, Any]],
    scores: Sequence[float | None],
    reasons: Sequence[str | None] | None = None,
) -> dict[str, Any]:
    """How many reads abstained, why, and per generator.

    Args:
        rows: ``(n,)`` rows with ``generator``.
        scores: ``(n,)`` scores, ``None`` = abstained.
        reasons: ``(n,)`` the verifier's reason per row (``ScoreResult.reason``), or ``None``
            when unknown (scores read from a file that does not record them).

    Returns:
        ``{"n_responses", "n_abstained", "fraction", "most" (fraction > MOST_ABSTAINED),
        "reasons": {reason kind: count} (most frequent first; ``None`` when unknown),
        "per_generator": {generator: {"n", "n_abstained"}}}``.

    >>> abstention_summary([{"generator": "g"}] * 3, [None, None, 0.4],
    ...                    ["low score-token mass: 0.2 < min_mass 0.5", "backend error: X", None])
    ... # doctest: +NORMALIZE_WHITESPACE
    {'n_responses': 3, 'n_abstained': 2, 'fraction': 0.6666666666666666, 'most': True,
     'reasons': {'low score-token mass': 1, 'backend error': 1},
     'per_generator': {'g': {'n': 3, 'n_abstained': 2}}}
    """
    if len(rows) != len(scores) or (reasons is not None and len(reasons) != len(scores)):
        raise DataError(f"{len(rows)} rows but {len(scores)} scores (and reasons)")
    abstained = [i for i, v in enumerate(scores) if v is None]
    per_gen: dict[str, dict[str, int]] = {}
    for i, r in enumerate(rows):
        g = per_gen.setdefault(str(r["generator"]), {"n": 0, "n_abstained": 0})
        g["n"] += 1
        g["n_abstained"] += scores[i] is None
    fraction = len(abstained) / len(rows) if rows else math.nan
    return {
        "n_responses": len(rows),
        "n_abstained": len(abstained),
        "fraction": fraction,
        "most": bool(rows) and fraction > MOST_ABSTAINED,
        "reasons": None if reasons is None else count_reasons(reasons[i] for i in abstained),
        "per_generator": per_gen,
    }


def abstention_headline(summary: Mapping[str, Any]) -> str:
    """One line: how many reads abstained and why (the report's, the plots' and the CLI's lead).

    >>> abstention_headline({"n_responses": 20, "n_abstained": 19, "reasons": {"backend error": 19}})
    '19 of 20 reads abstained (backend error 19)'
    """
    reasons = summary.get("reasons")
    why = (
        ", ".join(f"{kind} {n}" for kind, n in reasons.items())
        if reasons is not None
        else "reasons not recorded in the scores file"
    )
    return f"{summary['n_abstained']} of {summary['n_responses']} reads abstained ({why})"


def evidence(rows: Sequence[Mapping[str, Any]], overall: Mapping[str, Any]) -> dict[str, Any]:
    """What the overall rates rest on: the class counts, and whether they can be a verdict.

    Args:
        rows: ``(n,)`` every row of the file (``is_correct``).
        overall: the overall report (``n_pos``, ``n_neg``: scored correct / incorrect;
            ``score_gap``).

    Returns:
        ``{"n_correct", "n_incorrect"`` (scored), ``"n_correct_in_file", "n_incorrect_in_file",
        "min_per_class"`` (:data:`MIN_PER_CLASS`), ``"one_class"`` (``"correct"`` /
        ``"incorrect"`` when the scored responses hold that class only, else ``None``),
        ``"too_few"`` (a class has fewer than the minimum), ``"gap_below_resolution"``
        (both classes scored and ``|score_gap| <`` :data:`SCORE_RESOLUTION`)``}``.

    >>> e = evidence([{"is_correct": True}, {"is_correct": False}], {"n_pos": 1, "n_neg": 1, "score_gap": 3e-4})
    >>> e["too_few"], e["one_class"], e["gap_below_resolution"]
    (True, None, True)
    """
    n_pos, n_neg = int(overall["n_pos"]), int(overall["n_neg"])
    in_file = sum(bool(r["is_correct"]) for r in rows)
    gap = overall.get("score_gap")
    one = "correct" if not n_neg else "incorrect" if not n_pos else None
    return {
        "n_correct": n_pos,
        "n_incorrect": n_neg,
        "n_correct_in_file": in_file,
        "n_incorrect_in_file": len(rows) - in_file,
        "min_per_class": MIN_PER_CLASS,
        "one_class": one,
        "too_few": min(n_pos, n_neg) < MIN_PER_CLASS,
        "gap_below_resolution": one is None
        and gap is not None
        and math.isfinite(gap)
        and abs(gap) < SCORE_RESOLUTION,
        "score_gap": gap,
    }


def counts_text(rep: Mapping[str, Any], key: str) -> str:
    """The counts a rate of ``rep`` rests on, in words (``""`` for a key without one).

    >>> rep = {"n": 5.0, "n_pos": 2.0, "n_neg": 3.0, "n_accepted": 1.0}
    >>> [counts_text(rep, k) for k in ("tpr", "tnr", "auroc", "precision", "pass_rate", "ece")]
    ['2 correct', '3 incorrect', '2 correct / 3 incorrect', '1 accepted', '5 scored', '5 scored']
    """
    n = {k: rep.get(k) for k in ("n", "n_pos", "n_neg", "n_accepted")}
    if any(v is None or v != v for v in (n["n_pos"], n["n_neg"])):
        return ""
    pos, neg = f"{int(n['n_pos'])} correct", f"{int(n['n_neg'])} incorrect"
    if key in ("tpr", "fnr", "recall"):
        return pos
    if key in ("tnr", "fpr"):
        return neg
    if key in ("precision", "verifier_gain"):
        return f"{int(n['n_accepted'])} accepted" if n["n_accepted"] is not None else ""
    if key in ("pass_rate", "accuracy", "ece", "brier"):
        return f"{int(n['n'])} scored" if n["n"] is not None else ""
    if key in (
        "balanced_accuracy",
        "auroc",
        "auprc",
        "score_gap",
        "score_gap_snr",
        "pairwise_accuracy",
        "tie_rate",
        "f1",
    ):
        return f"{pos} / {neg}"
    if key in ("tts_pass_rate", "tts_verification_gain") and rep.get("tts_n_problems"):
        return tts_counts_text(rep)
    return ""


def tts_counts_text(rep: Mapping[str, Any]) -> str:
    """The problems x responses a test-time-scaling rate rests on.

    >>> tts_counts_text({"tts_n_problems": 4, "tts_n_responses": 8, "k_min": 2, "k_max": 2})
    '4 problems x 2 responses'
    >>> tts_counts_text({"tts_n_problems": 2, "tts_n_responses": 5, "k_min": 2, "k_max": 3})
    '2 problems x 2-3 responses (5 in all)'
    """
    n, k_min, k_max = int(rep["tts_n_problems"]), int(rep["k_min"]), int(rep["k_max"])
    if k_min == k_max:
        return f"{n} problems x {k_min} responses"
    return f"{n} problems x {k_min}-{k_max} responses ({int(rep['tts_n_responses'])} in all)"


def read_only_text(overall: Mapping[str, Any]) -> str:
    """The AUROC over the read responses with the classes it rests on.

    >>> read_only_text({"auroc_read_only": 0.5, "read_n_pos": 1, "read_n_neg": 1})
    '0.500 (1 correct / 1 incorrect)'
    """
    return (
        f"{format_number(overall.get('auroc_read_only'))} ({overall.get('read_n_pos', 0)} correct / "
        f"{overall.get('read_n_neg', 0)} incorrect)"
    )


def cross_validation_reason(metrics: Mapping[str, Any]) -> str:
    """Why the cross-validated accept threshold is ``n/a`` (``""`` when it is not)."""
    cv = metrics["threshold_calibration"]["cross_validated"]
    if cv.get("n_splits"):
        return ""
    if metrics.get("evidence", {}).get("one_class"):
        return "one class only"
    n = metrics["counts"]["n_problems"]
    if n < 2:
        return f"{n} problem: folds are split by problem, so it needs at least 2"
    return "no accept threshold could be chosen on these scores"


def spearman_reason(scores: np.ndarray, easiness: np.ndarray) -> str:
    """Why the score-easiness Spearman correlation is ``n/a`` (``""`` when it is not)."""
    if scores.size < 2:
        return f"{scores.size} scored response(s): it needs at least 2"
    if np.all(easiness == easiness[0]):
        return f"every problem has easiness d(x) {easiness[0]:.3f}: no spread to rank against"
    if np.all(scores == scores[0]):
        return f"every score is {scores[0]:.3f}: no spread to rank"
    return ""


def evidence_notes(metrics: Mapping[str, Any]) -> list[str]:
    """The sentences that say when the overall rates are not a verdict (console and report).

    One-class data: the reason TNR, AUROC and the threshold are ``n/a``; fewer than
    :data:`MIN_PER_CLASS` of a class: "too few to rank"; a class score gap below
    :data:`SCORE_RESOLUTION`. Empty when none applies.
    """
    e = metrics.get("evidence")
    if not e:
        return []
    notes = []
    if e["one_class"]:
        cls = e["one_class"]
        other = "incorrect" if cls == "correct" else "correct"
        n = e["n_correct"] if cls == "correct" else e["n_incorrect"]
        in_file = e[f"n_{other}_in_file"]
        where = (
            f"all {n} responses are labelled {cls}"
            if not in_file
            else f"all {n} scored responses are labelled {cls} (the {in_file} {other} one(s) "
            "were abstained on)"
        )
        needs = "TNR" if cls == "correct" else "TPR"
        notes.append(
            f"{where}: {needs}, balanced accuracy, AUROC, AUPRC and the accept threshold need both "
            f"classes; evaluate a file with {other} responses too"
        )
    elif e["too_few"]:
        notes.append(
            f"too few to rank: {e['n_correct']} correct and {e['n_incorrect']} incorrect scored "
            f"response(s), under {e['min_per_class']} of each, so these rates describe these "
            "responses, not the verifier; score at least "
            f"{e['min_per_class']} correct and {e['min_per_class']} incorrect responses"
        )
    if e["gap_below_resolution"]:
        notes.append(
            f"correct and incorrect responses' mean scores differ by {e['score_gap']:.2g}, under "
            f"{SCORE_RESOLUTION:g} (scores are shown to 3 decimals): the ranking rests on a "
            "difference too small to read, not a separation"
        )
    return notes


def evaluate(
    rows: Sequence[Mapping[str, Any]],
    scores: Sequence[float | None],
    *,
    reasons: Sequence[str | None] | None = None,
    threshold: float | str = "auto",
    n_bootstrap: int = 1000,
    n_calibration_bins: int = 10,
    n_repeats: int = 8,
    rs_max_attempts: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """Compute every verification-dynamics metric for scored, labelled responses.

    Args:
        rows: ``(n,)`` rows with ``problem_id, response, is_correct, generator`` (``family`` optional).
        scores: ``(n,)`` verifier scores in ``[0, 1]``, ``None`` = abstained: excluded from the
            classification metrics and counted; in the test-time-scaling and rejection-sampling
            figures a reject (the response stays in its problem's base pass rate and pool).
        reasons: ``(n,)`` the verifier's reason per response (counted under ``abstentions``),
            or ``None`` when unknown.
        threshold: accept threshold ``V = 1[score >= threshold]``: ``"auto"`` (Youden's J on
            these scored responses, in-sample; its problem-grouped cross-validated rates are
            reported beside it as the honest estimate), a number, or an earlier eval-verifier
            ``metrics.json`` (see :func:`densereward.config.resolve_threshold`). With ``auto``
            and only one class present, 0.5 is used and ``threshold_source`` says so.
        n_bootstrap: problem-level bootstrap replicates for the confidence intervals (0 = none).
        n_calibration_bins: equal-width bins of ECE and the reliability diagram.
        n_repeats: repeats of the per-generator balanced protocol (Zhou et al. 2025).
        rs_max_attempts: M of the simulated rejection sampling.
        seed: RNG seed of the sub-sampling, rejection sampling and bootstrap.

    Returns:
        A JSON-ready dict (undefined values as ``None``, i.e. JSON null): ``counts``
        (``n_scored`` includes ``n_scored_unread``, the responses scored 0 without a model
        read; ``None`` when the reasons are unknown), ``abstentions``
        (:func:`abstention_summary`), ``unread`` (:func:`unread_summary`), ``overall`` (classification
        report + pairwise + TTS, every scored response counted, the unread ones at 0; with the
        reasons known also ``auroc_read_only``, the AUROC of the responses the verifier read), ``soft``, ``confidence_intervals``, ``balanced``,
        ``per_generator`` (every generator of the file, also one with no scored response),
        ``per_generator_balanced``, ``difficulty`` (quartiles and
        equal-width bins, overall and per generator), ``tts``, ``rejection_sampling``,
        ``reliability``, ``self_verification_keyword_rate``.

        Two pass rates, named apart: ``pass_rate`` is the pooled fraction of correct
        responses (``mean(is_correct)``, as in the classification report and the training
        logs' ``verifier/pass_rate``); ``mean_problem_pass_rate`` is the mean over problems
        of each problem's fraction correct (:func:`densereward.metrics.mean_problem_pass_rate`, the base
        of the verified ``tts_pass_rate``, Zhou et al. 2025 eq. 5, also a mean over problems).
        They differ when problems have different numbers of responses.

    Raises:
        DataError: if lengths differ, a score is outside ``[0, 1]``, or nothing was scored.
    """
    if len(rows) != len(scores):
        raise DataError(f"{len(rows)} rows but {len(scores)} scores")
    keep = [i for i, v in enumerate(scores) if v is not None]
    if not keep:
        raise DataError("every response was abstained on; no metric can be computed")
    # every response (n,): an abstained score is NaN, a reject where responses are selected
    s_all = np.asarray([math.nan if v is None else v for v in scores], dtype=np.float64)
    scored = ~np.isnan(s_all)
    if s_all[scored].min() < 0 or s_all[scored].max() > 1:
        raise DataError("scores must lie in [0, 1]")
    y_all = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    pids_all = [str(r["problem_id"]) for r in rows]
    gens_all = [str(r["generator"]) for r in rows]
    fams_all = [str(r.get("family") or r["generator"]) for r in rows]
    # the scored responses (classification metrics)
    s, y = s_all[scored], y_all[scored]
    kept = [rows[i] for i in keep]
    pids = [pids_all[i] for i in keep]
    gens = [gens_all[i] for i in keep]
    gen_names = list(dict.fromkeys(gens_all))  # every generator of the file

    calibration = M.calibrate_threshold(s, y, pids)
    # written so that a copied value accepts the same scores (format_threshold)
    calibration["threshold_text"] = format_threshold(calibration["threshold"], s)
    threshold, threshold_source = resolve_threshold(threshold)
    if threshold is None:
        threshold = calibration["threshold"]
        threshold_source = (
            f"auto: {calibration['threshold_text']}, Youden's J on these {len(keep)} scored responses; rates at it "
            "are in-sample, the cross-validated ones are under 'Accept threshold'"
            if not math.isnan(threshold)
            else "0.5 (auto could not calibrate: one class only)"
        )
        threshold = 0.5 if math.isnan(threshold) else threshold

    def full_report(ix: np.ndarray) -> dict[str, float]:
        """Classification metrics on the scored responses among rows ``ix``; test-time scaling
        on all of them (an abstained response a reject)."""
        k = ix[scored[ix]]
        sc, lab, pid = s_all[k], y_all[k], [pids_all[i] for i in k]
        if k.size:
            rep = M.classification_report(sc, lab, threshold, n_bins=n_calibration_bins)
            rep.update(
                score_gap=M.mean_score_gap(sc, lab),
                pairwise_accuracy=M.pairwise_accuracy(sc, lab, pid),
                tie_rate=M.tie_rate(sc, lab, pid),
                score_gap_snr=M.score_gap_snr(sc, lab, pid),
                mean_score=float(np.mean(sc)),
                n_accepted=float(np.sum(sc >= threshold)),
            )
        else:  # nothing scored here: every rate undefined
            rep = {key: math.nan for key in M.REPORT_KEYS} | {"n": 0.0, "n_pos": 0.0, "n_neg": 0.0}
            rep.update(
                score_gap=math.nan,
                pairwise_accuracy=math.nan,
                tie_rate=math.nan,
                score_gap_snr=math.nan,
                mean_score=math.nan,
            )
        a_s, a_y, a_p = s_all[ix], y_all[ix], [pids_all[i] for i in ix]
        rep.update(
            mean_problem_pass_rate=M.mean_problem_pass_rate(a_y, a_p),
            tts_pass_rate=M.tts_pass_rate(a_s, a_y, a_p, threshold),
            tts_verification_gain=M.tts_verification_gain(a_s, a_y, a_p, threshold),
        )
        if a_p:
            cand = _candidates_per_problem(a_p)
            rep.update(
                tts_n_problems=len(set(a_p)),
                tts_n_responses=len(a_p),
                k_min=cand["k_min"],
                k_max=cand["k_max"],
            )
        return rep

    summary = abstention_summary(rows, scores, reasons)
    unread = unread_summary(rows, scores, reasons)
    abstained_by_gen = {g: summary["per_generator"][g]["n_abstained"] for g in gen_names}
    out: dict[str, Any] = {
        "threshold": threshold,
        "threshold_text": format_threshold(threshold, s),
        "threshold_source": threshold_source,
        "counts": {
            "n_responses": len(rows),
            "n_scored": len(keep),
            "n_abstained": len(rows) - len(keep),
            "n_scored_unread": None if unread is None else unread["n"],
            "n_problems": len(set(pids_all)),
            "n_generators": len(gen_names),
            "n_generators_scored": len(set(gens)),
            "abstained_per_generator": abstained_by_gen,
        },
        "abstentions": summary,
        "unread": unread,
        "generators": gen_names,
    }
    every = np.arange(len(rows))
    out["overall"] = full_report(every)
    out["evidence"] = evidence(rows, out["overall"])
    if unread is not None:  # the same threshold-free figure without the unread zeros
        read = [i for i in keep if reasons[i] not in UNREAD_REASONS]
        out["overall"]["auroc_read_only"] = M.auroc(s_all[read], y_all[read]) if read else math.nan
        out["overall"]["read_n_pos"] = int(y_all[read].sum()) if read else 0
        out["overall"]["read_n_neg"] = len(read) - out["overall"]["read_n_pos"]
    out["threshold_calibration"] = calibration
    out["soft"] = {
        k: v
        for k, v in M.classification_report(s, y, soft=True).items()
        if k in (*M.REPORT_KEYS[:9], "n", "n_pos", "n_neg")
    }

    # Headline numbers with problem-level bootstrap intervals.
    if n_bootstrap > 0:
        fns = {
            k: (lambda f: lambda a, b: f(a, b, threshold))(getattr(M, k))
            for k in HEADLINE
            if k not in ("auroc", "score_gap", "pairwise_accuracy")
        }
        fns["auroc"] = M.auroc
        fns["score_gap"] = M.mean_score_gap
        fns["pairwise_accuracy"] = M.pairwise_accuracy  # within problem: gets the group ids
        ci = M.bootstrap_many(
            fns,
            s,
            y,
            groups=pids,
            n_resamples=n_bootstrap,
            seed=seed,
            pass_groups=("pairwise_accuracy",),
        )
        # test-time scaling resamples every response (an abstained one a reject)
        ci["tts_verification_gain"] = M.bootstrap_ci(
            lambda a, b, g: M.tts_verification_gain(a, b, g, threshold),
            s_all,
            y_all,
            groups=pids_all,
            n_resamples=n_bootstrap,
            seed=seed,
            pass_groups=True,
        )
        out["confidence_intervals"] = {
            "confidence": 0.95,
            "n_resamples": n_bootstrap,
            "unit": "problem",
            **ci,
        }

    # Balanced protocol: up to 8 per problem, 4 correct + 4 incorrect when possible.
    bal = M.balanced_subsample(y, pids, max_per_problem=8, seed=seed)
    out["balanced"] = M.classification_report(s[bal], y[bal], threshold, n_bins=n_calibration_bins)
    out["per_generator_balanced"] = M.per_generator_balanced(
        s, y, pids, gens, threshold=threshold, n_repeats=n_repeats, seed=seed
    )

    # Per generator (all their responses), with keyword rates.
    per_gen = {}
    for g, ix in M.group_indices(gens_all).items():
        rep = full_report(ix)
        rep["n_abstained"] = float(abstained_by_gen[g])
        rep["self_verification_keyword_rate"] = M.self_verification_keyword_rate(
            [rows[i]["response"] for i in ix[scored[ix]]]
        )
        per_gen[g] = rep
    out["per_generator"] = per_gen

    # Difficulty d(x) over all generators (scored or not: it depends only on labels).
    diff = M.problem_difficulty(y_all, pids_all, gens_all)
    d_resp = np.asarray([diff[p] for p in pids])
    difficulty: dict[str, Any] = {
        "definition": "d(x) = mean over generators of the pass rate on x (Zhou et al. 2025, eq. 3); "
        "higher = easier; bin 1 = hardest",
        "mean": float(np.mean(list(diff.values()))),
    }
    problem_list = list(diff)
    d_prob = np.asarray([diff[p] for p in problem_list])
    for name, binner, prefix in (
        ("quartiles", M.difficulty_quartiles, "Q"),
        ("equal_width", M.difficulty_bins, "B"),
    ):
        pbins, edges = binner(d_prob, 4)
        bin_of = dict(zip(problem_list, pbins.tolist(), strict=True))
        rb = np.asarray([bin_of[p] for p in pids_all])
        labels_ = M.bin_labels(edges, prefix)
        bins_out = []
        for b, lab in enumerate(labels_):
            ix = np.flatnonzero(rb == b)
            rep = full_report(ix) if ix.size else {k: math.nan for k in M.REPORT_KEYS}
            rep.update(label=lab, n_problems=float(int((pbins == b).sum())))
            per_g = {}
            for g in gen_names:
                gx = np.asarray([i for i in ix if scored[i] and gens_all[i] == g], dtype=np.int64)
                per_g[g] = M.classification_report(
                    s_all[gx], y_all[gx], threshold, n_bins=n_calibration_bins
                )
            rep["per_generator"] = per_g
            bins_out.append(rep)
        difficulty[name] = {"edges": edges, "bins": bins_out}
    difficulty["score_difficulty_spearman"] = _spearman(s, d_resp)
    difficulty["score_difficulty_spearman_reason"] = spearman_reason(s, d_resp)
    out["difficulty"] = difficulty

    # Test-time scaling with verification over every response (an abstained one is a reject,
    # as in deployment); gap between weaker and stronger families.
    out["tts"] = {
        "pooled": {
            "mean_problem_pass_rate": M.mean_problem_pass_rate(y_all, pids_all),
            "tts_pass_rate": M.tts_pass_rate(s_all, y_all, pids_all, threshold),
            "tts_verification_gain": M.tts_verification_gain(s_all, y_all, pids_all, threshold),
            **_candidates_per_problem(pids_all),
        },
        "by_family": _family_gap(s_all, y_all, pids_all, fams_all, threshold),
    }
    rs = {
        "pooled": M.simulate_rejection_sampling(
            s_all, y_all, pids_all, max_attempts=rs_max_attempts, threshold=threshold, seed=seed
        )
    }
    for f, ix in M.group_indices(fams_all).items():
        rs[f] = M.simulate_rejection_sampling(
            s_all[ix],
            y_all[ix],
            [pids_all[i] for i in ix],
            max_attempts=rs_max_attempts,
            threshold=threshold,
            seed=seed,
        )
    out["rejection_sampling"] = rs
    # Lu et al. 2025 App. A: precision and gain from accuracy, TPR, FPR (NaN when a rate is).
    rates = (float(y.mean()), out["overall"]["tpr"], out["overall"]["fpr"])
    out["closed_form"] = {
        "precision": M.precision_from_rates(*rates),
        "verifier_gain": M.verifier_gain_from_rates(*rates),
    }
    out["reliability"] = M.reliability_curve(s, y, n_calibration_bins)
    out["self_verification_keyword_rate"] = M.self_verification_keyword_rate(
        [r["response"] for r in kept]
    )
    return to_jsonable(out)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(spearmanr(a, b).statistic)
