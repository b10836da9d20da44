"""Throughput of direct-style verifier scoring vs the fastest raw forward pass on the same tokens.

On the same ``--n`` GSM8K responses (``gsm8k/model_solutions_dev.jsonl``) and the same model
(the embedded SmolLM2-135M unless ``--model``), in the same process, interleaved
(A, B, A, B, ... so that a noisy shared machine hits both alike), prints responses/s for:

(a) ``Verifier.score_batch`` (direct style, the transformers backend, ``verifier.backend_options.dtype``,
    default ``auto``: bf16 where the CPU/GPU supports it);
(b) the raw forward baseline: exactly the token ids the scorer's backend was given (captured
    from one scoring call), run as ``model.model(...)`` (the decoder) followed by ``lm_head`` on
    the last position only, in the same dtype, three ways: length-sorted left-padded batches of
    ``--batch-size``; one sequence at a time (no padding, no mask); and length-sorted batches
    after running the prompts' common token prefix (system prompt, few-shot demonstrations)
    once and copying its key/value cache into each batch. The fastest of the three is the
    baseline. No chat template, no score-token arithmetic, no log-softmax.

It reports the median over ``--repeats`` rounds of each rate and of the per-round ratio
(a)/(b) (target >= 0.8). Optional extras: ``--naive`` (generate the score as text and parse
it; greedy and ``--naive-samples`` sampled), ``--vllm`` (the vLLM offline engine).

Run: ``HF_HUB_OFFLINE=1 nice python benchmarks/verifier_throughput.py --n 20 --repeats 5``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
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


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def raw_forward(model, seqs, batches, pad_id: int) -> None:
    """Last-position logits of each sequence: the decoder, then ``lm_head`` on one position.

    Args:
        model: a causal LM with ``.model`` (decoder) and ``.lm_head``.
        seqs: ``(N,)`` token-id sequences.
        batches: lists of indices into ``seqs``; each list is one left-padded forward pass.
        pad_id: padding token id.
    """
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        for batch in batches:
            width = max(len(seqs[i]) for i in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, i in enumerate(batch):
                ids[row, width - len(seqs[i]) :] = torch.tensor(seqs[i])
                mask[row, width - len(seqs[i]) :] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            if len(batch) == 1:  # no padding: no mask, the fastest attention path
                hidden = model.model(input_ids=ids.to(device), use_cache=False).last_hidden_state
            else:
                hidden = model.model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    position_ids=pos.to(device),
                    use_cache=False,
                ).last_hidden_state
            model.lm_head(hidden[:, -1, :])


def raw_forward_shared_prefix(model, seqs, batches, pad_id: int) -> None:
    """:func:`raw_forward`, with the common token prefix of all ``seqs`` run once.

    Its key/value cache is copied into every batch (the scorer's backend does the same per
    chunk), so each batch runs only the suffixes: the same logits, fewer tokens.
    """
    import copy

    import torch

    device = next(model.parameters()).device
    k = min(len(s) for s in seqs) - 1
    first = seqs[0]
    k = next((j for j in range(k) if any(s[j] != first[j] for s in seqs)), k)
    with torch.inference_mode():
        prefix = torch.tensor([first[:k]], dtype=torch.long, device=device)
        cache = model.model(input_ids=prefix, use_cache=True).past_key_values
        for batch in batches:
            width = max(len(seqs[i]) - k for i in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, i in enumerate(batch):
                ids[row, width - (len(seqs[i]) - k) :] = torch.tensor(seqs[i][k:])
                mask[row, width - (len(seqs[i]) - k) :] = 1
            pos = (k + mask.cumsum(-1) - 1).clamp(min=0)
            kv = copy.deepcopy(cache)
            kv.batch_repeat_interleave(len(batch))
            full_mask = torch.cat([torch.ones((len(batch), k), dtype=torch.long), mask], dim=1)
            hidden = model.model(
                input_ids=ids.to(device),
                attention_mask=full_mask.to(device),
                position_ids=pos.to(device),
                past_key_values=kv,
                use_cache=True,
            ).last_hidden_state
            model.lm_head(hidden[:, -1, :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--model", default=None, help="HF path; default: embedded SmolLM2-135M")
    ap.add_argument("--n", type=int, default=20, help="responses to score")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument(
        "--dtype", default="auto", help="verifier.backend_options.dtype (auto|float32|bfloat16)"
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: robust on a busy box)"
    )
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (median reported)")
    ap.add_argument(
        "--compare-dtype",
        default=None,
        help="also time Verifier.score_batch in this dtype, interleaved (e.g. bfloat16)",
    )
    ap.add_argument("--naive", action="store_true", help="also time generating the score as text")
    ap.add_argument("--naive-tokens", type=int, default=8)
    ap.add_argument("--naive-samples", type=int, default=8)
    ap.add_argument("--vllm", action="store_true", help="also time the vLLM offline engine")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from densereward.backends.hf import TransformersBackend
    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    torch.set_num_threads(args.threads)
    problems, responses = _load(args.data_dir, args.n)
    n = len(responses)
    config = VerifierConfig(
        model=args.model,
        batch_size=args.batch_size,
        backend_options={"dtype": args.dtype, "device": "cpu"},
    )
    backend = TransformersBackend(config)
    verifier = Verifier(config, backend=backend)

    # the exact prompts the scorer hands its backend (one warm-up scoring call)
    seen: list = []
    inner = backend.next_token_logprobs

    def spy(prompts, candidates):
        seen.extend(prompts)
        return inner(prompts, candidates)

    backend.next_token_logprobs = spy
    verifier.score_batch(problems=problems, responses=responses)
    backend.next_token_logprobs = inner
    seqs = [backend.render(p) for p in seen]
    n_tokens = sum(len(s) for s in seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    bs = max(1, args.batch_size)
    sorted_batches = [order[i : i + bs] for i in range(0, len(order), bs)]
    single_batches = [[i] for i in order]
    print(
        f"{n} responses, {len(seqs)} prompts, {n_tokens} prompt tokens (mean "
        f"{n_tokens / len(seqs):.0f}), batch_size={bs}, dtype={backend.dtype}, "
        f"threads={args.threads}, torch cpu capability {torch.backends.cpu.get_cpu_capability()}"
    )
    model, pad = backend.model, backend.pad_id
    raw_forward(model, seqs, single_batches[:2], pad)  # warm-up

    runs = {
        "scorer": lambda: verifier.score_batch(problems=problems, responses=responses),
        "raw, sorted batches": lambda: raw_forward(model, seqs, sorted_batches, pad),
        "raw, one at a time": lambda: raw_forward(model, seqs, single_batches, pad),
        "raw, shared prefix once": lambda: raw_forward_shared_prefix(
            model, seqs, sorted_batches, pad
        ),
    }
    scorers = ["scorer"]
    other = f"scorer, {args.compare_dtype}"
    if args.compare_dtype:
        options2 = {**config.backend_options, "dtype": args.compare_dtype}
        config2 = dataclasses.replace(config, backend_options=options2)
        verifier2 = Verifier(config2, backend=TransformersBackend(config2))
        verifier2.score_batch(problems=problems, responses=responses)  # warm-up
        runs[other] = lambda: verifier2.score_batch(problems=problems, responses=responses)
        scorers.append(other)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(_seconds(fn))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = min((k for k in runs if k not in scorers), key=lambda k: med[k])
    for k in runs:
        rates = ", ".join(f"{n / t:.2f}" for t in times[k])
        print(f"{k:22s}: {n / med[k]:6.2f} responses/s median ({med[k]:.2f} s)  [{rates}]")
    ratios = [n / s / (n / b) for s, b in zip(times["scorer"], times[base], strict=True)]
    print(f"baseline = fastest raw forward: {base}")
    print(
        f"scorer/baseline throughput ratio: median {statistics.median(ratios):.2f} "
        f"(per round {', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.8)"
    )
    if args.compare_dtype:
        speedups = [a / b for a, b in zip(times[other], times["scorer"], strict=True)]
        print(
            f"scorer throughput, {backend.dtype} / {args.compare_dtype}: median "
            f"{statistics.median(speedups):.2f}x (per round {', '.join(f'{x:.2f}' for x in speedups)})"
        )
        verifier2.close()

    if args.naive:
        letter = re.compile(r"\s*([A-T])\b")
        tokens = verifier.scale.tokens

        def naive():
            texts = backend.generate(seen, max_new_tokens=args.naive_tokens, temperature=0.0)
            return [tokens.index(m.group(1)) if (m := letter.match(t)) else None for t in texts]

        t0 = time.perf_counter()
        parsed = naive()
        t_naive = time.perf_counter() - t0
        t_sampled = _seconds(
            lambda: [
                backend.generate(seen, max_new_tokens=args.naive_tokens, temperature=1.0, seed=k)
                for k in range(args.naive_samples)
            ]
        )
        print(
            f"naive: generate {args.naive_tokens} tokens + parse: {n / t_naive:.2f} responses/s, "
            f"{sum(x is not None for x in parsed)}/{n} parsed; speedup of scoring "
            f"{t_naive / med['scorer']:.1f}x"
        )
        print(
            f"naive distribution ({args.naive_samples} samples): {n / t_sampled:.2f} responses/s; "
            f"speedup of scoring {t_sampled / med['scorer']:.1f}x"
        )
    backend.close()

    if args.vllm:
        try:
            from densereward.backends.vllm_offline import VLLMBackend

            vb = VLLMBackend(
                VerifierConfig(
                    backend="vllm",
                    model=args.model,
                    backend_options={
                        "dtype": args.dtype,
                        "gpu_memory_utilization": 0.15,
                        "max_model_len": 2048,
                        "kv_cache_bytes": 2**28,
                    },
                )
            )
        except Exception as e:  # vLLM missing or engine failed: report and carry on
            print(f"vLLM offline: skipped ({type(e).__name__}: {e})")
        else:
            candidates = list(verifier.candidates)
            vb.next_token_logprobs(seen[:2], candidates)  # warm-up
            t_vllm = statistics.median(
                _seconds(lambda: vb.next_token_logprobs(seen, candidates))
                for _ in range(args.repeats)
            )
            print(f"vLLM offline engine: {n / t_vllm:.2f} responses/s")
            vb.close()


if __name__ == "__main__":
    main()
