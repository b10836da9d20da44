"""Where the score is read, before and after the fix: the read after the prefill's text vs the
read at the verifier tokenizer's own boundary (issue 26, :mod:`densereward.verifier.boundary`).

For each model, scores the responses of the first ``--limit`` problems of
``gsm8k/model_solutions_dev.jsonl`` (four generators each; reference-guided, the
``answer_match`` prompt, G = 20, the transformers backend in float32) twice with one loaded
model:

- ``prefill``: the read before the fix, the next token after the text ``<score>`` whatever the
  tokenizer does with it (for Qwen tokenizers, after a lone ``>``: a boundary the model never
  produces), summing the single-token spellings ``A`` and `` A`` as the engine used to;
- ``boundary``: the engine's read plan (for Qwen: ``>A`` ... at the boundary before ``>``, and
  ``P(">") * P("Q" | ">")`` for the letters with no merged token).

Both reads run with ``min_mass = 0`` (nothing floored), and the table derives what the default
floor 0.5 would abstain on. It prints, per model and read: the mean (min) score-token mass,
the fraction of reads with mass >= 0.9, reads below ``min_mass`` 0.5, the AUROC of the
scores against the ``is_correct`` labels unfloored and floored (abstained reads left out),
each with a 95 % problem-clustered bootstrap interval, and seconds per read. Responses with no
final answer are scored 0 without a model call under ``answer_match`` and are counted apart.

Run: ``HF_HUB_OFFLINE=1 nice python benchmarks/read_boundary.py --models smollm2-135m
qwen2.5-coder-0.5b --limit 25 --json docs/figures/read_boundary.json``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def prefill_end_plan(verifier):
    """The pre-fix read: the token right after the prefill's text, single-token spellings."""
    from densereward.verifier.boundary import LevelRead, ReadPlan

    tok = verifier.backend.tokenize
    kept = tuple(
        tuple(s for s in forms if len(tok(s) or []) == 1) for forms in verifier.scale.spellings
    )
    reads = {s: LevelRead(s, s) for forms in kept for s in forms}
    return ReadPlan(verifier.read_plan.prefill, "", kept, reads, tokenization="(pre-fix read)")


def measure(verifier, problems, responses, refs, labels, groups, n_boot):
    """Scores and the table row of one read plan."""
    import numpy as np

    from densereward.metrics import auroc
    from densereward.metrics.bootstrap import bootstrap_ci

    t0 = time.perf_counter()
    res = verifier.score_batch(problems=problems, responses=responses, references=refs)
    seconds = time.perf_counter() - t0
    read = [i for i, r in enumerate(res) if r.mass is not None]
    masses = np.asarray([res[i].mass for i in read], dtype=np.float64)
    scores = np.asarray([r.value if r.value is not None else np.nan for r in res])
    y = np.asarray(labels, dtype=np.float64)

    def au(idx):
        idx = [i for i in idx if not np.isnan(scores[i])]
        if len({labels[i] for i in idx}) < 2:
            return {"value": None, "low": None, "high": None, "n": len(idx)}
        ci = bootstrap_ci(
            lambda s, yy: auroc(s, yy),
            scores[idx],
            y[idx],
            groups=[groups[i] for i in idx],
            n_resamples=n_boot,
        )
        return {**ci, "n": len(idx)}

    everyone = list(range(len(res)))
    floored = [i for i in everyone if res[i].mass is None or res[i].mass >= 0.5]
    mass_ci = bootstrap_ci(
        lambda m: float(np.mean(m)), masses, groups=[groups[i] for i in read], n_resamples=n_boot
    )
    return {
        "responses": len(res),
        "model_reads": len(read),
        "no_final_answer": sum(r.reason == "no final answer" for r in res),
        "mass_mean": float(masses.mean()) if len(read) else None,
        "mass_mean_ci": mass_ci,
        "mass_min": float(masses.min()) if len(read) else None,
        "frac_mass_ge_0_9": float((masses >= 0.9).mean()) if len(read) else None,
        "below_min_mass_0_5": int((masses < 0.5).sum()),
        "auroc_unfloored": au(everyone),
        "auroc_floored": au(floored),
        "score_correct_mean": float(np.nanmean(scores[y == 1])),
        "score_wrong_mean": float(np.nanmean(scores[y == 0])),
        "seconds_per_read": seconds / max(1, len(read)),
    }


def _fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--responses",
        type=Path,
        default=REPO.parent / "shared" / "data" / "gsm8k" / "model_solutions_dev.jsonl",
    )
    ap.add_argument(
        "--models",
        nargs="*",
        default=["smollm2-135m", "qwen2.5-coder-0.5b"],
        help="offline names or paths; none (--models) only prints the table of --json",
    )
    ap.add_argument("--limit", type=int, default=25, help="first N problems (4 responses each)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None, help="write (merge) the numbers here")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from densereward.config import VerifierConfig
    from densereward.eval_verifier import load_responses
    from densereward.rewards.math import reference_answer
    from densereward.verifier import Verifier

    rows = load_responses(args.responses, limit=args.limit)
    problems = [r["problem"] for r in rows]
    responses = [r["response"] for r in rows]
    refs = [reference_answer(r.get("reference")) for r in rows]
    labels = [bool(r["is_correct"]) for r in rows]
    groups = [r["problem_id"] for r in rows]
    out = json.loads(args.json.read_text()) if args.json and args.json.is_file() else {}
    for model in args.models:
        config = VerifierConfig(
            model=model,
            granularity=20,
            batch_size=args.batch_size,
            min_mass=0.0,
            backend_options={"dtype": "float32", "device": "cpu"},
        )
        with Verifier(config) as v:
            boundary_plan = v.read_plan
            rows_out = {"plan": boundary_plan.describe()}
            for name, plan in (("prefill", prefill_end_plan(v)), ("boundary", boundary_plan)):
                v.read_plan = v._driver.plan = plan
                rows_out[name] = measure(
                    v, problems, responses, refs, labels, groups, args.bootstrap
                )
                print(model, name, json.dumps(rows_out[name]), flush=True)
        out[model] = rows_out
        if args.json is not None:
            tmp = args.json.with_suffix(".tmp")
            tmp.write_text(json.dumps(out, indent=2) + "\n")
            tmp.replace(args.json)

    print(
        "\n| verifier | read | mean mass (min) [95 % CI of mean] | reads with mass >= 0.9 "
        "| reads below min_mass 0.5 | AUROC unfloored [CI] | AUROC floored [CI] | s/read |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model, r in out.items():
        for name in ("prefill", "boundary"):
            m = r[name]
            ci, au, af = m["mass_mean_ci"], m["auroc_unfloored"], m["auroc_floored"]
            floored = (
                f"{_fmt(af['value'])} [{_fmt(af['low'])}, {_fmt(af['high'])}] (n={af['n']})"
                if af["value"] is not None
                else f"none: {m['below_min_mass_0_5']} of {m['model_reads']} reads abstain"
            )
            read = "after `<score>` (before)" if name == "prefill" else "at the boundary (after)"
            print(
                f"| {model}, {m['model_reads']} reads | {read} | "
                f"{_fmt(m['mass_mean'])} ({_fmt(m['mass_min'])}) "
                f"[{_fmt(ci['low'])}, {_fmt(ci['high'])}] | "
                f"{_fmt(100 * m['frac_mass_ge_0_9'], 0)} % | {m['below_min_mass_0_5']} | "
                f"{_fmt(au['value'])} [{_fmt(au['low'])}, {_fmt(au['high'])}] | {floored} | "
                f"{m['seconds_per_read']:.2f} |"
            )


if __name__ == "__main__":
    main()
