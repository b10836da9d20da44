"""Which prompt should a verifier reward read by default? AUROC of each prompt kind (issue 36 item 4).

Scores labelled GSM8K model solutions (``../shared/data/gsm8k/model_solutions_dev.jsonl``: four
generators, each solution labelled correct / incorrect) through the dense reward GRPO trains on,
``build_reward_funcs(RewardConfig(type="dense", ...), verifier)`` (the same code path, prompt
and verifier settings), once per prompt kind a verifier reward can read:

* ``answer_match``: reference-guided, the extracted final answer against the reference;
* ``anchored``: reference-guided, the reference answer and the full solution on the correctness
  criterion;
* ``reference_free``: the problem and the full solution, no reference.

Problems ``--start`` .. ``--start + --problems`` are used (the tests read the first 40 problems
of the file; the default 400..439 are never read by a test). Reports per kind the AUROC of the
reward, correct vs incorrect, with a problem-level percentile bootstrap 95% CI (Efron &
Tibshirani 1993), the mean score of each class, the score mass, abstentions and seconds per read.

    python benchmarks/reward_prompt_auroc.py                      # the 0.5B judge set-up installs
    python benchmarks/reward_prompt_auroc.py --model smollm2-135m --name reward_prompt_auroc_135m

Writes ``docs/figures/<name>.json`` and ``.md`` (default ``reward_prompt_auroc``).
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

KINDS = {
    "answer_match": {"reference_guided": True, "reference_prompt": "answer_match"},
    "anchored": {"reference_guided": True, "reference_prompt": "anchored"},
    "reference_free": {"reference_guided": False},
}


def score_kind(
    rows: list[dict[str, Any]], verifier: Any, kind: str, chunk: int
) -> tuple[list, float]:
    """Dense reward of every row under one prompt kind; ``(scores, seconds)``."""
    from densereward.rewards import RewardConfig, build_reward_funcs

    cfg = RewardConfig(type="dense", track=False, audit=False, **KINDS[kind])
    (reward,), _ = build_reward_funcs(cfg, verifier)
    scores: list[float | None] = []
    t0 = time.perf_counter()
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        scores += reward(
            prompts=[r["problem"] for r in part],
            completions=[r["response"] for r in part],
            answer=[r["reference"] for r in part],
        )
        logging.info("%s: %d/%d (%.0f s)", kind, len(scores), len(rows), time.perf_counter() - t0)
    return scores, time.perf_counter() - t0


def summarise(rows, scores, *, n_resamples: int, seed: int) -> dict[str, Any]:
    """AUROC (correct vs incorrect) with a problem-level bootstrap CI, class means, abstentions."""
    from densereward.metrics import auroc

    pids = sorted({r["problem_id"] for r in rows})
    by_pid = {p: [] for p in pids}
    for r, s in zip(rows, scores, strict=True):
        if s is not None:
            by_pid[r["problem_id"]].append((float(s), float(r["is_correct"])))

    def stat(sample: list[str]) -> float:
        pairs = [x for p in sample for x in by_pid[p]]
        y = np.array([b for _, b in pairs])
        if y.size == 0 or y.min() == y.max():
            return float("nan")
        return float(auroc(np.array([a for a, _ in pairs]), y))

    rng = np.random.default_rng(seed)
    boots = [stat(list(rng.choice(pids, size=len(pids), replace=True))) for _ in range(n_resamples)]
    boots = np.array([b for b in boots if np.isfinite(b)])
    ok = [s for r, s in zip(rows, scores, strict=True) if s is not None and r["is_correct"]]
    bad = [s for r, s in zip(rows, scores, strict=True) if s is not None and not r["is_correct"]]
    return {
        "auroc": stat(pids),
        "auroc_ci": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
        "mean_correct": float(np.mean(ok)) if ok else None,
        "mean_incorrect": float(np.mean(bad)) if bad else None,
        "n_correct": len(ok),
        "n_incorrect": len(bad),
        "n_abstained": sum(s is None for s in scores),
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--responses", default=str(REPO.parent / "shared/data/gsm8k/model_solutions_dev.jsonl")
    )
    ap.add_argument("--start", type=int, default=400, help="first problem (the tests read 0..39)")
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--granularity", type=int, default=20)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="reward_prompt_auroc")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from densereward import Verifier, VerifierConfig
    from densereward.eval_verifier.data import load_responses

    rows = load_responses(args.responses, limit=args.start + args.problems)
    keep = {f"gsm8k-dev-{i}" for i in range(args.start, args.start + args.problems)}
    rows = [r for r in rows if r["problem_id"] in keep]
    cfg = VerifierConfig(
        backend="transformers",
        model=args.model,
        granularity=args.granularity,
        style="direct",
        batch_size=8,
        backend_options={"device": "cpu", "dtype": args.dtype},
    )
    verifier = Verifier(cfg)
    out: dict[str, Any] = {
        "responses": Path(args.responses).name,
        "problems": [args.start, args.start + args.problems],
        "n_rows": len(rows),
        "verifier": f"{args.model} (4-bit Q4_K_M GGUF converted), transformers, G={args.granularity}, "
        f"style direct, dtype {args.dtype}",
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "kinds": {},
    }
    try:
        for kind in args.kinds:
            scores, secs = score_kind(rows, verifier, kind, args.chunk)
            res = summarise(rows, scores, n_resamples=args.bootstrap, seed=args.seed)
            res["seconds_per_read"] = secs / max(1, len(rows))
            res["scores"] = scores
            out["kinds"][kind] = res
            print(
                f"{kind:15s} AUROC {res['auroc']:.3f} [{res['auroc_ci'][0]:.3f}, {res['auroc_ci'][1]:.3f}]  "
                f"correct {res['mean_correct']:.3f} incorrect {res['mean_incorrect']:.3f}  "
                f"abstained {res['n_abstained']}  {res['seconds_per_read']:.2f} s/read",
                flush=True,
            )
    finally:
        verifier.close()
    out["labels"] = [bool(r["is_correct"]) for r in rows]
    out["generators"] = [r["generator"] for r in rows]
    figs = REPO / "docs" / "figures"
    (figs / f"{args.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        f"# Which prompt the judge reads: AUROC on GSM8K model solutions ({args.name})",
        "",
        f"Verifier: {out['verifier']}. Rows: {len(rows)} solutions of problems "
        f"{args.start}..{args.start + args.problems - 1} of `{out['responses']}` (four generators; "
        "no test reads these problems). Each row scored through "
        "`build_reward_funcs(RewardConfig(type='dense', ...), verifier)`. "
        f"95% CIs: problem-level percentile bootstrap ({args.bootstrap} resamples).",
        "",
        "| prompt kind | AUROC correct vs incorrect [95% CI] | mean score correct | mean score incorrect | abstained | s/read |",
        "|---|---|---|---|---|---|",
    ]
    for kind, r in out["kinds"].items():
        lines.append(
            f"| {kind} | {r['auroc']:.3f} [{r['auroc_ci'][0]:.3f}, {r['auroc_ci'][1]:.3f}] | "
            f"{r['mean_correct']:.3f} (n={r['n_correct']}) | {r['mean_incorrect']:.3f} (n={r['n_incorrect']}) | "
            f"{r['n_abstained']} | {r['seconds_per_read']:.2f} |"
        )
    lines += ["", f"Measured on {out['machine']}, {time.strftime('%Y-%m-%d')}.", ""]
    (figs / f"{args.name}.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
