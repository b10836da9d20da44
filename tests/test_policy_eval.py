"""Held-out pass rate of a policy: config checks, problem exclusion, the paired bootstrap, and a
real evaluation of the embedded SmolLM2-135M policy."""

from __future__ import annotations

import numpy as np
import pytest

from densereward.errors import ConfigError, DataError
from densereward.policy_eval import (
    HeldoutConfig,
    evaluate_pass_rate,
    heldout_tasks,
    paired_difference,
)

CHAIN_SUM = {
    "source": "reasoning_gym",
    "task": "chain_sum",
    "task_config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "system_prompt": "Reply with one short sentence: The answer is <number>.",
}


def test_paired_difference_by_hand_and_by_brute_force():
    rng = np.random.default_rng(0)
    before = (rng.random(50) < 0.3).astype(float)
    after = np.maximum(before, (rng.random(50) < 0.4).astype(float))  # never worse, often better
    r = paired_difference(before, after, n_resamples=1000, seed=1)
    assert r["difference"]["value"] == pytest.approx(after.mean() - before.mean())
    assert 0 < r["difference"]["low"] <= r["difference"]["value"] <= r["difference"]["high"]
    # the same percentile bootstrap written out: resample problems, keep the pairs together
    rs = np.random.default_rng(1)
    diffs = [np.mean((after - before)[rs.integers(0, 50, 50)]) for _ in range(1000)]
    assert r["difference"]["low"] == pytest.approx(np.quantile(diffs, 0.025))
    same = paired_difference(before, before, n_resamples=200)
    assert same["difference"]["low"] == same["difference"]["high"] == 0.0
    with pytest.raises(DataError, match="equal"):
        paired_difference([1, 0], [1])
    with pytest.raises(DataError):
        paired_difference([], [])


def test_heldout_config_is_checked_and_training_problems_are_excluded():
    with pytest.raises(ConfigError, match="nothing to evaluate"):
        HeldoutConfig(greedy=False, n_samples=0)
    with pytest.raises(ConfigError, match="n_problems"):
        HeldoutConfig(n_problems=0)
    with pytest.raises(DataError, match="not set"):
        heldout_tasks(HeldoutConfig())
    train = heldout_tasks(HeldoutConfig(data={**CHAIN_SUM, "size": 40, "seed": 0}, n_problems=None))
    cfg = HeldoutConfig(data={**CHAIN_SUM, "size": 100, "seed": 1}, n_problems=None)
    everything = heldout_tasks(cfg)
    held = heldout_tasks(cfg, train["problem"])
    overlap = set(everything["problem"]) & set(train["problem"])
    assert overlap and not set(held["problem"]) & set(train["problem"])  # one-digit sums repeat
    assert len(held) == sum(p not in overlap for p in everything["problem"])
    with pytest.raises(DataError, match="no held-out problems left"):
        heldout_tasks(cfg, everything["problem"])


@pytest.mark.slow  # loads the embedded model
def test_evaluate_pass_rate_with_the_embedded_policy(default_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    model.train()
    cfg = HeldoutConfig(data={**CHAIN_SUM, "size": 6, "seed": 3}, n_problems=4, n_samples=2)
    tasks = heldout_tasks(cfg)
    r = evaluate_pass_rate(model, tok, tasks, cfg, temperature=1.0, max_new_tokens=12)
    assert len(r["greedy"]) == len(r["sampled"]) == len(r["problems"]) == 4
    assert set(r["greedy"]) <= {0.0, 1.0} and set(r["sampled"]) <= {0.0, 0.5, 1.0}
    assert model.training and tok.padding_side == "right"  # restored after the evaluation
    again = evaluate_pass_rate(model, tok, tasks, cfg, temperature=1.0, max_new_tokens=12)
    assert again["greedy"] == r["greedy"] and again["sampled"] == r["sampled"]  # fixed seed
    assert r["examples"][0]["mode"] == "greedy" and r["examples"][0]["completion"]


def test_every_steps_is_checked():
    with pytest.raises(ConfigError, match="every_steps"):
        HeldoutConfig(data=CHAIN_SUM, every_steps=0)


@pytest.mark.slow  # a real 3-step GRPO run of the embedded 135M policy (~1 min)
def test_heldout_every_steps_makes_the_run_curve_held_out(tmp_path, default_model_dir):
    """heldout.every_steps=2 over 3 steps: evaluations at steps 0, 2 and 3 (heldout_curve.jsonl),
    and the run's curve (what ``densereward compare`` reads) is that held-out greedy pass rate,
    its first and last points the before / after of heldout.json; the training-batch curve is
    kept as ``train_curve``."""
    import json

    from densereward.trainers.grpo import run

    config = {
        "model": {"name": None, "torch_threads": 1},
        "wandb": {"enabled": False},
        "data": {**CHAIN_SUM, "size": 8, "limit": 8, "seed": 0},
        "reward": {"type": "sparse", "track": False},
        "heldout": {
            "data": {**CHAIN_SUM, "size": 40, "seed": 1},
            "n_problems": 4,
            "n_samples": 0,
            "every_steps": 2,
        },
        "training": {
            "use_cpu": True,
            "max_steps": 3,
            "per_device_train_batch_size": 4,
            "num_generations": 2,
            "max_completion_length": 8,
            "save_steps": 100,
            "learning_rate": 3e-5,
            "logging_steps": 1,  # a training-batch point per step
        },
    }
    result = run(config, output_dir=tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run/heldout_curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 2, 3]
    assert all(r["mode"] == "greedy" and r["value"] == r["greedy"] for r in rows)
    assert result["metric"] == "heldout/pass_rate_greedy"
    assert [{"step": p["step"], "value": p["value"]} for p in result["curve"]] == [
        {"step": r["step"], "value": r["value"]} for r in rows
    ]
    # each point says what it rests on (compare sums them: issue 41 third rerun F4)
    assert all(p["n_problems"] == result["heldout"]["n_problems"] for p in result["curve"])
    assert result["final"] == rows[-1]["value"]
    saved = json.loads((tmp_path / "run/heldout.json").read_text())
    assert np.mean(saved["before"]["greedy"]) == rows[0]["value"]
    assert np.mean(saved["after"]["greedy"]) == rows[-1]["value"]
    assert [p["step"] for p in result["train_curve"]] == [1, 2, 3]  # training-batch pass rate
    assert all(p["value"] in (0.0, 0.25, 0.5, 0.75, 1.0) for p in result["train_curve"])
