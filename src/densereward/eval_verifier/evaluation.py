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
from ..config import resolve_threshold
from ..errors import DataError
from ..io import to_jsonable

__all__ = ["HEADLINE", "evaluate"]

HEADLINE = (
    "auroc", "score_gap", "pairwise_accuracy",  # threshold-free first
    "tpr", "tnr", "balanced_accuracy", "precision", "verifier_gain",
)  # fmt: skip


def _family_gap(scores, labels, pids, fams, threshold) -> dict[str, Any]:
    """TTS pass rates per family (or generator) and the weak-to-strong gap closed by verification.

    ``mean_problem_pass_rate`` is the mean over problems of each problem's pass rate (the base of
    Zhou et al. eq. 5); the weaker / stronger group is the one with the lower / higher of it.
    """
    per = {}
    for f, ix in M.group_indices(fams).items():
        sub_p = [pids[i] for i in ix]
        k = len(ix) / len(set(sub_p))
        per[f] = {
            "mean_problem_pass_rate": M.mean_problem_pass_rate(labels[ix], sub_p),
            "tts_pass_rate": M.tts_pass_rate(scores[ix], labels[ix], sub_p, threshold),
            "tts_verification_gain": M.tts_verification_gain(
                scores[ix], labels[ix], sub_p, threshold
            ),
            "k_mean": k,
        }
    out: dict[str, Any] = {"groups": per}
    if len(per) >= 2:
        weak = min(per, key=lambda f: per[f]["mean_problem_pass_rate"])
        strong = max(per, key=lambda f: per[f]["mean_problem_pass_rate"])
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


def evaluate(
    rows: Sequence[Mapping[str, Any]],
    scores: Sequence[float | None],
    *,
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
        scores: ``(n,)`` verifier scores in ``[0, 1]``, ``None`` = abstained (excluded, counted).
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
        A JSON-ready dict (undefined values as ``None``, i.e. JSON null): ``counts``, ``overall`` (classification
        report + pairwise + TTS), ``soft``, ``confidence_intervals``, ``balanced``,
        ``per_generator``, ``per_generator_balanced``, ``difficulty`` (quartiles and
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
    keep = [i for i, s in enumerate(scores) if s is not None]
    if not keep:
        raise DataError("every response was abstained on; no metric can be computed")
    s = np.asarray([scores[i] for i in keep], dtype=np.float64)
    if s.min() < 0 or s.max() > 1:
        raise DataError("scores must lie in [0, 1]")
    kept = [rows[i] for i in keep]
    y = np.asarray([bool(r["is_correct"]) for r in kept], dtype=np.float64)
    pids = [str(r["problem_id"]) for r in kept]
    gens = [str(r["generator"]) for r in kept]
    fams = [str(r.get("family") or r["generator"]) for r in kept]
    gen_names = [g for g in dict.fromkeys(str(r["generator"]) for r in rows) if g in set(gens)]

    calibration = M.calibrate_threshold(s, y, pids)
    threshold, threshold_source = resolve_threshold(threshold)
    if threshold is None:
        threshold = calibration["threshold"]
        threshold_source = (
            f"auto: {threshold:.4g}, Youden's J on these {len(keep)} scored responses; rates at it "
            "are in-sample, the cross-validated ones are under 'Accept threshold'"
            if not math.isnan(threshold)
            else "0.5 (auto could not calibrate: one class only)"
        )
        threshold = 0.5 if math.isnan(threshold) else threshold

    def full_report(sc, lab, pid) -> dict[str, float]:
        rep = M.classification_report(sc, lab, threshold, n_bins=n_calibration_bins)
        rep.update(
            score_gap=M.mean_score_gap(sc, lab),
            pairwise_accuracy=M.pairwise_accuracy(sc, lab, pid),
            tie_rate=M.tie_rate(sc, lab, pid),
            score_gap_snr=M.score_gap_snr(sc, lab, pid),
            mean_problem_pass_rate=M.mean_problem_pass_rate(lab, pid),
            tts_pass_rate=M.tts_pass_rate(sc, lab, pid, threshold),
            tts_verification_gain=M.tts_verification_gain(sc, lab, pid, threshold),
            mean_score=float(np.mean(sc)) if len(sc) else math.nan,
        )
        return rep

    all_gens = [str(r["generator"]) for r in rows]
    abstained_by_gen = {
        g: sum(1 for i, r in enumerate(rows) if scores[i] is None and all_gens[i] == g)
        for g in gen_names
    }
    out: dict[str, Any] = {
        "threshold": threshold,
        "threshold_source": threshold_source,
        "counts": {
            "n_responses": len(rows),
            "n_scored": len(keep),
            "n_abstained": len(rows) - len(keep),
            "n_problems": len(set(str(r["problem_id"]) for r in rows)),
            "n_generators": len(gen_names),
            "abstained_per_generator": abstained_by_gen,
        },
        "generators": gen_names,
    }
    out["overall"] = full_report(s, y, pids)
    out["threshold_calibration"] = calibration
    out["soft"] = {
        k: v for k, v in M.classification_report(s, y, soft=True).items() if k in M.REPORT_KEYS[:9]
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
        fns["tts_verification_gain"] = lambda a, b, g: M.tts_verification_gain(a, b, g, threshold)
        ci = M.bootstrap_many(
            fns,
            s,
            y,
            groups=pids,
            n_resamples=n_bootstrap,
            seed=seed,
            pass_groups=("tts_verification_gain", "pairwise_accuracy"),
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
    for g, ix in M.group_indices(gens).items():
        rep = full_report(s[ix], y[ix], [pids[i] for i in ix])
        rep["n_abstained"] = float(abstained_by_gen[g])
        rep["self_verification_keyword_rate"] = M.self_verification_keyword_rate(
            [kept[i]["response"] for i in ix]
        )
        per_gen[g] = rep
    out["per_generator"] = per_gen

    # Difficulty d(x) over all generators (scored or not: it depends only on labels).
    all_y = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    diff = M.problem_difficulty(all_y, [str(r["problem_id"]) for r in rows], all_gens)
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
        rb = np.asarray([bin_of[p] for p in pids])
        labels_ = M.bin_labels(edges, prefix)
        bins_out = []
        for b, lab in enumerate(labels_):
            ix = np.flatnonzero(rb == b)
            rep = (
                full_report(s[ix], y[ix], [pids[i] for i in ix])
                if ix.size
                else {k: math.nan for k in M.REPORT_KEYS}
            )
            rep.update(label=lab, n_problems=float(int((pbins == b).sum())))
            per_g = {}
            for g in gen_names:
                gx = np.asarray([i for i in ix if gens[i] == g], dtype=np.int64)
                per_g[g] = M.classification_report(
                    s[gx], y[gx], threshold, n_bins=n_calibration_bins
                )
            rep["per_generator"] = per_g
            bins_out.append(rep)
        difficulty[name] = {"edges": edges, "bins": bins_out}
    difficulty["score_difficulty_spearman"] = _spearman(s, d_resp)
    out["difficulty"] = difficulty

    # Test-time scaling with verification; gap between weaker and stronger families.
    out["tts"] = {
        "pooled": {
            "mean_problem_pass_rate": M.mean_problem_pass_rate(y, pids),
            "tts_pass_rate": M.tts_pass_rate(s, y, pids, threshold),
            "tts_verification_gain": M.tts_verification_gain(s, y, pids, threshold),
            "k_mean": len(pids) / len(set(pids)),
        },
        "by_family": _family_gap(s, y, pids, fams, threshold),
    }
    rs = {
        "pooled": M.simulate_rejection_sampling(
            s, y, pids, max_attempts=rs_max_attempts, threshold=threshold, seed=seed
        )
    }
    for f, ix in M.group_indices(fams).items():
        rs[f] = M.simulate_rejection_sampling(
            s[ix],
            y[ix],
            [pids[i] for i in ix],
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
