"""The Markdown report of :func:`~densereward.eval_verifier.evaluation.evaluate`'s metrics, and
the output files (``scores.jsonl``, ``metrics.json``, ``report.md``, plots)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..abstentions import FIXES, NO_REASON
from ..config import VerifierConfig
from ..io import atomic_write_json, atomic_write_text, to_jsonable
from ..metrics.format import format_number, markdown_table
from .data import _keys, _sha1
from .evaluation import (
    HEADLINE,
    MIN_PER_CLASS,
    abstention_headline,
    counts_text,
    cross_validation_reason,
    evidence_notes,
    read_only_text,
)
from .plots import write_plots

__all__ = ["render_report", "write_outputs"]


_RATE_COLUMNS = (
    ("pass rate", "pass_rate"),
    ("TPR", "tpr"),
    ("TNR", "tnr"),
    ("bal. acc.", "balanced_accuracy"),
    ("precision", "precision"),
    ("verifier gain", "verifier_gain"),
    ("AUROC", "auroc"),
)
"""(header, metric key) of the rate columns shared by the per-generator and difficulty tables."""

_OVERALL_COLUMNS = (
    ("fpr", "fpr"),
    ("fnr", "fnr"),
    ("accuracy", "accuracy"),
    ("recall", "recall"),
    ("f1", "f1"),
    ("auprc", "auprc"),
    ("ece", "ece"),
    ("brier", "brier"),
    ("pass rate", "pass_rate"),
    ("pairwise acc.", "pairwise_accuracy"),
    ("tie rate", "tie_rate"),
    ("gap SNR", "score_gap_snr"),
)
"""(header, metric key) of the overall report's second table (``pass_rate``: pooled)."""


def _prompt_description(config: VerifierConfig, prompt: str | bool, *, scored: bool) -> str:
    """How the responses were judged, for the report header (``prompt``: a prompt kind of
    :data:`~densereward.eval_verifier.scoring.PROMPT_KINDS`; ``True`` / ``False`` mean
    ``answer_match`` / ``reference_free``).

    >>> _prompt_description(VerifierConfig(), "answer_match", scored=True)
    'reference-guided (answer_match: the final answer against the reference), style direct'
    >>> _prompt_description(VerifierConfig(), "anchored", scored=True)
    'reference-guided (anchored: the reference answer and the full response, the correctness criterion), style direct'
    >>> _prompt_description(VerifierConfig(), False, scored=True)
    'reference-free (the default criterion), style direct'
    """
    if not scored:
        return "unknown (scores read from a file)"
    if isinstance(prompt, bool):
        prompt = "answer_match" if prompt else "reference_free"
    crit = ", ".join(config.criteria) if config.criteria else None
    if prompt == "anchored":
        what = (
            f"anchored: the reference answer and the full response, "
            f"{f'criteria {crit}' if crit else 'the correctness criterion'}"
        )
        return f"reference-guided ({what}), style {config.style}"
    if prompt == "answer_match":
        return f"reference-guided (answer_match: the final answer against the reference), style {config.style}"
    return f"reference-free ({f'criteria {crit}' if crit else 'the default criterion'}), style {config.style}"


def _abstention_section(summary: Mapping[str, Any]) -> list[str]:
    """The report's lead when most reads abstained: counts, reasons, their fix, per generator."""
    n, n_abst = summary["n_responses"], summary["n_abstained"]
    kinds = dict.fromkeys(
        part for kind in (summary.get("reasons") or {}) for part in kind.split(" + ")
    )
    fixes = [FIXES[k] for k in kinds if k in FIXES and k != NO_REASON]
    per_gen = ", ".join(
        f"{g} {c['n_abstained']} of {c['n']}" for g, c in summary["per_generator"].items()
    )
    scored = n - n_abst
    return [
        f"## {abstention_headline(summary)}",
        "",
        f"The verifier gave no score for {n_abst} of the {n} responses "
        f"({format_number(100 * summary['fraction'], 0)} %), so "
        + (
            f"every metric below rests on the {scored} scored response(s) and does not measure "
            "this verifier."
            if scored
            else "no metric can be computed."
        )
        + (
            " Reasons are not recorded in the scores file: score again (without --scores) to see them."
            if summary.get("reasons") is None
            else ""
        ),
        "",
        *([f"Fix: {'; '.join(fixes)}.", ""] if fixes else []),
        f"Abstained per generator: {per_gen}. `densereward eval-verifier` exits with code 3 "
        "when most reads abstain (its outputs are still written).",
        "",
    ]


def render_report(
    metrics: Mapping[str, Any],
    *,
    title: str = "Verifier evaluation",
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Render the metrics dict of :func:`evaluate` as Markdown (undefined values shown as ``n/a``).

    When most reads abstained (``metrics["abstentions"]["most"]``) the report leads with that;
    a dict without ``overall`` (nothing was scored) renders as that lead and the counts alone.
    """
    c = metrics["counts"]
    abst = metrics.get("abstentions") or {}
    parts = [f"# {title}", ""]
    if abst.get("most"):
        parts += _abstention_section(abst)
    for k, v in (meta or {}).items():
        parts.append(f"- {k}: `{v}`")
    n_gen_scored = c.get("n_generators_scored", c["n_generators"])
    parts.append(
        f"- responses: {c['n_responses']} ({_scored_text(c, metrics.get('unread'))}; "
        f"{c['n_abstained']} abstained and excluded from the classification metrics, rejects "
        f"in test-time scaling), problems: {c['n_problems']}, generators: {c['n_generators']}"
        + (f" ({n_gen_scored} with a scored response)" if n_gen_scored != c["n_generators"] else "")
    )
    if "overall" not in metrics:
        return "\n".join([*parts, ""])
    o = metrics["overall"]
    parts += [
        f"- accept threshold: score >= {threshold_text(metrics)} "
        f"({metrics.get('threshold_source', 'configured')})",
        "",
        "## Overall",
        "",
    ]
    ci = metrics.get("confidence_intervals", {})
    head_rows = []
    for k in (*HEADLINE, "tts_verification_gain"):
        iv = ci.get(k)
        interval = f"[{format_number(iv['low'])}, {format_number(iv['high'])}]" if iv else ""
        head_rows.append([k, format_number(o.get(k)), counts_text(o, k), interval])
    notes = evidence_notes(metrics)
    for note in notes:  # one class, too few to rank, a gap too small to read: before the numbers
        parts += [f"**{note[0].upper()}{note[1:]}.**", ""]
    parts.append(
        markdown_table(["metric", "value", "rests on", "95% CI (problem bootstrap)"], head_rows)
    )
    unread = metrics.get("unread") or {}
    if unread.get("n"):
        parts += [
            "",
            f"Every figure counts the {unread['n']} response(s) scored 0 without a read "
            f"({unread['n_incorrect']} incorrect, {unread['n_correct']} correct by the labels) "
            "at score 0, as a reward scores them; over the "
            f"{c['n_scored'] - unread['n']} read response(s) alone AUROC is "
            f"{read_only_text(o)}.",
        ]
    parts += [
        "",
        markdown_table(
            ["", *(h for h, _ in _OVERALL_COLUMNS)],
            [
                ["value", *(format_number(o[k]) for _, k in _OVERALL_COLUMNS)],
                ["rests on", *(counts_text(o, k) for _, k in _OVERALL_COLUMNS)],
            ],
        ),
    ]
    b = metrics["balanced"]
    parts += [
        "",
        f"Balanced protocol (<= 8 per problem, 4 correct + 4 incorrect when possible; n = {format_number(b['n'], 0)}): "
        f"TPR {format_number(b['tpr'])}, TNR {format_number(b['tnr'])}, balanced accuracy {format_number(b['balanced_accuracy'])}.",
        "",
    ]
    s = metrics["soft"]
    parts += [
        f"Soft variant (V = score): TPR {format_number(s['tpr'])} ({counts_text(s, 'tpr')}), "
        f"TNR {format_number(s['tnr'])} ({counts_text(s, 'tnr')}), precision "
        f"{format_number(s['precision'])} ({counts_text(s, 'pass_rate')}, each weighted by "
        "its score).",
        "",
    ]
    cal = metrics.get("threshold_calibration")
    if cal:
        ins, cv = cal["in_sample"], cal["cross_validated"]
        cv_thr = cv.get("thresholds") or []
        cv_how = (
            f"{cv['n_splits']}-fold cross-validated over problems (threshold re-chosen on each "
            f"training split: {', '.join(format_number(t) for t in cv_thr)})"
            if cv.get("n_splits")
            else f"not estimable ({cross_validation_reason(metrics)})"
        )
        best = [
            threshold_text(cal),
            format_number(ins["tpr"]),
            format_number(ins["tnr"]),
            format_number(ins["balanced_accuracy"]),
            "best on these data (in-sample, optimistic)",
        ]
        if cal["threshold"] == metrics["threshold"]:  # auto chose it: one row, not the same twice
            best[-1] += "; the accept threshold of this report"
            rows = [best]
        else:
            rows = [
                [
                    threshold_text(metrics),
                    format_number(o.get("tpr")),
                    format_number(o.get("tnr")),
                    format_number(o.get("balanced_accuracy")),
                    "the accept threshold of this report: "
                    + str(metrics.get("threshold_source", "configured")),
                ],
                best,
            ]
        rows.append(
            [
                "per fold",
                format_number(cv["tpr"]),
                format_number(cv["tnr"]),
                format_number(cv["balanced_accuracy"]),
                cv_how,
            ]
        )
        parts += [
            "## Accept threshold",
            "",
            markdown_table(["threshold", "TPR", "TNR", "balanced accuracy", "estimate"], rows),
            "",
            "The best threshold maximises balanced accuracy (Youden's J). "
            + _threshold_advice(cal["threshold"], abst, threshold_text(cal)),
            "",
        ]

    parts += ["## Per generator", ""]
    pg, pgb = metrics["per_generator"], metrics["per_generator_balanced"]
    none = {"tpr": None, "tnr": None}  # a generator with no scored response
    parts.append(
        markdown_table(
            [
                "generator",
                "n",
                "abstained",
                *(h for h, _ in _RATE_COLUMNS),
                "TPR (shared)",
                "TNR (shared)",
                "self-verification rate",
            ],
            [
                [
                    g,
                    format_number(r["n"], 0),
                    format_number(r["n_abstained"], 0),
                    *(_counted(r, k) for _, k in _RATE_COLUMNS),
                    _shared(pgb.get(g, none), "tpr"),
                    _shared(pgb.get(g, none), "tnr"),
                    f"{format_number(r['self_verification_keyword_rate'])} "
                    f"({format_number(r['n'], 0)} scored)",
                ]
                for g, r in pg.items()
            ],
        )
    )
    any_g = next(iter(pgb.values()))
    parts += [
        "",
        _COUNTS_NOTE,
        "",
        f"TPR/TNR (shared): Zhou et al. protocol, on the {format_number(any_g['n_problems_tpr'], 0)} problems where every "
        f"generator has a correct response (TPR) / the {format_number(any_g['n_problems_tnr'], 0)} where every generator has "
        "an incorrect one (TNR); one response per problem, 8 repeats averaged. Self-verification "
        "rate: the share of the generator's scored responses containing a self-verification "
        "phrase (verify, double-check, let me check, recheck, confirm, wait, ...: whole words, "
        "any case; `densereward.metrics.SELF_VERIFICATION_KEYWORDS`, after Lu et al. 2025 app. G).",
        "",
    ]

    d = metrics["difficulty"]
    parts += ["## By difficulty", "", d["definition"] + ".", ""]
    filled = {
        name: [r for r in d[name]["bins"] if r["n_problems"]]
        for name in ("quartiles", "equal_width")
    }
    for name in ("quartiles", "equal_width"):
        parts += [f"### {name.replace('_', '-')} bins", ""]
        empty = [r["label"] for r in d[name]["bins"] if not r["n_problems"]]
        if empty:
            why = " (tied d(x) values share one quartile)" if name == "quartiles" else ""
            parts += [f"Left out, no problem in them: {', '.join(empty)}{why}.", ""]
        parts.append(
            markdown_table(
                [
                    "bin",
                    "problems",
                    "responses",
                    *(h for h, _ in _RATE_COLUMNS),
                ],
                [
                    [
                        r["label"],
                        format_number(r["n_problems"], 0),
                        format_number(r["n"], 0),
                        *(_counted(r, k) for _, k in _RATE_COLUMNS),
                    ]
                    for r in filled[name]
                ],
            )
        )
        parts.append("")
    gens = metrics["generators"]
    parts += ["### TPR / TNR per generator and difficulty quartile", ""]
    parts.append(
        markdown_table(
            ["bin", *[f"{g} TPR / TNR" for g in gens]],
            [
                [
                    r["label"],
                    *[
                        f"{_counted(r['per_generator'][g], 'tpr')} / "
                        f"{_counted(r['per_generator'][g], 'tnr')}"
                        for g in gens
                    ],
                ]
                for r in filled["quartiles"]
            ],
        )
    )
    parts += [
        "",
        f"Spearman correlation between score and problem easiness d(x): {format_number(d['score_difficulty_spearman'])}"
        + (f" ({why})" if (why := d.get("score_difficulty_spearman_reason")) else "")
        + ".",
        "",
    ]

    t = metrics["tts"]
    parts += ["## Verification at test time", ""]
    p = t["pooled"]
    parts.append(
        f"Pooled (all generators' responses as the {_k_text(p)} candidates of a problem, "
        f"{p['n_problems']} problems, {p['n_responses']} responses): "
        f"mean problem pass rate {format_number(p['mean_problem_pass_rate'])} -> verified pass rate "
        f"{format_number(p['tts_pass_rate'])} "
        f"(Zhou et al. eq. 5; gain {format_number(p['tts_verification_gain'])}, eq. 6)."
    )
    fam = t["by_family"]
    parts += [
        "",
        markdown_table(
            [
                "group",
                "problems",
                "K (responses per problem)",
                "mean problem pass rate",
                "verified pass rate",
                "gain",
            ],
            [
                [
                    f,
                    format_number(r["n_problems"], 0),
                    _k_text(r, bare=True),
                    r["mean_problem_pass_rate"],
                    r["tts_pass_rate"],
                    r["tts_verification_gain"],
                ]
                for f, r in fam["groups"].items()
            ],
        ),
    ]
    if "equal_pass_rate" in fam:
        both = "both" if len(fam["groups"]) == 2 else f"all {len(fam['groups'])}"
        parts += [
            "",
            f"{both[0].upper()}{both[1:]} groups pass {format_number(fam['equal_pass_rate'])} of "
            "problems (mean problem pass rate): no gap between a weaker and a stronger group to close.",
        ]
    if "gap_closed" in fam:
        parts += [
            "",
            f"Share of the gap between the weaker ({fam['weak']}) and the stronger ({fam['strong']}) group "
            f"closed by verification: {format_number(fam['gap_closed'])}.",
        ]
    cf = metrics["closed_form"]
    parts += [
        "",
        f"Verifier gain (Lu et al. eq. 1) {format_number(o['verifier_gain'])}; closed form from accuracy, TPR, FPR "
        f"(App. A): precision {format_number(cf['precision'])}, gain {format_number(cf['verifier_gain'])}. "
        "This pooled gain treats a resample as a fresh draw from all problems; rejection sampling stays on one "
        "problem, so its gain (below, M -> inf: the per-problem precision) is the one a solver would see.",
        "",
    ]
    parts.append(
        markdown_table(
            [
                "rejection sampling",
                "problems",
                "M",
                "accuracy",
                "base",
                "empirical gain",
                "gain (M -> inf)",
                "verifier gain",
                "accept rate",
                "mean attempts",
            ],
            [
                [
                    k,
                    format_number(r["n_problems"], 0),
                    format_number(r["max_attempts"], 0),
                    r["accuracy"],
                    r["base_accuracy"],
                    r["empirical_gain"],
                    r["expected_gain_infinite_m"],
                    r["verifier_gain"],
                    r["acceptance_rate"],
                    r["mean_attempts"],
                ]
                for k, r in metrics["rejection_sampling"].items()
            ],
        )
    )
    parts += [
        "",
        "## Calibration",
        "",
        f"ECE {format_number(o['ece'])}, Brier {format_number(o['brier'])} "
        f"({_calibration_counts(o)}); see `reliability.png`.",
        "",
        "## Plots",
        "",
        "![TPR/TNR by difficulty](tpr_tnr_by_difficulty.png)",
        "",
        "![TPR/TNR per generator](tpr_tnr_by_generator.png)",
        "",
        "![Reliability](reliability.png)",
        "",
        "Per-response scores: `scores.jsonl` (TPR = mean of score >= threshold over is_correct rows).",
        "",
    ]
    return "\n".join(parts)


_COUNTS_NOTE = (
    "In parentheses, the scored responses each rate rests on: TPR the correct ones, TNR the "
    "incorrect ones, balanced accuracy and AUROC both, precision and verifier gain the accepted "
    "ones, pass rate all; the shared TPR / TNR the problems of the protocol. A class with fewer "
    f"than {MIN_PER_CLASS} responses makes its rates no verdict on the verifier."
)


def _counted(rep: Mapping[str, Any], key: str) -> str:
    """A rate with the counts it rests on: ``'0.500 (2 correct)'``; ``'n/a (0 correct)'``.

    >>> _counted({"tpr": 0.5, "n": 3.0, "n_pos": 2.0, "n_neg": 1.0}, "tpr")
    '0.500 (2 correct)'
    """
    counts = counts_text(rep, key)
    return f"{format_number(rep.get(key))} ({counts})" if counts else format_number(rep.get(key))


def _shared(rep: Mapping[str, Any], key: str) -> str:
    """A TPR / TNR of the shared protocol with the problems it rests on."""
    n = rep.get(f"n_problems_{key}")
    value = format_number(rep.get(key))
    return value if n is None else f"{value} ({format_number(n, 0)} problems)"


def _calibration_counts(overall: Mapping[str, Any]) -> str:
    """The responses ECE and Brier rest on.

    >>> _calibration_counts({"n": 8.0, "n_pos": 5.0, "n_neg": 3.0})
    'n=8 scored: 5 correct, 3 incorrect'
    """
    n = {k: int(overall.get(k) or 0) for k in ("n", "n_pos", "n_neg")}
    return f"n={n['n']} scored: {n['n_pos']} correct, {n['n_neg']} incorrect"


def _scored_text(counts: Mapping[str, Any], unread: Mapping[str, Any] | None) -> str:
    """How many responses were scored, and of them how many without a model read.

    >>> _scored_text({"n_scored": 14}, {"n": 5, "reasons": {"no final answer": 4, "empty response": 1}})
    '14 scored: 9 read by the verifier, 5 scored 0 without a read (no final answer 4, empty response 1)'
    >>> _scored_text({"n_scored": 14}, None)
    '14 scored (which were read by the verifier is not recorded in the scores file)'
    """
    n = counts["n_scored"]
    if not n:
        return "0 scored"
    if unread is None:
        return f"{n} scored (which were read by the verifier is not recorded in the scores file)"
    if not unread["n"]:
        return f"{n} scored, every one read by the verifier"
    why = ", ".join(f"{k} {v}" for k, v in unread["reasons"].items())
    return f"{n} scored: {n - unread['n']} read by the verifier, {unread['n']} scored 0 without a read ({why})"


def _k_text(tts: Mapping[str, Any], *, bare: bool = False) -> str:
    """K, the responses per problem: a whole number, or its range and mean.

    >>> _k_text({"k_mean": 4.0, "k_min": 4, "k_max": 4}), _k_text({"k_mean": 2.8, "k_min": 1, "k_max": 4})
    ('K = 4', 'K = 1-4 (mean 2.8)')
    """
    lo, hi = tts.get("k_min"), tts.get("k_max")
    if lo is not None and lo == hi:
        text = f"{int(lo)}"
    elif lo is not None:
        text = f"{int(lo)}-{int(hi)} (mean {format_number(tts['k_mean'], 1)})"
    else:  # metrics of an earlier version: the mean alone
        text = f"{format_number(tts['k_mean'], 1)} (mean)"
    return text if bare else f"K = {text}"


def threshold_text(metrics: Mapping[str, Any]) -> str:
    """``metrics["threshold_text"]`` (:func:`~densereward.metrics.format.format_threshold`:
    a copied value accepts the same scores), or for metrics of an earlier version the
    threshold with 4 decimals.

    >>> threshold_text({"threshold": 0.14998714, "threshold_text": "0.1499"})
    '0.1499'
    >>> threshold_text({"threshold": 0.61234})
    '0.6123'
    """
    return metrics.get("threshold_text") or format_number(metrics.get("threshold"), 4)


def _threshold_advice(
    threshold: float | None, abstentions: Mapping[str, Any], text: str | None = None
) -> str:
    """The sentence after the threshold table: the setting to use (``text``: the threshold as
    :func:`threshold_text` writes it), or why there is none.

    >>> _threshold_advice(0.61234, {})
    'To accept at it in training or evaluation: `verifier.threshold=0.6123`.'
    >>> _threshold_advice(0.14998714, {}, "0.1499")
    'To accept at it in training or evaluation: `verifier.threshold=0.1499`.'
    >>> _threshold_advice(float("nan"), {})[:40]
    'No threshold can be calibrated on these '
    """
    if abstentions.get("most"):
        return (
            "None is advised: most reads abstained, so a threshold fitted to the few scored "
            "responses would not describe this verifier (see the top of this report)."
        )
    if threshold is None or threshold != threshold:
        return (
            "No threshold can be calibrated on these data: the scored responses hold one class "
            "only (all correct or all incorrect), so there is nothing to separate; keep "
            "`verifier.threshold` as it is or calibrate on data with both."
        )
    return (
        "To accept at it in training or evaluation: "
        f"`verifier.threshold={text or format_number(threshold, 4)}`."
    )


def write_outputs(
    out_dir: str | Path,
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Any],
    *,
    meta: Mapping[str, Any] | None = None,
    report_meta: Mapping[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, Path]:
    """Write ``scores.jsonl``, ``metrics.json``, ``report.md`` and the plots, each atomically.

    Args:
        out_dir: output directory (created).
        rows: ``(n,)`` rows as from :func:`load_responses`.
        records: ``(n,)`` ``{score, mass, reason}`` per row (``score`` None = abstained).
        metrics: the dict of :func:`evaluate` (or, when nothing was scored, ``counts``,
            ``abstentions`` and ``generators`` alone: the report and plot say why).
        meta: stored under ``meta`` in ``metrics.json`` (run settings, verifier config and stats).
        report_meta: short ``name: value`` lines at the top of ``report.md``.
        plots: also write the PNG plots.

    Returns:
        ``{"scores", "metrics", "report", <plot stems>}`` -> path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for key, row, rec in zip(_keys(rows), rows, records, strict=True):
        lines.append(
            to_jsonable(
                {
                    "problem_id": key[0],
                    "generator": key[1],
                    "response_index": key[2],
                    "is_correct": bool(row["is_correct"]),
                    "score": rec["score"],
                    "mass": rec.get("mass"),
                    "abstained": rec["score"] is None,
                    # unknown stays unknown (a scores file without reasons): not "no reason"
                    **({"reason": rec["reason"]} if "reason" in rec else {}),
                    "response_sha1": _sha1(row["response"]),
                }
            )
        )
    paths = {
        "scores": atomic_write_text(
            out / "scores.jsonl", "".join(json.dumps(x) + "\n" for x in lines)
        )
    }
    paths["metrics"] = atomic_write_json(
        out / "metrics.json", {"meta": dict(meta or {}), **metrics}
    )
    paths["report"] = atomic_write_text(out / "report.md", render_report(metrics, meta=report_meta))
    if plots:
        for p in write_plots(metrics, out):
            paths[p.stem] = p
    return paths
