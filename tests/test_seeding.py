"""Seeds are seeds (issue 36 item 1): a held-out evaluation and a verifier's sampled analysis
leave the caller's random streams alone, and a GRPO run's sampling depends on ``training.seed``,
not on ``heldout.seed``."""

from __future__ import annotations

import pytest
import torch
from test_policy_eval import CHAIN_SUM

from densereward.rewards.kinds import RewardKind
from densereward.seeding import forked_rng, visible_cuda_devices

RECORDED: dict[int, list[list[str]]] = {}
"""run tag -> per generation batch, the completions (filled by :class:`_Recorder`)."""


class _Recorder:
    """A TRL reward function that records the completions and adds nothing to the reward."""

    __name__ = "recorder"

    def __init__(self, tag: int) -> None:
        self.tag = tag

    def __call__(self, prompts, completions, **kwargs):
        RECORDED.setdefault(self.tag, []).append([str(c) for c in completions])
        return [None] * len(completions)


def recording_kind(ctx):
    """GRPO reward kind ``test_recording``: sparse correctness plus the recorder."""
    from densereward.rewards.math import MathCorrectnessReward

    return [MathCorrectnessReward(checker=ctx.checker), _Recorder(ctx.config.pivots)], None


RECORDING = RewardKind(recording_kind)


def test_forked_rng_leaves_the_callers_stream_untouched():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    with forked_rng(0):
        inside = torch.rand(3)
    assert torch.equal(torch.rand(3), expected)
    with forked_rng(0):
        assert torch.equal(torch.rand(3), inside)  # the block's draws are the seed's
    assert visible_cuda_devices() == (
        list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    )


@pytest.mark.slow  # loads the embedded 135M policy (~10 s)
def test_a_heldout_evaluation_leaves_the_callers_rng_untouched(default_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from densereward.policy_eval import HeldoutConfig, evaluate_pass_rate, heldout_tasks

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    cfg = HeldoutConfig(data={**CHAIN_SUM, "size": 4, "seed": 3}, n_problems=2, n_samples=2, seed=0)
    tasks = heldout_tasks(cfg)
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    evaluate_pass_rate(model, tok, tasks, cfg, temperature=1.0, max_new_tokens=6)
    assert torch.equal(torch.rand(4), expected)  # was: the draw changed (reseeded to heldout.seed)


@pytest.mark.slow  # two real 2-step GRPO runs of the embedded 135M policy (~1 min)
def test_grpo_runs_with_different_training_seeds_sample_differently(tmp_path, default_model_dir):
    """One training prompt, so only the sampling stream can differ between the runs; the
    held-out evaluation runs before step 1 and before step 2 with the same heldout.seed. Before
    the fix every run sampled from heldout.seed's stream and both runs drew the same
    completions at every step."""
    from densereward.rewards.kinds import GRPO_REWARDS
    from densereward.trainers.grpo import run

    GRPO_REWARDS.register("test_recording", f"{__name__}:RECORDING")
    try:
        for seed in (0, 1):
            config = {
                "model": {"name": None, "torch_threads": 1},
                "wandb": {"enabled": False},
                "data": {**CHAIN_SUM, "size": 1, "limit": 1, "seed": 0},
                "reward": {"type": "test_recording", "track": False, "pivots": seed + 1},
                "heldout": {
                    "data": {**CHAIN_SUM, "size": 20, "seed": 1},
                    "n_problems": 2,
                    "n_samples": 1,
                    "every_steps": 1,
                    "seed": 0,
                },
                "training": {
                    "use_cpu": True,
                    "max_steps": 2,
                    "per_device_train_batch_size": 4,
                    "num_generations": 4,
                    "max_completion_length": 8,
                    "save_steps": 100,
                    "learning_rate": 3e-5,
                    "seed": seed,
                    "temperature": 1.0,
                },
            }
            run(config, output_dir=tmp_path / f"seed{seed}")
    finally:
        GRPO_REWARDS._entries.pop("test_recording", None)
    a, b = RECORDED[1], RECORDED[2]
    assert len(a) == len(b) == 2
    assert a[1] != b[1]  # step 2: the streams differ
    assert a[0] != b[0]
