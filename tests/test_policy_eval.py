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
