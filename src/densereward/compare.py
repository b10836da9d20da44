"""``densereward compare``: sparse vs dense sample efficiency over seeds, with rliable statistics.

A comparison runs every ``(condition, seed)`` pair through the same trainer ``run()`` that
``densereward train`` uses (:mod:`densereward.trainers.sac` or :mod:`densereward.trainers.grpo`), with the same budget,
then reports per condition the interquartile mean (IQM) of final performance and of the
normalised area under the learning curve with stratified-bootstrap 95% confidence intervals,
the steps needed to reach a threshold, and for every pair of conditions the probability of
improvement (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice").

Config (YAML; unknown keys are errors)::

    name: fetchreach-sparse-vs-dense
    trainer: sac                              # sac | grpo
    base: configs/sac_fetchreach_sparse.yaml  # a train config path, or an inline mapping
    common: [training.metrics_window=20]      # overrides applied to every condition
    conditions:                               # name -> overrides (dotted list or nested mapping)
      sparse: {}
      env_dense: [env.id=FetchReachDense-v4, env.reward=env]
    seeds: [0, 1, 2]
    budget: 6000                              # training.total_timesteps (sac) / training.max_steps (grpo)
    threshold: 0.8
    output_dir: runs/compare/fetchreach

Output directory::

    <out>/runs/<condition>/seed<k>/result.json        one finished run (written atomically, last)
    <out>/runs/<condition>/seed<k>/<condition>-seed<k>/  the trainer's run directory
    <out>/events.jsonl                                start / finish / skip of every run (append-only)
    <out>/results.json, report.md, learning_curves.png

Resuming: re-running the same command skips every run whose ``result.json`` exists and was
produced by the same run config (a fingerprint is stored); the partial directory of a run that
was interrupted is removed and the run starts again, so a crash loses at most that run.

Python API::

    results = run_comparison(load_yaml("configs/compare_fetchreach.yaml"), output_dir="runs/cmp")
    results["pairs"][0]["verdict"]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import hashlib
import importlib
import itertools
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .config import (
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
    parse_override,
)
from .errors import ConfigError, DataError, DenseRewardError
from .io import append_jsonl, atomic_write_json, atomic_write_text, to_jsonable

__all__ = [
    "CompareConfig",
    "CompareWandbConfig",
    "parse_compare_config",
    "build_run_configs",
    "run_comparison",
    "analyze",
    "render_report",
    "steps_to_threshold",
    "resample_curve",
    "normalized_auc",
    "final_performance",
    "stratified_bootstrap_ci",
    "iqm_ci",
    "probability_of_improvement_ci",
    "mean_curve_ci",
    "verdict",
    "add_arguments",
    "main",
]

logger = logging.getLogger(__name__)

NAN = float("nan")


# --------------------------------------------------------------------------------------------
# 1. Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TrainerSpec:
    """How a comparison drives one trainer module."""

    module: str
    budget_key: tuple[str, ...]
    seed_key: tuple[str, ...]
    x_label: str
    reserved: tuple[tuple[str, ...], ...]
    """Keys a condition may not override (budget, seed, run directory): they must be equal."""


TRAINERS: dict[str, _TrainerSpec] = {
    "sac": _TrainerSpec(
        module="densereward.trainers.sac",
        budget_key=("training", "total_timesteps"),
        seed_key=("training", "seed"),
        x_label="environment steps",
        reserved=(
            ("training", "total_timesteps"),
            ("training", "seed"),
            ("training", "output_dir"),
            ("training", "run_name"),
        ),
    ),
    "grpo": _TrainerSpec(
        module="densereward.trainers.grpo",
        budget_key=("training", "max_steps"),
        seed_key=("training", "seed"),
        x_label="GRPO steps",
        reserved=(
            ("training", "max_steps"),
            ("training", "seed"),
            ("training", "output_dir"),
            ("wandb", "group"),
        ),
    ),
}


@dataclass(frozen=True)
class CompareWandbConfig:
    """W&B grouping of the comparison's runs (YAML section ``wandb:``)."""

    group: str | None = None
    """W&B group of every run; ``None`` = the comparison's ``name``. Each run's job type is its condition."""
    enabled: bool = True
    """Log the runs to W&B (offline unless an API key is configured)."""


@dataclass(frozen=True)
class CompareConfig:
    """A sparse-vs-dense comparison (YAML ``configs/compare_*.yaml``)."""

    trainer: Literal["sac", "grpo"]
    """The trainer every run goes through: ``sac`` (trainers/sac.py) or ``grpo`` (trainers/grpo.py)."""
    conditions: dict[str, Any]
    """Condition name -> overrides of the base config: a list of dotted ``key=value`` strings, a
    nested mapping merged into the base, or ``null`` / ``{}`` for the base itself."""
    base: Any = None
    """The train config every condition starts from: a YAML path (relative to the working
    directory or to the comparison config) or an inline mapping."""
    name: str | None = None
    """Name of the comparison (report title, default W&B group); ``None`` = the config file's stem."""
    common: Any = None
    """Overrides applied to every condition before its own (same forms as a condition)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds S; every condition runs every seed (``training.seed``)."""
    budget: int | None = None
    """Training budget of every run: ``training.total_timesteps`` (SAC, environment steps) or
    ``training.max_steps`` (GRPO, optimizer steps); ``None`` = the base config's value."""
    threshold: float | None = None
    """Performance level for steps-to-threshold (e.g. success rate 0.8); ``None`` = not reported."""
    metric: str | None = None
    """Label of the curve metric in the report; ``None`` = the trainer's (``success_rate``,
    ``verifier/pass_rate``)."""
    output_dir: str | None = None
    """Output directory; ``None`` = ``runs/compare/<name>``."""
    final_window: int = 3
    """Final performance = mean of the last ``final_window`` points of a run's curve."""
    grid_points: int = 51
    """Points of the common step grid on ``[0, budget]`` (curve averaging, bands and AUC)."""
    n_bootstrap: int = 2000
    """Bootstrap replicates of every confidence interval."""
    confidence: float = 0.95
    """Coverage of the confidence intervals."""
    stats_seed: int = 0
    """Seed of the bootstrap (the report is reproducible from the result files)."""
    primary: Literal["auc", "final"] = "auc"
    """Score of the pairwise verdicts: ``auc`` (sample efficiency) or ``final`` (final performance)."""
    wandb: CompareWandbConfig = field(default_factory=CompareWandbConfig)

    def __post_init__(self) -> None:
        if self.trainer not in TRAINERS:
            raise ConfigError(f"trainer={self.trainer!r}; use one of {sorted(TRAINERS)}")
        if self.base is not None and not isinstance(self.base, (str, Mapping)):
            raise ConfigError(
                f"base must be a config path or a mapping, got {type(self.base).__name__}"
            )
        if not isinstance(self.conditions, Mapping) or len(self.conditions) < 2:
            raise ConfigError("conditions must map at least two condition names to overrides")
        for cname, ov in self.conditions.items():
            if (
                not isinstance(cname, str)
                or not cname
                or any(c in cname for c in "/\\ ")
                or cname.startswith(".")
            ):
                raise ConfigError(
                    f"condition name {cname!r} must be a non-empty string without '/', '\\' or spaces"
                )
            _check_override_form(ov, f"conditions.{cname}")
        _check_override_form(self.common, "common")
        seeds = self.seeds if isinstance(self.seeds, (list, tuple)) else None
        if not seeds:
            raise ConfigError(f"seeds must be a non-empty list of integers, got {self.seeds!r}")
        try:
            clean = tuple(int(s) for s in seeds)
        except (TypeError, ValueError):
            raise ConfigError(f"seeds must be integers, got {self.seeds!r}") from None
        if len(set(clean)) != len(clean):
            raise ConfigError(f"seeds must be distinct, got {list(clean)}")
        object.__setattr__(self, "seeds", clean)
        if self.budget is not None and self.budget < 1:
            raise ConfigError(f"budget must be >= 1, got {self.budget}")
        if self.final_window < 1:
            raise ConfigError(f"final_window must be >= 1, got {self.final_window}")
        if self.grid_points < 2:
            raise ConfigError(f"grid_points must be >= 2, got {self.grid_points}")
        if self.n_bootstrap < 100:
            raise ConfigError(f"n_bootstrap must be >= 100, got {self.n_bootstrap}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.primary not in ("auc", "final"):
            raise ConfigError(f"primary={self.primary!r}; use auc | final")


def _check_override_form(ov: Any, where: str) -> None:
    if ov is None or isinstance(ov, Mapping):
        return
    if isinstance(ov, (list, tuple)) and all(isinstance(x, str) for x in ov):
        for x in ov:
            parse_override(x)  # raises ConfigError on a malformed entry
        return
    raise ConfigError(f"{where} must be a list of key=value strings or a mapping, got {ov!r}")


def parse_compare_config(config: Mapping[str, Any], *, name: str | None = None) -> CompareConfig:
    """Validate a comparison config mapping into :class:`CompareConfig`.

    Args:
        config: the YAML mapping (see the module docstring).
        name: default comparison name (e.g. the config file's stem) when ``name`` is not set.

    Raises:
        ConfigError: on unknown keys or invalid values.
    """
    data = dict(config)
    for required in ("trainer", "conditions"):
        if required not in data:
            raise ConfigError(f"comparison config needs {required!r}")
    cfg = from_dict(CompareConfig, data)
    if cfg.name is None:
        cfg = dataclasses.replace(cfg, name=name or "compare")
    return cfg


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = copy.deepcopy(dict(v) if isinstance(v, Mapping) else v)
    return base


def _override_keys(ov: Any) -> list[tuple[str, ...]]:
    if ov is None:
        return []
    if isinstance(ov, Mapping):
        out = []
        for k, v in ov.items():
            if isinstance(v, Mapping) and v:
                out += [(str(k), *sub) for sub in _override_keys(v)]
            else:
                out.append((str(k),))
        return out
    return [tuple(parse_override(x)[0]) for x in ov]


def _apply(config: dict[str, Any], ov: Any) -> dict[str, Any]:
    if ov is None:
        return config
    if isinstance(ov, Mapping):
        return _deep_merge(config, ov)
    return apply_overrides(config, list(ov))


def _set(config: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    node = config
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def _get(config: Mapping[str, Any], keys: Sequence[str]) -> Any:
    node: Any = config
    for k in keys:
        if not isinstance(node, Mapping) or k not in node:
            return None
        node = node[k]
    return node


def _load_base(base: Any, base_dir: Path | None) -> dict[str, Any]:
    if base is None:
        return {}
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base))
    p = Path(base)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p]
    if not p.is_absolute() and base_dir is not None:
        candidates += [base_dir / p, base_dir.parent / p]
    for c in candidates:
        if c.is_file():
            return load_yaml(c)
    raise ConfigError(
        f"base config {base!r} not found (looked in {', '.join(str(c.parent) for c in candidates)})"
    )


def build_run_configs(
    cfg: CompareConfig, *, base_dir: Path | None = None
) -> dict[str, dict[str, dict[str, Any]]]:
    """The train config of every run: ``{condition: {f"seed{k}": config}}``.

    Each is the base config with ``common`` and then the condition's overrides applied, the
    budget and the seed set, and W&B grouping filled in, so every condition gets the same
    budget and seeds. The configs are validated by the trainer's own parser before any run.

    Args:
        cfg: the comparison.
        base_dir: directory of the comparison config file (a relative ``base`` path is also
            looked up there and in its parent).

    Raises:
        ConfigError: if a condition overrides the budget, the seed or the run directory, or a
            resulting config is invalid for the trainer.
    """
    spec = TRAINERS[cfg.trainer]
    base = _load_base(cfg.base, base_dir)
    _apply(base, copy.deepcopy(cfg.common))
    budget = cfg.budget if cfg.budget is not None else _get(base, spec.budget_key)
    if budget is None:
        raise ConfigError(f"set budget: (or {'.'.join(spec.budget_key)} in the base config)")
    group = cfg.wandb.group or cfg.name
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cname, ov in cfg.conditions.items():
        for keys in _override_keys(cfg.common) + _override_keys(ov):
            if any(keys == r[: len(keys)] or r == keys[: len(r)] for r in spec.reserved):
                raise ConfigError(
                    f"conditions.{cname}: {'.'.join(keys)} is set by the comparison for every run "
                    "(use budget: / seeds:); conditions must differ only in their reward set-up"
                )
        cond_cfg = _apply(copy.deepcopy(base), copy.deepcopy(ov))
        _set(cond_cfg, spec.budget_key, int(budget))
        if cfg.trainer == "sac":
            _set(cond_cfg, ("training", "wandb"), bool(cfg.wandb.enabled))
            cond_cfg.get("training", {}).pop("run_name", None)
        else:
            _set(cond_cfg, ("wandb", "group"), group)
            if not cfg.wandb.enabled:
                _set(cond_cfg, ("training", "report_to"), "none")
            cond_cfg.get("training", {}).pop("output_dir", None)
        _validate_trainer_config(cfg.trainer, cond_cfg, f"condition {cname!r}")
        out[cname] = {}
        for seed in cfg.seeds:
            run_cfg = copy.deepcopy(cond_cfg)
            _set(run_cfg, spec.seed_key, int(seed))
            out[cname][f"seed{seed}"] = run_cfg
    return out


def _validate_trainer_config(trainer: str, config: dict[str, Any], where: str) -> None:
    """The trainer's own config check plus what would fail a run at its start: a local data
    file that is missing (GRPO), an environment id that is not registered (SAC)."""
    mod = importlib.import_module(TRAINERS[trainer].module)
    try:
        if trainer == "sac":
            mod.env_spec(mod.parse_config(copy.deepcopy(config)).env.id)
        else:
            from .data import check_source

            check_source(mod.resolve_config(copy.deepcopy(config))["data"])
    except (ConfigError, DataError) as exc:
        raise type(exc)(f"{where}: {exc}") from None


def fingerprint(trainer: str, config: Mapping[str, Any]) -> str:
    """Stable hash of a run's trainer and config (detects a changed config on resume)."""
    text = json.dumps({"trainer": trainer, "config": to_jsonable(config)}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# 2. Statistics (pure functions)
# --------------------------------------------------------------------------------------------


def _curve_arrays(curve: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    pts = sorted(
        (float(p["step"]), float(p["value"]))
        for p in curve
        if p.get("value") is not None and math.isfinite(float(p["value"]))
    )
    if not pts:
        return np.zeros(0), np.zeros(0)
    steps, values = (np.asarray(x, dtype=float) for x in zip(*pts, strict=True))
    return steps, values


def steps_to_threshold(steps: Sequence[float], values: Sequence[float], threshold: float) -> float:
    """First step at which the learning curve reaches ``threshold``.

    Args:
        steps: evaluation steps, shape ``(T,)`` (environment steps or GRPO steps), increasing.
        values: the metric at each step, shape ``(T,)``.
        threshold: the level to reach (``value >= threshold``).

    Returns:
        The step (same unit as ``steps``), or ``NaN`` when the curve never reaches it.

    Raises:
        DataError: if the shapes differ.

    >>> steps_to_threshold([100, 200, 300], [0.1, 0.85, 0.9], 0.8)
    200.0
    >>> steps_to_threshold([100, 200], [0.1, 0.2], 0.8)
    nan
    """
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if s.shape != v.shape or s.ndim != 1:
        raise DataError(
            f"steps and values must be 1-D of equal length, got {s.shape} and {v.shape}"
        )
    hit = np.flatnonzero(v >= threshold)
    return float(s[hit[0]]) if hit.size else NAN


def resample_curve(
    steps: Sequence[float], values: Sequence[float], grid: Sequence[float]
) -> np.ndarray:
    """Linear interpolation of a learning curve onto a common step grid.

    Before the first evaluation the first value is held, after the last the last value is
    held (``np.interp``): no run is extrapolated beyond what it measured.

    Args:
        steps: evaluation steps, shape ``(T,)``, T >= 1, increasing.
        values: metric values, shape ``(T,)``.
        grid: target steps, shape ``(G,)``.

    Returns:
        Values on the grid, shape ``(G,)``.

    Raises:
        DataError: for an empty curve or mismatched shapes.

    >>> resample_curve([0, 10], [0.0, 1.0], [0, 5, 10, 20]).tolist()
    [0.0, 0.5, 1.0, 1.0]
    """
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if s.size == 0 or s.shape != v.shape:
        raise DataError(
            f"a learning curve needs >= 1 point and equal shapes, got {s.shape} and {v.shape}"
        )
    return np.interp(np.asarray(grid, dtype=float), s, v)


def normalized_auc(
    steps: Sequence[float], values: Sequence[float], budget: float, *, grid_points: int = 51
) -> float:
    """Area under the learning curve on ``[0, budget]``, divided by ``budget``.

    ``AUC = (1 / budget) * integral_0^budget f(t) dt`` by the trapezoid rule on ``grid_points``
    equally spaced steps (the curve resampled with :func:`resample_curve`). It is the mean
    performance over training, in the metric's unit (``[0, 1]`` for success and pass rates):
    a curve that rises earlier has a larger AUC, the usual sample-efficiency summary.

    Args:
        steps: evaluation steps, shape ``(T,)``.
        values: metric values, shape ``(T,)``.
        budget: the training budget (same unit as ``steps``), > 0.
        grid_points: resolution of the grid, >= 2.

    Returns:
        The normalised area; ``NaN`` for an empty curve.

    Raises:
        DataError: if ``budget <= 0`` or ``grid_points < 2``.

    >>> round(normalized_auc([0, 100], [0.0, 1.0], 100), 6)
    0.5
    """
    if budget <= 0 or grid_points < 2:
        raise DataError(f"budget must be > 0 and grid_points >= 2, got {budget} and {grid_points}")
    if len(steps) == 0:
        return NAN
    grid = np.linspace(0.0, float(budget), grid_points)
    y = resample_curve(steps, values, grid)
    return float(np.sum((y[1:] + y[:-1]) * np.diff(grid)) / 2.0 / float(budget))


def final_performance(values: Sequence[float], window: int = 3) -> float:
    """Mean of the last ``window`` evaluations of a learning curve (``NaN`` if empty).

    >>> final_performance([0.0, 0.5, 0.7, 0.9], window=2)
    0.8
    """
    v = np.asarray(values, dtype=float)
    if window < 1:
        raise DataError(f"window must be >= 1, got {window}")
    return float(np.mean(v[-window:])) if v.size else NAN


def stratified_bootstrap_ci(
    fn: Callable[..., float],
    *scores: np.ndarray,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Percentile stratified-bootstrap interval of ``fn(*scores)`` (Agarwal et al. 2021, Sec. 4).

    A thin wrapper of ``rliable.library.get_interval_estimates``: each score matrix has shape
    ``(n_runs, n_tasks)``; the runs of every task (column) are resampled with replacement
    (``StratifiedBootstrap`` for one matrix, ``StratifiedIndependentBootstrap`` -- each matrix
    independently -- for several, e.g. the two sides of a probability of improvement).

    Args:
        fn: statistic of the score matrices, e.g. ``rliable.metrics.aggregate_iqm`` or
            ``rliable.metrics.probability_of_improvement``; returns a scalar.
        *scores: one or more matrices ``(n_runs, n_tasks)`` (run counts may differ).
        n_bootstrap: replicates B.
        confidence: interval coverage in ``(0, 1)``.
        seed: seed of the bootstrap's ``numpy.random.RandomState``.

    Returns:
        ``{"value": fn on the data, "low", "high", "n_runs": runs of the first matrix}``.

    Raises:
        DataError: for an empty matrix, a non-2-D input or bad parameters.

    >>> from rliable import metrics
    >>> r = stratified_bootstrap_ci(metrics.aggregate_iqm, np.array([[0.1], [0.5], [0.9]]),
    ...                             n_bootstrap=200)
    >>> round(r["value"], 3), 0.1 <= r["low"] <= r["value"] <= r["high"] <= 0.9
    (0.5, True)
    """
    import warnings

    from rliable import library as rly

    mats = [np.asarray(s, dtype=float) for s in scores]
    if not mats or any(m.ndim != 2 or m.shape[0] == 0 for m in mats):
        raise DataError("stratified_bootstrap_ci needs non-empty (n_runs, n_tasks) matrices")
    if not 0.0 < confidence < 1.0 or n_bootstrap < 1:
        raise DataError("confidence must be in (0, 1) and n_bootstrap >= 1")
    data = mats[0] if len(mats) == 1 else tuple(mats)

    def statistic(*m: np.ndarray) -> np.ndarray:
        return np.atleast_1d(np.asarray(fn(*m), dtype=float))

    # rliable 1.2's StratifiedBootstrap.update_indices draws from the *global* np.random
    # (np.random.choice), ignoring the random_state it is given; seed the global generator for
    # the call and put its state back, so the interval depends on ``seed`` alone and the
    # caller's random stream is untouched.
    global_state = np.random.get_state()
    np.random.seed(seed)
    with warnings.catch_warnings():
        # arch 7 deprecates the ``random_state`` argument rliable passes; same numbers
        warnings.filterwarnings(
            "ignore", message="random_state is deprecated", category=FutureWarning
        )
        try:
            point, interval = rly.get_interval_estimates(
                {"x": data},
                statistic,
                method="percentile",
                reps=n_bootstrap,
                confidence_interval_size=confidence,
                random_state=np.random.RandomState(seed),
            )
        finally:
            np.random.set_state(global_state)
    low, high = (float(v) for v in np.asarray(interval["x"], dtype=float).reshape(2, -1)[:, 0])
    value = float(np.asarray(point["x"], dtype=float).ravel()[0])
    return {"value": value, "low": low, "high": high, "n_runs": int(mats[0].shape[0])}


def iqm_ci(
    scores: Sequence[float], *, n_bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Interquartile mean of per-run scores with a stratified-bootstrap interval.

    IQM = mean of the middle 50% of runs (``rliable.metrics.aggregate_iqm``, a 25%-trimmed
    mean; Agarwal et al. 2021, Sec. 4.1). With fewer than 4 runs nothing is trimmed and the
    IQM equals the mean. Non-finite scores (e.g. a run without a curve) are dropped.

    Args:
        scores: one score per run, shape ``(n_runs,)``.

    Returns:
        ``{"value", "low", "high", "n_runs"}``; all ``NaN`` (``n_runs`` 0) when no score is finite.

    >>> r = iqm_ci([0.2, 0.4, 0.6, 0.8], n_bootstrap=200)
    >>> round(r["value"], 3), r["low"] <= r["value"] <= r["high"]
    (0.5, True)
    """
    from rliable import metrics as rl_metrics

    x = np.asarray(scores, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"value": NAN, "low": NAN, "high": NAN, "n_runs": 0}
    return stratified_bootstrap_ci(
        rl_metrics.aggregate_iqm,
        x[:, None],
        n_bootstrap=n_bootstrap,
        confidence=confidence,
        seed=seed,
    )


def probability_of_improvement_ci(
    x: Sequence[float],
    y: Sequence[float],
    *,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """P(X > Y): probability that a run of X scores higher than a run of Y, with a CI.

    The Mann-Whitney U statistic divided by ``n_x * n_y``, ties counting one half
    (``rliable.metrics.probability_of_improvement``; Agarwal et al. 2021, Sec. 4.3), with a
    stratified bootstrap that resamples the runs of X and of Y independently.

    Args:
        x: scores of condition X, shape ``(n_x,)``; non-finite values are dropped.
        y: scores of condition Y, shape ``(n_y,)``.

    Returns:
        ``{"value", "low", "high", "n_runs"}`` (``n_runs`` = n_x); ``NaN`` when a side is empty.

    >>> probability_of_improvement_ci([3, 4, 5], [0, 1, 2], n_bootstrap=200)["value"]
    1.0
    """
    from rliable import metrics as rl_metrics

    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return {"value": NAN, "low": NAN, "high": NAN, "n_runs": int(a.size)}
    return stratified_bootstrap_ci(
        rl_metrics.probability_of_improvement, a[:, None], b[:, None],
        n_bootstrap=n_bootstrap, confidence=confidence, seed=seed,
    )  # fmt: skip


def mean_curve_ci(
    curves: np.ndarray, *, n_bootstrap: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean learning curve over seeds with a pointwise percentile-bootstrap band.

    Args:
        curves: resampled curves, shape ``(n_runs, G)`` (one row per seed, a common grid).

    Returns:
        ``(mean, low, high)``, each of shape ``(G,)``; the band comes from resampling whole
        runs (rows) with replacement, so points of one run stay together.

    Raises:
        DataError: for an empty or non-2-D array.
    """
    c = np.asarray(curves, dtype=float)
    if c.ndim != 2 or c.shape[0] == 0:
        raise DataError(f"curves must have shape (n_runs, G) with n_runs >= 1, got {c.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, c.shape[0], size=(n_bootstrap, c.shape[0]))
    means = c[idx].mean(axis=1)  # (B, G)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return c.mean(axis=0), low, high


def verdict(
    a: str, b: str, poi: Mapping[str, float], *, score: str = "AUC", n_a: int = 2, n_b: int = 2
) -> str:
    """One-line verdict for a pair from P(a > b) and its interval.

    ``a`` beats ``b`` when the interval's lower bound is above 0.5, ``b`` beats ``a`` when
    its upper bound is below 0.5, otherwise there is no significant difference. With fewer
    than 2 runs (``n_a``, ``n_b``) on a side the bootstrap interval is degenerate: no verdict.

    >>> verdict("dense", "sparse", {"value": 0.89, "low": 0.67, "high": 1.0})
    'dense beats sparse (AUC): P(dense > sparse) = 0.89 [0.67, 1.00]'
    >>> verdict("dense", "sparse", {"value": 0.5, "low": 0.2, "high": 0.8})
    'no significant difference between dense and sparse (AUC): P(dense > sparse) = 0.50 [0.20, 0.80]'
    """
    p, lo, hi = poi.get("value", NAN), poi.get("low", NAN), poi.get("high", NAN)
    stat = f"P({a} > {b}) = {_fmt(p, 2)} [{_fmt(lo, 2)}, {_fmt(hi, 2)}]"
    if min(n_a, n_b) < 2:
        return f"too few runs for a verdict ({score}; {n_a} and {n_b} finished, >= 2 each needed): {stat}"
    if not all(map(math.isfinite, (p, lo, hi))):
        return f"not comparable ({score}: a condition has no finished run with a curve): {stat}"
    if lo > 0.5:
        return f"{a} beats {b} ({score}): {stat}"
    if hi < 0.5:
        return f"{b} beats {a} ({score}): {stat}"
    return f"no significant difference between {a} and {b} ({score}): {stat}"


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}f}"


# --------------------------------------------------------------------------------------------
# 3. Analysis, report, plot
# --------------------------------------------------------------------------------------------


def analyze(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    budget: float,
    threshold: float | None = None,
    final_window: int = 3,
    grid_points: int = 51,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    primary: str = "auc",
) -> dict[str, Any]:
    """Statistics of a comparison from its per-run results.

    Args:
        runs: condition -> list of run results, each with ``seed`` and ``curve``
            (``[{"step", "value"}]``, steps in the budget's unit).
        budget: training budget (environment steps or GRPO steps) = the grid's right end.
        threshold: level for steps-to-threshold; ``None`` skips it.
        final_window: evaluations averaged into final performance.
        grid_points: points of the common grid on ``[0, budget]``.
        n_bootstrap, confidence, seed: bootstrap settings (every CI uses ``seed``).
        primary: ``auc`` or ``final``, the score of the pairwise verdicts.

    Returns:
        ``{"grid": (G,), "conditions": {name: {"runs": [...], "final": ci, "auc": ci,
        "steps_to_threshold": {...}, "curve": {"mean", "low", "high"}}}, "pairs": [...]}``.
    """
    grid = np.linspace(0.0, float(budget), grid_points)
    kw = {"n_bootstrap": n_bootstrap, "confidence": confidence, "seed": seed}
    conditions: dict[str, Any] = {}
    for name, results in runs.items():
        per_run = []
        rows = []
        for r in results:
            s, v = _curve_arrays(r.get("curve") or [])
            item = {
                "seed": r.get("seed"),
                "final": final_performance(v, final_window),
                "auc": normalized_auc(s, v, budget, grid_points=grid_points) if s.size else NAN,
                "steps_to_threshold": steps_to_threshold(s, v, threshold)
                if threshold is not None and s.size
                else NAN,
                "n_points": int(s.size),
                "wall_s": r.get("wall_s"),
                "run_dir": r.get("run_dir"),
            }
            per_run.append(item)
            if s.size:
                rows.append(resample_curve(s, v, grid))
        finals = [x["final"] for x in per_run]
        aucs = [x["auc"] for x in per_run]
        entry: dict[str, Any] = {
            "n_runs": len(per_run),
            "runs": per_run,
            "final": iqm_ci(finals, **kw),
            "auc": iqm_ci(aucs, **kw),
        }
        if threshold is not None:
            sts = np.array([x["steps_to_threshold"] for x in per_run], dtype=float)
            reached = np.isfinite(sts)
            median = float(np.median(np.where(reached, sts, np.inf))) if sts.size else NAN
            entry["steps_to_threshold"] = {
                "threshold": threshold,
                "median": median if math.isfinite(median) else None,
                "n_reached": int(reached.sum()),
                "n_runs": int(sts.size),
                "per_seed": {
                    str(x["seed"]): (
                        None
                        if not math.isfinite(x["steps_to_threshold"])
                        else x["steps_to_threshold"]
                    )
                    for x in per_run
                },
            }
        if rows:
            mean, low, high = mean_curve_ci(np.stack(rows), **kw)
            entry["curve"] = {"mean": mean, "low": low, "high": high}
        else:
            entry["curve"] = None
        conditions[name] = entry
    pairs = []
    for a, b in itertools.combinations(list(conditions), 2):
        pa = {k: [x[k] for x in conditions[a]["runs"]] for k in ("auc", "final")}
        pb = {k: [x[k] for x in conditions[b]["runs"]] for k in ("auc", "final")}
        poi = {k: probability_of_improvement_ci(pa[k], pb[k], **kw) for k in ("auc", "final")}
        # orient each pair so the condition with the larger primary score comes first
        if math.isfinite(poi[primary]["value"]) and poi[primary]["value"] < 0.5:
            a, b = b, a
            poi = {
                k: {
                    "value": 1 - v["value"],
                    "low": 1 - v["high"],
                    "high": 1 - v["low"],
                    "n_runs": len(pb[k]),
                }
                for k, v in poi.items()
            }
        pairs.append(
            {
                "a": a, "b": b, "score": primary,
                "p_improvement": poi,
                "verdict": verdict(
                    a, b, poi[primary], score="AUC" if primary == "auc" else "final performance",
                    n_a=int(np.isfinite([x[primary] for x in conditions[a]["runs"]]).sum()),
                    n_b=int(np.isfinite([x[primary] for x in conditions[b]["runs"]]).sum()),
                ),
            }
        )  # fmt: skip
    return {"grid": grid, "conditions": conditions, "pairs": pairs}


def render_report(
    analysis: Mapping[str, Any],
    *,
    name: str,
    trainer: str,
    metric: str,
    budget: float,
    seeds: Sequence[int],
    x_label: str,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    final_window: int = 3,
    wall_s: float | None = None,
    missing: Sequence[str] = (),
    curve_sources: Sequence[str] = (),
) -> str:
    """Markdown report: one table row per condition and one verdict line per pair.

    ``curve_sources``: what the runs' learning curves measure, as the trainers state it
    (``summary["curve_source"]``, e.g. SAC's deterministic evaluation episodes); each distinct
    one is named in the report's header and Method section.
    """
    pct = f"{round(confidence * 100)}%"
    lines = [
        f"# Comparison: {name}",
        "",
        f"Trainer `{trainer}`, metric `{metric}`, budget {int(budget)} {x_label} per run, "
        f"seeds {list(seeds)}."
        + (f" Total wall time {wall_s / 60:.1f} min." if wall_s is not None else ""),
        *[f"Learning curves: {src}." for src in curve_sources],
        "",
        f"| condition | runs | final {metric} IQM [{pct} CI] | AUC IQM [{pct} CI] | steps to threshold (median; reached) | wall s / run |",
        "|---|---|---|---|---|---|",
    ]
    for cname, c in analysis["conditions"].items():
        fin, auc = c["final"], c["auc"]
        st = c.get("steps_to_threshold")
        if st is None:
            st_txt = "n/a"
        else:
            med = "not reached" if st["median"] is None else f"{st['median']:.0f}"
            st_txt = f"{med} ({st['n_reached']}/{st['n_runs']} reached >= {st['threshold']:g})"
        walls = [r["wall_s"] for r in c["runs"] if r.get("wall_s") is not None]
        wall = f"{np.mean(walls):.0f}" if walls else "n/a"
        lines.append(
            f"| {cname} | {c['n_runs']} | {_fmt(fin['value'])} [{_fmt(fin['low'])}, {_fmt(fin['high'])}] "
            f"| {_fmt(auc['value'])} [{_fmt(auc['low'])}, {_fmt(auc['high'])}] | {st_txt} | {wall} |"
        )
    lines += ["", "## Verdicts", ""]
    for p in analysis["pairs"]:
        fin = p["p_improvement"]["final"]
        lines.append(
            f"- {p['verdict']}; final: P({p['a']} > {p['b']}) = {_fmt(fin['value'], 2)} "
            f"[{_fmt(fin['low'], 2)}, {_fmt(fin['high'], 2)}]"
        )
    if missing:
        lines += ["", f"**Incomplete:** {len(missing)} run(s) not finished: {', '.join(missing)}."]
    n_min = min((c["n_runs"] for c in analysis["conditions"].values()), default=0)
    if 0 < n_min < 5:
        lines += [
            "",
            f"**Few runs:** {n_min} per condition. A bootstrap over so few runs understates the "
            "uncertainty (two runs that beat two others give P = 1.00 [1.00, 1.00]); read the "
            "verdicts as indicative and add seeds (`--seeds`) before drawing conclusions.",
        ]
    short = sorted(
        {cname for cname, c in analysis["conditions"].items()
         for r in c["runs"] if 0 < int(r.get("n_points") or 0) < 3}
    )  # fmt: skip
    if short:
        lines += [
            "",
            f"**Short curves:** some runs of {', '.join(short)} have fewer than 3 evaluation "
            "points; the budget may be too small to learn anything (e.g. below SAC's "
            "`learning_starts`), or the curve interval too large.",
        ]
    lines += [
        "",
        "![learning curves](learning_curves.png)",
        "",
        "## Method",
        "",
        *[f"- Curve (`{metric}`): {src}." for src in curve_sources],
        f"- Final performance: mean of the last {final_window} points of each run's `{metric}` curve. "
        f"AUC: area under the curve on [0, {int(budget)}] {x_label} (trapezoid on a common grid, "
        "the first value held before the first evaluation) divided by the budget, i.e. the mean "
        "performance over training; higher = learns faster.",
        "- IQM: interquartile mean over runs (25%-trimmed mean, `rliable.metrics.aggregate_iqm`); "
        "with fewer than 4 runs it equals the mean. "
        f"CIs: {pct} percentile stratified bootstrap over runs, {n_bootstrap} replicates "
        "(`rliable.library.get_interval_estimates`; Agarwal et al. 2021). With few seeds the intervals are wide, and with fewer than about 5 runs per condition still too narrow: a percentile bootstrap cannot show more spread than the runs have.",
        "- P(X > Y): probability of improvement (Mann-Whitney U / (n_x n_y), ties count 1/2, "
        "`rliable.metrics.probability_of_improvement`) with rliable's independent stratified "
        "bootstrap (`StratifiedIndependentBootstrap`); "
        "X beats Y when the CI's lower bound is above 0.5.",
        "- Steps to threshold: the first evaluation at or above the threshold; the median counts "
        "runs that never reached it as infinite.",
        "",
    ]
    return "\n".join(lines)


def plot_curves(
    analysis: Mapping[str, Any],
    path: Path,
    *,
    metric: str,
    x_label: str,
    threshold: float | None,
    title: str,
    confidence: float = 0.95,
) -> Path:
    """Mean learning curve with its bootstrap band per condition (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.asarray(analysis["grid"])
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for cname, c in analysis["conditions"].items():
        if c.get("curve") is None:
            continue
        mean = np.asarray(c["curve"]["mean"])
        (line,) = ax.plot(grid, mean, label=f"{cname} (n={c['n_runs']})")
        ax.fill_between(
            grid,
            c["curve"]["low"],
            c["curve"]["high"],
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
    if threshold is not None:
        ax.axhline(
            threshold, color="grey", linestyle="--", linewidth=1, label=f"threshold {threshold:g}"
        )
    ax.set_xlabel(x_label)
    ax.set_ylabel(metric)
    ax.set_title(
        f"{title}\nline: mean over seeds; band: {round(confidence * 100)}% bootstrap CI of the mean",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------
# 4. Running (resumable)
# --------------------------------------------------------------------------------------------

_WANDB_ENV = (
    "WANDB_DIR",
    "WANDB_MODE",
    "WANDB_SILENT",
    "WANDB_RUN_GROUP",
    "WANDB_JOB_TYPE",
    "WANDB_PROJECT",
    "WANDB_TAGS",
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


def _output_dir(flag: str | Path | None, configured: str | None, name: Any) -> Path:
    """The comparison's directory: ``--output-dir``, else ``output_dir:``, else runs/compare/<name>."""
    return Path(flag or configured or Path("runs") / "compare" / str(name))


def run_comparison(
    config: Mapping[str, Any],
    *,
    output_dir: str | Path | None = None,
    base_dir: str | Path | None = None,
    name: str | None = None,
    progress: bool = True,
    report_only: bool = False,
) -> dict[str, Any]:
    """Run (or resume) a comparison and write ``results.json``, ``report.md``, ``learning_curves.png``.

    Runs go seed-major (seed 0 of every condition, then seed 1, ...), so a partial comparison
    stays balanced. Each run calls the trainer's ``run(config, output_dir=...)`` in this process
    (the ``densereward train`` code path); its result is written atomically to
    ``<out>/runs/<condition>/seed<k>/result.json`` when it finishes. Finished runs with the same
    run config are skipped; an unfinished run's directory is removed and the run redone.

    Args:
        config: the comparison config mapping (see :class:`CompareConfig`).
        output_dir: overrides ``output_dir`` of the config.
        base_dir: directory of the comparison config file (for a relative ``base`` path).
        name: default name when the config has none (the CLI passes the file's stem).
        progress: show a progress bar over runs with an estimate of the time left.
        report_only: run nothing; build the report from the runs finished so far.

    Returns:
        The content of ``results.json``: ``{"name", "trainer", "metric", "budget", "seeds",
        "threshold", "conditions": {...}, "pairs": [...], "missing": [...], "wall_s", "output_dir"}``.

    Raises:
        ConfigError: on an invalid config, or result files from a different config.
        DenseRewardError: if no condition has a finished run (``report_only``).
        Exception: whatever a trainer raises; runs finished before it are kept.
    """
    t_start = time.monotonic()
    cfg = parse_compare_config(config, name=name)
    spec = TRAINERS[cfg.trainer]
    run_configs = build_run_configs(cfg, base_dir=Path(base_dir) if base_dir is not None else None)
    out = _output_dir(output_dir, cfg.output_dir, cfg.name)
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
        atomic_write_text(
            out / "compare_config.yaml", _yaml_dump({**dict(config), "output_dir": str(out)})
        )
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
    analysis = analyze(
        by_cond, budget=budget, threshold=cfg.threshold, final_window=cfg.final_window,
        grid_points=cfg.grid_points, n_bootstrap=cfg.n_bootstrap, confidence=cfg.confidence,
        seed=cfg.stats_seed, primary=cfg.primary,
    )  # fmt: skip
    wall = sum(float(r.get("wall_s") or 0.0) for rs in by_cond.values() for r in rs)
    report = render_report(
        analysis, name=str(cfg.name), trainer=cfg.trainer, metric=metric, budget=budget, seeds=cfg.seeds,
        x_label=spec.x_label, confidence=cfg.confidence, n_bootstrap=cfg.n_bootstrap,
        final_window=cfg.final_window, wall_s=wall, missing=missing,
        curve_sources=sorted({str(r["summary"]["curve_source"]) for rs in by_cond.values()
                              for r in rs if (r.get("summary") or {}).get("curve_source")}),
    )  # fmt: skip
    plot_curves(
        analysis,
        out / "learning_curves.png",
        metric=metric,
        x_label=spec.x_label,
        threshold=cfg.threshold,
        title=str(cfg.name),
        confidence=cfg.confidence,
    )
    atomic_write_text(out / "report.md", report)
    results_doc = {
        "name": cfg.name,
        "trainer": cfg.trainer,
        "metric": metric,
        "trainer_metric": trainer_metric,
        "x_label": spec.x_label,
        "budget": budget,
        "seeds": list(cfg.seeds),
        "threshold": cfg.threshold,
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
) -> list[str]:
    """Validate a comparison without running or creating anything (``--dry-run``).

    Every condition's run config is built and validated as :func:`run_comparison` does
    (including local data files and environment ids), then put through its trainer's own dry
    run (``densereward.trainers.<name>.dry_run``) in a scratch directory; the output directory is read
    to say which runs are already finished and would be skipped.

    Returns:
        One line per check; a problem a run would hit although the config is valid starts
        with ``"!! "``.

    Raises:
        ConfigError, DataError: as :func:`run_comparison` would, before its first run.
    """
    import tempfile

    cfg = parse_compare_config(config, name=name)
    spec = TRAINERS[cfg.trainer]
    run_configs = build_run_configs(cfg, base_dir=Path(base_dir) if base_dir is not None else None)
    out = _output_dir(output_dir, cfg.output_dir, cfg.name)
    order = [(c, f"seed{s}") for s in cfg.seeds for c in cfg.conditions]
    done, changed = 0, []
    for c, k in order:
        try:
            done += _load_result(out / "runs" / c / k / "result.json",
                                 fingerprint(cfg.trainer, run_configs[c][k])) is not None  # fmt: skip
        except _ChangedConfig as exc:
            changed.append(str(exc))
    lines = [
        f"comparison {cfg.name!r}: trainer {cfg.trainer}, conditions {list(cfg.conditions)}, "
        f"seeds {list(cfg.seeds)}, budget {_get(run_configs[order[0][0]][order[0][1]], spec.budget_key)}",
        f"output directory: {out} ({done} of {len(order)} runs finished there and would be skipped)",
    ]
    lines += [f"!! a finished run has a different config: {c}" for c in changed[:1]]
    trainer = importlib.import_module(spec.module)
    with tempfile.TemporaryDirectory() as tmp:
        for cname, seeds in run_configs.items():
            first = copy.deepcopy(next(iter(seeds.values())))
            for line in trainer.dry_run(first, output_dir=Path(tmp) / cname):
                if line.startswith("run directory:"):
                    continue  # a scratch directory; the comparison's own is reported above
                bang = line.startswith("!! ")
                lines.append(("!! " if bang else "") + f"{cname}: {line[3:] if bang else line}")
    return lines


def _run_all(
    cfg: CompareConfig,
    spec: _TrainerSpec,
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

    trainer = importlib.import_module(spec.module)
    console = Console(stderr=True)
    n_done0 = n_total - len(todo)
    group = cfg.wandb.group or str(cfg.name)
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("left ~{task.fields[eta]}"),
        console=console, disable=not progress, transient=False,
    ) as bar:  # fmt: skip
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
            if run_dir.exists():
                shutil.rmtree(run_dir)  # an interrupted earlier attempt: start this run again
                append_jsonl(
                    events,
                    {"event": "cleanup", "condition": cname, "seed": key, "time": time.time()},
                )
            seed_dir.mkdir(parents=True, exist_ok=True)
            append_jsonl(
                events, {"event": "start", "condition": cname, "seed": key, "time": time.time()}
            )
            old_env = {k: os.environ.get(k) for k in _WANDB_ENV}
            os.environ["WANDB_RUN_GROUP"] = group
            os.environ["WANDB_JOB_TYPE"] = cname
            t0 = time.monotonic()
            try:
                summary = trainer.run(copy.deepcopy(run_configs[cname][key]), output_dir=run_dir)
            finally:
                for k, v in old_env.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                gc.collect()
            wall = time.monotonic() - t0
            record = {
                "condition": cname,
                "seed": int(key[4:]),
                "trainer": cfg.trainer,
                "fingerprint": fps[(cname, key)],
                "metric": summary.get("metric"),
                "curve": summary.get("curve") or [],
                "final": summary.get("final"),
                "wall_s": round(wall, 2),
                "run_dir": summary.get("run_dir", str(run_dir)),
                "summary": {k: v for k, v in summary.items() if k not in ("curve", "run_dir")},
                "config": run_configs[cname][key],
            }
            atomic_write_json(seed_dir / "result.json", record)
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
            _, values = _curve_arrays(record["curve"])  # as analyze() reads it
            final = final_performance(values, cfg.final_window) if values.size else None
            console.print(
                f"[{n_done0 + i + 1}/{n_total}] {cname} {key}: final {summary.get('metric')}="
                f"{_fmt(final)} (mean of the last {min(cfg.final_window, values.size)} of "
                f"{values.size} points) in {wall:.0f} s; ~{_hms(eta)} left"
            )


def _yaml_dump(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(to_jsonable(obj), sort_keys=False)


# --------------------------------------------------------------------------------------------
# 5. Command line
# --------------------------------------------------------------------------------------------

EPILOG = """\
examples:
  densereward compare --config configs/compare_fetchreach.yaml
  densereward compare --config configs/compare_fetchreach.yaml --seeds 0 1 budget=2000 --output-dir runs/cmp-small
  densereward compare --config configs/compare_grpo_cpu.yaml --conditions sparse dense
  densereward compare --config configs/compare_fetchreach.yaml --report-only   # statistics of finished runs

Re-running the same command resumes: finished runs (runs/<condition>/seed<k>/result.json) are
skipped and an interrupted run starts again. Outputs: report.md, learning_curves.png, results.json.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``densereward compare``'s arguments to ``parser``."""
    parser.description = (
        "Compare reward conditions (e.g. sparse vs dense) over seeds with the same trainer and budget: "
        "IQM with stratified-bootstrap CIs, probability of improvement, steps to threshold, AUC (rliable)."
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--config", required=True, help="comparison YAML, e.g. configs/compare_fetchreach.yaml"
    )
    add_override_arguments(parser, "budget=2000 threshold=0.9 (keys of the comparison config)")
    parser.add_argument(
        "--output-dir", default=None, help="output directory (overrides output_dir:)"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="seeds (overrides seeds:)"
    )
    parser.add_argument(
        "--budget", type=int, default=None, help="steps per run (overrides budget:)"
    )
    parser.add_argument(
        "--conditions", nargs="+", default=None, metavar="NAME", help="run only these conditions"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing; report the runs finished so far (their budget, seeds and conditions "
        "are read from <output dir>/compare_config.yaml; flags still override)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every condition with its trainer's dry run (data files, environment ids, "
        "configs) and list the finished runs; run nothing, create nothing",
    )


_RUN_KEYS = ("trainer", "base", "common", "conditions", "seeds", "budget")
"""Keys of a comparison config that define its runs (the rest only changes the analysis)."""


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Load the comparison YAML and apply the command-line overrides (flags win).

    With ``--report-only`` the run-defining keys (``trainer, base, common, conditions, seeds,
    budget``) come from ``<output dir>/compare_config.yaml`` when it exists -- the config the
    runs there were made with -- so a comparison run with ``--budget/--seeds/--conditions``
    can be re-analysed without repeating them; analysis keys (``threshold``, ``final_window``,
    ``metric``, bootstrap settings) still come from ``--config``, and overrides and flags
    still win.
    """
    config = load_yaml(args.config)
    if getattr(args, "report_only", False):
        out = _output_dir(
            getattr(args, "output_dir", None),
            config.get("output_dir"),
            config.get("name") or Path(args.config).stem,
        )
        stored_path = out / "compare_config.yaml"
        if stored_path.is_file():
            stored = load_yaml(stored_path)
            for key in _RUN_KEYS:
                if key in stored:
                    config[key] = stored[key]
                else:
                    config.pop(key, None)
            print(f"report-only: runs as recorded in {stored_path}", file=sys.stderr)
    apply_overrides(config, overrides_from(args))
    if args.seeds is not None:
        config["seeds"] = list(args.seeds)
    if args.budget is not None:
        config["budget"] = args.budget
    if args.conditions:
        conds = config.get("conditions") or {}
        unknown = [c for c in args.conditions if c not in conds]
        if unknown:
            raise ConfigError(f"--conditions: unknown {unknown}; the config has {list(conds)}")
        dup = sorted({c for c in args.conditions if args.conditions.count(c) > 1})
        if dup:
            raise ConfigError(f"--conditions: {dup} given more than once")
        config["conditions"] = {c: conds[c] for c in args.conditions}
    return config


def main(args: argparse.Namespace) -> int:
    """Run ``densereward compare`` from parsed arguments; returns the exit code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    config = config_from_args(args)
    cfg_path = Path(args.config)
    if getattr(args, "dry_run", False):
        lines = dry_run_comparison(config, output_dir=args.output_dir,
                                   base_dir=cfg_path.resolve().parent, name=cfg_path.stem)  # fmt: skip
        n_problems = sum(line.startswith("!! ") for line in lines)
        print("dry run: comparison valid; nothing run, nothing created"
              + (f"; {n_problems} problem(s) the runs would hit:" if n_problems else ""))  # fmt: skip
        for line in lines:
            print(f"  {line}" if line.startswith("!! ") else f"  ok  {line}")
        return 0
    res = run_comparison(
        config, output_dir=args.output_dir, base_dir=cfg_path.resolve().parent, name=cfg_path.stem,
        progress=not args.no_progress, report_only=args.report_only,
    )  # fmt: skip
    out = Path(res["output_dir"])
    print(
        f"report: {out / 'report.md'}\nlearning curves: {out / 'learning_curves.png'}\nresults: {out / 'results.json'}"
    )
    for p in res["pairs"]:
        print(p["verdict"])
    if res["missing"]:
        print(f"incomplete: {len(res['missing'])} run(s) not finished", file=sys.stderr)
    return 0
