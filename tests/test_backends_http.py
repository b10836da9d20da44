"""The OpenAI-compatible HTTP backends against a real vLLM server on loopback (CPU, float32).

One server per test session (:func:`servers.vllm_server_fixture`, ~100 s to start on 2 cores)
serves the embedded SmolLM2-135M-Instruct; its score-token distributions are compared
with the transformers backend's exact full-vocabulary log-probabilities.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from servers import VLLMServer, vllm_server_fixture  # noqa: F401  (the `vllm_server` session fixture)

from densereward.backends.base import ChatPrompt, TokenLogprobs
from densereward.backends.openai_http import OpenAIBackend
from densereward.backends.sampled import SampledBackend
from densereward.config import VerifierConfig
from densereward.scale import ScoreScale

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SCALE = ScoreScale.letters(20)
CANDIDATES = list(SCALE.all_spellings())  # "A", " A", ..., "T", " T"
CASES = [
    ("What is 17 * 3?", "17 * 3 = 51. The answer is 51."),
    ("What is 17 * 3?", "17 * 3 = 41. The answer is 41."),
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "In May she sold 48 / 2 = 24 clips. Altogether 48 + 24 = 72 clips. The answer is 72.",
    ),
    ("Solve for x: 2x + 6 = 10.", "Subtract 6: 2x = 4, so x = 3."),
]


def grading_prompts() -> list[ChatPrompt]:
    """Realistic pointwise grading prompts (the library's own template when present)."""
    try:
        from densereward.prompts import pointwise_prompt
    except ImportError:  # prompts.py not there yet: an equivalent hand-written template
        return [
            ChatPrompt(
                messages=(
                    {
                        "role": "system",
                        "content": f"You are a strict grader. Grade with one letter from {SCALE.describe()}.",
                    },
                    {
                        "role": "user",
                        "content": f"Problem:\n{p}\n\n<response>\n{r}\n</response>\n\nIs the response correct?",
                    },
                ),
                prefill="<score>",
            )
            for p, r in CASES
        ]
    return [pointwise_prompt(SCALE, p, r, "The final answer is correct.") for p, r in CASES]


def level_distribution(out: TokenLogprobs) -> np.ndarray:
    """``(G,)`` distribution over levels: spellings summed, then renormalised over what was seen."""
    p = np.array(
        [sum(math.exp(out.logprobs[s]) for s in sp if s in out.logprobs) for sp in SCALE.spellings]
    )
    return p / p.sum()


def expected_score(dist: np.ndarray) -> float:
    """Normalised expected score in [0, 1] (Kwok et al. 2026, eq. 1)."""
    return float(dist @ SCALE.phi) / (SCALE.granularity - 1)


def tv(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p - q).sum())


@pytest.fixture(scope="module")
def hf_backend(default_model_dir):
    """The transformers backend on the same model in float32 (``None`` if hf.py is missing)."""
    try:
        from densereward.backends.hf import TransformersBackend
    except ImportError:
        yield None
        return
    backend = TransformersBackend(
        VerifierConfig(
            model=str(default_model_dir),
            batch_size=1,
            backend_options={"dtype": "float32", "device": "cpu"},
        )
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def reference(default_model_dir, hf_backend) -> list[TokenLogprobs]:
    """Exact log-probabilities of the 40 spellings from the transformers backend (float32)."""
    prompts = grading_prompts()
    if hf_backend is None:  # hf.py not there: the same computation with transformers directly
        return _direct_reference(default_model_dir, prompts)
    return hf_backend.next_token_logprobs(prompts, CANDIDATES)


def _direct_reference(model_dir, prompts) -> list[TokenLogprobs]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = {c: tok.encode(c, add_special_tokens=False)[0] for c in CANDIDATES}
    outs = []
    for p in prompts:
        msgs = [dict(m) for m in p.messages] + [{"role": "assistant", "content": p.prefill}]
        text = tok.apply_chat_template(msgs, tokenize=False, continue_final_message=True)
        x = torch.tensor([tok.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            lp = torch.log_softmax(model(x).logits[0, -1].double(), -1)
        outs.append(TokenLogprobs({c: float(lp[i]) for c, i in ids.items()}))
    return outs


def _config(server: VLLMServer, **kw) -> VerifierConfig:
    options = {"base_url": server.base_url, "timeout_s": 120.0, **kw.pop("backend_options", {})}
    return VerifierConfig(backend=kw.pop("backend", "openai"), backend_options=options, **kw)


def test_server_start_up(vllm_server: VLLMServer):
    print(
        f"\nvLLM server start-up: {vllm_server.startup_s:.1f} s, flags: {' '.join(vllm_server.flags)}"
    )
    with OpenAIBackend(_config(vllm_server)) as b:
        assert b.model_id == vllm_server.model
        assert b.server_extensions  # vLLM lists owned_by="vllm"


def test_restricted_distribution_matches_transformers(vllm_server, reference):
    """All 40 spellings via allowed_token_ids: TV <= 0.01 and |dE| <= 0.01 per prompt."""
    with OpenAIBackend(_config(vllm_server), restrict_to_candidates=True, top_logprobs=40) as b:
        outs = b.next_token_logprobs(grading_prompts(), CANDIDATES)
        body_ids = b._token_ids
    assert sorted(body_ids) == sorted(CANDIDATES) and len(set(body_ids.values())) == 40
    tvs, des = [], []
    for out, ref in zip(outs, reference, strict=True):
        assert out.restricted and out.exact and set(out.logprobs) == set(CANDIDATES)
        assert sum(math.exp(v) for v in out.logprobs.values()) == pytest.approx(1.0, abs=1e-4)
        p, q = level_distribution(out), level_distribution(ref)
        tvs.append(tv(p, q))
        des.append(abs(expected_score(p) - expected_score(q)))
    print(
        f"\nrestricted (40/40 spellings): TV={np.round(tvs, 5).tolist()} |dE|={np.round(des, 5).tolist()}"
    )
    assert max(tvs) <= 0.01 and max(des) <= 0.01


@pytest.mark.parametrize("k", [20, 40])
def test_top_k_logprobs_match_transformers(vllm_server, reference, k):
    """Unrestricted top-k: each reported spelling's log-prob equals the exact one; partial => exact=False."""
    with OpenAIBackend(_config(vllm_server), top_logprobs=k) as b:
        prompts = grading_prompts()
        outs = b.next_token_logprobs(prompts, CANDIDATES)
        usage = b.usage
    tvs_seen, tvs_full, masses = [], [], []
    for out, ref in zip(outs, reference, strict=True):
        assert not out.restricted
        assert 0 < len(out.logprobs) <= k
        assert out.exact == (len(out.logprobs) == len(CANDIDATES))
        for c, lp in out.logprobs.items():
            assert lp == pytest.approx(ref.logprobs[c], abs=2e-3), c
        seen = TokenLogprobs({c: ref.logprobs[c] for c in out.logprobs})
        tvs_seen.append(tv(level_distribution(out), level_distribution(seen)))
        tvs_full.append(tv(level_distribution(out), level_distribution(ref)))
        masses.append(
            sum(math.exp(v) for v in out.logprobs.values())
            / sum(math.exp(v) for v in ref.logprobs.values())
        )
    print(
        f"\ntop-{k}: spellings seen={[len(o.logprobs) for o in outs]} mass seen/true={np.round(masses, 4).tolist()} "
        f"TV(same support)={np.round(tvs_seen, 5).tolist()} TV(vs full 40)={np.round(tvs_full, 4).tolist()}"
    )
    assert max(tvs_seen) <= 0.01
    assert usage.n_prompts == len(prompts) and usage.n_failures == 0
    assert usage.n_completion_tokens == len(prompts)


def test_prompt_tokens_and_tokenizer_match_transformers(vllm_server, default_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    prompts = grading_prompts()[:2]
    with OpenAIBackend(_config(vllm_server)) as b:
        for text in ["A", " T", "<score>", "The answer is 51."]:
            assert b.tokenize(text) == tok.encode(text, add_special_tokens=False)
        b.next_token_logprobs(prompts, CANDIDATES)
        n_prompt_tokens = b.usage.n_prompt_tokens
    # the server rendered the prefill as a continued assistant turn: same ids as transformers
    expected = 0
    for p in prompts:
        msgs = [dict(m) for m in p.messages] + [{"role": "assistant", "content": p.prefill}]
        text = tok.apply_chat_template(msgs, tokenize=False, continue_final_message=True)
        assert text.endswith("<score>")
        expected += len(tok.encode(text, add_special_tokens=False))
    assert n_prompt_tokens == expected


def test_generate_and_async(vllm_server):
    import asyncio

    prompts = grading_prompts()[:2]
    with OpenAIBackend(_config(vllm_server)) as b:
        greedy = b.generate(prompts, max_new_tokens=8, temperature=0.0)
        again = asyncio.run(b.agenerate(prompts, max_new_tokens=8, temperature=0.0))
        seeded = [
            b.generate(prompts[:1], max_new_tokens=8, temperature=1.0, seed=7)[0] for _ in range(2)
        ]
        outs = asyncio.run(b.anext_token_logprobs(prompts, CANDIDATES))
    assert all(isinstance(t, str) and t for t in greedy)
    assert greedy == again  # greedy decoding is deterministic
    assert seeded[0] == seeded[1]  # per-request seeds are honoured
    assert len(outs) == 2 and all(o.logprobs for o in outs)


def test_sampled_backend_on_real_server(vllm_server):
    prompts = grading_prompts()[:2]
    cfg = _config(vllm_server, backend="sampled", seed=11, backend_options={"n_samples": 8})
    t0 = time.monotonic()
    with SampledBackend(cfg) as b:
        first = b.next_token_logprobs(prompts, CANDIDATES)
        second = b.next_token_logprobs(prompts, CANDIDATES)
    elapsed = time.monotonic() - t0
    for out, rep in zip(first, second, strict=True):
        assert out.sampled and out.n_samples == 8 and not out.exact
        counts = [round(math.exp(v) * 8) for v in out.logprobs.values() if v > -math.inf]
        assert all(
            math.exp(v) * 8 == pytest.approx(round(math.exp(v) * 8)) for v in out.logprobs.values()
        )
        assert sum(counts) <= 8
        assert out.logprobs == rep.logprobs  # same seed, same samples
    print(
        f"\nsampled N=8: parsed {[sum(math.exp(v) for v in o.logprobs.values()) for o in first]} of the mass; {elapsed:.1f} s"
    )


@pytest.fixture(scope="module")
def engine_reference(hf_backend):
    """Rewards of the engine on the transformers backend for CASES (computed once)."""
    from densereward import verifier

    if hf_backend is None:
        pytest.skip("densereward.backends.hf is not available")
    v_local = verifier.Verifier(VerifierConfig(), backend=hf_backend)  # not closed: shared backend
    return v_local.score_batch(problems=[p for p, _ in CASES], responses=[r for _, r in CASES])


@pytest.mark.parametrize("restrict", [True, False], ids=["restricted", "top20"])
def test_verifier_engine_scores_agree_with_transformers(vllm_server, engine_reference, restrict):
    """End to end through the engine: the same rewards from the HTTP and the local backend."""
    from densereward.verifier import Verifier

    cfg = _config(vllm_server)
    http = OpenAIBackend(cfg, restrict_to_candidates=restrict, top_logprobs=40 if restrict else 20)
    with Verifier(cfg, backend=http) as v_http:
        got = v_http.score_batch(problems=[p for p, _ in CASES], responses=[r for _, r in CASES])
    diffs = [abs(a.value - b.value) for a, b in zip(got, engine_reference, strict=True)]
    print(
        f"\nengine rewards ({'restricted' if restrict else 'top-20'}): "
        f"http={[round(r.value, 4) for r in got]} local={[round(r.value, 4) for r in engine_reference]} "
        f"|d value|={np.round(diffs, 5).tolist()}"
    )
    assert max(diffs) <= (0.01 if restrict else 0.02)
    if restrict:
        assert all(r.mass is None for r in got)  # the pre-restriction mass is unknown
    else:
        assert all(r.mass is not None and 0.0 < r.mass <= 1.0 for r in got)
