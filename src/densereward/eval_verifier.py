"""``densereward eval-verifier``: score a labelled response file and report verification dynamics.

Input is JSONL, one response a row: ``problem``, ``response``, ``is_correct``, ``generator``
(optional ``problem_id``, ``reference``, ``family``), or the GSM8K model-solutions format
(``question``, ``ground_truth`` and one ``{solution, is_correct}`` object per generator),
detected from the first row. Scores come from a :class:`densereward.verifier.Verifier`
built from ``--config``/``--set``, or from a ``scores.jsonl`` written by an earlier run
(``--scores``), so metrics can be recomputed without re-scoring.

Outputs in ``--out``: ``metrics.json`` (every metric), ``report.md``, ``scores.jsonl`` (one
row per response: ``problem_id, generator, is_correct, score, mass, abstained``, plus
``response_index`` and ``response_sha1`` to align a reuse) and PNG plots. Abstained
responses (score ``None``) are excluded from the metrics and counted.

Python API::

    rows = load_responses("model_solutions_dev.jsonl", limit=10)
    records = score_responses(rows, VerifierConfig())
    metrics = evaluate(rows, [r["score"] for r in records])
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as M
from .config import (
    VerifierConfig,
    add_override_arguments,
    apply_overrides,
    check_sections,
    field_names,
    from_dict,
    load_yaml,
    overrides_from,
    resolve_threshold,
)
from .errors import ConfigError, DataError
from .io import atomic_write_json, atomic_write_text, read_jsonl, to_jsonable

__all__ = [
    "GSM8K_GENERATORS",
    "load_gsm8k_model_solutions",
    "load_responses",
    "load_scores",
    "align_scores",
    "score_responses",
    "evaluate",
    "render_report",
    "write_plots",
    "write_outputs",
    "build_config",
    "add_arguments",
    "main",
]

logger = logging.getLogger(__name__)

GSM8K_GENERATORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
"""Generators of the GSM8K example model solutions (Cobbe et al. 2021): 6B and 175B GPT-3,
each fine-tuned ("finetuning") and the verification-trained variant ("verification")."""

HEADLINE = (
    "auroc", "score_gap", "pairwise_accuracy",  # threshold-free first
    "tpr", "tnr", "balanced_accuracy", "precision", "verifier_gain",
)  # fmt: skip


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _label(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise DataError(f"{where}: is_correct must be a boolean (or 0/1), got {value!r}")


def load_gsm8k_model_solutions(
    path: str | Path, *, limit: int | None = None, allow_unlabelled: bool = False
) -> list[dict[str, Any]]:
    """Rows of the GSM8K example model solutions (``gsm8k/model_solutions_dev.jsonl``).

    Each input line is one problem with four generators (:data:`GSM8K_GENERATORS`); it
    becomes four rows ``{problem_id, problem, response, is_correct, generator, family,
    reference}`` with ``problem_id = "gsm8k-dev-<line>"`` and ``family`` the model size
    (``6b``/``175b``). The responses keep GSM8K's ``<<a*b=c>>`` calculator annotations.

    Args:
        path: the JSONL file.
        limit: keep the first ``limit`` problems (``None`` = all).

    Raises:
        DataError: if a line lacks ``question`` or a generator's ``solution``/``is_correct``.
    """
    rows: list[dict[str, Any]] = []
    for i, rec in enumerate(read_jsonl(path)):
        if limit is not None and i >= limit:
            break
        if "question" not in rec:
            raise DataError(f"{path}:{i + 1}: GSM8K model-solutions row lacks 'question'")
        gens = [g for g in rec if isinstance(rec[g], Mapping) and "solution" in rec[g]]
        if not gens:
            raise DataError(f"{path}:{i + 1}: no generator object with 'solution' and 'is_correct'")
        for g in gens:
            sol = rec[g]
            if sol.get("is_correct") is None and not allow_unlabelled:
                raise DataError(f"{path}:{i + 1}: generator {g!r} lacks 'is_correct'")
            rows.append(
                {
                    "problem_id": f"gsm8k-dev-{i}",
                    "problem": rec["question"],
                    "response": sol["solution"] or "",
                    "is_correct": None
                    if sol.get("is_correct") is None
                    else _label(sol["is_correct"], f"{path}:{i + 1}:{g}"),
                    "generator": g,
                    "family": g.split("_", 1)[0],
                    "reference": rec.get("ground_truth"),
                }
            )
    return rows


def load_responses(
    path: str | Path, *, limit: int | None = None, allow_unlabelled: bool = False
) -> list[dict[str, Any]]:
    """Load a labelled response file, detecting the GSM8K model-solutions format.

    Generic rows need ``problem``, ``response``, ``is_correct``, ``generator``; ``problem_id``
    defaults to a hash of the problem text, ``family`` to ``None``, ``reference`` to ``None``.

    Args:
        path: JSONL file.
        limit: keep the responses of the first ``limit`` distinct problems.
        allow_unlabelled: accept rows without ``is_correct`` (it becomes ``None``; label them
            with :func:`label_with_sparse_reward`).

    Returns:
        Rows ``{problem_id, problem, response, is_correct, generator, family, reference}``.

    Raises:
        DataError: if the file is missing, empty, or a row lacks a required field.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"response file not found: {p}")
    first = next(read_jsonl(p), None)
    if first is None:
        raise DataError(f"{p} holds no rows")
    if "question" in first and "response" not in first:
        return load_gsm8k_model_solutions(p, limit=limit, allow_unlabelled=allow_unlabelled)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    need = ("problem", "response", "generator") + (() if allow_unlabelled else ("is_correct",))
    for i, rec in enumerate(read_jsonl(p)):
        missing = [k for k in need if k not in rec]
        if missing:
            raise DataError(
                f"{p}:{i + 1}: missing field(s) {missing}; need problem, response, is_correct, "
                "generator (rows with a 'reference' but no 'is_correct' can be labelled by the "
                "sparse reward: pass --label-with-sparse)"
            )
        pid = str(rec.get("problem_id") or _sha1(str(rec["problem"])))
        if pid not in seen:
            if limit is not None and len(seen) >= limit:
                continue
            seen.add(pid)
        rows.append(
            {
                "problem_id": pid,
                "problem": str(rec["problem"]),
                "response": str(rec["response"] or ""),
                "is_correct": None
                if rec.get("is_correct") is None and allow_unlabelled
                else _label(rec.get("is_correct"), f"{p}:{i + 1}"),
                "generator": str(rec["generator"]),
                "family": rec.get("family"),
                "reference": rec.get("reference"),
            }
        )
    return rows


def _keys(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """``(problem_id, generator, k)`` with k the occurrence of that pair (several samples per generator)."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in rows:
        pair = (str(r["problem_id"]), str(r["generator"]))
        out.append((*pair, seen.get(pair, 0)))
        seen[pair] = seen.get(pair, 0) + 1
    return out


def load_scores(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``scores.jsonl`` (as written by this command).

    Raises:
        DataError: if the file is missing or a row lacks ``problem_id``/``generator``/``score``.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"scores file not found: {p}")
    recs = list(read_jsonl(p))
    for i, r in enumerate(recs):
        if not {"problem_id", "generator", "score"} <= set(r):
            raise DataError(f"{p}:{i + 1}: a score row needs problem_id, generator and score")
    return recs


def align_scores(
    rows: Sequence[Mapping[str, Any]], score_records: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Match pre-computed score records to rows by ``(problem_id, generator, response_index)``.

    Extra score records (e.g. from a run without ``--limit``) are ignored.

    Returns:
        One record per row ``{score, mass, abstained}``, aligned with ``rows``.

    Raises:
        DataError: if a row has no score record, or the stored ``response_sha1`` shows the
            record was computed for a different response text.
    """
    index: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for key, rec in zip(_keys(score_records), score_records, strict=True):
        k = int(rec.get("response_index", key[2]))
        index[(key[0], key[1], k)] = rec
    out = []
    for key, row in zip(_keys(rows), rows, strict=True):
        rec = index.get(key)
        if rec is None:
            raise DataError(
                f"no score for problem_id={key[0]!r} generator={key[1]!r} #{key[2]} in the scores file"
            )
        sha = rec.get("response_sha1")
        if sha is not None and sha != _sha1(row["response"]):
            raise DataError(f"scores file was computed for a different response at {key}; re-score")
        score = rec.get("score")
        if score is not None and not (isinstance(score, (int, float)) and math.isfinite(score)):
            raise DataError(f"invalid score {score!r} at {key}")
        out.append(
            {
                "score": None if score is None else float(score),
                "mass": rec.get("mass"),
                "abstained": score is None,
            }
        )
    return out


def score_responses(
    rows: Sequence[Mapping[str, Any]],
    config: VerifierConfig,
    *,
    chunk_size: int = 64,
    reference_guided: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score every row with ``Verifier(config).score_batch``.

    By default the verifier sees the problem and the response only. With
    ``reference_guided=True`` it also gets each row's reference answer (the final answer of
    ``reference``, e.g. GSM8K's ``A: 18`` / ``#### 18``), which makes the engine use its
    reference-guided ``answer_match`` criterion when no criteria are configured.

    Returns:
        ``(records, stats)``: one ``{score, mass, abstained, reason, per_criterion,
        per_repeat}`` per row (the reads behind the score: ``per_repeat`` criterion-major,
        C x K values in ``[0, 1]`` or ``None``; both empty/``None`` for a row scored without
        a model call), and the verifier's ``stats.as_dict()``.

    Raises:
        BackendError, AbstentionError: as the verifier raises them.
    """
    from .rewards.math import reference_answer  # the one answer-extraction policy
    from .verifier import Verifier

    v = Verifier(config)
    records: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start : start + chunk_size]
            refs = (
                [reference_answer(r.get("reference")) for r in chunk] if reference_guided else None
            )
            results = v.score_batch(
                problems=[r["problem"] for r in chunk],
                responses=[r["response"] for r in chunk],
                references=refs,
            )
            for res in results:
                records.append(
                    {
                        "score": res.value,
                        "mass": res.mass,
                        "abstained": res.value is None,
                        "reason": res.reason,
                        "per_criterion": res.per_criterion,
                        "per_repeat": res.per_repeat,
                    }
                )
            logger.info(
                "scored %d/%d responses (%.1f s)", len(records), len(rows), time.perf_counter() - t0
            )
        stats = v.stats.as_dict()
    finally:
        v.close()
    return records, stats


def label_with_sparse_reward(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill missing ``is_correct`` labels with the sparse reward (Math-Verify vs ``reference``).

    Rows that have a label keep it; the sparse reward's agreement with those labels is
    measured at the same time (:func:`densereward.rewards.agreement.sparse_agreement`).

    Returns:
        ``{"n_labelled": rows labelled now, "agreement": sparse_agreement(...) on the rows that
        already had labels}``.

    Raises:
        DataError: if a row without a label has no reference, or its check abstained.
    """
    from .rewards.agreement import sparse_agreement, sparse_labels
    from .rewards.math import MathChecker

    checker = MathChecker()
    try:
        agreement = sparse_agreement([r for r in rows if r.get("is_correct") is not None], checker)
        todo = [r for r in rows if r.get("is_correct") is None]
        for r, c in zip(todo, sparse_labels(todo, checker), strict=True):
            if c["reward"] is None:
                raise DataError(
                    f"cannot label problem {r['problem_id']!r} ({r['generator']}) with the sparse "
                    f"reward: {c['reason'] or 'no reference'}"
                )
            r["is_correct"] = c["reward"] == 1.0
            r["label_source"] = "sparse_reward"
    finally:
        checker.close()
    return {"n_labelled": len(todo), "agreement": agreement}


def _family_gap(scores, labels, pids, fams, threshold) -> dict[str, Any]:
    """TTS pass rates per family (or generator) and the weak-to-strong gap closed by verification."""
    per = {}
    for f, ix in M.tts.group_indices(fams).items():
        sub_p = [pids[i] for i in ix]
        k = len(ix) / len(set(sub_p))
        per[f] = {
            "pass_rate": M.pass_rate(labels[ix], sub_p),
            "tts_pass_rate": M.tts_pass_rate(scores[ix], labels[ix], sub_p, threshold),
            "tts_verification_gain": M.tts_verification_gain(
                scores[ix], labels[ix], sub_p, threshold
            ),
            "k_mean": k,
        }
    out: dict[str, Any] = {"groups": per}
    if len(per) >= 2:
        weak = min(per, key=lambda f: per[f]["pass_rate"])
        strong = max(per, key=lambda f: per[f]["pass_rate"])
        out.update(
            weak=weak,
            strong=strong,
            gap_closed=M.gap_closed(
                per[weak]["pass_rate"], per[weak]["tts_pass_rate"], per[strong]["pass_rate"]
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
            plain_pass_rate=M.pass_rate(lab, pid),
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
    for g, ix in M.tts.group_indices(gens).items():
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
            "pass_rate": M.pass_rate(y, pids),
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
    for f, ix in M.tts.group_indices(fams).items():
        rs[f] = M.simulate_rejection_sampling(
            s[ix],
            y[ix],
            [pids[i] for i in ix],
            max_attempts=rs_max_attempts,
            threshold=threshold,
            seed=seed,
        )
    out["rejection_sampling"] = rs
    out["closed_form"] = {
        "precision": M.precision_from_rates(
            float(y.mean()), out["overall"]["tpr"], out["overall"]["fpr"]
        )
        if not (math.isnan(out["overall"]["tpr"]) or math.isnan(out["overall"]["fpr"]))
        else math.nan,
    }
    out["closed_form"]["verifier_gain"] = out["closed_form"]["precision"] - float(y.mean())
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


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


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


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows
    ]
    return "\n".join(lines)


def _prompt_description(config: VerifierConfig, reference_guided: bool, *, scored: bool) -> str:
    """How the responses were judged, for the report header.

    >>> _prompt_description(VerifierConfig(), True, scored=True)
    'reference-guided (answer_match: the final answer against the reference), style direct'
    >>> _prompt_description(VerifierConfig(), False, scored=True)
    'reference-free (the default criterion), style direct'
    """
    if not scored:
        return "unknown (scores read from a file)"
    crit = ", ".join(config.criteria) if config.criteria else None
    if reference_guided:
        what = (
            f"criteria {crit} with the reference"
            if crit
            else "answer_match: the final answer against the reference"
        )
        return f"reference-guided ({what}), style {config.style}"
    return f"reference-free ({f'criteria {crit}' if crit else 'the default criterion'}), style {config.style}"


def render_report(
    metrics: Mapping[str, Any],
    *,
    title: str = "Verifier evaluation",
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Render the metrics dict of :func:`evaluate` as Markdown (undefined values shown as ``n/a``)."""
    c = metrics["counts"]
    o = metrics["overall"]
    parts = [f"# {title}", ""]
    for k, v in (meta or {}).items():
        parts.append(f"- {k}: `{v}`")
    parts += [
        f"- responses: {c['n_responses']} ({c['n_scored']} scored, {c['n_abstained']} abstained and excluded), "
        f"problems: {c['n_problems']}, generators: {c['n_generators']}",
        f"- accept threshold: score >= {_fmt(metrics['threshold'], 4)} "
        f"({metrics.get('threshold_source', 'configured')})",
        "",
        "## Overall",
        "",
    ]
    ci = metrics.get("confidence_intervals", {})
    head_rows = []
    for k in (*HEADLINE, "tts_verification_gain"):
        iv = ci.get(k)
        interval = f"[{_fmt(iv['low'])}, {_fmt(iv['high'])}]" if iv else ""
        head_rows.append([k, _fmt(o.get(k)), interval])
    parts.append(_table(["metric", "value", "95% CI (problem bootstrap)"], head_rows))
    parts += [
        "",
        _table(
            [
                "fpr",
                "fnr",
                "accuracy",
                "recall",
                "f1",
                "auprc",
                "ece",
                "brier",
                "pass rate",
                "pairwise acc.",
                "tie rate",
                "gap SNR",
            ],
            [
                [
                    o[k]
                    for k in (
                        "fpr",
                        "fnr",
                        "accuracy",
                        "recall",
                        "f1",
                        "auprc",
                        "ece",
                        "brier",
                        "pass_rate",
                        "pairwise_accuracy",
                        "tie_rate",
                        "score_gap_snr",
                    )
                ]
            ],
        ),
    ]
    b = metrics["balanced"]
    parts += [
        "",
        f"Balanced protocol (<= 8 per problem, 4 correct + 4 incorrect when possible; n = {_fmt(b['n'], 0)}): "
        f"TPR {_fmt(b['tpr'])}, TNR {_fmt(b['tnr'])}, balanced accuracy {_fmt(b['balanced_accuracy'])}.",
        "",
    ]
    s = metrics["soft"]
    parts += [
        f"Soft variant (V = score): TPR {_fmt(s['tpr'])}, TNR {_fmt(s['tnr'])}, precision {_fmt(s['precision'])}.",
        "",
    ]
    cal = metrics.get("threshold_calibration")
    if cal:
        ins, cv = cal["in_sample"], cal["cross_validated"]
        cv_thr = cv.get("thresholds") or []
        cv_how = (
            f"{cv['n_splits']}-fold cross-validated over problems (threshold re-chosen on each "
            f"training split: {', '.join(_fmt(t) for t in cv_thr)})"
            if cv.get("n_splits")
            else "not estimable (one class or fewer than 2 problems)"
        )
        parts += [
            "## Accept threshold",
            "",
            _table(
                ["threshold", "TPR", "TNR", "balanced accuracy", "estimate"],
                [
                    [
                        _fmt(metrics["threshold"]),
                        _fmt(o.get("tpr")),
                        _fmt(o.get("tnr")),
                        _fmt(o.get("balanced_accuracy")),
                        "the accept threshold of this report: "
                        + str(metrics.get("threshold_source", "configured")),
                    ],
                    [
                        _fmt(cal["threshold"]),
                        _fmt(ins["tpr"]),
                        _fmt(ins["tnr"]),
                        _fmt(ins["balanced_accuracy"]),
                        "best on these data (in-sample, optimistic)",
                    ],
                    [
                        "per fold",
                        _fmt(cv["tpr"]),
                        _fmt(cv["tnr"]),
                        _fmt(cv["balanced_accuracy"]),
                        cv_how,
                    ],
                ],
            ),  # fmt: skip
            "",
            "The best threshold maximises balanced accuracy (Youden's J). To accept at it in "
            f"training or evaluation: `verifier.threshold={_fmt(cal['threshold'], 4)}`.",
            "",
        ]

    parts += ["## Per generator", ""]
    pg, pgb = metrics["per_generator"], metrics["per_generator_balanced"]
    parts.append(
        _table(
            [
                "generator",
                "n",
                "abstained",
                *(h for h, _ in _RATE_COLUMNS),
                "TPR (shared)",
                "TNR (shared)",
                "self-verif. kw",
            ],
            [
                [
                    g,
                    _fmt(r["n"], 0),
                    _fmt(r["n_abstained"], 0),
                    *(r[k] for _, k in _RATE_COLUMNS),
                    pgb[g]["tpr"],
                    pgb[g]["tnr"],
                    r["self_verification_keyword_rate"],
                ]
                for g, r in pg.items()
            ],
        )
    )
    any_g = next(iter(pgb.values()))
    parts += [
        "",
        f"TPR/TNR (shared): Zhou et al. protocol, on the {_fmt(any_g['n_problems_tpr'], 0)} problems where every "
        f"generator has a correct response (TPR) / the {_fmt(any_g['n_problems_tnr'], 0)} where every generator has "
        "an incorrect one (TNR); one response per problem, 8 repeats averaged.",
        "",
    ]

    d = metrics["difficulty"]
    parts += ["## By difficulty", "", d["definition"] + ".", ""]
    for name in ("quartiles", "equal_width"):
        parts += [f"### {name.replace('_', '-')} bins", ""]
        parts.append(
            _table(
                [
                    "bin",
                    "problems",
                    "responses",
                    *(h for h, _ in _RATE_COLUMNS),
                ],
                [
                    [
                        r["label"],
                        _fmt(r["n_problems"], 0),
                        _fmt(r["n"], 0),
                        *(r[k] for _, k in _RATE_COLUMNS),
                    ]
                    for r in d[name]["bins"]
                ],
            )
        )
        parts.append("")
    gens = metrics["generators"]
    parts += ["### TPR / TNR per generator and difficulty quartile", ""]
    parts.append(
        _table(
            ["bin", *[f"{g} TPR / TNR" for g in gens]],
            [
                [
                    r["label"],
                    *[
                        f"{_fmt(r['per_generator'][g]['tpr'])} / {_fmt(r['per_generator'][g]['tnr'])}"
                        for g in gens
                    ],
                ]
                for r in d["quartiles"]["bins"]
            ],
        )
    )
    parts += [
        "",
        f"Spearman correlation between score and problem easiness d(x): {_fmt(d['score_difficulty_spearman'])}.",
        "",
    ]

    t = metrics["tts"]
    parts += ["## Verification at test time", ""]
    p = t["pooled"]
    parts.append(
        f"Pooled (all generators' responses as the K = {_fmt(p['k_mean'], 1)} candidates of a problem): "
        f"pass rate {_fmt(p['pass_rate'])} -> verified pass rate {_fmt(p['tts_pass_rate'])} "
        f"(Zhou et al. eq. 5; gain {_fmt(p['tts_verification_gain'])}, eq. 6)."
    )
    fam = t["by_family"]
    parts += [
        "",
        _table(
            ["group", "K", "pass rate", "verified pass rate", "gain"],
            [
                [
                    f,
                    _fmt(r["k_mean"], 1),
                    r["pass_rate"],
                    r["tts_pass_rate"],
                    r["tts_verification_gain"],
                ]
                for f, r in fam["groups"].items()
            ],
        ),
    ]
    if "gap_closed" in fam:
        parts += [
            "",
            f"Share of the gap between the weaker ({fam['weak']}) and the stronger ({fam['strong']}) group "
            f"closed by verification: {_fmt(fam['gap_closed'])}.",
        ]
    cf = metrics["closed_form"]
    parts += [
        "",
        f"Verifier gain (Lu et al. eq. 1) {_fmt(o['verifier_gain'])}; closed form from accuracy, TPR, FPR "
        f"(App. A): precision {_fmt(cf['precision'])}, gain {_fmt(cf['verifier_gain'])}. "
        "This pooled gain treats a resample as a fresh draw from all problems; rejection sampling stays on one "
        "problem, so its gain (below, M -> inf: the per-problem precision) is the one a solver would see.",
        "",
    ]
    parts.append(
        _table(
            [
                "rejection sampling",
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
                    _fmt(r["max_attempts"], 0),
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
        f"ECE {_fmt(o['ece'])}, Brier {_fmt(o['brier'])}; see `reliability.png`.",
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


def _bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[Any]], ylabel: str) -> None:
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(series))
    for j, (name, vals) in enumerate(series.items()):
        v = [np.nan if a is None else a for a in vals]
        ax.bar(x + (j - (len(series) - 1) / 2) * width, v, width, label=name)
    ax.set_xticks(x, labels, rotation=15, fontsize=8)
    ax.set_ylim(0, 1.3)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.grid(axis="y", alpha=0.3)


def write_plots(metrics: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``tpr_tnr_by_difficulty.png``, ``tpr_tnr_by_generator.png``, ``reliability.png`` (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    paths = []
    gens = metrics["generators"]
    bins = metrics["difficulty"]["quartiles"]["bins"]

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key in zip(axes, ("tpr", "tnr"), strict=True):
        series = {"all": [b[key] for b in bins]}
        series.update({g: [b["per_generator"][g][key] for b in bins] for g in gens})
        _bars(ax, [b["label"] for b in bins], series, key.upper())
        ax.set_title(f"{key.upper()} by difficulty quartile (Q1 = hardest)")
    paths.append(_save(fig, out_dir / "tpr_tnr_by_difficulty.png", plt))

    fig, ax = plt.subplots(figsize=(7, 4))
    pg = metrics["per_generator"]
    _bars(
        ax,
        gens,
        {
            "TPR": [pg[g]["tpr"] for g in gens],
            "TNR": [pg[g]["tnr"] for g in gens],
            "balanced acc.": [pg[g]["balanced_accuracy"] for g in gens],
        },
        "rate",
    )
    ax.set_title("TPR / TNR per generator")
    paths.append(_save(fig, out_dir / "tpr_tnr_by_generator.png", plt))

    rel = metrics["reliability"]
    fig, ax = plt.subplots(figsize=(5, 5))
    edges = np.asarray(rel["edges"], dtype=float)
    centers = (edges[:-1] + edges[1:]) / 2
    acc = np.asarray([np.nan if a is None else a for a in rel["accuracy"]], dtype=float)
    ax.bar(
        centers,
        acc,
        width=edges[1] - edges[0],
        edgecolor="k",
        alpha=0.7,
        label="empirical accuracy",
    )
    ax.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    for cx, n in zip(centers, rel["count"], strict=True):
        if n:
            ax.text(cx, 0.02, str(int(n)), ha="center", fontsize=7, rotation=90)
    ax.set_xlabel("verifier score")
    ax.set_ylabel("fraction correct")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(f"Reliability (ECE {_fmt(metrics['overall']['ece'])})")
    ax.legend(fontsize=8, loc="upper left")
    paths.append(_save(fig, out_dir / "reliability.png", plt))
    return paths


def _save(fig, path: Path, plt) -> Path:
    """Save a figure atomically (temp file + rename)."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path


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
        records: ``(n,)`` ``{score, mass}`` per row (``score`` None = abstained).
        metrics: the dict of :func:`evaluate`.
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
                    "response_sha1": _sha1(row["response"]),
                }
            )
        )
    import json

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


def build_config(config_path: str | None, overrides: Sequence[str]) -> VerifierConfig:
    """``VerifierConfig`` from the ``verifier:`` section of a YAML file plus ``verifier.x=y`` overrides.

    The YAML file may be a train config (its other sections are ignored).

    Raises:
        ConfigError: on unknown keys, bad values, or an override outside ``verifier.`` (with
            a hint: ``granularity=10`` -> ``verifier.granularity``).
    """
    data = load_yaml(config_path) if config_path else {}
    # the file may be a train config (its other sections are ignored); overrides may not
    check_sections(
        apply_overrides({}, list(overrides)), {"verifier": lambda: field_names(VerifierConfig)}
    )
    apply_overrides(data, list(overrides))
    return from_dict(VerifierConfig, data.get("verifier") or {}, prefix="verifier.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``eval-verifier`` options to ``parser``."""
    parser.add_argument(
        "--responses", required=True, help="labelled JSONL (generic rows or GSM8K model solutions)"
    )
    parser.add_argument(
        "--out", default="outputs/eval-verifier", help="output directory (default: %(default)s)"
    )
    parser.add_argument("--config", default=None, help="YAML file with a 'verifier:' section")
    add_override_arguments(parser, "verifier.granularity=10")
    parser.add_argument(
        "--scores",
        default=None,
        help="reuse per-response scores (a scores.jsonl) instead of scoring",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="evaluate the first N problems only"
    )
    parser.add_argument(
        "--reference-guided",
        action="store_true",
        help="show the verifier each row's reference answer (the engine's answer_match criterion)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of sub-sampling, rejection sampling, bootstrap"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap replicates for CIs (0 = none)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--label-with-sparse",
        action="store_true",
        help="label rows that have a reference but no is_correct with the sparse reward "
        "(Math-Verify); rows with labels also get the sparse reward's agreement reported",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``densereward eval-verifier``; returns the process exit code (0 = success).

    Raises:
        DataError, ConfigError: on bad input (the CLI prints them).
    """
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be >= 1")
    config = build_config(args.config, overrides_from(args))
    label_with_sparse = bool(getattr(args, "label_with_sparse", False))
    rows = load_responses(args.responses, limit=args.limit, allow_unlabelled=label_with_sparse)
    meta: dict[str, Any] = {
        "responses": str(args.responses),
        "limit": args.limit,
        "seed": args.seed,
    }
    sparse_line = None
    if label_with_sparse or any(r.get("reference") for r in rows):
        # The sparse reward is the ground truth of every verifier metric during training:
        # say how well it agrees with this file's labels (and label what has none).
        sparse = label_with_sparse_reward(rows)
        meta["sparse_agreement"] = sparse["agreement"]
        meta["n_labelled_by_sparse_reward"] = sparse["n_labelled"]
        ag = sparse["agreement"]
        if ag["overall"]["agreement"] is not None:
            per_gen = ", ".join(
                f"{g} {_fmt(v['agreement'])}" for g, v in ag["per_generator"].items()
            )
            sparse_line = (
                f"{_fmt(ag['overall']['agreement'])} on {ag['overall']['n']} labelled rows"
                + (f" ({per_gen})" if len(ag["per_generator"]) > 1 else "")
            )
        if sparse["n_labelled"]:
            sparse_line = (sparse_line + "; " if sparse_line else "") + (
                f"{sparse['n_labelled']} unlabelled rows labelled by the sparse reward"
            )
    if args.scores:
        records = align_scores(rows, load_scores(args.scores))
        meta["scores_from"] = str(args.scores)
    else:
        records, stats = score_responses(rows, config, reference_guided=args.reference_guided)
        meta["verifier_stats"] = stats
        meta["reference_guided"] = bool(args.reference_guided)
    meta["verifier"] = {k: v for k, v in to_jsonable(config).items() if k != "api_key_env"}
    metrics = evaluate(
        rows,
        [r["score"] for r in records],
        threshold=config.threshold,
        n_bootstrap=args.bootstrap,
        seed=args.seed,
    )
    report_meta = {
        "responses": meta["responses"],
        "scores": meta.get("scores_from", "scored now"),
        "verifier": f"{config.backend} {config.model or 'default (SmolLM2-135M-Instruct)'}, G={config.granularity}, K={config.n_repeats}",
        "prompt": _prompt_description(config, args.reference_guided, scored=not args.scores),
    }
    if sparse_line:
        report_meta["sparse reward vs labels"] = sparse_line
    n_low = int((meta.get("verifier_stats") or {}).get("n_low_mass", 0))
    if n_low:
        report_meta["low score-token mass"] = (
            f"{n_low} reads below min_mass {config.min_mass:g} abstained"
        )
    paths = write_outputs(
        args.out,
        rows,
        records,
        metrics,
        meta=meta,
        report_meta=report_meta,
        plots=not args.no_plots,
    )
    o = metrics["overall"]
    print(
        f"TPR {_fmt(o['tpr'])}  TNR {_fmt(o['tnr'])}  balanced accuracy {_fmt(o['balanced_accuracy'])}  "
        f"AUROC {_fmt(o['auroc'])}  ({metrics['counts']['n_scored']} scored, {metrics['counts']['n_abstained']} abstained)"
    )
    cal = metrics["threshold_calibration"]
    print(
        f"best accept threshold {_fmt(cal['threshold'], 4)}: balanced accuracy "
        f"{_fmt(cal['in_sample']['balanced_accuracy'])} in-sample, "
        f"{_fmt(cal['cross_validated']['balanced_accuracy'])} cross-validated over problems"
    )
    print(f"wrote {paths['report']}")
    return 0
