"""Advantage audit of GRPO reward schemes, offline, on the policy's own samples (issue 36 item 2).

Samples the untrained policy of a GRPO config (default ``configs/grpo_demo_cpu.yaml``: the
embedded SmolLM2-135M on one-digit sums) on ``--prompts`` training prompts x ``num_generations``
completions at the training temperature and length, checks each with Math-Verify and scores it
once with the config's judge (the dense reward's default read), then computes TRL 1.16's
advantages (:func:`densereward.rewards.grpo_advantages`) for every reward scheme below, batch by
batch as the run would group them (``per_device_train_batch_size / num_generations`` groups a
step), and reports the mean over batches of :func:`densereward.rewards.advantage_audit`:

* ``wrong_up_share``: share of the step's ``|A|`` pushing wrong completions up;
* ``constant_group_share``: share of ``|A|`` in groups with no sparse spread;
* ``judge_only_step``: share of steps where no group had sparse spread.

Schemes: ``sparse``, ``dense``, the earlier ``gated`` (sparse + 0.5 x judge, two TRL reward
functions) under ``scale_rewards`` group / batch / none, and today's ``gated`` (the stratified
reward, :func:`densereward.rewards.stratified_rewards`, weights [1, 0.1], spread floor 0.02,
judge-only steps skipped) under none (the library's setting) and group.

    python benchmarks/advantage_audit.py                     # 48 prompts x 4, the demo config
    python benchmarks/advantage_audit.py --prompts 16 --name advantage_audit_small

Writes ``docs/figures/<name>.json`` and ``.md`` (default ``advantage_audit``).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def sample(config: dict[str, Any], n_prompts: int, seed: int) -> dict[str, Any]:
    """The policy's completions of the first ``n_prompts`` training prompts (``G`` each)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from densereward.backends.models import resolve_model
    from densereward.config import from_dict
    from densereward.data import DataConfig, load_tasks
    from densereward.policy_eval import _generate
    from densereward.seeding import forked_rng

    data = load_tasks(from_dict(DataConfig, config["data"], prefix="data."))
    data = data.select(range(min(n_prompts, len(data))))
    tr = config["training"]
    g = int(tr["num_generations"])
    path = resolve_model((config.get("model") or {}).get("name"))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prompts = [
        tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
        for r in data
    ]
    with forked_rng(seed):
        texts = _generate(
            model,
            tok,
            prompts,
            max_new_tokens=int(tr["max_completion_length"]),
            temperature=float(tr.get("temperature", 1.0)),
            n=g,
            batch_size=16,
        )
    return {
        "problems": [r["problem"] for r in data for _ in range(g)],
        "prompts": [r["prompt"] for r in data for _ in range(g)],
        "answers": [r["answer"] for r in data for _ in range(g)],
        "completions": [t for ts in texts for t in ts],
        "num_generations": g,
        "groups_per_step": int(tr["per_device_train_batch_size"]) // g,
    }


def judge(samples: dict[str, Any], config: dict[str, Any]) -> list[float | None]:
    """The dense reward's scores (the config's verifier, the dense kind's default prompt)."""
    from densereward.config import VerifierConfig, from_dict
    from densereward.rewards import RewardConfig, build_reward_funcs
    from densereward.verifier import Verifier

    verifier = Verifier(from_dict(VerifierConfig, config["verifier"], prefix="verifier."))
    try:
        (reward,), _ = build_reward_funcs(
            RewardConfig(type="dense", track=False, audit=False), verifier
        )
        return reward(
            prompts=samples["prompts"],
            completions=samples["completions"],
            answer=samples["answers"],
            problem=samples["problems"],
        )
    finally:
        verifier.close()


def audit(correct, dense, g: int, per_step: int) -> dict[str, dict[str, float]]:
    """Mean audit metrics over steps of ``per_step`` groups, for every scheme."""
    from densereward.rewards import advantage_audit, grpo_advantages, stratified_rewards

    c = np.array([1.0 if x == 1.0 else 0.0 for x in correct])
    d = np.array([np.nan if x is None else float(x) for x in dense])
    schemes: dict[str, tuple[Any, str]] = {
        "sparse / group (TRL default)": (lambda s, j, gr: list(s), "group"),
        "dense / group": (lambda s, j, gr: list(j), "group"),
        "dense / none": (lambda s, j, gr: list(j), "none"),
        "earlier gated: sparse + 0.5 judge / group": (
            lambda s, j, gr: list(s + 0.5 * np.nan_to_num(j)),
            "group",
        ),
        "earlier gated / batch": (lambda s, j, gr: list(s + 0.5 * np.nan_to_num(j)), "batch"),
        "earlier gated / none": (lambda s, j, gr: list(s + 0.5 * np.nan_to_num(j)), "none"),
        "gated (stratified [1, 0.1], floor 0.02, skip) / group": (
            lambda s, j, gr: stratified_rewards(
                list(s), [None if np.isnan(x) else x for x in j], gr
            )[0],
            "group",
        ),
        "gated (stratified [1, 0.1], floor 0.02, skip) / none (library default)": (
            lambda s, j, gr: stratified_rewards(
                list(s), [None if np.isnan(x) else x for x in j], gr
            )[0],
            "none",
        ),
        "gated (stratified, keep judge-only steps) / none": (
            lambda s, j, gr: stratified_rewards(
                list(s), [None if np.isnan(x) else x for x in j], gr, judge_only_steps="keep"
            )[0],
            "none",
        ),
    }
    step = g * per_step
    out: dict[str, dict[str, float]] = {}
    for name, (fn, scale) in schemes.items():
        rows = []
        for i in range(0, len(c) - step + 1, step):
            s, j = c[i : i + step], d[i : i + step]
            groups = [slice(k, k + g) for k in range(0, step, g)]
            adv = grpo_advantages(fn(s, j, groups), g, scale)
            rows.append(advantage_audit(adv, list(s), g))
        out[name] = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} | {
            "n_steps": len(rows)
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default=str(REPO / "configs/grpo_demo_cpu.yaml"))
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="advantage_audit")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from densereward.config import load_yaml
    from densereward.rewards.math import MathChecker

    config = load_yaml(args.config)
    t0 = time.perf_counter()
    samples = sample(config, args.prompts, args.seed)
    checks = MathChecker().check_batch(samples["answers"], samples["completions"])
    correct = [c.reward for c in checks]
    dense = judge(samples, config)
    g, per_step = samples["num_generations"], samples["groups_per_step"]
    table = audit(correct, dense, g, per_step)
    ok = np.array([x == 1.0 for x in correct])
    groups = ok.reshape(-1, g)
    result = {
        "config": str(Path(args.config).relative_to(REPO))
        if Path(args.config).is_relative_to(REPO)
        else args.config,
        "n_prompts": args.prompts,
        "num_generations": g,
        "groups_per_step": per_step,
        "pass_rate": float(ok.mean()),
        "frac_groups_all_wrong": float((~groups.any(axis=1)).mean()),
        "frac_groups_mixed": float((groups.any(axis=1) & ~groups.all(axis=1)).mean()),
        "judge_mean_correct": float(
            np.mean([d for d, c in zip(dense, ok, strict=True) if c and d is not None])
        )
        if ok.any()
        else None,
        "judge_mean_wrong": float(
            np.mean([d for d, c in zip(dense, ok, strict=True) if not c and d is not None])
        ),
        "n_judge_abstained": sum(d is None for d in dense),
        "schemes": table,
        "wall_s": round(time.perf_counter() - t0, 1),
        "machine": platform.machine(),
        "samples": [
            {"problem": p, "completion": t, "correct": c, "judge": d}
            for p, t, c, d in zip(
                samples["problems"], samples["completions"], correct, dense, strict=True
            )
        ],
    }
    figs = REPO / "docs" / "figures"
    (figs / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        f"# Advantage audit of GRPO reward schemes ({args.name})",
        "",
        f"Config `{result['config']}`: {args.prompts} training prompts x {g} samples of the untrained policy "
        f"(pass rate {result['pass_rate']:.2f}; groups all wrong {result['frac_groups_all_wrong']:.2f}, mixed "
        f"{result['frac_groups_mixed']:.2f}); judge = the config's verifier, the dense reward's default prompt "
        f"(mean score correct {result['judge_mean_correct'] if result['judge_mean_correct'] is None else round(result['judge_mean_correct'], 3)}, "
        f"wrong {result['judge_mean_wrong']:.3f}; {result['n_judge_abstained']} abstained). Advantages: TRL 1.16's formula, "
        f"steps of {per_step} groups as trained; each value is the mean over {table[next(iter(table))]['n_steps']} steps.",
        "",
        "| scheme / scale_rewards | wrong_up_share | correct_down_share | constant_group_share | judge_only_step | mean abs A |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in table.items():
        lines.append(
            f"| {name} | {m['wrong_up_share']:.3f} | {m['correct_down_share']:.3f} | "
            f"{m['constant_group_share']:.3f} | {m['judge_only_step']:.2f} | {m['abs_mean']:.3f} |"
        )
    lines += [
        "",
        f"{result['wall_s']:.0f} s on {result['machine']}, {time.strftime('%Y-%m-%d')}.",
        "",
    ]
    (figs / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
