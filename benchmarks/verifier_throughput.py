"""Throughput of direct-style verifier scoring vs a raw forward pass and vs generating the score.

On the same ~20 GSM8K responses (``gsm8k/model_solutions_dev.jsonl``) and the same model
(the embedded SmolLM2-135M unless ``--model``), prints responses/s for:

(a) direct-style scoring with the transformers backend (through
    ``densereward.verifier.Verifier`` when it exists, else the backend with the same
    pointwise prompt), with and without the shared-prefix KV cache;
(b) a raw batched ``model(...)`` forward pass over the same token ids (same batches);
(c) the naive alternative: generate the score as text (``--naive-tokens`` new tokens,
    greedy) and parse the letter;
(d) the vLLM offline engine (skipped with ``--no-vllm`` or when vLLM is missing),

and the ratios: scoring overhead vs raw forward (target <= 20 %), speedup vs naive
(target >= 3x).

Run: ``HF_HUB_OFFLINE=1 nice python benchmarks/verifier_throughput.py --n 20``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load(data_dir: Path, n: int) -> tuple[list[str], list[str]]:
    """``n`` (problem, response) pairs: first problems, alternating two generators."""
    problems, responses = [], []
    with open(data_dir / "gsm8k" / "model_solutions_dev.jsonl") as f:
        for line in f:
            row = json.loads(line)
            for gen in ("6b_finetuning", "175b_verification"):
                problems.append(row["question"])
                responses.append(row[gen]["solution"])
            if len(problems) >= n:
                break
    return problems[:n], responses[:n]


def _timed(fn, repeats: int = 1) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model", default=None, help="HF path; default: embedded SmolLM2-135M")
    ap.add_argument("--n", type=int, default=20, help="responses to score")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--naive-tokens", type=int, default=8)
    ap.add_argument(
        "--naive-samples",
        type=int,
        default=8,
        help="(c2) samples per response to estimate the score distribution by sampling",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="timing repeats (best of)")
    ap.add_argument("--no-vllm", action="store_true")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from densereward.backends.hf import TransformersBackend
    from densereward.config import VerifierConfig
    from densereward.prompts import DEFAULT_CRITERIA, pointwise_prompt
    from densereward.scale import ScoreScale

    torch.set_num_threads(args.threads)
    problems, responses = _load(args.data_dir, args.n)
    n = len(responses)
    scale = ScoreScale.letters(20)
    candidates = list(scale.all_spellings())
    criterion = next(iter(DEFAULT_CRITERIA.values()))
    prompts = [
        pointwise_prompt(scale, p, r, criterion) for p, r in zip(problems, responses, strict=True)
    ]
    config = VerifierConfig(
        model=args.model, batch_size=args.batch_size, dtype="float32", device="cpu"
    )
    backend = TransformersBackend(config)
    seqs = [backend.render(p) for p in prompts]
    n_tokens = sum(len(s) for s in seqs)
    print(
        f"{n} responses, {n_tokens} prompt tokens (mean {n_tokens / n:.0f}), batch_size={args.batch_size}, "
        f"threads={args.threads}"
    )
    backend.next_token_logprobs(prompts[:2], candidates)  # warm-up

    # (a) direct-style scoring
    try:
        from densereward.verifier import Verifier

        verifier = Verifier(config, backend=backend)
        how = "Verifier.score_batch"

        def score():
            return verifier.score_batch(problems=problems, responses=responses)
    except ImportError:
        how = "TransformersBackend.next_token_logprobs (verifier.py not present)"

        def score():
            return backend.next_token_logprobs(prompts, candidates)

    t_score, _ = _timed(score, args.repeats)
    backend.share_prefix = False
    t_score_noprefix, _ = _timed(
        lambda: backend.next_token_logprobs(prompts, candidates), args.repeats
    )
    backend.share_prefix = True
    t_backend, _ = _timed(lambda: backend.next_token_logprobs(prompts, candidates), args.repeats)

    # (b) raw batched forward pass, same token ids, same (length-sorted) batches, full logits
    model, pad = backend.model, backend.pad_id
    chunks = backend._chunks([len(s) for s in seqs])

    def raw_forward():
        with torch.inference_mode():
            for chunk in chunks:
                width = max(len(seqs[i]) for i in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for row, i in enumerate(chunk):
                    ids[row, width - len(seqs[i]) :] = torch.tensor(seqs[i])
                    mask[row, width - len(seqs[i]) :] = 1
                model(input_ids=ids, attention_mask=mask, use_cache=False)

    t_raw, _ = _timed(raw_forward, args.repeats)

    # (c) naive: generate the score as text and parse it
    letter = re.compile(r"\s*([A-T])\b")

    def naive():
        texts = backend.generate(prompts, max_new_tokens=args.naive_tokens, temperature=0.0)
        return [scale.tokens.index(m.group(1)) if (m := letter.match(t)) else None for t in texts]

    t_naive, parsed = _timed(naive, args.repeats)
    n_parsed = sum(x is not None for x in parsed)

    # (c2) naive distribution: what direct scoring reads in one pass, estimated from samples
    def naive_sampled():
        return [
            backend.generate(prompts, max_new_tokens=args.naive_tokens, temperature=1.0, seed=k)
            for k in range(args.naive_samples)
        ]

    t_sampled, _ = _timed(naive_sampled, 1) if args.naive_samples > 0 else (float("nan"), None)

    print(f"(a) direct scoring [{how}]: {n / t_score:7.2f} responses/s ({t_score:.2f} s)")
    print(
        f"    backend, shared-prefix KV cache on : {n / t_backend:7.2f} responses/s ({t_backend:.2f} s)"
    )
    print(
        f"    backend, shared-prefix KV cache off: {n / t_score_noprefix:7.2f} responses/s ({t_score_noprefix:.2f} s)"
    )
    print(f"(b) raw batched forward              : {n / t_raw:7.2f} responses/s ({t_raw:.2f} s)")
    print(
        f"(c) naive generate {args.naive_tokens} tokens + parse   : {n / t_naive:7.2f} responses/s ({t_naive:.2f} s), "
        f"{n_parsed}/{n} parsed"
    )
    print(
        f"(c2) naive distribution, {args.naive_samples} samples x {args.naive_tokens} tokens: "
        f"{n / t_sampled:7.2f} responses/s ({t_sampled:.2f} s)"
    )
    backend.close()

    if not args.no_vllm:
        try:
            from densereward.backends.vllm_offline import VLLMBackend

            vb = VLLMBackend(
                VerifierConfig(
                    backend="vllm", model=args.model, dtype="float32", gpu_memory_utilization=0.15
                ),
                max_model_len=2048,
                kv_cache_bytes=2**28,
            )
        except Exception as e:  # vLLM missing or engine failed: report and carry on
            print(f"(d) vLLM offline: skipped ({type(e).__name__}: {e})")
        else:
            vb.next_token_logprobs(prompts[:2], candidates)  # warm-up
            t_vllm, _ = _timed(lambda: vb.next_token_logprobs(prompts, candidates), args.repeats)
            print(
                f"(d) vLLM offline engine              : {n / t_vllm:7.2f} responses/s ({t_vllm:.2f} s)"
            )
            vb.close()

    overhead = t_score / t_raw - 1.0
    speedup = t_naive / t_score
    print(
        f"scoring overhead vs raw forward: {100 * overhead:+.1f} % (target <= +20 %; negative = faster, "
        "thanks to logits_to_keep=1 and the shared-prefix cache)"
    )
    print(
        f"speedup vs naive generation    : {speedup:.2f}x (target >= 3x; one greedy grade, no distribution)"
    )
    print(
        f"speedup vs sampled distribution: {t_sampled / t_score:.2f}x "
        f"({args.naive_samples} samples give a coarse estimate of what one direct pass reads exactly)"
    )
    print(f"shared-prefix cache speedup    : {t_score_noprefix / t_backend:.2f}x")


if __name__ == "__main__":
    main()
