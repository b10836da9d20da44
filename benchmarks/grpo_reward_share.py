"""Share of GRPO step time spent computing rewards (CPU config, real TRL GRPOTrainer).

Runs a few real GRPO steps with the configured policy and verifier, times every reward-function
call (verifier scoring + Math-Verify ground truth + tracking) and every optimizer step, and
prints the reward share per step and overall. Target with the direct style: <= 10 % (issue 18).

    python benchmarks/grpo_reward_share.py --config configs/grpo_math_cpu.yaml \\
        --data ../shared/data/math500/test.jsonl --steps 3 [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _timed(func, bucket: list[float]):
    """Wrap a (sync or async) reward function, appending each call's wall time to ``bucket``."""
    from trl.trainer.utils import is_async_callable

    is_async = is_async_callable(func)

    if is_async:

        async def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return await func(*args, **kwargs)
            finally:
                bucket.append(time.perf_counter() - t)

    else:

        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                bucket.append(time.perf_counter() - t)

    functools.update_wrapper(wrapper, func.__call__ if not inspect.isfunction(func) else func)
    wrapper.__name__ = func.__name__
    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="configs/grpo_math_cpu.yaml")
    parser.add_argument("--data", default="../shared/data/math500/test.jsonl")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--reward",
        default=None,
        choices=["sparse", "dense", "group", "mixed", "gated"],
        help="reward.type (default: the config's own, gated in configs/grpo_math_cpu.yaml)",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    a = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from densereward.backends.default_model import ensure_default_model
    from densereward.config import apply_overrides, load_yaml
    from densereward.data import load_tasks
    from densereward.rewards import RewardQualityTracker, build_reward_funcs
    from densereward.trainers.grpo import build_grpo_args, resolve_config
    from densereward.verifier import VerifierFactory

    config = load_yaml(a.config)
    config.setdefault("data", {})
    config["data"] = (
        {"path": a.data, "limit": 64, "shuffle": True}
        if a.data != "reasoning_gym"
        else config["data"]
    )
    reward_type = [f"reward.type={a.reward}"] if a.reward else []
    apply_overrides(
        config,
        [
            *reward_type,
            f"training.max_steps={a.steps}",
            "wandb.enabled=false",
            "training.save_strategy='no'",
            "training.log_completions=false",
            *a.overrides,
        ],
    )
    if config["reward"].get("type") not in ("mixed", "gated"):
        config["reward"].pop("weights", None)
    parts = resolve_config(config)
    parts["training"].pop("output_dir", None)
    if parts["model"].torch_threads:
        torch.set_num_threads(parts["model"].torch_threads)

    reward_times: list[float] = []
    step_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        args = build_grpo_args(parts, Path(tmp))
        tracker = RewardQualityTracker(None, threshold=parts["verifier"].threshold)
        funcs, _ = build_reward_funcs(
            parts["reward"],
            VerifierFactory(parts["verifier"]),
            tracker=tracker,
            num_generations=args.num_generations,
        )
        # Build the verifier before timing (model load is a one-off, not per-step cost).
        for f in funcs:
            if hasattr(f, "verifier"):
                _ = f.verifier
        per_call: list[float] = []
        wrapped = [_timed(f, per_call) for f in funcs]

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                self.t = time.perf_counter()
                per_call.clear()

            def on_step_end(self, args, state, control, **kw):
                step_times.append(time.perf_counter() - self.t)
                reward_times.append(sum(per_call))

        policy = parts["model"].name or str(ensure_default_model())
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=wrapped,
            args=args,
            train_dataset=load_tasks(parts["data"]),
            callbacks=[StepTimer()],
        )
        trainer.train()
        for f in funcs:
            if hasattr(f, "close"):
                f.close()

    print(
        f"\nreward={parts['reward'].type} style={parts['verifier'].style} G={parts['verifier'].granularity} "
        f"K={parts['verifier'].n_repeats} completions/step={args.per_device_train_batch_size} "
        f"max_completion_length={args.max_completion_length} torch_threads={torch.get_num_threads()}"
    )
    print(f"{'step':>4} {'step_s':>8} {'reward_s':>9} {'share':>7}")
    for i, (st, rt) in enumerate(zip(step_times, reward_times, strict=True), 1):
        print(f"{i:>4} {st:8.2f} {rt:9.2f} {rt / st:7.1%}")
    # The first step includes one-off warm-up (Math-Verify worker start, lazy imports).
    steady = list(zip(step_times, reward_times, strict=True))[1:] or list(
        zip(step_times, reward_times, strict=True)
    )
    share = sum(r for _, r in steady) / sum(s for s, _ in steady)
    print(
        f"steady-state (steps 2..): step {statistics.mean(s for s, _ in steady):.2f} s, "
        f"reward {statistics.mean(r for _, r in steady):.2f} s, share {share:.1%} (target <= 10%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
