"""``densereward eval-verifier``: options, configuration and the run."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import VerifierConfig, check_sections, field_names
from ..config_files import (
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
)
from ..errors import ConfigError, DataError
from ..io import to_jsonable
from ..metrics.format import format_number
from .data import (
    CHANGED_RESPONSE_FIX,
    align_scores,
    load_responses,
    load_scores,
    score_coverage,
)
from .evaluation import (
    abstention_headline,
    abstention_summary,
    counts_text,
    cross_validation_reason,
    evaluate,
    evidence_notes,
    read_only_text,
)
from .report import _prompt_description, threshold_text, write_outputs
from .scoring import (
    PROMPT_KINDS,
    check_references,
    label_with_sparse_reward,
    progress_line,
    resolve_prompt_kind,
    score_responses,
)

__all__ = ["EXIT_MOST_ABSTAINED", "build_config", "add_arguments", "main"]

EXIT_MOST_ABSTAINED = 3
"""Exit status when most reads abstained (more than half of the responses have no score): the
outputs are written, the report and plots lead with the abstentions, but they measure too few
responses to describe the verifier. The same code as ``densereward score``'s abstention."""

EXIT_CODES = f"""exit status:
  0  the report was written
  2  bad input or configuration (the message names it)
  {EXIT_MOST_ABSTAINED}  most reads abstained (> half of the responses have no score); the outputs
     are still written and report.md / abstentions.png lead with the reasons counted
"""


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
    """Add the ``eval-verifier`` options to ``parser`` (and its exit codes to the help)."""
    parser.epilog = f"{parser.epilog}\n\n{EXIT_CODES}" if parser.epilog else EXIT_CODES
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
        help="reuse per-response scores (a scores.jsonl) instead of scoring; pass the --responses "
        "and --limit they were made with",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="evaluate the first N problems only"
    )
    parser.add_argument(
        "--prompt",
        choices=PROMPT_KINDS,
        default=None,
        help="the prompt a GRPO verifier reward reads: reference_free (default), answer_match (the "
        "final answer against the row's reference), anchored (the reference and the full response)",
    )
    parser.add_argument(
        "--reference-guided",
        action="store_true",
        help="the same as --prompt answer_match (anchored when verifier.criteria are set)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of sub-sampling, rejection sampling, bootstrap"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap replicates for CIs (0 = none)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress lines on stderr while scoring (done/total, rate, time left)",
    )
    parser.add_argument(
        "--label-with-sparse",
        action="store_true",
        help="label rows that have a reference but no is_correct with the sparse reward "
        "(Math-Verify); rows with labels also get the sparse reward's agreement reported",
    )


def _prompt_kind(args: argparse.Namespace, config: VerifierConfig) -> str:
    """``--prompt``, or what ``--reference-guided`` reads (:func:`resolve_prompt_kind`); a
    reference-free ``--prompt`` beside ``--reference-guided`` is a contradiction."""
    prompt = getattr(args, "prompt", None)
    guided = bool(getattr(args, "reference_guided", False))
    if guided and prompt == "reference_free":
        raise ConfigError(
            "--reference-guided and --prompt reference_free contradict: pass one of them"
        )
    return resolve_prompt_kind(prompt, guided, config)


def _refuse_settings_with_scores(args: argparse.Namespace, config: VerifierConfig) -> None:
    """With ``--scores`` nothing is scored: a verifier setting or prompt would be credited with
    scores another run made. Only ``verifier.threshold`` (how the scores are read) applies.

    Raises:
        ConfigError: naming the settings and the fix.
    """
    default = VerifierConfig()
    given = [
        f"verifier.{f.name}"
        for f in dataclasses.fields(VerifierConfig)
        if f.name != "threshold" and getattr(config, f.name) != getattr(default, f.name)
    ]
    if getattr(args, "prompt", None) is not None:
        given.append("--prompt")
    if getattr(args, "reference_guided", False):
        given.append("--reference-guided")
    if given:
        raise ConfigError(
            f"{', '.join(given)} with --scores: nothing is scored, the scores were made by the run "
            "that wrote them (its metrics.json records its verifier and prompt); drop them, or "
            "score again without --scores (verifier.threshold applies to both)"
        )


def _recorded_meta(scores: str | Path) -> tuple[dict[str, Any] | None, str]:
    """The ``meta`` of the ``metrics.json`` beside ``scores`` (the run that wrote them), and why
    not when there is none: ``(meta, why_not)``."""
    path = Path(scores).with_name("metrics.json")
    if not path.is_file():
        return None, f"no metrics.json beside {scores}"
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("meta") or {}
    except (OSError, ValueError, AttributeError):
        return None, f"{path} is not a readable metrics.json"
    if not isinstance(meta, dict):
        return None, f"{path} is not a readable metrics.json"
    return meta, f"{path} does not record it"


def _recorded_scoring(scores: str | Path) -> tuple[dict[str, Any] | None, str | None, str]:
    """The verifier settings and prompt kind of the run that made ``scores``, as the
    ``metrics.json`` beside it records them (``meta.verifier``, ``meta.prompt``; a run that
    recomputed from scores carries its source's), and why not when it does not:
    ``(verifier, prompt, why_not)``."""
    meta, why = _recorded_meta(scores)
    meta = meta or {}
    verifier = meta.get("verifier") if isinstance(meta.get("verifier"), dict) else None
    prompt = meta.get("prompt") if isinstance(meta.get("prompt"), str) else None
    return verifier, prompt, why


def _key_text(key: tuple[str, str, int]) -> str:
    return f"problem_id={key[0]!r} generator={key[1]!r} #{key[2]}"


def _read_scores(
    rows: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], int, str | None]:
    """The score records of ``rows`` from ``args.scores``, the number of score rows that match
    no response, and the report's note on them (said once on stderr here; ``None`` when all
    match).

    The ``metrics.json`` beside the scores names the responses file and ``--limit`` they were
    made with (``meta.responses``, ``meta.limit``); the messages use them to say why.

    Raises:
        DataError: no score row matches a response (another responses file), or some responses
            have no score (with the recorded ``--limit`` and the fix when it explains them), or
            as :func:`align_scores` (a changed response: the fix names the responses file the
            scores were made from, or that this one changed since).
    """
    stored = load_scores(args.scores)
    missing, unmatched = score_coverage(rows, stored)
    made, _ = _recorded_meta(args.scores)
    made = made or {}
    made_limit = made.get("limit") if isinstance(made.get("limit"), int) else None
    made_from = made.get("responses") if isinstance(made.get("responses"), str) else None
    metrics_json = Path(args.scores).with_name("metrics.json")
    other_file = (
        made_from is not None and Path(made_from).resolve() != Path(args.responses).resolve()
    )
    source = f"made from {made_from} ({metrics_json} meta.responses)" if other_file else None
    if missing and len(missing) == len(rows):
        raise DataError(
            f"none of the {len(stored)} score rows in {args.scores} matches a response of "
            f"{args.responses} (first response: {_key_text(missing[0])}"
            + (f"; first score row: {_key_text(unmatched[0])}" if unmatched else "")
            + f"): the scores were {source or 'made from another responses file'}; pass that "
            "file as --responses, or score this one without --scores"
        )
    if missing:
        head = (
            f"no score for {len(missing)} of the {len(rows)} responses in {args.scores} "
            f"(first: {_key_text(missing[0])})"
        )
        if made_limit is not None and (args.limit is None or args.limit > made_limit):
            raise DataError(
                f"{head}: the scores were made with --limit {made_limit} ({metrics_json}); "
                f"add --limit {made_limit}"
            )
        raise DataError(
            f"{head}: the scores were {source or 'made from other responses'}; pass the "
            "--responses and --limit they were made with, or score again without --scores"
        )
    note = None
    if unmatched:
        if args.limit is not None and (made_limit is None or args.limit < made_limit):
            made_with = f"--limit {made_limit}" if made_limit is not None else "no --limit"
            why = (
                f"this run's --limit {args.limit} keeps fewer problems than the scores were "
                f"made with ({made_with}, {metrics_json})"
            )
        elif source is not None:
            why = f"the scores were {source}: pass that file to use them all"
        else:
            why = "the scores were made from more responses than this file holds"
        print(
            f"eval-verifier: {len(unmatched)} of the {len(stored)} score rows in {args.scores} "
            f"match no response of {args.responses} and are not used (first: "
            f"{_key_text(unmatched[0])}); {why}",
            file=sys.stderr,
        )
        note = (
            f"{len(unmatched)} of its {len(stored)} score rows match no response: not used; {why}"
        )
    if other_file:
        changed_fix = f"the scores were {source}; pass that file as --responses, or score this one again without --scores"
    elif made_from is not None:
        changed_fix = (
            f"{args.responses} changed after the scores were made from it ({metrics_json} "
            "meta.responses); score it again without --scores"
        )
    else:
        changed_fix = CHANGED_RESPONSE_FIX
    return align_scores(rows, stored, changed_fix=changed_fix), len(unmatched), note


SCORE_CACHE_DIR = "score-cache"
"""Where a scoring run keeps the verifier's answers as it makes them (under ``--out``), unless
``verifier.cache_dir`` names another place: an interrupted run's answers are reused by the next
run with the same settings."""


def _with_cache_in_out(config: VerifierConfig, out: str | Path) -> VerifierConfig:
    """``config`` with ``cache_dir`` under ``out`` when none is set; says on stderr how many
    answers an earlier run left there."""
    if config.cache_dir is not None:
        return config
    cache = Path(out) / SCORE_CACHE_DIR
    if cache.is_dir():
        from ..cache import ScoreCache

        store = ScoreCache(cache)
        try:
            n = len(store)
        finally:
            store.close()
        if n:
            print(
                f"eval-verifier: reusing {n} verifier answers an earlier run left in {cache} "
                "(only those of the same verifier, prompt and responses are used)",
                file=sys.stderr,
            )
    return dataclasses.replace(config, cache_dir=str(cache))


def _print_progress(done: int, total: int, seconds: float) -> None:
    print(progress_line(done, total, seconds), file=sys.stderr, flush=True)


def _verifier_text(config: VerifierConfig) -> str:
    model = config.model or "default (SmolLM2-135M-Instruct)"
    return f"{config.backend} {model}, G={config.granularity}, K={config.n_repeats}"


def _scores_origin(scores: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """``meta`` entries and report header lines (``verifier``, ``prompt``) for scores read from
    a file: the run that made them, or "not recorded" and why."""
    verifier, prompt, why = _recorded_scoring(scores)
    meta: dict[str, Any] = {"verifier": verifier, "prompt": prompt}
    recorded = None
    if verifier is not None:
        try:
            recorded = from_dict(VerifierConfig, verifier, prefix="verifier.")
        except (ConfigError, TypeError, ValueError):
            recorded = None
    head = {
        "verifier": (
            f"{_verifier_text(recorded)} (recorded by the run that made the scores)"
            if recorded is not None
            else f"not recorded ({why})"
        ),
        "prompt": (
            f"{_prompt_description(recorded or VerifierConfig(), prompt, scored=True)} "
            "(recorded by the run that made the scores)"
            if prompt is not None
            else f"not recorded ({why})"
        ),
    }
    if verifier is None:
        meta["verifier_not_recorded"] = why
    if prompt is None:
        meta["prompt_not_recorded"] = why
    return meta, head


def main(args: argparse.Namespace) -> int:
    """Run ``densereward eval-verifier``; returns the process exit code.

    Exit codes: 0 the report was written; 2 bad input or configuration (raised here, printed by
    the CLI); :data:`EXIT_MOST_ABSTAINED` (3) most reads abstained (more than half of the
    responses have no score): the outputs are written and lead with the abstentions and their
    reasons, but the metrics rest on too few responses to describe the verifier (with every
    read abstained there are no metrics, only the counts).

    Raises:
        DataError, ConfigError: on bad input (the CLI prints them).
    """
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be >= 1")
    config = build_config(args.config, overrides_from(args))
    if args.scores:
        _refuse_settings_with_scores(args, config)
    label_with_sparse = bool(getattr(args, "label_with_sparse", False))
    rows = load_responses(args.responses, limit=args.limit, allow_unlabelled=label_with_sparse)
    if not args.scores and (kind := _prompt_kind(args, config)) != "reference_free":
        check_references(rows, kind)  # before any checker or model starts
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
                f"{g} {format_number(v['agreement'])}" for g, v in ag["per_generator"].items()
            )
            sparse_line = (
                f"{format_number(ag['overall']['agreement'])} on {ag['overall']['n']} labelled rows"
                + (f" ({per_gen})" if len(ag["per_generator"]) > 1 else "")
            )
        if sparse["n_labelled"]:
            sparse_line = (sparse_line + "; " if sparse_line else "") + (
                f"{sparse['n_labelled']} unlabelled rows labelled by the sparse reward"
            )
    origin: dict[str, str] = {}
    scores_note = None
    if args.scores:
        records, n_unmatched, scores_note = _read_scores(rows, args)
        meta["scores_from"] = str(args.scores)
        meta["n_score_rows_unmatched"] = n_unmatched
        recorded, origin = _scores_origin(args.scores)
        meta.update(recorded)
        meta["threshold_setting"] = to_jsonable(config.threshold)
    else:
        prompt = _prompt_kind(args, config)
        config = _with_cache_in_out(config, args.out)
        records, stats = score_responses(
            rows,
            config,
            prompt=prompt,
            progress=None if getattr(args, "no_progress", False) else _print_progress,
        )
        meta["verifier_stats"] = stats
        meta["reference_guided"] = prompt != "reference_free"
        meta["prompt"] = prompt
        meta["verifier"] = to_jsonable(config)  # no secret in it: keys stay in the environment
    scores = [r["score"] for r in records]
    # reasons are known when scored now, or from a scores.jsonl that records them
    reasons = [r.get("reason") for r in records] if all("reason" in r for r in records) else None
    if all(v is None for v in scores):  # no metric exists: counts and reasons only
        summary = abstention_summary(rows, scores, reasons)
        metrics = {
            "counts": {
                "n_responses": len(rows),
                "n_scored": 0,
                "n_abstained": len(rows),
                "n_problems": len({str(r["problem_id"]) for r in rows}),
                "n_generators": len(summary["per_generator"]),
                "n_generators_scored": 0,
            },
            "abstentions": summary,
            "generators": list(summary["per_generator"]),
        }
    else:
        metrics = evaluate(
            rows,
            scores,
            reasons=reasons,
            threshold=config.threshold,
            n_bootstrap=args.bootstrap,
            seed=args.seed,
        )
    report_meta = {
        "responses": meta["responses"],
        "scores": meta.get("scores_from", "scored now")
        + (f" ({scores_note})" if scores_note else ""),
        "verifier": origin.get("verifier") or _verifier_text(config),
        "prompt": origin.get("prompt")
        or _prompt_description(config, _prompt_kind(args, config), scored=True),
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
    abst = metrics["abstentions"]
    if "overall" not in metrics:
        print(f"wrote {paths['report']}")
        return _most_abstained(abst)
    o, c = metrics["overall"], metrics["counts"]
    unread = (
        f" ({c['n_scored_unread']} of them 0 without a read; AUROC {read_only_text(o)} "
        "over the read ones)"
        if c.get("n_scored_unread")
        else ""
    )
    rates = "  ".join(
        f"{name} {format_number(o[key])} ({counts_text(o, key)})"
        for name, key in (
            ("TPR", "tpr"),
            ("TNR", "tnr"),
            ("balanced accuracy", "balanced_accuracy"),
            ("AUROC", "auroc"),
        )
    )
    print(  # the rates are read at it: say which (a one-class file falls back to 0.5)
        f"accept threshold: score >= {threshold_text(metrics)} "
        f"({metrics.get('threshold_source', 'configured')})"
    )
    print(f"{rates}  ({c['n_scored']} scored{unread}, {c['n_abstained']} abstained)")
    for note in evidence_notes(metrics):  # one class, too few to rank, a gap too small to read
        print(note)
    cal = metrics["threshold_calibration"]
    if not metrics["evidence"]["one_class"]:  # else the note above says why there is none
        print(
            f"best accept threshold {threshold_text(cal)}: balanced accuracy "
            f"{format_number(cal['in_sample']['balanced_accuracy'])} in-sample, "
            f"{format_number(cal['cross_validated']['balanced_accuracy'])} cross-validated over problems"
            + (f" ({why})" if (why := cross_validation_reason(metrics)) else "")
        )
    print(f"wrote {paths['report']}")
    return _most_abstained(abst) if abst["most"] else 0


def _most_abstained(summary: dict[str, Any]) -> int:
    """Say on stderr that most reads abstained; the exit code for it."""
    scored = summary["n_responses"] - summary["n_abstained"]
    print(
        f"densereward eval-verifier: {abstention_headline(summary)}; the metrics rest on {scored} "
        f"scored response(s) and do not describe this verifier (report.md leads with the reasons "
        f"and their fix); exit status {EXIT_MOST_ABSTAINED}",
        file=sys.stderr,
    )
    return EXIT_MOST_ABSTAINED
