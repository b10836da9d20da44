"""Tests of ``densereward compare`` (:mod:`densereward.sample_efficiency`) and the learning-curve
statistics (:mod:`densereward.metrics.curves`): statistics on synthetic curves, config checks,
a comparison through a registered run function of its own, and a
real SAC comparison (FetchReach, sparse vs environment-dense) killed with SIGKILL mid-way and
resumed without redoing finished runs."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from densereward import sample_efficiency as C
from densereward.config import load_yaml
from densereward.errors import ConfigError, DataError
from densereward.io import atomic_write_json, read_jsonl
from densereward.metrics import curves

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------
# statistics (pure functions)
# ------------------------------------------------------------------------------------------


def test_steps_to_threshold_first_crossing_and_never():
    assert (
        curves.steps_to_threshold([10, 20, 30, 40], [0.1, 0.8, 0.5, 0.9], 0.8) == 20.0
    )  # first, not last
    assert math.isnan(curves.steps_to_threshold([10, 20], [0.1, 0.79], 0.8))
    with pytest.raises(DataError):
        curves.steps_to_threshold([1, 2], [0.5], 0.8)


def test_normalized_auc_known_shapes():
    # constant 1 -> 1; linear ramp 0 -> 1 over the budget -> 1/2; step at half budget -> ~1/2
    assert curves.normalized_auc([0, 100], [1.0, 1.0], 100) == pytest.approx(1.0)
    assert curves.normalized_auc([0, 50, 100], [0.0, 0.5, 1.0], 100) == pytest.approx(0.5)
    # first value held before the first evaluation, last value held after the last one
    assert curves.normalized_auc([50], [0.4], 100) == pytest.approx(0.4)
    # a curve that rises earlier has a larger AUC at the same final value
    early = curves.normalized_auc([0, 20, 100], [0, 1, 1], 100)
    late = curves.normalized_auc([0, 80, 100], [0, 1, 1], 100)
    assert (
        early > late
        and early == pytest.approx(0.9, abs=0.01)
        and late == pytest.approx(0.6, abs=0.01)
    )
    assert math.isnan(curves.normalized_auc([], [], 100))
    with pytest.raises(DataError):
        curves.normalized_auc([0], [1.0], 0)


def test_final_performance_and_resample():
    assert curves.final_performance([0.0, 0.2, 0.4, 0.9], 3) == pytest.approx(0.5)
    assert curves.final_performance([0.7], 3) == pytest.approx(0.7)
    assert math.isnan(curves.final_performance([], 3))
    np.testing.assert_allclose(
        curves.resample_curve([10, 20], [1.0, 3.0], [0, 15, 30]), [1.0, 2.0, 3.0]
    )


def test_iqm_trims_outer_quartiles_and_ci_brackets_it():
    scores = [
        0.0,
        0.5,
        0.5,
        0.5,
        0.5,
        0.5,
        0.5,
        10.0,
    ]  # IQM ignores the outliers, the mean does not
    r = curves.iqm_ci(scores, n_bootstrap=500, seed=1)
    assert r["value"] == pytest.approx(0.5)
    assert r["low"] <= r["value"] <= r["high"] and r["n_runs"] == 8
    # reproducible from the seed; a different seed moves the interval, not the point estimate
    assert curves.iqm_ci(scores, n_bootstrap=500, seed=1) == r
    # identical runs: zero-width interval; NaN runs are dropped; no finite run -> NaN
    assert curves.iqm_ci([0.3, 0.3, 0.3], n_bootstrap=200) == {
        "value": pytest.approx(0.3),
        "low": pytest.approx(0.3),
        "high": pytest.approx(0.3),
        "n_runs": 3,
    }
    assert curves.iqm_ci([0.2, float("nan"), 0.4], n_bootstrap=200)["n_runs"] == 2
    assert math.isnan(curves.iqm_ci([float("nan")], n_bootstrap=200)["value"])


def test_probability_of_improvement_separated_tied_and_overlapping():
    sep = curves.probability_of_improvement_ci([0.8, 0.9, 1.0], [0.1, 0.2, 0.3], n_bootstrap=500)
    assert sep == {"value": 1.0, "low": 1.0, "high": 1.0, "n_runs": 3}
    tie = curves.probability_of_improvement_ci([0.5, 0.5], [0.5, 0.5], n_bootstrap=500)
    assert tie["value"] == pytest.approx(0.5)
    mix = curves.probability_of_improvement_ci([0.1, 0.5, 0.9], [0.2, 0.4, 0.6], n_bootstrap=2000)
    assert mix["value"] == pytest.approx(5 / 9)
    assert mix["low"] < 0.5 < mix["high"]  # three overlapping seeds: no significant difference


def test_mean_curve_band_contains_mean_and_collapses_for_identical_runs():
    rng = np.random.default_rng(0)
    rows = rng.uniform(size=(5, 11))
    mean, low, high = curves.mean_curve_ci(rows, n_bootstrap=500)
    np.testing.assert_allclose(mean, rows.mean(axis=0))
    assert np.all(low <= mean + 1e-12) and np.all(mean <= high + 1e-12) and np.all(high - low > 0)
    same = np.tile(np.linspace(0, 1, 11), (3, 1))
    _, lo2, hi2 = curves.mean_curve_ci(same, n_bootstrap=200)
    np.testing.assert_allclose(lo2, hi2)


def test_verdicts():
    n = {"n_a": 4, "n_b": 4}
    assert C.verdict("dense", "sparse", {"value": 0.9, "low": 0.6, "high": 1.0}, **n).startswith(
        "dense beats sparse"
    )
    assert C.verdict("dense", "sparse", {"value": 0.1, "low": 0.0, "high": 0.4}, **n).startswith(
        "sparse beats dense"
    )
    assert C.verdict("a", "b", {"value": 0.5, "low": 0.1, "high": 0.9}, **n).startswith(
        "no significant difference"
    )
    assert C.verdict(
        "a", "b", {"value": float("nan"), "low": float("nan"), "high": float("nan")}, **n
    ).startswith("not comparable")


def _synthetic_runs(rise_at: float, seeds=(0, 1, 2, 3), budget=1000):
    """Success curves that jump from 0 to 1 near ``rise_at`` (seed-dependent jitter)."""
    runs = []
    for s in seeds:
        steps = np.arange(100, budget + 1, 100)
        at = rise_at + 50 * s
        runs.append(
            {
                "seed": s,
                "curve": [{"step": int(t), "value": float(t >= at)} for t in steps],
                "wall_s": 1.0,
            }
        )
    return runs


def test_analyze_and_report_on_synthetic_curves(tmp_path):
    runs = {"sparse": _synthetic_runs(800), "dense": _synthetic_runs(200)}
    a = C.analyze(runs, budget=1000, threshold=0.8, n_bootstrap=500)
    d, s = a["conditions"]["dense"], a["conditions"]["sparse"]
    assert d["auc"]["value"] > s["auc"]["value"]
    assert d["steps_to_threshold"]["median"] == 300.0 and d["steps_to_threshold"]["n_reached"] == 4
    assert s["steps_to_threshold"]["per_seed"] == {"0": 800.0, "1": 900.0, "2": 900.0, "3": 1000.0}
    (pair,) = a["pairs"]
    assert (pair["a"], pair["b"]) == ("dense", "sparse")  # oriented: the better condition first
    assert pair["p_improvement"]["auc"]["value"] == 1.0 and pair["verdict"].startswith(
        "dense beats sparse"
    )
    assert d["curve"]["mean"].shape == (51,)
    # a never-reaching condition reports "not reached"
    a2 = C.analyze(
        {"flat": _synthetic_runs(5000), "dense": _synthetic_runs(200)},
        budget=1000,
        threshold=0.8,
        n_bootstrap=200,
    )
    assert a2["conditions"]["flat"]["steps_to_threshold"]["median"] is None
    md = C.render_report(
        a2,
        name="t",
        trainer="sac",
        metric="success_rate",
        budget=1000,
        seeds=[0, 1, 2],
        x_label="environment steps",
    )
    assert (
        "| flat | 4 |" in md
        and "not reached (0/4 reached >= 0.8)" in md
        and "dense beats flat" in md
    )
    assert "dense beats flat (AUC)" in md  # rerun 13 F1: the final P says it is not the verdict's
    assert (
        "; final performance (shown, not the verdict's score: primary=auc): P(dense > flat) = "
        in md
    )
    assert "The verdict is on one score, the comparison's `primary` (auc: the area under" in md
    # rerun 13 F2: "the last 3 points" while a run with step 0 left out rests on fewer
    assert "points (`final_window`) of each run's" in md and "fewer where a curve has fewer" in md
    # a verdict on final performance states its P once (the report repeated it)
    a3 = C.analyze(
        {"flat": _synthetic_runs(5000), "dense": _synthetic_runs(200)},
        budget=1000,
        threshold=0.8,
        n_bootstrap=200,
        primary="final",
    )
    md3 = C.render_report(
        a3, name="t", trainer="sac", metric="m", budget=1000, seeds=[0, 1, 2], x_label="steps"
    )
    (line,) = [x for x in md3.splitlines() if x.startswith("- dense beats flat")]
    assert "(final performance)" in line and line.count("P(dense > flat)") == 1, line
    C.plot_curves(
        a2,
        tmp_path / "c.png",
        metric="success_rate",
        x_label="environment steps",
        threshold=0.8,
        title="t",
    )
    assert (tmp_path / "c.png").stat().st_size > 1000


# ------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------


def _sac_compare_config(out: Path, *, budget=300, seeds=(0, 1), wandb=False) -> dict:
    return {
        "name": "tiny",
        "trainer": "sac",
        "base": "configs/sac_fetchreach_sparse.yaml",
        "common": [
            "sac.learning_starts=100",
            "sac.batch_size=64",
            "env.n_envs=1",
            "training.curve_every=100",
            "training.metrics_window=5",
            "training.checkpoint_every=0",
            "training.eval_every=100",
            "training.eval_episodes=2",
        ],
        "conditions": {"sparse": {}, "env_dense": ["env.id=FetchReachDense-v4", "env.reward=env"]},
        "seeds": list(seeds),
        "budget": budget,
        "threshold": 0.8,
        "n_bootstrap": 200,
        "output_dir": str(out),
        "wandb": {"enabled": wandb},
    }


@pytest.mark.slow  # imports TRL to validate the GRPO config
def test_shipped_compare_configs_build_valid_run_configs():
    for name, trainer, budget_key in (
        ("compare_fetchreach", "sac", "total_timesteps"),
        ("compare_grpo_cpu", "grpo", "max_steps"),
    ):
        path = REPO / "configs" / f"{name}.yaml"
        cfg = C.parse_compare_config(load_yaml(path), name=path.stem)
        assert cfg.trainer == trainer and len(cfg.conditions) >= 2
        runs = C.build_run_configs(
            cfg, base_dir=path.parent
        )  # validated by the trainer's own parser
        budgets = {rc["training"][budget_key] for seeds in runs.values() for rc in seeds.values()}
        assert budgets == {cfg.budget}  # the same budget for every condition
        assert all(set(seeds) == {f"seed{s}" for s in cfg.seeds} for seeds in runs.values())
    fetch = C.build_run_configs(
        C.parse_compare_config(load_yaml(REPO / "configs/compare_fetchreach.yaml")),
        base_dir=REPO / "configs",
    )
    assert (
        fetch["env_dense"]["seed0"]["env"]["reward"] == "env"
        and fetch["sparse"]["seed0"]["env"]["reward"] == "sparse"
    )
    assert (
        fetch["verifier_dense"]["seed2"]["env"]["reward"] == "verifier"
        and fetch["verifier_dense"]["seed2"]["training"]["seed"] == 2
    )
    grpo = C.build_run_configs(
        C.parse_compare_config(load_yaml(REPO / "configs/compare_grpo_cpu.yaml")),
        base_dir=REPO / "configs",
    )
    assert {c: grpo[c]["seed1"]["reward"]["type"] for c in grpo} == {
        "sparse": "sparse",
        "dense": "dense",
        "group": "group",
        "mixed": "mixed",
    }
    assert grpo["mixed"]["seed0"]["data"]["task_config"] == {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 1,
    }
    assert grpo["mixed"]["seed0"]["data"]["task"] == "chain_sum"


@pytest.mark.parametrize(
    "change, match",
    [
        ({"budgett": 3}, "did you mean 'budget'"),
        ({"trainer": "ppo"}, "trainer"),
        ({"conditions": {"only": {}}}, "at least two"),
        ({"conditions": {"a": {}, "b": ["training.total_timesteps=5"]}}, "set by the comparison"),
        ({"conditions": {"a": {}, "b": {"training": {"seed": 3}}}}, "set by the comparison"),
        ({"conditions": {"a": {}, "b": ["env.rewrd=env"]}}, "rewrd"),
        # a typo in a trainer argument is caught before the first run, naming the condition
        ({"conditions": {"a": {}, "b": ["sac.tua=0.05"]}}, "condition 'b'.*did you mean 'sac.tau'"),
        ({"conditions": {"a": {}, "b": "env.reward=env"}}, "list of key=value"),
        # `- env.task=Goal: x` unquoted in the YAML file is a mapping: say to quote it
        (
            {"conditions": {"a": {}, "b": [{"env.task=Goal": "x"}]}},
            r"conditions.b: the entry \{'env.task=Goal': 'x'\} is a YAML mapping, not a "
            r"key=value string: a value with ': ' in it must be quoted, e.g. - "
            r'"env.task=Goal: x"',
        ),
        ({"seeds": [0, 0]}, "distinct"),
        ({"base": "configs/nope.yaml"}, "not found"),
    ],
)
def test_bad_compare_configs_are_rejected(tmp_path, change, match):
    config = {**_sac_compare_config(tmp_path), **change}
    with pytest.raises(ConfigError, match=match):
        cfg = C.parse_compare_config(config)
        C.build_run_configs(cfg, base_dir=REPO / "configs")


def test_fetchreach_comparison_has_the_her_baseline_five_seeds_and_evaluation_curves():
    path = REPO / "configs" / "compare_fetchreach.yaml"
    cfg = C.parse_compare_config(load_yaml(path), name=path.stem)
    assert len(cfg.seeds) >= 5 and cfg.metric is None  # the trainer names its curve
    runs = C.build_run_configs(cfg, base_dir=path.parent)
    assert set(runs) == {"sparse", "sparse_her", "env_dense", "verifier_dense"}
    # the HER condition is exactly configs/sac_fetchreach_sparse_her.yaml under the same
    # common overrides, budget and seeds
    her_base = dataclasses.replace(
        cfg, base="configs/sac_fetchreach_sparse_her.yaml", conditions={"a": {}, "b": {}}
    )
    assert C.build_run_configs(her_base, base_dir=path.parent)["a"] == runs["sparse_her"]
    for seeds in runs.values():
        for rc in seeds.values():
            assert rc["training"]["eval_every"] > 0 and rc["training"]["eval_episodes"] >= 10


def test_result_from_a_different_config_is_an_error_not_silently_reused(tmp_path):
    config = _sac_compare_config(tmp_path)
    stale = tmp_path / "runs" / "sparse" / "seed0" / "result.json"
    atomic_write_json(stale, {"fingerprint": "0" * 16, "curve": [{"step": 100, "value": 0.0}]})
    with pytest.raises(ConfigError, match="different run config"):
        C.run_comparison(
            config, output_dir=tmp_path, base_dir=REPO, report_only=True, progress=False
        )
    with pytest.raises(ConfigError, match=r"1 finished run\(s\) .* different run config"):
        C.run_comparison(config, output_dir=tmp_path, base_dir=REPO, progress=False)
    # a refused call leaves no record claiming its config describes the runs here
    assert not (tmp_path / "compare_config.yaml").exists()


# ------------------------------------------------------------------------------------------
# a real comparison: SIGKILL mid-way, resume, nothing finished is redone
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_kill_and_resume_does_not_redo_finished_runs(tmp_path):
    out = tmp_path / "cmp"
    cfg_path = tmp_path / "compare_tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(_sac_compare_config(out, budget=200, seeds=(0, 1))))
    cmd = [
        sys.executable,
        "-m",
        "densereward.cli",
        "compare",
        "--config",
        str(cfg_path),
        "--no-progress",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    first = out / "runs" / "sparse" / "seed0" / "result.json"

    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while not first.exists():
            if proc.poll() is not None:
                pytest.fail(f"comparison exited early: {proc.stdout.read().decode()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no run finished within 120 s")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # a crash: no clean-up code runs
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    finished = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/*/result.json")}
    assert first in finished and len(finished) < 4, "the kill must land before the comparison ends"
    assert not (out / "report.md").exists()

    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # finished runs were skipped: result files untouched and started exactly once overall
    for p, mtime in finished.items():
        assert p.stat().st_mtime_ns == mtime
    starts: dict[tuple[str, str], int] = {}
    for e in read_jsonl(out / "events.jsonl"):
        if e["event"] == "start":
            starts[(e["condition"], e["seed"])] = starts.get((e["condition"], e["seed"]), 0) + 1
    for p in finished:
        assert starts[(p.parent.parent.name, p.parent.name)] == 1
    assert set(starts) == {(c, f"seed{s}") for c in ("sparse", "env_dense") for s in (0, 1)}
    # every run finished once now, and the report covers both conditions
    assert len(list((out / "runs").glob("*/*/result.json"))) == 4
    results = json.loads((out / "results.json").read_text())
    assert results["missing"] == [] and set(results["conditions"]) == {"sparse", "env_dense"}
    for c in results["conditions"].values():
        assert c["n_runs"] == 2 and c["final"]["low"] <= c["final"]["value"] <= c["final"]["high"]
        assert all(r["n_points"] >= 1 for r in c["runs"])
    report = (out / "report.md").read_text()
    assert "| sparse | 2 |" in report and "| env_dense | 2 |" in report and "P(" in report
    assert "**Too few runs for a verdict:** 2 per condition" in report
    # the curves are the deterministic evaluation episodes, and the report says so
    assert results["metric"] == "eval/success_rate"
    assert "Learning curves: deterministic evaluation: 2 episodes every 100" in report
    assert all(
        [p["step"] for p in r["curve"]] == [0, 100, 200]
        for r in map(json.loads, map(Path.read_text, finished))
    )
    # the resume was announced and logged; the stored config is the one of these runs
    assert f"resuming {out}: {len(finished)} of 4 runs already finished and skipped" in done.stderr
    skips = {
        (e["condition"], e["seed"])
        for e in read_jsonl(out / "events.jsonl")
        if e["event"] == "skip"
    }
    assert skips == {(p.parent.parent.name, p.parent.name) for p in finished}
    stored = yaml.safe_load((out / "compare_config.yaml").read_text())
    assert stored["output_dir"] == str(out) and stored["budget"] == 200
    # the per-run progress line reports the same final performance as the report
    for line in done.stderr.splitlines():
        if line.startswith("[") and "final eval/success_rate=" in line:
            cname, key = line.split("] ", 1)[1].split(":")[0].split()
            run = next(r for r in results["conditions"][cname]["runs"] if f"seed{r['seed']}" == key)
            assert line.split("final eval/success_rate=")[1].startswith(
                f"{run['final']:.3f} (mean of"
            )
    assert (out / "learning_curves.png").stat().st_size > 1000

    # --report-only re-analyses these runs from a config with another budget and seeds: the
    # run-defining keys come from <out>/compare_config.yaml, analysis keys from --config
    other = tmp_path / "compare_other.yaml"
    other.write_text(
        yaml.safe_dump({**_sac_compare_config(out, budget=999, seeds=(7,)), "final_window": 1})
    )
    import argparse

    parser = argparse.ArgumentParser()
    C.add_arguments(parser)
    args = parser.parse_args(["--config", str(other), "--output-dir", str(out), "--report-only"])
    config = C.config_from_args(args)
    assert config["budget"] == 200 and config["seeds"] == [0, 1] and config["final_window"] == 1
    again = C.run_comparison(
        config, output_dir=out, base_dir=REPO, report_only=True, progress=False
    )
    assert again["budget"] == 200 and again["final_window"] == 1 and again["missing"] == []


def test_no_verdict_from_a_single_seed():
    v = C.verdict("a", "b", {"value": 1.0, "low": 1.0, "high": 1.0}, n_a=1, n_b=3)
    assert v.startswith("too few runs")
    a = C.analyze(
        {"x": _synthetic_runs(200, seeds=(0,)), "y": _synthetic_runs(800, seeds=(0,))},
        budget=1000,
        n_bootstrap=200,
    )
    assert a["pairs"][0]["verdict"].startswith("too few runs")


def test_cli_flags_override_the_config_and_bad_condition_names_are_errors():
    import argparse

    parser = argparse.ArgumentParser()
    C.add_arguments(parser)
    path = str(REPO / "configs" / "compare_fetchreach.yaml")
    args = parser.parse_args(
        [
            "--config",
            path,
            "--seeds",
            "4",
            "5",
            "--budget",
            "300",
            "--conditions",
            "env_dense",
            "sparse",
        ]
    )
    config = C.config_from_args(args)
    assert config["seeds"] == [4, 5] and config["budget"] == 300
    assert list(config["conditions"]) == ["env_dense", "sparse"]
    for names, match in (
        (["sparse", "dense_env"], r"unknown \['dense_env'\]"),
        (["sparse", "sparse"], r"\['sparse'\] given more than once"),
        # issue 41 third rerun F15: one name got the YAML's "conditions must map at least two"
        (
            ["sparse"],
            r"^--conditions needs at least two of: sparse, sparse_her, .* \(got sparse\)$",
        ),
    ):
        with pytest.raises(ConfigError, match=match):
            C.config_from_args(parser.parse_args(["--config", path, "--conditions", *names]))


@pytest.mark.slow  # validates a GRPO condition (imports TRL)
def test_dry_run_validates_every_condition_and_creates_nothing(tmp_path, data_dir):
    out = tmp_path / "cmp"
    config = {
        "name": "tiny-grpo",
        "trainer": "grpo",
        "base": "configs/grpo_math_cpu.yaml",
        "common": [f"data.path={data_dir / 'math500' / 'tset.jsonl'}"],  # a typo
        "conditions": {"sparse": ["reward.type=sparse"], "dense": ["reward.type=dense"]},
        "seeds": [0],
        "budget": 1,
        "output_dir": str(out),
    }
    with pytest.raises(DataError, match="condition 'sparse'.*data file not found"):
        C.dry_run_comparison(config, base_dir=REPO)
    with pytest.raises(DataError, match="data file not found"):  # the real run: before any run
        C.run_comparison(config, base_dir=REPO, progress=False)
    assert not out.exists()
    config["common"] = [f"data.path={data_dir / 'math500' / 'test.jsonl'}", "data.limit=4"]
    lines = C.dry_run_comparison(config, base_dir=REPO)
    assert "output directory: " + str(out) + " (0 of 2 runs finished" in lines[1]
    assert any(line.startswith("dense: reward: dense -> reward_funcs") for line in lines)
    assert any(line.startswith("sparse: data: jsonl") for line in lines)
    assert not out.exists()


def test_iqm_interval_of_five_seeds_of_one_task_has_width():
    """Issue 28 item 20 (rliable#20: with one task the stratified bootstrap can swap the seed and
    task axes, and the interval collapses). A comparison's IQM of five seeds of one task has an
    interval of clear width, as a plain bootstrap over the five runs has; the swapped shape is
    refused."""
    from scipy.stats import trim_mean

    from densereward.metrics.bootstrap import cluster_resamples, stratified_bootstrap_ci

    finals = [0.1, 0.9, 0.2, 0.8, 0.5]
    runs = {
        "dense": [
            {"seed": k, "curve": [{"step": 0, "value": 0.0}, {"step": 10, "value": v}]}
            for k, v in enumerate(finals)
        ]
    }
    ci = C.analyze(runs, budget=10, final_window=1, n_bootstrap=1000)["conditions"]["dense"][
        "final"
    ]
    assert ci["value"] == pytest.approx(0.5) and ci["n_runs"] == 5
    # a plain percentile bootstrap of the 25%-trimmed mean over the five runs, for scale
    x = np.asarray(finals)
    reps = [trim_mean(x[idx], 0.25) for idx, _ in cluster_resamples(np.arange(5), n_resamples=1000)]
    plain_low, plain_high = np.quantile(reps, [0.025, 0.975])
    assert ci["high"] - ci["low"] > 0.5 * (plain_high - plain_low) > 0.2, (
        ci,
        plain_low,
        plain_high,
    )
    assert ci["low"] < 0.3 and ci["high"] > 0.7
    with pytest.raises(DataError, match=r"one run of 5 tasks.*pass shape \(5, 1\)"):
        stratified_bootstrap_ci(trim_mean_25, x[None, :], n_bootstrap=100)
    assert stratified_bootstrap_ci(trim_mean_25, x[:, None], n_bootstrap=100)["high"] > 0.7


def trim_mean_25(m: np.ndarray) -> float:
    from scipy.stats import trim_mean

    return float(trim_mean(m, 0.25, axis=None))


def test_bootstrap_interval_depends_on_the_seed_alone():
    """rliable's StratifiedBootstrap draws from the global np.random; the interval must not."""
    scores = [0.1, 0.2, 0.35, 0.5, 0.5, 0.65, 0.8, 0.9]
    np.random.seed(123)
    a = curves.iqm_ci(scores, n_bootstrap=300, seed=4)
    after = np.random.random()
    np.random.seed(999)
    b = curves.iqm_ci(scores, n_bootstrap=300, seed=4)
    assert a == b
    np.random.seed(123)
    assert np.random.random() == after  # the caller's random stream is untouched


# ------------------------------------------------------------------------------------------
# the registry of trainers: a comparison takes run functions, not module names
# ------------------------------------------------------------------------------------------


def _toy_run(config: dict, *, output_dir: Path) -> dict:
    """A cheap real trainer: its score rises linearly at ``reward.rate`` per budget (capped
    at 1) with seed-dependent noise; it writes its learning curve to ``curve.jsonl``."""
    output_dir.mkdir(parents=True)  # the runner hands over a directory that does not exist yet
    steps, seed = config["training"]["steps"], config["training"]["seed"]
    rng = np.random.default_rng(seed)
    curve = [
        {
            "step": t,
            "value": float(
                min(1.0, config["reward"]["rate"] * t / steps) + 0.02 * rng.standard_normal()
            ),
        }
        for t in range(0, steps + 1, steps // 10)
    ]
    with (output_dir / "curve.jsonl").open("w") as f:
        f.writelines(json.dumps(p) + "\n" for p in curve)
    return {
        "metric": "toy/score",
        "curve": curve,
        "final": curve[-1]["value"],
        "run_dir": str(output_dir),
        "curve_source": "the toy trainer's score",
    }


def _toy_dry_run(config: dict, *, output_dir: Path) -> list[str]:
    return [f"run directory: {output_dir}", f"rate {config['reward']['rate']}"] + (
        ["!! a rate this low never reaches the threshold"] if config["reward"]["rate"] < 0.5 else []
    )


def _toy_validate(config: dict) -> None:
    if not config["reward"]["rate"] > 0:
        raise ConfigError(f"reward.rate must be > 0, got {config['reward']['rate']}")


def _toy_spec(calls: list) -> C.TrainerSpec:
    def run(config, *, output_dir):
        calls.append((config["reward"]["rate"], config["training"]["seed"], output_dir))
        return _toy_run(config, output_dir=output_dir)

    return C.TrainerSpec(
        run=run,
        dry_run=_toy_dry_run,
        budget_key=("training", "steps"),
        x_label="toy steps",
        validate=_toy_validate,
    )


def _toy_config(out: Path) -> dict:
    return {
        "name": "toy",
        "trainer": "toy",
        "output_dir": str(out),
        "n_bootstrap": 200,
        "base": {"training": {"steps": 10}, "reward": {"rate": 1.0}},
        "conditions": {"slow": ["reward.rate=0.3"], "fast": {"reward": {"rate": 3.0}}},
        "seeds": [0, 1, 2],
        "budget": 100,
        "threshold": 0.9,
    }


def test_a_comparison_runs_a_run_function_given_to_it(tmp_path):
    calls: list = []
    spec = _toy_spec(calls)
    out = tmp_path / "cmp"
    res = C.run_comparison(_toy_config(out), trainers={"toy": spec}, progress=False)
    # every (condition, seed) ran once, seed-major, with the comparison's budget and seeds, in
    # the comparison's run directory
    assert [(r, s) for r, s, _ in calls] == [
        (0.3, 0),
        (3.0, 0),
        (0.3, 1),
        (3.0, 1),
        (0.3, 2),
        (3.0, 2),
    ]
    assert all(
        d == out / "runs" / ("slow" if r == 0.3 else "fast") / f"seed{s}" / d.name
        for r, s, d in calls
    )
    written = [json.loads(x) for x in (calls[0][2] / "curve.jsonl").read_text().splitlines()]
    stored = json.loads((out / "runs" / "slow" / "seed0" / "result.json").read_text())
    assert stored["curve"] == written and stored["config"]["training"]["steps"] == 100
    rows = json.loads((out / "curves.json").read_text())["rows"]  # every run's curve, flat
    assert {(r["condition"], r["seed"]) for r in rows} == {
        (c, s) for c in ("slow", "fast") for s in (0, 1, 2)
    }
    assert [r["value"] for r in rows if r["condition"] == "slow" and r["seed"] == 0] == [
        p["value"] for p in written
    ]
    fast, slow = res["conditions"]["fast"], res["conditions"]["slow"]
    assert fast["auc"]["value"] > slow["auc"]["value"] and res["x_label"] == "toy steps"
    assert (
        fast["steps_to_threshold"]["n_reached"] == 3
        and slow["steps_to_threshold"]["n_reached"] == 0
    )
    assert res["pairs"][0]["verdict"].startswith(  # 3 a side: below MIN_RUNS_FOR_A_VERDICT
        "too few runs for a verdict between fast and slow (AUC): 3 and 3 finished"
    )
    report = (out / "report.md").read_text()
    assert (
        "metric `toy/score`, budget 100 toy steps" in report and "the toy trainer's score" in report
    )
    # a re-run resumes: nothing runs again
    C.run_comparison(_toy_config(out), trainers={"toy": spec}, progress=False)
    assert len(calls) == 6
    # the dry run goes through the spec's dry_run; the trainer's validate runs before any run
    lines = C.dry_run_comparison(_toy_config(out), trainers={"toy": spec})
    assert "output directory: " + str(out) + " (6 of 6 runs finished" in lines[1]
    assert (
        "slow: rate 0.3" in lines
        and "!! slow: a rate this low never reaches the threshold" in lines
    )
    assert not any("run directory" in line for line in lines)
    bad = {**_toy_config(tmp_path / "bad"), "conditions": {"a": {}, "b": ["reward.rate=0"]}}
    with pytest.raises(ConfigError, match="condition 'b': reward.rate must be > 0"):
        C.run_comparison(bad, trainers={"toy": spec}, progress=False)
    assert len(calls) == 6 and not (tmp_path / "bad").exists()
    # a trainer name the registry does not hold is a config error naming the choices
    with pytest.raises(
        ConfigError, match=r"unknown compare trainer 'toy'; available: \['grpo', 'sac'\]"
    ):
        C.run_comparison(_toy_config(out), progress=False)


def test_register_trainer_adds_a_name_and_never_overwrites_one(tmp_path):
    from densereward.errors import RegistryError

    calls: list = []
    spec = _toy_spec(calls)
    with pytest.raises(RegistryError, match="'sac' is already registered"):
        C.register_trainer("sac", spec)
    with pytest.raises(RegistryError, match="non-empty string"):
        C.register_trainer(" ", spec)
    with pytest.raises(RegistryError, match="callable run"):
        C.TrainerSpec(run="trainers.sac", dry_run=_toy_dry_run, budget_key=("training", "steps"))
    name = "toy-registered"
    try:
        assert C.register_trainer(name, spec) is spec
        assert C.register_trainer(name, spec) is spec  # the same spec again: a no-op
        with pytest.raises(RegistryError, match="already registered"):
            C.register_trainer(name, _toy_spec([]))
        # the budget and seed keys and wandb: are reserved for every condition
        assert spec.reserved == (("training", "steps"), ("training", "seed"), ("wandb",))
        config = {**_toy_config(tmp_path), "trainer": name, "seeds": [0, 1]}
        res = C.run_comparison(config, progress=False)  # the default registry
        assert res["trainer"] == name and len(calls) == 4
        with pytest.raises(ConfigError, match="set by the comparison"):
            C.build_run_configs(
                C.parse_compare_config(
                    {**config, "conditions": {"a": {}, "b": ["training.steps=5"]}}
                )
            )
    finally:
        C.TRAINERS._entries.pop(name, None)  # a registry never drops a name; the test does


def test_compare_dry_run_exits_2_when_a_condition_would_hit_a_problem(tmp_path, capsys):
    """A ``!!`` line is a problem a run would hit here: the dry run says so with exit 2 (it
    exited 0), as ``train grpo`` and ``train sac`` do; without one it exits 0."""
    from densereward.cli import main

    name = "toy-dry-exit"
    C.register_trainer(name, _toy_spec([]))
    try:
        path = tmp_path / "toy.yaml"
        path.write_text(yaml.safe_dump({**_toy_config(tmp_path / "cmp"), "trainer": name}))
        assert main(["compare", "--config", str(path), "--dry-run"]) == 2
        out = capsys.readouterr().out
        assert "1 problem(s) the runs would hit" in out and "!! slow: a rate this low" in out
        assert (
            main(
                [
                    "compare",
                    "--config",
                    str(path),
                    "--dry-run",
                    "base.reward.rate=0.6",
                    "conditions.slow=[reward.rate=0.6]",
                ]
            )
            == 0
        )
        assert "!!" not in capsys.readouterr().out and not (tmp_path / "cmp").exists()
    finally:
        C.TRAINERS._entries.pop(name, None)


def test_the_built_in_trainers_import_nothing_heavy_until_a_run():
    code = (
        "import sys, densereward.sample_efficiency as se; "
        "assert callable(se.TRAINERS.load('sac').run) and callable(se.TRAINERS.load('grpo').dry_run); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('trl', 'stable_baselines3', 'torch', 'transformers', 'gymnasium') "
        "or m in ('densereward.trainers.sac', 'densereward.trainers.grpo')))"
    )  # the specs live beside the trainers (trainers/*_spec.py); the training loops stay out
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_finished_runs_keep_no_checkpoints_unless_asked(tmp_path):
    """Issue 36 item 5: a CPU GRPO run's checkpoints took ~1.5 GB and nine filled the disk. A
    finished run's checkpoint directories are deleted once its result.json is written (logged
    in events.jsonl); its curve and other files stay; keep_checkpoints keeps them."""

    def run(config, *, output_dir):
        out = _toy_run(config, output_dir=output_dir)
        for d in ("checkpoint-5", "checkpoint-10", "checkpoints/sub"):
            (output_dir / d).mkdir(parents=True)
            (output_dir / d / "optimizer.pt").write_bytes(b"x" * 1000)
        (output_dir / "checkpoint-notes.txt").write_text("not a checkpoint directory")
        return out

    spec = C.TrainerSpec(run=run, dry_run=_toy_dry_run, budget_key=("training", "steps"))
    for keep in (False, True):
        out = tmp_path / f"keep{keep}"
        cfg = {**_toy_config(out), "seeds": [0], "keep_checkpoints": keep}
        C.run_comparison(cfg, trainers={"toy": spec}, progress=False)
        run_dirs = [p for p in (out / "runs").glob("*/seed0/*") if p.is_dir()]
        assert len(run_dirs) == 2 and all((d / "curve.jsonl").is_file() for d in run_dirs)
        assert all((d / "checkpoint-notes.txt").is_file() for d in run_dirs)
        left = [
            p
            for d in run_dirs
            for p in d.iterdir()
            if p.name.startswith("checkpoint") and p.is_dir() or p.name == "checkpoints"
        ]
        assert bool(left) is keep
        events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
        deleted = [e for e in events if e["event"] == "checkpoints_deleted"]
        assert len(deleted) == (0 if keep else 2) and all(e["bytes"] == 3000 for e in deleted)


def test_one_run_each_gives_no_probability_and_one_final_value(tmp_path, monkeypatch):
    """Issue 41 item 4: from one run each, compare printed "too few runs for a verdict ...:
    P(sparse > dense) = 1.00 [1.00, 1.00]"; the report's final value (mean of the last
    final_window points) differed from result.json's (the curve's last point); the title was
    the config's name, naming conditions that never ran. Now no probability without enough
    runs, one computation of "final", and a title of the conditions that ran."""
    titles: list[str] = []
    real_plot = C.runner.plot_curves
    monkeypatch.setattr(
        C.runner, "plot_curves", lambda *a, **k: titles.append(k["title"]) or real_plot(*a, **k)
    )
    out = tmp_path / "cmp"
    config = {**_toy_config(out), "name": "toy-slow-fast-never", "seeds": [0], "final_window": 3}
    res = C.run_comparison(config, trainers={"toy": _toy_spec([])}, progress=False)
    pair = res["pairs"][0]
    assert pair["verdict"] == (
        "too few runs for a verdict between fast and slow (AUC): 1 and 1 finished, >= 4 each needed"
    )
    assert pair["enough_runs"] is False
    report = (out / "report.md").read_text()
    verdicts = report[report.index("## Verdicts") : report.index("![learning curves]")]
    assert "P(" not in verdicts
    # one "final": result.json, results.json and the report's table agree
    for cond in ("slow", "fast"):
        stored = json.loads((out / "runs" / cond / "seed0" / "result.json").read_text())
        values = [p["value"] for p in stored["curve"]]
        assert stored["final"] == pytest.approx(np.mean(values[-3:]))
        assert stored["final"] != pytest.approx(values[-1]) and "final" not in stored["summary"]
        assert res["conditions"][cond]["runs"][0]["final"] == pytest.approx(stored["final"])
        assert f"| {cond} | 1 | {stored['final']:.3f} (n=1: no interval)" in report
    # the title names the conditions that ran; one configured without a finished run is said
    assert report.startswith("# Comparison: slow vs fast\n") and titles == ["slow vs fast"]
    never = {**config, "conditions": {**config["conditions"], "never": ["reward.rate=2.0"]}}
    C.run_comparison(never, trainers={"toy": _toy_spec([])}, progress=False, report_only=True)
    report = (out / "report.md").read_text()
    assert report.startswith("# Comparison: slow vs fast\n")
    assert "Comparison `toy-slow-fast-never`; no finished run of never." in report
    assert titles[-1] == "slow vs fast"


def test_the_report_gives_each_sac_arm_its_cost_per_step_and_the_rewards_share():
    """Issue 39: the README states the verifier's share of step time per arm; the report's
    column comes from each run's summary (training seconds, verifier or reward-model seconds)."""
    from densereward.sample_efficiency.report import step_cost

    assert step_cost({"steps_per_second": 200.0, "seconds": 50.0, "verifier_stats": None}) == {
        "ms_per_step": 5.0,
        "reward_share": 0.0,
    }
    model = step_cost(
        {
            "steps_per_second": 100.0,
            "seconds": 40.0,
            "verifier_stats": {"reward_model_calls": 8000, "reward_model_seconds": 2.0},
        }
    )
    assert model == {"ms_per_step": 10.0, "reward_share": 0.05}
    verifier = step_cost(
        {"steps_per_second": 10.0, "seconds": 100.0, "verifier_stats": {"seconds": 90.0}}
    )
    assert verifier["reward_share"] == 0.9
    assert step_cost({"steps_per_second": None}) == {"ms_per_step": None, "reward_share": None}


def test_two_processes_of_one_comparison_share_its_directory(tmp_path):
    """Issue 39's FetchPush comparison ran as parallel processes (`--conditions` / `--seeds`
    subsets) into one directory. A process skips a run another finished after it started
    (it had deleted that run's directory and run it again), and compare_config.yaml holds the
    union of their conditions and seeds, so --report-only reports every run (it held the
    last process's subset)."""
    out = tmp_path / "cmp"
    calls: list = []
    spec = _toy_spec(calls)
    cfg = _toy_config(out)

    def run(config, *, output_dir):
        result = spec.run(config, output_dir=output_dir)
        if config["training"]["seed"] == 0 and config["reward"]["rate"] == 0.3:
            # meanwhile "another process" (seeds [1]) finishes slow seed1
            C.run_comparison(
                {
                    **cfg,
                    "seeds": [1],
                    "conditions": {"slow": ["reward.rate=0.3"], "fast": {"reward": {"rate": 3.0}}},
                },
                trainers={"toy": spec},
                progress=False,
            )
        return result

    outer = C.TrainerSpec(
        run=run,
        dry_run=_toy_dry_run,
        budget_key=("training", "steps"),
        x_label="toy steps",
        validate=_toy_validate,
    )
    C.run_comparison({**cfg, "seeds": [0, 1]}, trainers={"toy": outer}, progress=False)
    ran = [(r, s) for r, s, _ in calls]
    assert sorted(ran) == sorted([(0.3, 0), (0.3, 1), (3.0, 1), (3.0, 0)]), ran  # each once
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert any(e.get("why") == "finished by another process" for e in events)

    from densereward.sample_efficiency.runner import record_config

    C.run_comparison(
        {
            **cfg,
            "seeds": [2],
            "conditions": {"slow": ["reward.rate=0.3"], "fast": {"reward": {"rate": 3.0}}},
        },
        trainers={"toy": spec},
        progress=False,
    )
    stored = yaml.safe_load((out / "compare_config.yaml").read_text())
    assert stored["seeds"] == [0, 1, 2] and set(stored["conditions"]) == {"slow", "fast"}
    record_config(out, {**cfg, "budget": 50, "seeds": [7]})  # another run config replaces it
    assert yaml.safe_load((out / "compare_config.yaml").read_text())["seeds"] == [7]


def test_one_run_per_condition_gets_no_interval_in_the_report_or_the_plot(tmp_path, monkeypatch):
    """Issue 41 rerun: with n=1 the report printed "IQM [95% CI]" as ``0.000 [0.000, 0.000]``
    and the plot's subtitle claimed a 95% bootstrap band of the mean: one run has no interval."""
    import matplotlib.axes

    a = C.analyze(
        {"flat": _synthetic_runs(5000, seeds=(0,)), "dense": _synthetic_runs(200)},
        budget=1000,
        threshold=0.8,
        n_bootstrap=50,
    )
    md = C.render_report(
        a, name="t", trainer="sac", metric="m", budget=1000, seeds=[0], x_label="steps"
    )
    (flat,) = [x for x in md.splitlines() if x.startswith("| flat")]
    assert "0.000 (n=1: no interval)" in flat and "[0.000, 0.000]" not in flat, flat
    (dense,) = [x for x in md.splitlines() if x.startswith("| dense")]
    assert "no interval" not in dense and "[" in dense, dense
    bands, titles = [], []
    real_fill, real_title = matplotlib.axes.Axes.fill_between, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "fill_between",
        lambda ax, *x, **k: bands.append(x) or real_fill(ax, *x, **k),
    )
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "set_title",
        lambda ax, t, **k: titles.append(t) or real_title(ax, t, **k),
    )
    C.plot_curves(a, tmp_path / "c.png", metric="m", x_label="steps", threshold=None, title="t")
    assert len(bands) == 1  # dense's band only
    assert "no band for flat (n=1: no interval)" in titles[-1], titles


def test_every_example_of_compare_help_parses_and_dry_runs(monkeypatch, capsys):
    """Issue 41 item 2a: ``compare --help`` showed ``--seeds 0 1 budget=2000``, which fails
    (``argument --seeds: invalid int value: 'budget=2000'``). Every example line is now parsed
    by the real parser and its config built; those that run anything pass the dry run too."""
    import shlex

    from densereward.cli import build_parser, main
    from densereward.sample_efficiency.cli import EPILOG, config_from_args

    monkeypatch.chdir(REPO)  # the examples name configs/ relative to the repository root
    examples = [
        shlex.split(line.split("#")[0])[1:]
        for line in EPILOG.splitlines()
        if line.strip().startswith("densereward compare")
    ]
    assert len(examples) >= 4
    for argv in examples:
        args = build_parser().parse_args(argv)
        config = config_from_args(args)
        assert args.seeds is None or config["seeds"] == args.seeds
        if args.budget is not None:
            assert config["budget"] == args.budget
        for override in args.overrides:
            key, value = override.split("=", 1)
            if "." in key:  # a run setting: the last entry of common
                assert config["common"][-1] == override, (argv, key)
            else:
                assert str(config[key]) == value, (argv, key)
        if not args.report_only:
            assert main([*argv, "--dry-run"]) == 0, (argv, capsys.readouterr().out)


def test_a_success_rate_threshold_is_not_read_on_a_fallback_reward_curve(tmp_path, capsys):
    """Issue 41 item 2b: runs whose curve fell back to ``eval/mean_reward`` (no is_success)
    got the success-rate ``threshold: 0.5`` applied to rewards ("not reached (0/1 reached >=
    0.5)") and a "threshold 0.5" line on the reward axis, unsaid. Now steps to threshold is not
    reported, the report and the console say why once; naming the metric applies it."""

    def reward_run(config, *, output_dir):
        return {**_toy_run(config, output_dir=output_dir), "metric": "eval/mean_reward"}

    spec = C.TrainerSpec(run=reward_run, dry_run=_toy_dry_run, budget_key=("training", "steps"))
    config = {**_toy_config(tmp_path / "cmp"), "seeds": [0], "threshold": 0.5}
    res = C.run_comparison(config, trainers={"toy": spec}, progress=False)
    why = "Steps to threshold not reported: the environment reports no is_success"
    assert res["threshold"] is None and res["threshold_not_applied"].startswith(why)
    assert (
        "Fix: set `metric: eval/mean_reward` together with a `threshold`"
        in (res["threshold_not_applied"])
    )
    assert all("steps_to_threshold" not in c for c in res["conditions"].values())
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert report.count(why) == 1 and "reached >= 0.5" not in report
    # a threshold set together with the metric it is a level of is applied as set
    named = {**config, "output_dir": str(tmp_path / "named"), "metric": "eval/mean_reward"}
    res = C.run_comparison(named, trainers={"toy": spec}, progress=False)
    assert res["threshold"] == 0.5 and res["threshold_not_applied"] is None
    assert res["conditions"]["fast"]["steps_to_threshold"]["n_reached"] == 1
    assert why not in (tmp_path / "named" / "report.md").read_text()


def test_the_console_verdict_carries_its_run_counts_and_the_few_runs_caveat(tmp_path, capsys):
    """From 2 runs a side compare ended its console with "fast beats slow (AUC): P(fast >
    slow) = 1.00 [1.00, 1.00]" and no caveat (only the report said "Few runs"); the line now
    says the runs it rests on. Issue 41 third rerun F3: the line then gave a verdict and "too
    few for a verdict" at once, the report the verdict under "Verdicts" ("indicative") and
    results.json ``enough_runs: true``: one rule now (MIN_RUNS_FOR_A_VERDICT) for all three."""
    from densereward.cli import main

    name = "toy-console"
    C.register_trainer(name, _toy_spec([]))
    try:
        path = tmp_path / "cmp.yaml"
        config = {**_toy_config(tmp_path / "cmp"), "trainer": name, "seeds": [0, 1]}
        path.write_text(yaml.safe_dump(config))
        assert main(["compare", "--config", str(path), "--no-progress"]) == 0
        printed = capsys.readouterr()
        last = printed.out.splitlines()[-1]
        assert C.report.MIN_RUNS_FOR_A_VERDICT == 4
        # rerun 17 F5: the descriptive line gave the AUC's P only; the final's follows it now
        assert last == (
            "too few runs for a verdict between fast and slow (AUC): 2 and 2 finished, >= 4 each "
            "needed; descriptive only: P(fast > slow) = 1.00 over 2 vs 2 runs; final performance "
            "(descriptive only): P(fast > slow) = 1.00"
        )
        results = json.loads((tmp_path / "cmp" / "results.json").read_text())
        (pair,) = results["pairs"]
        # rerun 18 F1: and results.json's verdict is the same line, the final P in it
        assert pair["enough_runs"] is False and pair["verdict"] == last
        report = (tmp_path / "cmp" / "report.md").read_text()
        assert f"- {last}\n" in report and "fast beats" not in report and "indicative" not in report
        # each run's progress line is one line (rich wrapped them at 80 columns mid-sentence)
        runs = [x for x in printed.err.splitlines() if x.startswith("[") and "] fast seed" in x]
        assert runs and all(x.endswith(" left") for x in runs), printed.err
        # five a side: the counts, no caveat
        five = {**config, "seeds": [0, 1, 2, 3, 4], "output_dir": str(tmp_path / "five")}
        path.write_text(yaml.safe_dump(five))
        assert main(["compare", "--config", str(path), "--no-progress"]) == 0
        last = capsys.readouterr().out.splitlines()[-1]
        assert last.startswith("fast beats slow (AUC)") and " (5 vs 5 runs); " in last
        # rerun 13 F1: the console gave the verdict's P only; the report's final P too now
        results = json.loads((tmp_path / "five" / "results.json").read_text())
        (pair,) = results["pairs"]
        assert pair["enough_runs"] is True
        final = pair["p_improvement"]["final"]
        assert last.endswith(
            "; final performance (shown, not the verdict's score: primary=auc): P(fast > slow) = "
            f"{final['value']:.2f} [{final['low']:.2f}, {final['high']:.2f}]"
        ), last
        report = (tmp_path / "five" / "report.md").read_text()
        assert "- fast beats slow (AUC)" in report and "Too few runs" not in report
        assert last.split(" (5 vs 5 runs)")[1] in report
    finally:
        C.TRAINERS._entries.pop(name, None)


def test_no_verdict_on_curves_of_each_runs_training_reward(tmp_path, capsys):
    """Issue 41 third rerun F2: with evaluation off SAC's curve was each run's training reward
    (rollout/ep_rew_mean), shaped under the verifier, and compare printed "env_only beats
    verifier_dense (AUC): P = 1.00 [1.00, 1.00]", an artefact of two reward scales. Such curves
    (and curves of different metrics) now get no verdict, with the reason and the fix."""
    from densereward.cli import main

    def run(config, *, output_dir):
        return {**_toy_run(config, output_dir=output_dir), "metric": "rollout/ep_rew_mean"}

    name = "toy-trained-on"
    C.register_trainer(name, dataclasses.replace(_toy_spec([]), run=run))
    try:
        path = tmp_path / "cmp.yaml"
        config = {**_toy_config(tmp_path / "cmp"), "trainer": name, "seeds": [0, 1, 2, 3]}
        path.write_text(yaml.safe_dump(config))
        assert main(["compare", "--config", str(path), "--no-progress"]) == 0
        last = capsys.readouterr().out.splitlines()[-1]
        assert last.startswith(
            "no verdict between fast and slow (AUC): the curves are each run's training reward "
            "(`rollout/ep_rew_mean`)"
        ) and last.endswith("rollout/ep_env_rew_mean)"), last
        assert "turn evaluation on (training.eval_every > 0)" in last
        (pair,) = json.loads((tmp_path / "cmp" / "results.json").read_text())["pairs"]
        assert pair["enough_runs"] is False and pair["verdict"] == last
        assert "beats" not in (tmp_path / "cmp" / "report.md").read_text().split("## Method")[0]
        # the dry run says so too, with the same reason
        assert main(["compare", "--config", str(path), "--dry-run"]) == 2
        printed = capsys.readouterr().out
        assert (
            "  !! no verdict from the finished runs: the curves are each run's training" in printed
        )
    finally:
        C.TRAINERS._entries.pop(name, None)
    assert "different metrics" in C.runner.not_comparable_why({"eval/success_rate", "toy/score"})
    assert C.runner.not_comparable_why({"rollout/ep_env_rew_mean"}) is None


def test_the_final_values_say_what_they_rest_on(tmp_path):
    """Issue 41 third rerun F4: compare's pass rates had no counts (sparse 0.031 vs dense 0.000
    was one correct completion of 32), and a run's result.json had a top-level "final" (mean
    of final_window points) beside the nested summary's final_rests_on of train grpo's own
    final (the last step alone). Now the table, results.json and the legend say what each
    condition's final rests on, a result.json's one final_rests_on is its own final's, and the
    plot marks the stretch before the first measurement."""

    def run(config, *, output_dir):
        result = _toy_run(config, output_dir=output_dir)
        curve = [{**p, "n_completions": 8} for p in result["curve"] if p["step"] > 0]
        return {**result, "curve": curve, "final_rests_on": "8 completions of step 100"}

    out = tmp_path / "cmp"
    config = {**_toy_config(out), "seeds": [0, 1], "final_window": 2}
    spec = dataclasses.replace(_toy_spec([]), run=run)
    res = C.run_comparison(config, trainers={"toy": spec}, progress=False)
    stored = json.loads((out / "runs" / "slow" / "seed0" / "result.json").read_text())
    assert stored["final_rests_on"] == "16 completions of steps 90, 100"
    assert "final_rests_on" not in stored["summary"] and "final" not in stored["summary"]
    for cond in ("slow", "fast"):
        rests = res["conditions"][cond]["final_rests_on"]
        assert rests == {
            "n": 32,
            "unit": "completions",
            "at_least": False,
            "n_runs": 2,
            "steps": [90, 100],
            "untrained": False,
            "text": rests["text"],
        }
        assert rests["text"] == "32 completions of steps 90, 100 over 2 runs"
        assert res["conditions"][cond]["runs"][0]["first_step"] == 10.0
    report = (out / "report.md").read_text()
    assert (
        "| final rests on |" in report
        and "| 32 completions of steps 90, 100 over 2 runs |" in report
    )
    assert (out / "learning_curves.png").stat().st_size > 1000
    # without counts in the curve: the points it rests on
    assert (
        C.report.final_rests_on([{"step": 5, "value": 1.0}], 3)["text"] == "1 curve point (step 5)"
    )


@pytest.mark.slow
def test_an_evaluation_off_comparison_counts_distinct_training_episodes(tmp_path, capsys):
    """Fresh-user trial F1: with evaluation off (training.eval_every=0) the curve is the
    training episodes' rolling window (rollout/success_rate here), and compare said "32
    evaluation episodes over 2 runs" (report, legend) and "16 evaluation episodes of steps
    150, 200" (result.json): no evaluation episode was run, and the overlapping windows were
    summed (monitor.csv held 10 episodes). Now every output says training episodes, counts each
    distinct episode once (= monitor.csv's rows here), and the Method section speaks of the
    training curve, not of evaluations."""
    import csv

    from densereward.cli import main

    out = tmp_path / "cmp"
    config = _sac_compare_config(out, budget=300, seeds=(0,))
    # windows of up to 4 episodes every 100 steps (FetchReach: 50-step episodes): the windows
    # of steps 100, 200, 300 hold 2, 4, 4 episodes (10 summed), 6 distinct ones in all
    config["common"] = [
        *[x for x in config["common"] if not x.startswith("training.eval_")],
        "training.eval_every=0",
        "training.metrics_window=4",
    ]
    config["final_window"] = 3
    path = tmp_path / "cmp.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["compare", "--config", str(path), "--no-progress"]) == 0
    err = capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["metric"] == "rollout/success_rate"
    report = (out / "report.md").read_text()
    for cond in ("sparse", "env_dense"):
        run_dir = out / "runs" / cond / "seed0"
        stored = json.loads((run_dir / "result.json").read_text())
        assert [p["n_episodes"] for p in stored["curve"]] == [2, 4, 4]
        # the recorded config names the run's real directory (fresh-user note), not runs/sac
        assert stored["config"]["training"]["output_dir"] == stored["run_dir"]
        assert Path(stored["run_dir"]) == run_dir / f"{cond}-seed0"
        with (run_dir / f"{cond}-seed0" / "monitor.csv").open() as f:
            episodes = len(list(csv.DictReader(line for line in f if not line.startswith("#"))))
        assert episodes == 6
        assert stored["final_rests_on"] == (
            "6 training episodes in the rolling windows (the last 2, 4, 4 episodes) of steps "
            "100, 200, 300"
        )
        rests = results["conditions"][cond]["final_rests_on"]
        assert rests["text"] == "6 training episodes of steps 100, 200, 300 over 1 run"
        assert rests["n"] == 6 and f"| {cond} | 1 |" in report
        assert "| 6 training episodes of steps 100, 200, 300 over 1 run |" in report
        # the console's line for the run says the same
        (line,) = [x for x in err.splitlines() if f"] {cond} seed0: final" in x]
        assert "(mean of the last 3 of 3 points: 6 training episodes in the rolling" in line
    assert "evaluation episodes" not in report and "first evaluation" not in report
    assert "the first training-curve point at or above the threshold" in report
    assert (
        "Learning curves: training episodes: success rate of the last 4 training episodes at "
        "each point (rolling windows, which overlap)." in report
    )
    assert "each distinct episode counted once" in report


def _two_point_runs(values: tuple[float, ...], seeds=(0, 1)) -> list[dict]:
    """Runs measured at steps 0 and 300 only (evaluations at the start and the end)."""
    return [
        {"seed": s, "curve": [{"step": 0, "value": 0.0}, {"step": 300, "value": v}]}
        for s, v in zip(seeds, values, strict=True)
    ]


def _saved_figure(monkeypatch, draw):
    """The figure ``draw()`` saves (caught at ``savefig``, then saved as usual)."""
    import matplotlib.figure

    figures = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda fig, *a, **k: figures.append(fig) or real(fig, *a, **k),
    )
    draw()
    (fig,) = figures
    return fig


def test_a_plot_of_few_points_and_few_runs_shows_its_points_and_says_too_few(tmp_path, monkeypatch):
    """Fresh-user trial F5: runs evaluated only at steps 0 and 300 were drawn as continuous
    lines with no markers, under a 95% bootstrap band from 2 seeds and no "too few runs" banner
    (the verdict said it; the eval-verifier plots have such a banner). Now a curve of at most
    MAX_POINTS_MARKED points marks its measured steps, and a plot with a condition below
    MIN_RUNS_FOR_A_VERDICT says so in a banner."""
    a = C.analyze(
        {"sparse": _two_point_runs((0.2, 0.4)), "dense": _two_point_runs((0.5, 0.7))},
        budget=300,
        n_bootstrap=50,
    )
    png = tmp_path / "learning_curves.png"
    fig = _saved_figure(
        monkeypatch,
        lambda: C.plot_curves(a, png, metric="m", x_label="steps", threshold=None, title="t"),
    )
    (ax,) = fig.axes
    marked = [ln for ln in ax.get_lines() if ln.get_marker() not in (None, "None", "")]
    assert len(marked) == 2  # one per condition, at its two measured steps
    for ln in marked:
        assert list(ln.get_xdata()) == [0.0, 300.0]
    assert [ln.get_ydata()[-1] for ln in marked] == pytest.approx([0.3, 0.6])
    banner = fig._suptitle.get_text().replace("\n", " ")
    assert banner.startswith(
        "too few runs for a verdict (n < MIN_RUNS_FOR_A_VERDICT = 4 a side): sparse n=2, dense n=2"
    ), banner
    assert png.stat().st_size > 1000
    # long curves (20 points) and 4 runs a side: no markers, no banner
    a = C.analyze(
        {"sparse": _synthetic_runs(800, budget=2000), "dense": _synthetic_runs(200, budget=2000)},
        budget=2000,
        n_bootstrap=50,
    )
    fig = _saved_figure(
        monkeypatch,
        lambda: C.plot_curves(a, png, metric="m", x_label="steps", threshold=None, title="t"),
    )
    assert all(ln.get_marker() in (None, "None", "") for ln in fig.axes[0].get_lines())
    assert fig._suptitle is None or not fig._suptitle.get_text()


def test_final_rests_on_counts_each_episode_of_overlapping_windows_once():
    """Rolling windows of training episodes (a ``rollout/`` curve) overlap: the distinct
    episodes behind them come from each point's running episode count
    (``n_episodes_total``); without it the largest window is a lower bound, said as such.
    Evaluation episodes (an ``eval/`` curve) are new at every point and are summed."""
    rolling = [
        {
            "step": s,
            "value": 0.5,
            "metric": "rollout/success_rate",
            "n_episodes": n,
            "n_episodes_total": t,
        }
        for s, n, t in ((100, 2, 2), (200, 4, 4), (300, 4, 6), (400, 4, 20))
    ]
    # windows (0,2], (0,4], (2,6], (16,20]: episodes 7-16 are in none of them
    rests = C.report.final_rests_on(rolling, 4)
    assert rests["n"] == 10 and rests["unit"] == "training episodes" and not rests["at_least"]
    assert rests["text"].startswith("10 training episodes in the rolling windows")
    old = [{k: v for k, v in p.items() if k != "n_episodes_total"} for p in rolling]
    rests = C.report.final_rests_on(old, 2)
    assert rests["n"] == 4 and rests["at_least"]
    assert rests["text"].startswith("at least 4 training episodes in the rolling windows")
    assert (
        C.report._condition_rests_on(
            [C.report.final_rests_on(rolling, 4), C.report.final_rests_on(old, 2)]
        )["text"]
        == "at least 14 training episodes of steps 100 to 400 over 2 runs"
    )
    evals = [{**p, "metric": "eval/success_rate"} for p in old]
    assert C.report.final_rests_on(evals, 2)["text"] == "8 evaluation episodes of steps 300, 400"


def test_the_compare_doc_says_how_the_grpo_arms_differ_besides_the_reward():
    """Fresh-user trial F13: compare.md said "only the reward differs", while the GRPO arms of
    compare_grpo_cpu.yaml also differ in TRL's advantage scaling (the dry run shows sparse with
    scale_rewards=group, dense with none). The page now names the kinds run without scaling
    (the library's own list) and each arm's scaling in that config."""
    from densereward.rewards.kinds import CONTINUOUS_KINDS, default_scale_rewards

    text = " ".join((REPO / "docs" / "compare.md").read_text().split())
    assert "only the reward differs" not in text
    named = ", ".join(f"`{k}`" for k in sorted(CONTINUOUS_KINDS, key=text.find))
    assert f"the verifier kinds ({named}) run with `scale_rewards: none`" in text
    arms = {
        name: dict(o.split("=", 1) for o in overrides)["reward.type"]
        for name, overrides in load_yaml(REPO / "configs" / "compare_grpo_cpu.yaml")[
            "conditions"
        ].items()
    }
    by_scale: dict[str, list[str]] = {}
    for name, kind in arms.items():
        by_scale.setdefault(default_scale_rewards(kind), []).append(f"`{name}`")
    (group,), none = by_scale["group"], by_scale["none"]
    assert (
        f"in `compare_grpo_cpu.yaml` the {group} arm is `scale_rewards=group` and the "
        f"{', '.join(none[:-1])} and {none[-1]} arms `none`" in text
    )


def _eval_run(steps_by_condition: dict[str, tuple[int, ...]], values=(0.9, 0.2, 0.4)):
    """A trainer whose runs are evaluated at the condition's ``steps`` (``reward.name``), 10
    evaluation episodes a point, with ``values`` in step order."""

    def run(config, *, output_dir):
        output_dir.mkdir(parents=True)
        steps = steps_by_condition[config["reward"]["name"]]
        curve = [
            {"step": s, "value": v, "n_episodes": 10} for s, v in zip(steps, values, strict=False)
        ]
        return {"metric": "eval/success_rate", "curve": curve, "run_dir": str(output_dir)}

    return C.TrainerSpec(run=run, dry_run=_toy_dry_run, budget_key=("training", "steps"))


def test_the_final_leaves_out_the_untrained_policys_step_0_and_names_its_steps(
    tmp_path, monkeypatch, capsys
):
    """Fresh-user trial F6: with final_window >= the curve's points, "final" was the mean of
    the whole curve, the untrained policy's step-0 evaluation included, and the table,
    results.json and the legend ("60 evaluation episodes over 2 runs") did not say so. Now the
    final leaves step 0 out when later points exist (and says so), a final that has only step 0
    says it rests on the untrained policy, and every output names the steps."""
    out = tmp_path / "cmp"
    config = {
        "name": "f6",
        "trainer": "toy",
        "output_dir": str(out),
        "n_bootstrap": 100,
        "base": {"training": {"steps": 10}, "reward": {"name": "x"}},
        "conditions": {
            "evaluated": ["reward.name=evaluated"],
            "untrained": ["reward.name=untrained"],
        },
        "seeds": [0, 1],
        "budget": 100,
        "final_window": 3,
    }
    spec = _eval_run({"evaluated": (0, 50, 100), "untrained": (0,)})
    fig = _saved_figure(
        monkeypatch, lambda: C.run_comparison(config, trainers={"toy": spec}, progress=False)
    )
    err = capsys.readouterr().err
    stored = json.loads((out / "runs" / "evaluated" / "seed0" / "result.json").read_text())
    assert stored["final"] == pytest.approx(0.3)  # steps 50, 100; not 0.5 with step 0
    assert stored["final_rests_on"] == (
        "20 evaluation episodes of steps 50, 100 (step 0, the untrained policy, left out)"
    )
    untrained = json.loads((out / "runs" / "untrained" / "seed0" / "result.json").read_text())
    assert untrained["final"] == pytest.approx(0.9)
    assert untrained["final_rests_on"] == (
        "10 evaluation episodes of step 0: the untrained policy (no later point)"
    )
    (line,) = [x for x in err.splitlines() if "] evaluated seed0: final" in x]
    assert (
        "(mean of the last 2 of 3 points: 20 evaluation episodes of steps 50, 100 (step 0" in line
    )
    results = json.loads((out / "results.json").read_text())
    rests = results["conditions"]["evaluated"]["final_rests_on"]
    assert rests["text"] == "40 evaluation episodes of steps 50, 100 over 2 runs"
    assert rests["steps"] == [50, 100] and rests["untrained"] is False
    rests = results["conditions"]["untrained"]["final_rests_on"]
    assert rests["text"] == "20 evaluation episodes of step 0 (the untrained policy) over 2 runs"
    assert rests["steps"] == [0] and rests["untrained"] is True
    report = (out / "report.md").read_text()
    assert "| 40 evaluation episodes of steps 50, 100 over 2 runs |" in report
    assert "| 20 evaluation episodes of step 0 (the untrained policy) over 2 runs |" in report
    assert "a step-0 point (the untrained policy) is left out" in report
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == [
        "evaluated (n=2; final: 40 evaluation episodes of steps 50, 100 over 2 runs)",
        "untrained (n=2; final: 20 evaluation episodes of step 0 (the untrained policy) over 2 runs)",
    ]
    # runs measured at different steps: the range of them
    assert (
        C.report._condition_rests_on(
            [
                C.report.final_rests_on(
                    [{"step": 90, "value": 0.0}, {"step": 100, "value": 1.0}], 3
                ),
                C.report.final_rests_on([{"step": 80, "value": 0.0}], 3),
            ]
        )["text"]
        == "3 curve points of steps 80 to 100 over 2 runs"
    )


def test_the_dry_run_says_when_the_seeds_are_too_few_for_a_verdict(tmp_path, capsys):
    """Fresh-user trial F13: the dry run of a comparison with 2 seeds a side printed only
    ``ok`` lines, though "too few runs for a verdict" was certain before anything ran. Now it
    says so in a note (not a problem: the runs are valid, exit 0), with the rule and the fix."""
    from densereward.cli import main

    name = "toy-dry-seeds"
    C.register_trainer(name, _toy_spec([]))
    try:
        path = tmp_path / "toy.yaml"
        config = {**_toy_config(tmp_path / "cmp"), "trainer": name, "seeds": [0, 1]}
        config["conditions"] = {"slow": ["reward.rate=0.6"], "fast": ["reward.rate=3.0"]}
        path.write_text(yaml.safe_dump(config))
        assert main(["compare", "--config", str(path), "--dry-run"]) == 0
        printed = capsys.readouterr().out
        assert (
            "  note  too few seeds for a verdict: 2 a side, >= 4 needed (MIN_RUNS_FOR_A_VERDICT); "
            "the results are descriptive only; use --seeds 0 1 2 3\n" in printed
        ), printed
        assert "!!" not in printed and not (tmp_path / "cmp").exists()
        # seeds of one's own are kept in the fix
        assert main(["compare", "--config", str(path), "--dry-run", "--seeds", "5", "9"]) == 0
        assert "use --seeds 5 9 10 11\n" in capsys.readouterr().out
        # 4 seeds a side: no note
        assert (
            main(["compare", "--config", str(path), "--dry-run", "--seeds", "0", "1", "2", "3"])
            == 0
        )
        assert "too few seeds" not in capsys.readouterr().out
    finally:
        C.TRAINERS._entries.pop(name, None)


def test_conditions_with_identical_curves_are_said_to_coincide_and_both_drawn(
    tmp_path, monkeypatch
):
    """Fresh-user trial F7: two conditions with identical curves (the verifier's shaping
    changed no outcome) drew one line exactly under the other: the legend listed three
    conditions, the plot showed two, and nothing said so. Now the analysis lists coinciding
    conditions (results.json ``coinciding``), the report and the plot say so, and the later
    line is drawn dashed over the earlier so both show."""
    out = tmp_path / "cmp"
    config = {**_toy_config(out), "seeds": [0, 1], "n_bootstrap": 100}
    config["conditions"] = {
        "slow": ["reward.rate=0.3"],
        "twin": ["reward.rate=0.3"],  # the same runs as slow, seed by seed
        "fast": ["reward.rate=3.0"],
    }
    png = out / "learning_curves.png"
    fig = _saved_figure(
        monkeypatch,
        lambda: C.run_comparison(config, trainers={"toy": _toy_spec([])}, progress=False),
    )
    results = json.loads((out / "results.json").read_text())
    assert results["coinciding"] == [{"conditions": ["slow", "twin"], "same_runs": True}]
    report = (out / "report.md").read_text()
    assert (
        "**Coinciding curves:** slow and twin coincide (identical mean curves; every seed's "
        "curve the same: the difference between their rewards changed no measured value). In the "
        "plot twin is drawn dashed over slow." in report
    )
    (ax,) = fig.axes
    title = ax.get_title()
    assert "slow and twin coincide (identical curves): twin dashed over slow" in title, title
    styles = {ln.get_label().split(" ")[0]: ln.get_linestyle() for ln in ax.get_lines()}
    assert styles["slow"] == "-" and styles["fast"] == "-" and styles["twin"] == "--"
    assert png.stat().st_size > 1000
    # different curves: none listed, no note
    assert (
        C.analyze(
            {"a": _two_point_runs((0.2, 0.4)), "b": _two_point_runs((0.5, 0.7))},
            budget=300,
            n_bootstrap=100,
        )["coinciding"]
        == []
    )


def test_a_runs_result_records_its_real_run_directory_in_its_config(tmp_path):
    """Fresh-user note: a run's result.json recorded ``config.training.output_dir`` as the
    base file's value (``runs/sac``) while the run wrote to
    ``<out>/runs/<condition>/seed<k>/<condition>-seed<k>``. A trainer's spec names its
    run-directory key (``run_dir_key``; SAC and GRPO: ``training.output_dir``) and the record
    holds the real directory there; the fingerprint (of the config as built) is unchanged."""
    out = tmp_path / "cmp"
    config = {**_toy_config(out), "seeds": [0]}
    config["base"] = {**config["base"], "training": {"steps": 10, "output_dir": "runs/toy"}}
    spec = dataclasses.replace(_toy_spec([]), run_dir_key=("training", "output_dir"))
    C.run_comparison(config, trainers={"toy": spec}, progress=False)
    stored = json.loads((out / "runs" / "slow" / "seed0" / "result.json").read_text())
    real = out / "runs" / "slow" / "seed0" / "slow-seed0"
    assert stored["run_dir"] == str(real) and real.is_dir()
    assert stored["config"]["training"]["output_dir"] == str(real)
    # the record's config is not the fingerprinted one: a re-run still resumes
    calls: list = []
    spec = dataclasses.replace(_toy_spec(calls), run_dir_key=("training", "output_dir"))
    C.run_comparison(config, trainers={"toy": spec}, progress=False)
    assert calls == []
    from densereward.trainers.grpo_spec import GRPO_TRAINER
    from densereward.trainers.sac_spec import SAC_TRAINER

    assert SAC_TRAINER.run_dir_key == GRPO_TRAINER.run_dir_key == ("training", "output_dir")


_ROLLING = {  # seed -> (step, value, n_episodes, n_episodes_total): SAC with evaluation off
    0: [(100, 0.5, 2, 2), (200, 0.3, 10, 10), (300, 0.5, 10, 14)],  # 1 of 2, then 5 of 10
    1: [(100, 0.0, 1, 1), (200, 0.6, 10, 10), (300, 0.7, 10, 14)],
}


def _rolling_curve(rows) -> list[dict]:
    """Training-curve points from ``(step, value, n_episodes, n_episodes_total)`` rows."""
    return [
        {
            "step": s,
            "value": v,
            "metric": "rollout/success_rate",
            "n_episodes": n,
            "n_episodes_total": t,
        }
        for s, v, n, t in rows
    ]


def _rolling_run(config, *, output_dir):
    """A training curve as SAC writes it with evaluation off (rollout/success_rate rows with
    their windows' n_episodes and n_episodes_total); the ``late`` condition's reaches are
    shifted one point later."""
    output_dir.mkdir(parents=True)
    rows = _ROLLING[config["training"]["seed"]]
    values = [v for _, v, _, _ in rows]
    if config["reward"]["rate"] < 1:
        values = [0.0, *values[:-1]]
    curve = _rolling_curve([(s, v, n, t) for (s, _, n, t), v in zip(rows, values, strict=True)])
    return {"metric": "rollout/success_rate", "curve": curve, "run_dir": str(output_dir)}


def test_steps_to_threshold_counts_no_reach_on_a_window_of_a_few_training_episodes(
    tmp_path, capsys
):
    """Fresh-user trial F8: with evaluation off (training-curve points: rolling windows of
    training episodes) "steps to threshold" counted seed 0's first point, 1 success of 2
    episodes (0.5 >= 0.5), as a reach at step 100. A reach now counts only at a point whose
    window holds MIN_REACH_EPISODES training episodes (or the whole window, where
    training.metrics_window is smaller); the one set aside is said in the console, report.md
    and results.json, and the rule in the Method section."""
    from densereward.cli import main

    assert C.report.MIN_REACH_EPISODES == 10
    name = "toy-rolling"
    C.register_trainer(
        name,
        C.TrainerSpec(run=_rolling_run, dry_run=_toy_dry_run, budget_key=("training", "steps")),
    )
    try:
        config = {
            **_toy_config(tmp_path / "cmp"),
            "trainer": name,
            "seeds": [0, 1],
            "budget": 300,
            "threshold": 0.5,
            "conditions": {"early": ["reward.rate=1.0"], "late": ["reward.rate=0.5"]},
        }
        path = tmp_path / "cmp.yaml"
        path.write_text(yaml.safe_dump(config))
        assert main(["compare", "--config", str(path), "--no-progress"]) == 0
        err = capsys.readouterr().err
    finally:
        C.TRAINERS._entries.pop(name, None)
    results = json.loads((tmp_path / "cmp" / "results.json").read_text())
    early = results["conditions"]["early"]["steps_to_threshold"]
    # seed 0: step 100 (1 of 2 episodes) set aside, step 300 (5 of 10) counted; seed 1: step 200
    assert early["per_seed"] == {"0": 300.0, "1": 200.0}, early
    assert early["n_reached"] == 2 and early["min_episodes"] == 10
    assert early["set_aside"] == [{"seed": 0, "step": 100, "value": 0.5, "n_episodes": 2}]
    (run0,) = [r for r in results["conditions"]["early"]["runs"] if r["seed"] == 0]
    assert run0["steps_to_threshold_n_episodes"] == 10  # what the counted reach rests on
    late = results["conditions"]["late"]["steps_to_threshold"]
    assert late["per_seed"] == {"0": 200.0, "1": 300.0} and late["set_aside"] == []
    note = (
        "Steps to threshold: 1 reach on a rolling window of fewer than 10 training episodes "
        "not counted: early seed 0 at step 100 (0.5 on 2 episodes)"
    )
    assert results["steps_to_threshold_note"].startswith(note)
    assert err.count(note) == 1, err
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert report.count(note) == 1
    assert "| 250 (2/2 reached >= 0.5 on windows of >= 10 training episodes) |" in report
    assert (
        "a training-curve point counts only when its rolling window holds at least "
        "MIN_REACH_EPISODES = 10 training episodes" in report
    )


def test_the_reach_rule_takes_the_whole_window_when_it_is_smaller():
    """training.metrics_window=4: every full window holds 4 episodes (n_episodes <
    n_episodes_total says a window is full), so a point of 4 counts and one of 2 does not;
    evaluation points and GRPO's completions are not rolling windows: the rule leaves them."""
    rows = [(100, 0.5, 2, 2), (200, 0.5, 4, 4), (300, 0.75, 4, 6)]
    curve = _rolling_curve(rows)
    a = C.analyze({"x": [{"seed": 0, "curve": curve}]}, budget=300, threshold=0.5, n_bootstrap=50)
    st = a["conditions"]["x"]["steps_to_threshold"]
    assert st["per_seed"] == {"0": 200.0} and st["min_episodes"] == 4
    evals = [{**p, "metric": "eval/success_rate"} for p in curve]
    a = C.analyze({"x": [{"seed": 0, "curve": evals}]}, budget=300, threshold=0.5, n_bootstrap=50)
    st = a["conditions"]["x"]["steps_to_threshold"]
    assert st["per_seed"] == {"0": 100.0} and st["min_episodes"] is None and st["set_aside"] == []


def test_curves_that_meet_on_a_stretch_are_both_visible(tmp_path, monkeypatch):
    """Rerun 13 F3: two conditions whose curves are equal on a stretch (both 0 until one
    rises) were drawn with one width, so the later line hid the earlier one there and the
    earlier condition seemed to start where they part. Each later solid line is thinner now,
    so the earlier one's edges stay visible where they meet."""
    import matplotlib.axes

    a = C.analyze(
        {
            "sparse": _synthetic_runs(5000),
            "env": _synthetic_runs(600),
            "dense": _synthetic_runs(200),
        },
        budget=1000,
        threshold=0.8,
        n_bootstrap=50,
    )
    assert not a["coinciding"]  # equal on a stretch only: not drawn dashed
    widths = []
    real_plot = matplotlib.axes.Axes.plot

    def plot(ax, *args, **kwargs):
        if "label" in kwargs:  # a condition's mean line (markers and held stretches have none)
            widths.append((kwargs["label"].split(" ")[0], kwargs.get("linewidth")))
        return real_plot(ax, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    C.plot_curves(a, tmp_path / "c.png", metric="m", x_label="steps", threshold=None, title="t")
    assert [name for name, _ in widths] == ["sparse", "env", "dense"]
    assert widths[0][1] > widths[1][1] > widths[2][1] >= 1.2, widths


def test_an_auc_verdict_on_one_point_curves_says_it_is_the_final_value():
    """Rerun 15 F2: with every curve one point (a curve interval at the budget), the AUC
    verdict was given as a sample-efficiency verdict although each run's AUC equals its final
    value. The verdict says so now (results.json's pair: one_point_curves); curves of two
    points or more, and a verdict on final performance, say nothing of it."""
    one = {
        c: [{"seed": k, "curve": [{"step": 300, "value": v + 0.1 * k}]} for k in range(4)]
        for c, v in (("sparse", 0.1), ("dense", 0.2))
    }
    (pair,) = C.analyze(one, budget=300, n_bootstrap=200)["pairs"]
    assert pair["one_point_curves"] is True
    assert pair["verdict"].endswith(
        "; every curve of both has one point, so each run's AUC is its final value: this says "
        "nothing of sample efficiency (more points: a smaller curve interval than the budget)"
    ), pair["verdict"]
    assert pair["verdict"].startswith("no significant difference between dense and sparse (AUC)")
    (final,) = C.analyze(one, budget=300, n_bootstrap=200, primary="final")["pairs"]
    assert "one_point_curves" not in final and "one point" not in final["verdict"]
    two = {
        c: [
            {"seed": k, **r, "curve": [{"step": 150, "value": 0.0}, *r["curve"]]}
            for k, r in enumerate(runs)
        ]
        for c, runs in one.items()
    }
    (pair,) = C.analyze(two, budget=300, n_bootstrap=200)["pairs"]
    assert "one_point_curves" not in pair and "one point" not in pair["verdict"]


# ------------------------------------------------------------------------------------------
# run settings on compare's command line (fresh-user trial F2)
# ------------------------------------------------------------------------------------------

FETCHREACH = str(REPO / "configs" / "compare_fetchreach.yaml")
SMALL = ["--conditions", "sparse", "env_dense", "--seeds", "0", "--budget", "500"]


def _compare_config(*argv: str) -> dict:
    from densereward.cli import build_parser
    from densereward.config_files import parse_command_line
    from densereward.sample_efficiency.cli import config_from_args

    args = parse_command_line(build_parser(), ["compare", "--config", *argv])
    return config_from_args(args)


def test_compare_takes_run_settings_on_the_command_line_after_the_files_common(tmp_path, capsys):
    """Fresh-user trial F2: configuration.md says every command takes ``section.field=value``
    overrides, but compare refused ``training.eval_every=250`` ("unknown key(s) in the config
    (CompareConfig): 'training' (did you mean 'trainer'?)"), ``sac.learning_rate=1e-3`` and
    ``verifier.threshold=0.4``. A dotted key whose section is not the comparison's is a run
    setting now: added to ``common`` after the file's entries (so it wins over them), given to
    every condition, and listed, marked, in the dry run's ``common`` line."""
    from densereward.cli import main

    out = str(tmp_path / "cmp")
    first = [*SMALL, "training.eval_every=250", "--output-dir", out, "--dry-run"]
    later = [*SMALL[:-4], "--budget", "500", "--output-dir", out, "--dry-run", "--seeds", "0"]
    # the three commands as the user gave them (the last two after --seeds 0)
    for argv in (first, [*later, "sac.learning_rate=1e-3"], [*later, "verifier.threshold=0.4"]):
        assert main(["compare", "--config", FETCHREACH, *argv]) == 0, argv
        captured = capsys.readouterr()
        given = next(a for a in argv if "=" in a)
        common = [line for line in captured.out.splitlines() if "ok  common" in line]
        assert len(common) == 1, captured.out
        assert common[0].startswith(
            "  ok  common (every condition, before its own): sac.learning_starts=250, "
        ), common[0]
        assert common[0].endswith(f", verifier.threshold=0.5, {given} (command line)"), common[0]
        assert not (tmp_path / "cmp").exists()
    # the runs' configs carry the values, with the file's common kept and overridden
    config = _compare_config(
        FETCHREACH,
        *SMALL,
        "training.eval_every=250",
        "sac.learning_rate=1e-3",
        "verifier.threshold=0.4",
    )
    assert config["common"][-3:] == [
        "training.eval_every=250",
        "sac.learning_rate=1e-3",
        "verifier.threshold=0.4",
    ]
    runs = C.build_run_configs(C.parse_compare_config(config), base_dir=REPO / "configs")
    for cname in ("sparse", "env_dense"):
        run = runs[cname]["seed0"]
        assert run["training"]["eval_every"] == 250  # the file's common said 500
        assert run["sac"]["learning_rate"] == 1e-3 and run["verifier"]["threshold"] == 0.4
        assert run["sac"]["learning_starts"] == 250  # the file's common is still applied
    # a mapping common gets the setting applied onto it; none becomes the list
    config = _compare_config(
        FETCHREACH,
        *SMALL,
        "common={training: {eval_every: 500, eval_episodes: 3}}",
        "training.eval_every=250",
    )
    assert config["common"] == {"training": {"eval_every": 250, "eval_episodes": 3}}
    config = _compare_config(FETCHREACH, *SMALL, "common=null", "training.eval_every=250")
    assert config["common"] == ["training.eval_every=250"]
    # common=[...] on the command line replaces the file's list; run settings follow it
    config = _compare_config(
        FETCHREACH, *SMALL, "common=[sac.learning_starts=100]", "training.eval_every=250"
    )
    assert config["common"] == ["sac.learning_starts=100", "training.eval_every=250"]


def test_a_run_setting_a_condition_sets_itself_is_refused_naming_the_condition(tmp_path, capsys):
    """The condition's own value would silently win over a run setting of the command line
    (conditions are applied after common): refused with one line naming the condition and the
    fix. A condition not in the run (--conditions) does not count."""
    from densereward.cli import main

    whole = tmp_path / "whole_env.yaml"  # a condition that sets a whole section
    whole.write_text(
        yaml.safe_dump(
            {
                **load_yaml(FETCHREACH),
                "base": str(REPO / "configs" / "sac_fetchreach_sparse.yaml"),
                "conditions": {
                    "sparse": {},
                    "env_dense": ["env={id: FetchReachDense-v4, reward: env}"],
                },
            }
        )
    )
    for config, given, cname, key in (
        (FETCHREACH, "env.reward=verifier", "env_dense", "env.reward"),
        (str(whole), "env.max_episode_steps=40", "env_dense", "env"),  # a key in its section
        (FETCHREACH, "verifier.granularity=10", "verifier_dense", "verifier.granularity"),
    ):
        conditions = ["--conditions", "sparse", cname]
        assert main(["compare", "--config", config, *conditions, given, "--dry-run"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"densereward: error: {given}: condition '{cname}' sets {key} itself, which would "
            f"win over the command line's value; change it in the config's conditions.{cname} "
            "(or leave the condition out with --conditions)"
        ), err
    config = _compare_config(
        FETCHREACH, "--conditions", "sparse", "sparse_her", "env.id=FetchReach-v4"
    )
    assert config["common"][-1] == "env.id=FetchReach-v4"


def test_report_only_refuses_run_settings(tmp_path, capsys):
    """--report-only re-analyses recorded runs (their common comes from compare_config.yaml):
    a run setting would change the runs, so it is refused with the reason, not reported as
    'unknown key(s) in the config (CompareConfig)'."""
    from densereward.cli import main

    argv = ["compare", "--config", FETCHREACH, "--output-dir", str(tmp_path / "cmp")]
    assert main([*argv, "--report-only", "training.eval_every=250"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "densereward: error: --report-only re-analyses the recorded runs; run settings "
        "(training.eval_every=250) would change the runs: run the comparison without "
        "--report-only (into a new --output-dir) to train with them"
    ), err


def test_misspelt_run_settings_and_comparison_keys_get_their_own_hints(tmp_path, capsys):
    """A misspelt run section is named by the trainer's validation (not 'did you mean
    trainer'); a bare misspelt key stays the comparison's, with its hint; a key the comparison
    sets for every run names common and the flag."""
    from densereward.cli import main

    argv = ["compare", "--config", FETCHREACH, *SMALL, "--output-dir", str(tmp_path), "--dry-run"]
    assert main([*argv, "trainng.eval_every=1"]) == 2
    err = capsys.readouterr().err
    assert "condition 'sparse': unknown section(s) 'trainng' (did you mean 'training'?)" in err
    assert main([*argv, "budgte=5"]) == 2
    assert "'budgte' (did you mean 'budget'?)" in capsys.readouterr().err
    assert main([*argv, "training.seed=3"]) == 2
    err = capsys.readouterr().err
    assert "common: training.seed is set by the comparison for every run" in err, err
    assert "--seeds" in err and "conditions." not in err, err


def test_a_run_section_among_the_comparisons_keys_is_sent_to_common(tmp_path, capsys):
    """Fresh-user trial F2: a train config's section given where a comparison key goes (the
    file's top level, or a bare key on the command line) was 'unknown key(s) ...: 'training'
    (did you mean 'trainer'?)', sending the user the wrong way; it names the fix now."""
    from densereward.cli import main

    path = tmp_path / "top.yaml"
    path.write_text(yaml.safe_dump({**load_yaml(FETCHREACH), "training": {"eval_every": 250}}))
    argv = ["compare", "--config", str(path), *SMALL, "--output-dir", str(tmp_path), "--dry-run"]
    expected = (
        "densereward: error: unknown key(s) in the config (CompareConfig): 'training' is a "
        "section of each run's train config, not a comparison key: put it under common: (every "
        "condition) or a condition, or give training.FIELD=VALUE on the command line"
    )
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == expected
    argv[2] = FETCHREACH
    assert main([*argv, "training={eval_every: 250}"]) == 2
    assert capsys.readouterr().err.strip() == expected
    assert main([*argv, "trainr=sac"]) == 2  # a misspelt comparison key keeps its hint
    assert "'trainr' (did you mean 'trainer'?)" in capsys.readouterr().err
