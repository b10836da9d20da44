"""A short SFT warm start of the policy on running-total ``chain_sum`` answers (issue 37 item 2).

The untrained SmolLM2-135M-Instruct never writes the running-total form on 3-4-term ``chain_sum``
(0/48 sampled answers correct, 10 % with any correct step), so GRPO has no mixed group to learn
from and a process reward has no steps to read. This script teaches the *form* (and some of the
arithmetic) with a few supervised steps, so that the five-arm comparison
(``configs/compare_grpo_dense_cpu.yaml``) starts from a policy whose answers are partly right:
the regime where dense process rewards are reported to help (PAV, arXiv 2410.08146; PRIME,
arXiv 2502.01456 both start RL from an SFT policy).

Data: reasoning-gym ``chain_sum`` (3-4 one-digit terms) drawn with ``--task-seed`` (default 2),
with every question of the comparison's training set (seed 0, 128 problems) and held-out set
(seed 1, 600 problems) removed; targets are the exact running-total solutions
(``"0-4=-4; -4-8=-12; -12+7=-5; The answer is -5."``), the prompts the comparison's own
(system prompt :data:`densereward.rewards.process.CHAIN_SUM_FORMAT`, the model's chat template).
Training: TRL's ``SFTTrainer`` on prompt-completion pairs (loss on the completion only), float32
on CPU, ``--steps`` optimizer steps of ``--batch-size`` examples, constant learning rate, seed 0.

After training it measures, on the comparison's 100 held-out problems, the greedy pass rate
(Math-Verify on the final answer), the share of answers in the form, and the mean process score,
and at temperature 0.7 the sampled pass rate and the share of groups of 4 samples with a mixed
result; these go to ``<output>/warm_start.json`` and ``docs/figures/chain_sum_warm_start.json``.

    python benchmarks/chain_sum_warm_start.py            # ~/.cache/densereward/models/SmolLM2-135M-chain-sum-sft-v1

The output directory is a plain transformers checkpoint (``model.name`` takes its path).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TASK = {"min_terms": 3, "max_terms": 4, "min_digits": 1, "max_digits": 1}
DEFAULT_OUT = Path("~/.cache/densereward/models/SmolLM2-135M-chain-sum-sft-v1").expanduser()


def solution(problem: str) -> str:
    """The exact running-total answer of a ``chain_sum`` problem (process_judge's slip-free text)."""
    from benchmarks.process_judge import chain_text
    from densereward.rewards.process import chain_terms

    terms = chain_terms(problem)
    if terms is None:
        raise ValueError(f"not a chain_sum problem: {problem!r}")
    return chain_text(terms, None, 0)


def tasks(seed: int, size: int) -> list[dict[str, Any]]:
    from densereward.data import load_tasks
    from densereward.rewards.process import CHAIN_SUM_FORMAT

    ds = load_tasks(
        {
            "source": "reasoning_gym",
            "task": "chain_sum",
            "task_config": TASK,
            "size": size,
            "seed": seed,
            "system_prompt": CHAIN_SUM_FORMAT,
        }
    )
    return list(ds)


def sft_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` prompt-completion rows, none of whose questions is in the comparison's sets."""
    taken = {r["problem"] for r in tasks(0, 128)} | {r["problem"] for r in tasks(1, 600)}
    rows = []
    for r in tasks(seed, n + len(taken)):
        if r["problem"] in taken:
            continue
        rows.append(
            {
                "prompt": r["prompt"],
                "completion": [{"role": "assistant", "content": solution(r["problem"])}],
            }
        )
        if len(rows) == n:
            break
    return rows


def measure(model_dir: Path, n: int = 100, group: int = 4, seed: int = 0) -> dict[str, Any]:
    """Greedy and sampled behaviour of the checkpoint on the comparison's held-out problems."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from densereward.rewards.math import default_checker
    from densereward.rewards.process import process_score, stated_totals

    check = default_checker().check

    def is_correct(completion: str, answer: str) -> bool:
        return check(answer, completion).reward == 1.0

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    train_q = {r["problem"] for r in tasks(0, 128)}
    held = [r for r in tasks(1, 600) if r["problem"] not in train_q][:n]
    texts = [
        tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
        for r in held
    ]

    def generate(sample: bool, reps: int) -> list[str]:
        out: list[str] = []
        torch.manual_seed(seed)
        for i in range(0, len(texts), 25):
            batch = tok(texts[i : i + 25], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = model.generate(
                    **batch,
                    max_new_tokens=48,
                    do_sample=sample,
                    temperature=0.7 if sample else None,
                    top_p=None,
                    top_k=None,
                    num_return_sequences=reps,
                    pad_token_id=tok.pad_token_id,
                )
            out += tok.batch_decode(ids[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        return out

    greedy = generate(False, 1)
    ok = [bool(is_correct(c, r["answer"])) for c, r in zip(greedy, held, strict=True)]
    form = [len(stated_totals(c)) >= 2 and "The answer is" in c for c in greedy]
    proc = [process_score(r["problem"], c) or 0.0 for c, r in zip(greedy, held, strict=True)]
    sampled = generate(True, group)
    s_ok = [bool(is_correct(c, held[i // group]["answer"])) for i, c in enumerate(sampled)]
    mixed = [len(set(s_ok[i : i + group])) > 1 for i in range(0, len(s_ok), group)]
    return {
        "problems": len(held),
        "greedy_pass_rate": sum(ok) / len(ok),
        "greedy_form_share": sum(form) / len(form),
        "greedy_mean_process_score": sum(proc) / len(proc),
        "sampled_pass_rate_t0.7": sum(s_ok) / len(s_ok),
        "mixed_group_share_t0.7": sum(mixed) / len(mixed),
        "greedy_examples": greedy[:3],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--output", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--learning-rate", type=float, default=1e-4)
    ap.add_argument("--task-seed", type=int, default=2)
    ap.add_argument("--measure-only", action="store_true", help="measure an existing --output")
    ap.add_argument("--record", type=Path, default=REPO / "docs/figures/chain_sum_warm_start.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("WANDB_MODE", "disabled")

    t0 = time.time()
    if not args.measure_only:
        import datasets
        import torch
        from trl import SFTConfig, SFTTrainer

        from densereward.backends.default_model import ensure_default_model

        torch.manual_seed(0)
        base = ensure_default_model()
        rows = sft_rows(args.examples, args.task_seed)
        tmp = args.output.with_name(args.output.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        cfg = SFTConfig(
            output_dir=str(tmp / "trainer"),
            max_steps=args.steps,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            lr_scheduler_type="constant",
            warmup_steps=0,
            logging_steps=10,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=False,  # TRL's SFTConfig defaults to bf16: emulated (slow) on a CPU without AMX
            gradient_checkpointing=False,  # TRL's default; a 135M model needs no memory saving
            seed=0,
            dataloader_num_workers=0,
        )
        trainer = SFTTrainer(
            model=str(base), args=cfg, train_dataset=datasets.Dataset.from_list(rows)
        )
        trainer.train()
        trainer.save_model(str(tmp))
        trainer.processing_class.save_pretrained(str(tmp))
        shutil.rmtree(tmp / "trainer", ignore_errors=True)
        shutil.rmtree(args.output, ignore_errors=True)
        tmp.rename(args.output)  # nothing half-written is left under the final name
    train_s = time.time() - t0
    result = {
        "base": "SmolLM2-135M-Instruct (embedded)",
        "output": str(args.output),
        "sft_examples": args.examples,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "task": TASK,
        "task_seed": args.task_seed,
        "train_seconds": round(train_s, 1),
        **measure(args.output),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "date": time.strftime("%Y-%m-%d"),
    }
    (args.output / "warm_start.json").write_text(json.dumps(result, indent=2) + "\n")
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
