"""Running a comparison: every ``(condition, seed)`` run, resumable, then the report.

Runs go seed-major through the registered trainer's ``run`` function
(:class:`~densereward.sample_efficiency.config.TrainerSpec`) in this process; each finished
run is written atomically to ``<out>/runs/<condition>/seed<k>/result.json`` with a
fingerprint of its config, so a re-run skips it and a changed config is an error.
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DenseRewardError, Interrupted
from ..io import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    earlier_wandb_runs,
    to_jsonable,
)
from ..metrics.curves import curve_arrays
from ..metrics.format import format_number
from ..trainers.spec import set_key
from ..wandb_config import WandbConfig, describe_wandb, restored_environ
from .config import (
    TRAINERS,
    CompareConfig,
    Trainers,
    TrainerSpec,
    _get,
    build_run_configs,
    describe_common,
    fingerprint,
    parse_compare_config,
    run_wandb,
    trainer_spec,
)
from .report import (
    MIN_RUNS_FOR_A_VERDICT,
    analyze,
    final_rests_on,
    plot_curves,
    reach_note,
    render_report,
    run_final,
    title_of,
)

__all__ = ["dry_run_comparison", "output_dir_of", "run_comparison"]

logger = logging.getLogger(__name__)

_WANDB_ENV = (
    "WANDB_DIR",
    "WANDB_MODE",
    "WANDB_SILENT",
    "WANDB_RUN_GROUP",
    "WANDB_JOB_TYPE",
    "WANDB_PROJECT",
    "WANDB_TAGS",
    "WANDB_ENTITY",
    "WANDB_NAME",
)


class _ChangedConfig(Exception):
    """A finished run's result file was produced by a different run config."""


def _load_result(path: Path, expected_fp: str) -> dict[str, Any] | None:
    """A finished run's result, ``None`` if absent or unreadable; :class:`_ChangedConfig` if
    it was produced by a different run config."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        logger.warning("ignoring unreadable %s (%s); the run is redone", path, exc)
        return None
    if not isinstance(data, dict) or "curve" not in data or "fingerprint" not in data:
        logger.warning("ignoring %s: not a run result; the run is redone", path)
        return None
    if data["fingerprint"] != expected_fp:
        raise _ChangedConfig(str(path))
    return data


def record_config(out: Path, config: Mapping[str, Any]) -> Path:
    """Write ``<out>/compare_config.yaml``, the config of the runs in ``out``.

    Processes that run parts of one comparison into one directory (``--conditions``,
    ``--seeds``: e.g. two at a time on two cores) each add their conditions and seeds to it
    when the rest of the run config (trainer, base, common overrides, budget) is the same, so
    ``--report-only`` reports every run there; otherwise the new config replaces it.
    """
    import yaml

    path = out / "compare_config.yaml"
    record = {**dict(config), "output_dir": str(out)}
    if path.is_file():
        prev = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if all(prev.get(k) == record.get(k) for k in ("trainer", "base", "common", "budget")):
            conditions = {**(prev.get("conditions") or {}), **(record.get("conditions") or {})}
            seeds = sorted({*(prev.get("seeds") or []), *(record.get("seeds") or [])})
            record.update(conditions=conditions, seeds=seeds)
    return atomic_write_text(path, _yaml_dump(record))


def _eta(durations: dict[str, list[float]], remaining: Sequence[str]) -> float | None:
    every = [d for ds in durations.values() for d in ds]
    if not every:
        return None
    overall = float(np.mean(every))
    return float(sum(np.mean(durations[c]) if durations.get(c) else overall for c in remaining))


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def output_dir_of(flag: str | Path | None, configured: str | None, name: Any) -> Path:
    """The comparison's directory: ``--output-dir``, else ``output_dir:``, else runs/compare/<name>."""
    return Path(flag or configured or Path("runs") / "compare" / str(name))


FALLBACK_METRICS = {
    "eval/mean_reward": "the environment reports no is_success, so the runs' curves are "
    "the evaluation episodes' mean reward, not a success rate",
}
"""Curve metrics a trainer falls back to, with why: a ``threshold`` meant for the metric it
would have used (a success rate) is not applied to them unless ``metric`` names them."""


TRAINING_REWARD_METRICS = ("rollout/ep_rew_mean",)
"""Curve metrics that are each run's training reward: it differs between reward conditions
(the verifier's includes its shaping term), so no verdict is given on them. SAC's curve with
evaluation off is ``rollout/ep_env_rew_mean`` (the environment's own reward); runs of earlier
versions used ``rollout/ep_rew_mean``."""


def not_comparable_why(run_metrics: set[str]) -> str | None:
    """Why the runs' curves are not on one scale (``None`` when they are): different metrics
    across runs, or a metric that is each run's training reward (:data:`TRAINING_REWARD_METRICS`).

    >>> not_comparable_why({"eval/success_rate"}) is None
    True
    >>> "training reward" in not_comparable_why({"rollout/ep_rew_mean"})
    True
    """
    if len(run_metrics) > 1:
        return (
            f"the runs' curves are different metrics ({', '.join(sorted(run_metrics))}); "
            "fix: give every condition the same evaluation settings"
        )
    trained_on = sorted(run_metrics & set(TRAINING_REWARD_METRICS))
    if trained_on:
        return (
            f"the curves are each run's training reward (`{trained_on[0]}`), on a different scale "
            "per reward condition (the verifier's includes its shaping term); fix: turn evaluation "
            "on (training.eval_every > 0) or rerun the runs (the curve without evaluation is now "
            "the environment's own reward, rollout/ep_env_rew_mean)"
        )
    return None


def threshold_for(
    threshold: float | None, metric: str | None, run_metrics: set[str]
) -> tuple[float | None, str]:
    """The steps-to-threshold level to apply, and why none is (``""`` when it is as set).

    A ``threshold`` set without ``metric`` is a level of the trainer's usual metric (SAC: a
    success rate); on runs whose curves fell back to another (:data:`FALLBACK_METRICS`) it
    would be read on the wrong scale, so it is not applied unless ``metric`` names the curve.

    >>> threshold_for(0.5, None, {"eval/mean_reward"})[0] is None
    True
    >>> threshold_for(0.5, "eval/mean_reward", {"eval/mean_reward"})
    (0.5, '')
    """
    fallback = sorted(m for m in run_metrics if m in FALLBACK_METRICS)
    if threshold is None or metric is not None or not fallback:
        return threshold, ""
    m = fallback[0]
    return None, (
        f"Steps to threshold not reported: {FALLBACK_METRICS[m]} (`{m}`), and threshold "
        f"{threshold:g} is a level of the success rate. Fix: set `metric: {m}` together with a "
        "`threshold` on that scale, or evaluate an environment that reports is_success."
    )


def run_comparison(
    config: Mapping[str, Any],
    *,
    output_dir: str | Path | None = None,
    base_dir: str | Path | None = None,
    name: str | None = None,
    progress: bool = True,
    report_only: bool = False,
    trainers: Trainers = TRAINERS,
) -> dict[str, Any]:
    """Run (or resume) a comparison and write ``results.json``, ``report.md``, ``learning_curves.png``
    and ``curves.json`` (every run's curve as rows ``{condition, seed, step, value}``, from which
    the report's statistics can be recomputed).

    Runs go seed-major (seed 0 of every condition, then seed 1, ...), so a partial comparison
    stays balanced. Each run calls the trainer's ``run(config, output_dir=...)`` in this process
    (for ``sac`` and ``grpo`` the ``densereward train`` code path); its result is written
    atomically to ``<out>/runs/<condition>/seed<k>/result.json`` when it finishes. Finished runs
    with the same run config are skipped; an unfinished run's directory is removed and the run
    redone.

    Args:
        config: the comparison config mapping (see :class:`CompareConfig`).
        output_dir: overrides ``output_dir`` of the config.
        base_dir: directory of the comparison config file (for a relative ``base`` path).
        name: default name when the config has none (the CLI passes the file's stem).
        progress: show a progress bar over runs with an estimate of the time left.
        report_only: run nothing; build the report from the runs finished so far.
        trainers: the registry ``trainer:`` is looked up in: name -> :class:`TrainerSpec`
            (default: :data:`~densereward.sample_efficiency.config.TRAINERS`).

    Returns:
        The content of ``results.json``: ``{"name", "trainer", "metric", "budget", "seeds",
        "threshold", "conditions": {...}, "pairs": [...], "missing": [...], "wall_s", "output_dir"}``.

    Raises:
        ConfigError: on an invalid config, or result files from a different config.
        DenseRewardError: if no condition has a finished run (``report_only``).
        Exception: whatever a trainer raises; runs finished before it are kept.
    """
    t_start = time.monotonic()
    cfg = parse_compare_config(config, name=name, trainers=trainers)
    spec = trainer_spec(cfg.trainer, trainers)
    run_configs = build_run_configs(
        cfg, base_dir=Path(base_dir) if base_dir is not None else None, trainers=trainers
    )
    out = output_dir_of(output_dir, cfg.output_dir, cfg.name)
    budget = int(_get(next(iter(next(iter(run_configs.values())).values())), spec.budget_key))
    events = out / "events.jsonl"

    order = [(c, f"seed{s}") for s in cfg.seeds for c in cfg.conditions]
    results: dict[tuple[str, str], dict[str, Any]] = {}
    fps = {(c, k): fingerprint(cfg.trainer, run_configs[c][k]) for c, k in order}
    changed: list[str] = []
    for c, k in order:
        try:
            r = _load_result(out / "runs" / c / k / "result.json", fps[(c, k)])
        except _ChangedConfig as exc:
            changed.append(str(exc))
            continue
        if r is not None:
            results[(c, k)] = r
    if changed:
        raise ConfigError(
            f"{len(changed)} finished run(s) in {out / 'runs'} were produced by a different run "
            f"config (budget, seeds, base config or overrides changed), e.g. {changed[0]}; pass "
            f"--output-dir for a new comparison, the flags of the original command "
            f"(see {out / 'compare_config.yaml'}) to continue it, or delete {out / 'runs'} to redo it"
        )
    todo = [] if report_only else [ck for ck in order if ck not in results]
    if not report_only:  # the config of the runs in this directory (not of a refused call)
        record_config(out, config)
    if results and todo:
        print(
            f"resuming {out}: {len(results)} of {len(order)} runs already finished and skipped, "
            f"{len(todo)} to run",
            file=sys.stderr,
        )
        for c, k in order:
            if (c, k) in results:
                append_jsonl(
                    events, {"event": "skip", "condition": c, "seed": k, "time": time.time()}
                )

    for c, k in todo:  # said before any run starts; _run_all replaces them
        partial = _partial_words(cfg, out, c, k)
        if partial is not None:
            print(_afresh(c, k, partial), file=sys.stderr)

    durations: dict[str, list[float]] = {}
    for (c, _), r in results.items():
        if r.get("wall_s") is not None:
            durations.setdefault(c, []).append(float(r["wall_s"]))
    if todo:
        _run_all(
            cfg,
            spec,
            run_configs,
            fps,
            todo,
            results,
            durations,
            out,
            events,
            progress,
            n_total=len(order),
        )

    by_cond: dict[str, list[dict[str, Any]]] = {c: [] for c in cfg.conditions}
    for c, k in order:
        if (c, k) in results:
            by_cond[c].append(results[(c, k)])
    missing = [f"{c}/{k}" for c, k in order if (c, k) not in results]
    if not any(by_cond.values()):
        raise DenseRewardError(f"no finished run in {out}/runs; run the comparison first")
    trainer_metric = next(
        (r.get("metric") for rs in by_cond.values() for r in rs if r.get("metric")), None
    )
    metric = cfg.metric or trainer_metric or "performance"
    threshold, threshold_note = threshold_for(
        cfg.threshold,
        cfg.metric,
        {str(r["metric"]) for rs in by_cond.values() for r in rs if r.get("metric")},
    )
    analysis = analyze(
        by_cond,
        budget=budget,
        threshold=threshold,
        final_window=cfg.final_window,
        grid_points=cfg.grid_points,
        n_bootstrap=cfg.n_bootstrap,
        confidence=cfg.confidence,
        seed=cfg.stats_seed,
        primary=cfg.primary,
        not_comparable=not_comparable_why(
            {str(r["metric"]) for rs in by_cond.values() for r in rs if r.get("metric")}
        ),
    )
    wall = sum(float(r.get("wall_s") or 0.0) for rs in by_cond.values() for r in rs)
    reaches = reach_note(analysis["conditions"])  # reaches on a few training episodes: set aside
    report = render_report(
        analysis,
        name=str(cfg.name),
        trainer=cfg.trainer,
        metric=metric,
        budget=budget,
        seeds=cfg.seeds,
        x_label=spec.x_label,
        confidence=cfg.confidence,
        n_bootstrap=cfg.n_bootstrap,
        final_window=cfg.final_window,
        wall_s=wall,
        missing=missing,
        notes=[n for n in (threshold_note, reaches) if n],
        run_metrics={str(r["metric"]) for rs in by_cond.values() for r in rs if r.get("metric")},
        curve_sources=sorted(
            {
                str(r["summary"]["curve_source"])
                for rs in by_cond.values()
                for r in rs
                if (r.get("summary") or {}).get("curve_source")
            }
        ),
    )
    plot_curves(
        analysis,
        out / "learning_curves.png",
        metric=metric,
        x_label=spec.x_label,
        threshold=threshold,
        title=title_of(analysis["conditions"]),
        confidence=cfg.confidence,
    )
    atomic_write_text(out / "report.md", report)
    curves = [
        {"condition": c, "seed": int(r["seed"]), "step": int(p["step"]), "value": float(p["value"])}
        for c, rs in by_cond.items()
        for r in rs
        for p in r.get("curve") or []
    ]
    atomic_write_json(
        out / "curves.json", {"metric": metric, "x_label": spec.x_label, "rows": curves}
    )
    results_doc = {
        "name": cfg.name,
        "trainer": cfg.trainer,
        "metric": metric,
        "trainer_metric": trainer_metric,
        "x_label": spec.x_label,
        "budget": budget,
        "seeds": list(cfg.seeds),
        "threshold": threshold,
        "threshold_not_applied": threshold_note or None,
        "steps_to_threshold_note": reaches,
        "final_window": cfg.final_window,
        "bootstrap": {
            "n": cfg.n_bootstrap,
            "confidence": cfg.confidence,
            "seed": cfg.stats_seed,
            "method": "percentile, stratified over runs",
        },
        "wandb_group": cfg.wandb.group or cfg.name,
        "grid": analysis["grid"],
        "conditions": analysis["conditions"],
        "pairs": analysis["pairs"],
        "coinciding": analysis["coinciding"],
        "missing": missing,
        "wall_s": round(wall, 1),
        "session_wall_s": round(time.monotonic() - t_start, 1),
        "output_dir": str(out),
    }
    atomic_write_json(out / "results.json", results_doc)
    return to_jsonable(results_doc)


def dry_run_comparison(
    config: Mapping[str, Any],
    *,
    output_dir: str | Path | None = None,
    base_dir: str | Path | None = None,
    name: str | None = None,
    trainers: Trainers = TRAINERS,
    common_given: Sequence[str] = (),
) -> list[str]:
    """Validate a comparison without running or creating anything (``--dry-run``).

    Every condition's run config is built and validated as :func:`run_comparison` does
    (including local data files and environment ids), then put through its trainer's own dry
    run (the spec's ``dry_run``, e.g. ``densereward.trainers.sac.dry_run``) in a scratch
    directory; the output directory is read to say which runs are already finished and would
    be skipped.

    Args:
        common_given: the run settings of the command line, the last entries of ``common``;
            its line (every entry of ``common`` in order) marks them ``(command line)``.

    Returns:
        One line per check; a problem a run would hit although the config is valid starts
        with ``"!! "``; an outcome certain before any run that is no problem (fewer seeds than
        :data:`~densereward.sample_efficiency.report.MIN_RUNS_FOR_A_VERDICT`: no verdict; a
        trainer dry run's own ``"note: "`` line, named by its condition) starts with
        ``"note: "``.

    Raises:
        ConfigError, DataError: as :func:`run_comparison` would, before its first run.
    """
    cfg = parse_compare_config(config, name=name, trainers=trainers)
    spec = trainer_spec(cfg.trainer, trainers)
    run_configs = build_run_configs(
        cfg, base_dir=Path(base_dir) if base_dir is not None else None, trainers=trainers
    )
    out = output_dir_of(output_dir, cfg.output_dir, cfg.name)
    order = [(c, f"seed{s}") for s in cfg.seeds for c in cfg.conditions]
    done, changed, metrics, partial = 0, [], set(), []
    for c, k in order:
        try:
            r = _load_result(
                out / "runs" / c / k / "result.json",
                fingerprint(cfg.trainer, run_configs[c][k]),
            )
        except _ChangedConfig as exc:
            changed.append(str(exc))
            continue
        done += r is not None
        if r is None and (words := _partial_words(cfg, out, c, k)) is not None:
            partial.append(_afresh(c, k, words))
        if r is not None and r.get("metric"):
            metrics.add(str(r["metric"]))
    lines = [
        f"comparison {cfg.name!r}: trainer {cfg.trainer}, conditions {list(cfg.conditions)}, "
        f"seeds {list(cfg.seeds)}, budget {_get(run_configs[order[0][0]][order[0][1]], spec.budget_key)}",
        f"output directory: {out} ({done} of {len(order)} runs finished there and would be skipped)",
        *partial,
    ]
    each_run = out / "runs" / "<condition>" / "seed<k>" / "<condition>-seed<k>"
    lines.append(describe_wandb(WandbConfig.from_section(run_wandb(cfg)), each_run))
    lines.append(describe_common(cfg.common, common_given))
    lines += [f"!! a finished run has a different config: {c}" for c in changed[:1]]
    n_seeds = len(cfg.seeds)
    if len(cfg.conditions) >= 2 and n_seeds < MIN_RUNS_FOR_A_VERDICT:  # fresh-user trial F13
        more = list(cfg.seeds)
        while len(more) < MIN_RUNS_FOR_A_VERDICT:
            more.append(max(more) + 1)
        lines.append(
            f"note: too few seeds for a verdict: {n_seeds} a side, >= {MIN_RUNS_FOR_A_VERDICT} "
            "needed (MIN_RUNS_FOR_A_VERDICT); the results are descriptive only; use --seeds "
            + " ".join(map(str, more))
        )
    why = not_comparable_why(metrics)
    if why:  # the report would give no verdict on these runs (issue 41 third rerun F2)
        lines.append(f"!! no verdict from the finished runs: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        for cname, seeds in run_configs.items():
            first = copy.deepcopy(next(iter(seeds.values())))
            for line in spec.dry_run(first, output_dir=Path(tmp) / cname):
                if line.startswith(("run directory:", "wandb:")):
                    continue  # a scratch directory; the comparison's own is reported above
                kind = next((k for k in ("!! ", "note: ") if line.startswith(k)), "")
                lines.append(f"{kind}{cname}: {line[len(kind) :]}")
    return lines


def _partial_run(cfg: CompareConfig, out: Path, cname: str, key: str) -> tuple[Path, list[Path]]:
    """The directory of run ``(cname, key)`` (``<out>/runs/<cname>/<key>/<cname>-<key>``) and
    the W&B runs of its ``wandb_id.txt`` outside it (under the comparison's ``wandb.dir``):
    what a stopped earlier attempt left, which the run replaces when it starts again."""
    run_dir = out / "runs" / cname / key / f"{cname}-{key}"
    wandb_dir = WandbConfig.from_section(run_wandb(cfg)).dir_for(run_dir)
    runs = [p for p in earlier_wandb_runs(run_dir, wandb_dir) if not p.is_relative_to(run_dir)]
    return run_dir, runs


def _partial_words(cfg: CompareConfig, out: Path, cname: str, key: str) -> str | None:
    """What a stopped earlier attempt of run ``(cname, key)`` left, in words: ``"<dir>"`` or
    ``"<dir> (and its W&B run <path>)"``; ``None`` when it left no directory."""
    run_dir, runs = _partial_run(cfg, out, cname, key)
    if not run_dir.exists():
        return None
    also = f" (and its W&B run{'s' * (len(runs) > 1)} {', '.join(map(str, runs))})" if runs else ""
    return f"{run_dir}{also}"


def _afresh(cname: str, key: str, partial: str) -> str:
    """The dry run's and the re-run's line on a run a stopped attempt left ``partial``."""
    return (
        f"the stopped run {cname} {key} starts afresh: its partial directory {partial} is replaced"
    )


def _run_all(
    cfg: CompareConfig,
    spec: TrainerSpec,
    run_configs: dict[str, dict[str, dict[str, Any]]],
    fps: dict[tuple[str, str], str],
    todo: list[tuple[str, str]],
    results: dict[tuple[str, str], dict[str, Any]],
    durations: dict[str, list[float]],
    out: Path,
    events: Path,
    progress: bool,
    *,
    n_total: int,
) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, soft_wrap=True)  # no wraps mid-sentence
    n_done0 = n_total - len(todo)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left ~{task.fields[eta]}"),
        console=console,
        disable=not progress,
        transient=False,
    ) as bar:
        task = bar.add_task(
            "runs",
            total=n_total,
            completed=n_done0,
            eta=_hms(_eta(durations, [c for c, _ in todo])),
        )
        for i, (cname, key) in enumerate(todo):
            remaining = [c for c, _ in todo[i + 1 :]]
            bar.update(task, description=f"{cname} {key}")
            seed_dir = out / "runs" / cname / key
            run_dir = seed_dir / f"{cname}-{key}"
            try:  # finished meanwhile by another process of the same comparison (--conditions)
                done = _load_result(seed_dir / "result.json", fps[(cname, key)])
            except _ChangedConfig as exc:
                raise ConfigError(f"{exc}: finished meanwhile by another run config") from None
            if done is not None:
                results[(cname, key)] = done
                append_jsonl(
                    events,
                    {
                        "event": "skip",
                        "condition": cname,
                        "seed": key,
                        "time": time.time(),
                        "why": "finished by another process",
                    },
                )
                bar.update(task, advance=1)
                continue
            if run_dir.exists():  # an interrupted earlier attempt: start this run again
                for wandb_run in _partial_run(cfg, out, cname, key)[1]:  # under wandb.dir
                    shutil.rmtree(wandb_run)
                shutil.rmtree(run_dir)
                append_jsonl(
                    events,
                    {"event": "cleanup", "condition": cname, "seed": key, "time": time.time()},
                )
            seed_dir.mkdir(parents=True, exist_ok=True)
            append_jsonl(
                events, {"event": "start", "condition": cname, "seed": key, "time": time.time()}
            )
            t0 = time.monotonic()
            try:  # W&B's environment back as it was before the run, whatever the trainer set
                with restored_environ(_WANDB_ENV):
                    os.environ["WANDB_JOB_TYPE"] = cname  # the group: the run's wandb: section
                    summary = spec.run(copy.deepcopy(run_configs[cname][key]), output_dir=run_dir)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in densereward compare
                stopped = Interrupted.of(exc)
                append_jsonl(
                    events,
                    {
                        "event": "stopped",
                        "condition": cname,
                        "seed": key,
                        "signal": stopped.signal_name,
                        "time": time.time(),
                    },
                )
                partial = _partial_words(cfg, out, cname, key)
                left = (
                    "the stopped run left no files: re-run the same command to start it and "
                    "continue the comparison"
                    if partial is None
                    else f"the stopped run's partial directory {partial} is replaced when you "
                    "re-run the same command, which starts that run afresh and continues the "
                    "comparison"
                )
                raise Interrupted.of(
                    exc,
                    f"during run {cname} {key}; {len(results)} of {n_total} runs finished and "
                    f"are kept in {out / 'runs'}; {left}",
                ) from None
            finally:
                gc.collect()
            wall = time.monotonic() - t0
            rests = final_rests_on(summary.get("curve") or [], cfg.final_window)
            record = {
                "condition": cname,
                "seed": int(key[4:]),
                "trainer": cfg.trainer,
                "fingerprint": fps[(cname, key)],
                "metric": summary.get("metric"),
                "curve": summary.get("curve") or [],
                # the report's computation (the trainer's own "final" is its curve's last point)
                "final": run_final(summary.get("curve") or [], cfg.final_window),
                "final_window": cfg.final_window,
                # what this "final" rests on; the trainer's own final and its final_rests_on
                # (the last point alone) are left out of "summary": one final per file
                "final_rests_on": rests["text"],
                "wall_s": round(wall, 2),
                "run_dir": summary.get("run_dir", str(run_dir)),
                "summary": {
                    k: v
                    for k, v in summary.items()
                    if k not in ("curve", "run_dir", "final", "final_rests_on")
                },
                "config": _recorded_config(spec, run_configs[cname][key], summary, run_dir),
            }
            atomic_write_json(seed_dir / "result.json", record)
            if not cfg.keep_checkpoints:
                freed = drop_checkpoints(Path(record["run_dir"]))
                if freed:
                    append_jsonl(
                        events,
                        {
                            "event": "checkpoints_deleted",
                            "condition": cname,
                            "seed": key,
                            "bytes": freed,
                            "time": time.time(),
                        },
                    )
            append_jsonl(
                events,
                {
                    "event": "finish",
                    "condition": cname,
                    "seed": key,
                    "time": time.time(),
                    "wall_s": wall,
                },
            )
            results[(cname, key)] = record
            durations.setdefault(cname, []).append(wall)
            eta = _eta(durations, remaining)
            bar.update(task, advance=1, eta=_hms(eta))
            _, values = curve_arrays(record["curve"])
            final = record["final"]  # as analyze() computes it
            console.print(
                f"[{n_done0 + i + 1}/{n_total}] {cname} {key}: final {summary.get('metric')}="
                f"{format_number(final)} (mean of the last {rests['n_points']} of "
                f"{values.size} points: {record['final_rests_on']}) in {wall:.0f} s; "
                f"~{_hms(eta)} left"
            )


def _recorded_config(
    spec: TrainerSpec, config: Mapping[str, Any], summary: Mapping[str, Any], run_dir: Path
) -> dict[str, Any]:
    """A run's config as its ``result.json`` records it: with the real run directory at the
    spec's ``run_dir_key`` (not the base file's value); the fingerprint is of the config as
    built."""
    record = copy.deepcopy(dict(config))
    if spec.run_dir_key is not None:
        set_key(record, spec.run_dir_key, str(summary.get("run_dir", run_dir)))
    return record


def drop_checkpoints(run_dir: Path) -> int:
    """Delete the checkpoint directories of a finished run; returns the bytes freed.

    A checkpoint directory is one named ``checkpoint-<step>`` (transformers' Trainer) or
    ``checkpoints`` anywhere under ``run_dir``; nothing else is touched.
    """
    if not run_dir.is_dir():
        return 0
    found = [
        p
        for p in run_dir.rglob("*")
        if p.is_dir() and (p.name == "checkpoints" or re.fullmatch(r"checkpoint-\d+", p.name))
    ]
    freed = 0
    for p in sorted(found, key=lambda q: len(q.parts)):
        if p.exists():
            freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p)
    return freed


def _yaml_dump(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(to_jsonable(obj), sort_keys=False)
