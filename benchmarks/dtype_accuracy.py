"""Accuracy cost of scoring in bf16 instead of fp32: the same rows, the same verifier, two dtypes.

Scores the responses of the first ``--limit`` problems of ``gsm8k/model_solutions_dev.jsonl``
(four generators each) with ``Verifier.score_batch`` (direct style, the transformers backend)
once in float32 and once in bfloat16, and prints:

- per response, the total variation ``TV = 0.5 * sum_g |p_fp32(g) - p_bf16(g)|`` between the two
  renormalised score distributions (``ScoreResult.distribution``), and ``|R_fp32 - R_bf16|``
  between the expected scores: mean, median, 95th percentile, max;
- the AUROC of each dtype's scores against the file's ``is_correct`` labels, and the paired
  difference with a 95 % problem-clustered bootstrap interval
  (:func:`densereward.metrics.bootstrap.bootstrap_ci`);
- the wall time of each pass (responses/s; the machine may be shared, so a rough number --
  ``benchmarks/verifier_throughput.py`` times the two side by side).

``--reference-guided`` shows the verifier each row's reference answer (the ``answer_match``
criterion, as ``densereward eval-verifier --reference-guided``). ``--json PATH`` writes the
numbers.

Run: ``HF_HUB_OFFLINE=1 nice python benchmarks/dtype_accuracy.py --limit 50``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _quantile(xs: list[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(xs, dtype=np.float64), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--responses",
        type=Path,
        default=REPO.parent / "shared" / "data" / "gsm8k" / "model_solutions_dev.jsonl",
    )
    ap.add_argument("--limit", type=int, default=50, help="first N problems (4 responses each)")
    ap.add_argument("--model", default=None, help="HF path; default: embedded SmolLM2-135M")
    ap.add_argument("--reference-guided", action="store_true")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    from densereward.config import VerifierConfig
    from densereward.eval_verifier import load_responses
    from densereward.metrics import auroc
    from densereward.metrics.bootstrap import bootstrap_ci
    from densereward.rewards.math import reference_answer
    from densereward.verifier import Verifier

    torch.set_num_threads(args.threads)
    rows = load_responses(args.responses, limit=args.limit)
    problems = [r["problem"] for r in rows]
    responses = [r["response"] for r in rows]
    refs = [reference_answer(r.get("reference")) for r in rows] if args.reference_guided else None
    labels = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    groups = [r["problem_id"] for r in rows]

    results, seconds = {}, {}
    for dtype in ("float32", "bfloat16"):
        config = VerifierConfig(
            model=args.model,
            batch_size=args.batch_size,
            backend_options={"dtype": dtype, "device": "cpu"},
        )
        with Verifier(config) as v:
            t0 = time.perf_counter()
            results[dtype] = v.score_batch(problems=problems, responses=responses, references=refs)
            seconds[dtype] = time.perf_counter() - t0

    a, b = results["float32"], results["bfloat16"]
    both = [
        i
        for i in range(len(rows))
        if a[i].distribution is not None and b[i].distribution is not None
    ]
    tv = [0.5 * float(np.abs(a[i].distribution - b[i].distribution).sum()) for i in both]
    dr = [abs(a[i].value - b[i].value) for i in both]
    scored = [i for i in range(len(rows)) if a[i].value is not None and b[i].value is not None]
    s32 = np.asarray([a[i].value for i in scored], dtype=np.float64)
    s16 = np.asarray([b[i].value for i in scored], dtype=np.float64)
    y = labels[scored]
    g = [groups[i] for i in scored]
    au32, au16 = auroc(s32, y), auroc(s16, y)
    diff = bootstrap_ci(
        lambda x, z, yy: auroc(z, yy) - auroc(x, yy),
        s32,
        s16,
        y,
        groups=g,
        n_resamples=args.bootstrap,
    )
    n = len(rows)
    out = {
        "rows": n,
        "problems": len(set(groups)),
        "reference_guided": args.reference_guided,
        "compared_distributions": len(both),
        "abstained": {k: sum(r.value is None for r in v) for k, v in results.items()},
        "no_model_call": len(rows) - len(both),
        "tv": {
            "mean": statistics.fmean(tv),
            "median": statistics.median(tv),
            "p95": _quantile(tv, 0.95),
            "max": max(tv),
        },
        "abs_score_diff": {
            "mean": statistics.fmean(dr),
            "median": statistics.median(dr),
            "p95": _quantile(dr, 0.95),
            "max": max(dr),
        },
        "auroc": {"float32": au32, "bfloat16": au16},
        "auroc_diff_bf16_minus_fp32": diff,
        "seconds": seconds,
        "responses_per_s": {k: n / s for k, s in seconds.items()},
    }
    print(
        f"{n} responses of {out['problems']} problems "
        f"({'reference-guided' if args.reference_guided else 'reference-free'}); "
        f"{len(both)} read in both dtypes"
    )
    for key, title in (("tv", "TV(fp32, bf16)"), ("abs_score_diff", "|R_fp32 - R_bf16|")):
        d = out[key]
        print(
            f"{title:18s}: mean {d['mean']:.4f}  median {d['median']:.4f}  "
            f"p95 {d['p95']:.4f}  max {d['max']:.4f}"
        )
    print(
        f"AUROC             : fp32 {au32:.4f}  bf16 {au16:.4f}  bf16 - fp32 {diff['value']:+.4f} "
        f"[{diff['low']:+.4f}, {diff['high']:+.4f}] (95 % problem bootstrap)"
    )
    print(
        "wall time         : "
        + "  ".join(f"{k} {s:.1f} s ({n / s:.2f} responses/s)" for k, s in seconds.items())
    )
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
