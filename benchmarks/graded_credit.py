"""Does the judge give graded credit? Near-miss vs far-off final answers (issue 27 item 3).

A dense reward can only help where the sparse one is silent (every completion of a group wrong)
if it ranks the wrong answers: a near miss above a far-off one. For N problems of a task this
builds, per problem, three one-sentence answers in the policy's own form ("The answer is X."):

* ``correct``: X = the reference answer;
* ``near``: X = reference +- 1 or +- 2 (an arithmetic slip; sign and size drawn at random);
* ``far``: X = reference +- 10..30;

scores each with the dense reward GRPO trains on (:func:`densereward.rewards.build_reward_funcs`,
``reward.type=dense``: the extracted final answer against the reference, the reference-guided
``answer_match`` prompt; the same code path, prompt and verifier settings as
``configs/compare_grpo_judge_cpu.yaml``), and reports the mean score of each class with a
problem-level percentile bootstrap 95% CI (Efron & Tibshirani 1993) and the AUROCs
near vs far and correct vs near (ties count one half; Hanley & McNeil 1982) with bootstrap CIs.
AUROC(near vs far) = 0.5 means no graded credit; 1 means every near miss outscores every far one.

    python benchmarks/graded_credit.py                        # 40 chain_sum problems, the 0.5B judge
    python benchmarks/graded_credit.py --problems 20 --model smollm2-135m --name graded_credit_135m

Writes ``docs/figures/<name>.json`` and ``.md`` (default name ``graded_credit``).
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

CLASSES = ("correct", "near", "far")
SYSTEM_PROMPT = "Reply with one short sentence: The answer is <number>."


def build_items(answers: list[str], seed: int) -> list[dict[str, Any]]:
    """Per problem i and class c, ``{"problem_index", "class", "offset", "answer"}`` (``(3N,)``).

    ``answers`` are the reference answers (integers as text); the offsets are 0 (correct),
    +-1 / +-2 (near) and +-10..30 (far), drawn with ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    items = []
    for i, ref in enumerate(answers):
        value = int(ref)
        near = int(rng.choice([-2, -1, 1, 2]))
        far = int(rng.integers(10, 31)) * int(rng.choice([-1, 1]))
        for cls, off in zip(CLASSES, (0, near, far), strict=True):
            items.append(
                {"problem_index": i, "class": cls, "offset": off, "answer": str(value + off)}
            )
    return items


def summarise(items: list[dict[str, Any]], *, n_resamples: int, seed: int) -> dict[str, Any]:
    """Mean score per class and the two AUROCs, each with a problem-level bootstrap CI."""
    from densereward.metrics import auroc, bootstrap_many

    n = 1 + max(it["problem_index"] for it in items)
    table = np.full((n, len(CLASSES)), np.nan)
    for it in items:
        if it["score"] is not None:
            table[it["problem_index"], CLASSES.index(it["class"])] = it["score"]

    def mean_of(k: int):
        return lambda t: float(np.nanmean(t[:, k])) if np.isfinite(t[:, k]).any() else float("nan")

    def auc_of(hi: int, lo: int):
        def stat(t):
            a, b = t[:, hi][np.isfinite(t[:, hi])], t[:, lo][np.isfinite(t[:, lo])]
            return auroc(np.r_[a, b], np.r_[np.ones(a.size), np.zeros(b.size)])

        return stat

    fns = {f"mean_{c}": mean_of(k) for k, c in enumerate(CLASSES)}
    fns["auroc_near_vs_far"] = auc_of(1, 2)
    fns["auroc_correct_vs_near"] = auc_of(0, 1)
    fns["near_minus_far"] = lambda t: float(np.nanmean(t[:, 1] - t[:, 2]))
    rows = np.arange(n)
    stats = bootstrap_many(
        {k: (lambda idx, f=f: f(table[idx.astype(int)])) for k, f in fns.items()},
        rows,
        n_resamples=n_resamples,
        seed=seed,
    )
    by_offset: dict[str, list[float]] = {}
    for it in items:
        if it["score"] is not None:
            by_offset.setdefault(
                str(abs(it["offset"])) if it["class"] != "far" else "10-30", []
            ).append(it["score"])
    return {
        "n_problems": n,
        "n_abstained": sum(it["score"] is None for it in items),
        "stats": stats,
        "by_abs_offset": {
            k: {"n": len(v), "mean": float(np.mean(v))}
            for k, v in sorted(by_offset.items(), key=lambda kv: (kv[0] == "10-30", kv[0]))
        },
    }


def _fmt(s: dict[str, float]) -> str:
    return f"{s['value']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def render(res: dict[str, Any]) -> str:
    """The markdown report of one run (``res`` as written to the JSON)."""
    st, s = res["summary"]["stats"], res["summary"]
    far_auc = st["auroc_near_vs_far"]
    verdict = (
        "graded credit: near misses outscore far-off answers (CI above 0.5)"
        if far_auc["low"] > 0.5
        else "no graded credit shown: the CI of AUROC(near vs far) includes 0.5"
        if far_auc["high"] >= 0.5
        else "inverted: far-off answers outscore near misses"
    )
    lines = [
        f"# Graded credit of {res['verifier']['model']} on {res['task']['task']}",
        "",
        f"Command: `{res['command']}`; {res['wall_s']:.0f} s wall on {res['machine']}.",
        "",
        f"{s['n_problems']} problems ({res['task']['task']} {res['task']['task_config']}), three "
        'answers each in the policy\'s form ("The answer is X."): correct, near (off by 1 or 2), '
        "far (off by 10-30). Scores: the dense GRPO reward (expected score in [0, 1]), reference-guided "
        f"`answer_match` prompt, G = {res['verifier']['granularity']}, dtype {res['verifier']['dtype']}. "
        f"95% problem-level bootstrap CIs ({res['n_resamples']} resamples); {s['n_abstained']} reads abstained.",
        "",
        "| class | mean score [95% CI] |",
        "|---|---|",
        *[f"| {c} | {_fmt(st['mean_' + c])} |" for c in CLASSES],
        "",
        "| comparison | value [95% CI] |",
        "|---|---|",
        f"| AUROC near vs far | {_fmt(far_auc)} |",
        f"| mean(near - far), paired | {_fmt(st['near_minus_far'])} |",
        f"| AUROC correct vs near | {_fmt(st['auroc_correct_vs_near'])} |",
        "",
        "Mean score by |offset|: "
        + ", ".join(f"{k}: {v['mean']:.3f} (n={v['n']})" for k, v in s["by_abs_offset"].items()),
        "",
        f"**Verdict:** {verdict}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--problems", type=int, default=40, help="N problems (3 reads each)")
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="verifier (offline name or path)")
    p.add_argument("--granularity", type=int, default=20)
    p.add_argument("--dtype", default="auto", help="verifier dtype (auto: bf16 with AMX)")
    p.add_argument(
        "--task-config",
        default='{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}',
        help="reasoning-gym chain_sum knobs (JSON)",
    )
    p.add_argument(
        "--data-seed", type=int, default=1, help="task seed (1: the held-out problems' seed)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the offsets and the bootstrap")
    p.add_argument("--n-resamples", type=int, default=2000)
    p.add_argument("--name", default="graded_credit")
    p.add_argument("--out", default=str(REPO / "docs" / "figures"))
    p.add_argument(
        "--render-only", metavar="JSON", help="re-summarise and re-render a written JSON"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.render_only:
        res = json.loads(Path(args.render_only).read_text())
        res["summary"] = summarise(res["items"], n_resamples=res["n_resamples"], seed=args.seed)
        Path(args.render_only).write_text(json.dumps(res, indent=1) + "\n")
        Path(args.render_only).with_suffix(".md").write_text(render(res))
        print(render(res))
        return 0

    from densereward.config import VerifierConfig
    from densereward.data import load_tasks
    from densereward.rewards import RewardConfig, build_reward_funcs
    from densereward.verifier import VerifierFactory

    task = {
        "source": "reasoning_gym",
        "task": "chain_sum",
        "task_config": json.loads(args.task_config),
        "size": args.problems,
        "seed": args.data_seed,
        "system_prompt": SYSTEM_PROMPT,
    }
    ds = load_tasks(task)
    items = build_items(list(ds["answer"]), args.seed)
    vcfg = VerifierConfig(
        model=args.model,
        granularity=args.granularity,
        style="direct",
        batch_size=8,
        backend_options={"device": "cpu", "dtype": args.dtype},
    )
    rcfg = RewardConfig(
        type="dense", track=False, reference_guided=True, reference_prompt="answer_match"
    )
    (dense,), _ = build_reward_funcs(rcfg, VerifierFactory(vcfg))
    t0 = time.perf_counter()
    rows = [ds[it["problem_index"]] for it in items]
    scores = dense(
        prompts=[r["prompt"] for r in rows],
        completions=[f"The answer is {it['answer']}." for it in items],
        problem=[r["problem"] for r in rows],
        answer=[r["answer"] for r in rows],
    )
    wall = time.perf_counter() - t0
    for it, r, s in zip(items, rows, scores, strict=True):
        it.update(
            problem=r["problem"], reference=r["answer"], score=None if s is None else float(s)
        )
    res = {
        "command": "python benchmarks/graded_credit.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "task": {k: task[k] for k in ("task", "task_config", "seed")},
        "verifier": {
            "model": args.model,
            "granularity": args.granularity,
            "dtype": args.dtype,
            "prompt": "answer_match (reference-guided)",
        },
        "n_resamples": args.n_resamples,
        "wall_s": wall,
        "machine": f"{platform.machine()} CPU, torch threads as set by the backend",
        "summary": summarise(items, n_resamples=args.n_resamples, seed=args.seed),
        "items": items,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(render(res))
    print(render(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
