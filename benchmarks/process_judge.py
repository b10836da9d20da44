"""Does the judge read the path? Its agreement with the programmatic process reward (issue 37 item 1).

Builds, for ``--problems`` reasoning-gym ``chain_sum`` problems with 3-4 one-digit terms, the
running-total solution in the required form (``"3+4=7; 7-2=5; The answer is 5."``) and one
solution per step ``k`` with a slip at step ``k`` (the ``k``-th total off by 1-3, later totals
computed from the wrong one, so steps before ``k`` are right and the final answer is wrong). The
oracle process reward (:func:`densereward.rewards.process.process_score`, the share of correct
running totals) of the slip at ``k`` is ``k / (steps)``. Each solution is scored by the dense
reward GRPO trains on (``build_reward_funcs(RewardConfig(type="dense", reference_prompt=...))``)
with each prompt kind:

* ``process``: the full solution judged on progress along the steps (the reference answer shown);
* ``anchored``: the reference answer and the full solution on the correctness criterion;
* ``answer_match``: the final answer against the reference (it cannot see the steps: the control).

Reported per prompt, with problem-level percentile bootstrap 95% CIs (Efron & Tibshirani 1993):
AUROC of the correct solution vs the slip at step ``k`` (for every ``k``); the *progress*
accuracy, the share of pairs of wrong solutions of one problem in which the later slip (more
correct steps) scores higher (ties count one half); and the Spearman correlation of the judge's
score with the oracle over all solutions.

    python benchmarks/process_judge.py                           # 40 problems, the 0.5B judge
    python benchmarks/process_judge.py --model qwen2.5-coder-1.5b --name process_judge_15b

Writes ``docs/figures/<name>.json`` and ``.md`` (default ``process_judge``).
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

PROMPTS = ("process", "anchored", "answer_match")


def chain_text(terms: list[int], slip_at: int | None, delta: int) -> str:
    """The running-total solution; with ``slip_at`` the total of that step is off by ``delta``."""
    parts, total = [], terms[0]
    for k, t in enumerate(terms[1:]):
        new = total + t + (delta if k == slip_at else 0)
        parts.append(f"{total}{'+' if t >= 0 else '-'}{abs(t)}={new}")
        total = new
    return "; ".join(parts) + f"; The answer is {total}."


def build(n: int, seed: int) -> list[dict[str, Any]]:
    """Per problem: the correct solution and one slip per step (``(problems x (1 + steps))``)."""
    from densereward.data import DataConfig, load_tasks
    from densereward.rewards.process import CHAIN_SUM_FORMAT, chain_terms, process_score

    ds = load_tasks(
        DataConfig(
            source="reasoning_gym",
            task="chain_sum",
            size=n,
            seed=seed,
            system_prompt=CHAIN_SUM_FORMAT,
            task_config={"min_terms": 3, "max_terms": 4, "min_digits": 1, "max_digits": 1},
        )
    )
    rng = np.random.default_rng(seed)
    items = []
    for i, row in enumerate(ds):
        terms = chain_terms(row["problem"])
        steps = len(terms) - 1
        for slip in [None, *range(steps)]:
            delta = int(rng.integers(1, 4)) * int(rng.choice([-1, 1]))
            text = chain_text(terms, slip, delta)
            items.append(
                {
                    "problem_index": i,
                    "problem": row["problem"],
                    "prompt": row["prompt"],
                    "answer": row["answer"],
                    "slip_at": slip,
                    "steps": steps,
                    "text": text,
                    "oracle": process_score(row["problem"], text),
                }
            )
    assert all(
        it["oracle"] == (1.0 if it["slip_at"] is None else it["slip_at"] / it["steps"])
        for it in items
    )
    return items


def score(items: list[dict[str, Any]], verifier: Any, prompt: str) -> list[float | None]:
    from densereward.rewards import RewardConfig, build_reward_funcs

    cfg = RewardConfig(type="dense", track=False, audit=False, reference_prompt=prompt)
    (reward,), _ = build_reward_funcs(cfg, verifier)
    out: list[float | None] = []
    for i in range(0, len(items), 16):
        part = items[i : i + 16]
        out += reward(
            prompts=[it["prompt"] for it in part],
            completions=[it["text"] for it in part],
            answer=[it["answer"] for it in part],
            problem=[it["problem"] for it in part],
        )
    return out


def metrics(items: list[dict[str, Any]], scores: list, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Per-step AUROC (correct vs slip at k), progress accuracy, Spearman with the oracle."""
    from scipy.stats import spearmanr

    from densereward.metrics import auroc

    by: dict[int, list[tuple[dict, float]]] = {}
    for it, s in zip(items, scores, strict=True):
        if s is not None:
            by.setdefault(it["problem_index"], []).append((it, float(s)))
    pids = sorted(by)
    max_steps = max(it["steps"] for it in items)

    def stats(sample: list[int]) -> dict[str, float]:
        out: dict[str, float] = {}
        for k in range(max_steps):
            pos = [
                s for p in sample for it, s in by[p] if it["slip_at"] is None and it["steps"] > k
            ]
            neg = [s for p in sample for it, s in by[p] if it["slip_at"] == k]
            out[f"auroc_step{k + 1}"] = (
                float(auroc(np.r_[pos, neg], np.r_[np.ones(len(pos)), np.zeros(len(neg))]))
                if pos and neg
                else float("nan")
            )
        wins = n = 0.0
        for p in sample:
            wrong = [(it["slip_at"], s) for it, s in by[p] if it["slip_at"] is not None]
            for (_, sa), (_, sb) in ((x, y) for x in wrong for y in wrong if x[0] > y[0]):
                wins += 1.0 if sa > sb else 0.5 if sa == sb else 0.0
                n += 1
        out["progress_accuracy"] = wins / n if n else float("nan")
        ora = [it["oracle"] for p in sample for it, _ in by[p]]
        js = [s for p in sample for _, s in by[p]]
        out["spearman_oracle"] = (
            float(spearmanr(ora, js).statistic) if len(set(js)) > 1 else float("nan")
        )
        return out

    point = stats(pids)
    rng = np.random.default_rng(seed)
    boots = [stats(list(rng.choice(pids, size=len(pids)))) for _ in range(n_boot)]
    res = {}
    for key, v in point.items():
        b = np.array([x[key] for x in boots if np.isfinite(x[key])])
        res[key] = {
            "value": v,
            "low": float(np.percentile(b, 2.5)) if b.size else None,
            "high": float(np.percentile(b, 97.5)) if b.size else None,
        }
    res["mean_score"] = {
        ("correct" if k is None else f"slip_step{k + 1}"): float(
            np.mean([s for it, s in (x for p in pids for x in by[p]) if it["slip_at"] == k])
        )
        for k in [None, *range(max_steps)]
    }
    res["n_abstained"] = sum(s is None for s in scores)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--seed", type=int, default=2, help="task seed (the training data uses 0)")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--prompts", nargs="+", default=list(PROMPTS), choices=PROMPTS)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--name", default="process_judge")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from densereward import Verifier, VerifierConfig

    items = build(args.problems, args.seed)
    verifier = Verifier(
        VerifierConfig(
            backend="transformers",
            model=args.model,
            granularity=20,
            style="direct",
            batch_size=8,
            backend_options={"device": "cpu", "dtype": args.dtype},
        )
    )
    result: dict[str, Any] = {
        "problems": args.problems,
        "task_seed": args.seed,
        "n_solutions": len(items),
        "verifier": f"{args.model} (4-bit Q4_K_M GGUF converted), transformers, G=20, direct, dtype {args.dtype}",
        "machine": platform.machine(),
        "prompts": {},
    }
    try:
        for prompt in args.prompts:
            t0 = time.perf_counter()
            scores = score(items, verifier, prompt)
            m = metrics(items, scores, n_boot=args.bootstrap, seed=0)
            m["seconds_per_read"] = (time.perf_counter() - t0) / len(items)
            m["scores"] = scores
            result["prompts"][prompt] = m
            logging.info("%s: %s", prompt, {k: v for k, v in m.items() if k != "scores"})
    finally:
        verifier.close()
    result["items"] = [
        {k: it[k] for k in ("problem_index", "slip_at", "steps", "text", "oracle")} for it in items
    ]
    figs = REPO / "docs" / "figures"
    (figs / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    steps = sorted({k for m in result["prompts"].values() for k in m if k.startswith("auroc_step")})

    def ci(d: dict) -> str:
        return "n/a" if d["low"] is None else f"{d['value']:.2f} [{d['low']:.2f}, {d['high']:.2f}]"

    lines = [
        f"# Does the judge read the path? ({args.name})",
        "",
        f"Verifier: {result['verifier']}. {args.problems} `chain_sum` problems (3-4 one-digit terms, task "
        f"seed {args.seed}), {len(items)} solutions in the running-total form: the correct one and one slip "
        "per step (later totals follow the slip; the final answer is wrong). Oracle: the share of correct "
        "running totals. 95% CIs: problem-level percentile bootstrap.",
        "",
        "| prompt | "
        + " | ".join(f"AUROC correct vs slip at step {s[10:]}" for s in steps)
        + " | progress accuracy (later slip > earlier) | Spearman with the oracle | s/read |",
        "|---|" + "---|" * (len(steps) + 3),
    ]
    for prompt, m in result["prompts"].items():
        lines.append(
            f"| {prompt} | "
            + " | ".join(ci(m[s]) for s in steps)
            + f" | {ci(m['progress_accuracy'])} | {ci(m['spearman_oracle'])} | {m['seconds_per_read']:.2f} |"
        )
    lines += [
        "",
        "Mean score by solution:",
        "",
        "| prompt | " + " | ".join(next(iter(result["prompts"].values()))["mean_score"]) + " |",
        "|---|" + "---|" * len(next(iter(result["prompts"].values()))["mean_score"]),
    ]
    for prompt, m in result["prompts"].items():
        lines.append(
            f"| {prompt} | " + " | ".join(f"{v:.3f}" for v in m["mean_score"].values()) + " |"
        )
    lines += ["", f"Measured on {result['machine']}, {time.strftime('%Y-%m-%d')}.", ""]
    (figs / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
