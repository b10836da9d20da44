"""Fault handling of the HTTP backends against a real, scripted loopback server.

Every test talks HTTP to :class:`tests.servers.MisbehavingServer` on 127.0.0.1; nothing is
mocked. Backoff is made fast with ``retry_base_s``; timings are asserted only as lower
bounds (or loose upper bounds) so a loaded machine does not make them flaky.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time

import pytest
from servers import Fault, MisbehavingServer, free_port

from densereward.backends.base import ChatPrompt, TokenLogprobs
from densereward.backends.openai_http import OpenAIBackend
from densereward.backends.sampled import SampledBackend, parse_score_token
from densereward.config import VerifierConfig
from densereward.errors import BackendError, BackendUnavailableError, ConfigError

CANDIDATES = [c for L in "ABCDEFGHIJKLMNOPQRST" for c in (L, " " + L)]
PROMPT = ChatPrompt(
    messages=(
        {"role": "system", "content": "You grade answers."},
        {"role": "user", "content": "Problem: 2+2. Answer: 4. Grade A (worst) to T (best)."},
    ),
    prefill="<score>",
)
PLANTED_KEY = "sk-planted-4f9c2b7e1d0a-do-not-leak"


def make_config(base_url: str, *, backend_options=None, **overrides) -> VerifierConfig:
    """An ``openai`` config at ``base_url``: 2 retries, 2 s timeout, the test key variable;
    ``backend_options`` update those, ``overrides`` set shared fields."""
    options = {
        "base_url": base_url,
        "max_retries": 2,
        "timeout_s": 2.0,
        "api_key_env": "DENSEREWARD_TEST_KEY",
        **(backend_options or {}),
    }
    return VerifierConfig(**{"backend": "openai", **overrides}, backend_options=options)


@pytest.fixture
def backend(server):
    b = OpenAIBackend(make_config(server.base_url), retry_base_s=0.01, retry_max_s=2.0)
    yield b
    b.close()


# ------------------------------------------------------------------ start-up


def test_unreachable_server_fails_fast_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=url.replace(".", r"\.")):
        OpenAIBackend(make_config(url))
    assert time.monotonic() - t0 < 5.0


def test_silent_server_fails_after_the_health_timeout():
    # A socket that accepts connections (kernel backlog) but never answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="not reachable") as info:
            OpenAIBackend(make_config(url), health_timeout_s=1.0)
        elapsed = time.monotonic() - t0
    assert url in str(info.value)
    assert 0.9 <= elapsed < 5.0


def test_health_check_and_model_discovery(server, backend):
    assert backend.model_id == "misbehaving-model"
    assert backend.server_extensions  # owned_by="vllm"
    assert server.requests[0]["method"] == "GET" and server.requests[0]["path"] == "/v1/models"


def test_constructor_rejects_bad_arguments(server):
    with pytest.raises(ConfigError, match="top_logprobs"):
        OpenAIBackend(make_config(server.base_url), top_logprobs=0)
    with pytest.raises(ConfigError, match="max_concurrency"):
        OpenAIBackend(make_config(server.base_url, backend_options={"max_concurrency": 0}))
    with pytest.raises(ConfigError, match="n_samples"):
        SampledBackend(
            make_config(server.base_url, backend="sampled", backend_options={"n_samples": 0})
        )


# ------------------------------------------------------------------ request shape


def test_request_continues_the_prefill_with_vllm_extensions(server, backend):
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    body = server.chat_requests()[-1]["body"]
    assert body["messages"][-1] == {"role": "assistant", "content": "<score>"}
    assert body["messages"][:-1] == [dict(m) for m in PROMPT.messages]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["max_tokens"] == 1 and body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["temperature"] == 0.0 and body["model"] == "misbehaving-model"
    assert "allowed_token_ids" not in body
    assert out.logprobs == {"T": -0.5, "S": -1.5, " T": -3.0}
    assert not out.exact and not out.sampled and not out.restricted
    assert backend.usage.n_prompts == 1 and backend.usage.n_calls == 1
    assert backend.usage.n_prompt_tokens == 10 and backend.usage.n_completion_tokens == 1


def test_no_extension_parameters_for_plain_openai_servers():
    with MisbehavingServer(owned_by="openai") as srv, OpenAIBackend(make_config(srv.base_url)) as b:
        assert not b.server_extensions
        b.next_token_logprobs([PROMPT], CANDIDATES)
        body = srv.chat_requests()[-1]["body"]
        assert "continue_final_message" not in body and "add_generation_prompt" not in body


def test_exact_when_every_candidate_is_seen(server, backend):
    server.script(Fault(top_logprobs=[("A", -0.1), ("B", -2.5)]))
    [out] = backend.next_token_logprobs([PROMPT], ["A", "B"])
    assert out.exact and out.logprobs == {"A": -0.1, "B": -2.5}


# ------------------------------------------------------------------ retries


def test_retry_after_is_honoured_then_succeeds(server, backend):
    server.script(Fault("status", status=429, retry_after=1), Fault("ok"))
    t0 = time.monotonic()
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    elapsed = time.monotonic() - t0
    reqs = server.chat_requests()
    assert elapsed >= 1.0
    assert reqs[1]["t"] - reqs[0]["t"] >= 1.0
    assert out.logprobs["T"] == -0.5
    assert backend.usage.n_retries == 1 and backend.usage.n_failures == 0


def test_503_retry_after_and_transient_500(server, backend):
    server.script(
        Fault("status", status=503, retry_after=0.5), Fault("status", status=500), Fault("ok")
    )
    t0 = time.monotonic()
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert time.monotonic() - t0 >= 0.5
    assert out.logprobs["S"] == -1.5
    assert backend.usage.n_retries == 2 and backend.usage.n_failures == 0


@pytest.mark.parametrize(
    "fault, message",
    [
        (Fault("status", status=500), "HTTP 500"),
        (Fault("status", status=503), "HTTP 503"),
        (Fault("malformed"), "malformed JSON"),
        (Fault("stall", delay_s=2.0), "timed out"),
        (Fault("drop"), "connection error"),
    ],
    ids=["500", "503", "malformed", "stall", "drop"],
)
def test_persistent_faults_give_bounded_retries_then_backend_error(fault, message):
    with MisbehavingServer(default=fault) as srv:
        b = OpenAIBackend(
            make_config(srv.base_url, backend_options={"timeout_s": 0.5, "max_retries": 2}),
            retry_base_s=0.01,
        )
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=message) as info:
            b.next_token_logprobs([PROMPT], CANDIDATES)
        elapsed = time.monotonic() - t0
        b.close()
    assert "after 2 retries" in str(info.value)
    assert len(srv.chat_requests()) == 3  # 1 try + 2 retries
    assert b.usage.n_retries == 2 and b.usage.n_failures == 1 and b.usage.n_calls == 3
    assert elapsed < 10.0


def test_non_retryable_client_error_fails_at_once(server, backend):
    server.script(Fault("status", status=400))
    with pytest.raises(BackendError, match="HTTP 400"):
        backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert len(server.chat_requests()) == 1
    assert backend.usage.n_retries == 0 and backend.usage.n_failures == 1


def test_backoff_grows_exponentially(server):
    server.default = Fault("status", status=500)
    b = OpenAIBackend(
        make_config(server.base_url, backend_options={"max_retries": 3}),
        retry_base_s=0.2,
        retry_max_s=5.0,
    )
    with pytest.raises(BackendError):
        b.next_token_logprobs([PROMPT], CANDIDATES)
    b.close()
    t = [r["t"] for r in server.chat_requests()]
    gaps = [b_ - a for a, b_ in zip(t[:-1], t[1:], strict=True)]
    assert len(gaps) == 3
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.8


def test_one_failing_prompt_fails_the_batch_but_counts_once(server, backend):
    server.default = Fault("status", status=500)
    with pytest.raises(BackendError):
        backend.next_token_logprobs([PROMPT], CANDIDATES)
    server.default = Fault("ok")
    assert backend.next_token_logprobs([PROMPT, PROMPT], CANDIDATES)[1].logprobs["T"] == -0.5
    assert backend.usage.n_failures == 1


# ------------------------------------------------------------------ odd answers


def test_reasoning_content_still_yields_logprobs(server, backend):
    server.script(Fault("reasoning", text="Let me think", top_logprobs=[("K", -0.2), (" K", -1.9)]))
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert out.logprobs == {"K": -0.2, " K": -1.9}
    server.script(Fault("reasoning", text="The answer is right."))
    assert backend.generate([PROMPT], max_new_tokens=8) == ["The answer is right."]


def test_nan_and_minus_inf_are_returned_faithfully(server, backend):
    server.script(Fault(top_logprobs=[("A", float("nan")), ("B", float("-inf")), ("C", -1.0)]))
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert (
        math.isnan(out.logprobs["A"])
        and out.logprobs["B"] == -math.inf
        and out.logprobs["C"] == -1.0
    )
    assert not out.exact


def test_no_score_token_among_alternatives(server, backend):
    server.script(
        Fault(top_logprobs=[("The", -0.1), ("Z", -2.0), ("<", -3.0), ("a", -3.5)], text="The")
    )
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert out == TokenLogprobs(logprobs={}, exact=False)


def test_same_token_in_two_spellings_is_summed(server, backend):
    server.script(
        Fault(
            top_logprobs=[("A", -1.0), ("A", -2.0), (" A", -3.0), ("B", float("-inf")), ("B", -4.0)]
        )
    )
    [out] = backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert out.logprobs["A"] == pytest.approx(math.log(math.exp(-1.0) + math.exp(-2.0)))
    assert out.logprobs[" A"] == -3.0
    assert out.logprobs["B"] == pytest.approx(-4.0)


def test_missing_logprobs_is_a_backend_error_without_retries(server, backend):
    server.script(Fault(no_logprobs=True))
    with pytest.raises(BackendError, match="no logprobs.*sampled"):
        backend.next_token_logprobs([PROMPT], CANDIDATES)
    assert len(server.chat_requests()) == 1
    assert backend.usage.n_failures == 1 and backend.usage.n_retries == 0


# ------------------------------------------------------------------ secrets


def test_api_key_never_leaks(monkeypatch, caplog, server):
    monkeypatch.setenv("DENSEREWARD_TEST_KEY", PLANTED_KEY)
    caplog.set_level(logging.DEBUG)
    b = OpenAIBackend(
        make_config(server.base_url, backend_options={"max_retries": 1}), retry_base_s=0.01
    )
    # the key is really used: the server saw it
    assert server.requests[-1]["headers"].get("Authorization") == f"Bearer {PLANTED_KEY}"
    # and the error path echoes it back (as some proxies do): it must be redacted
    server.default = Fault("status", status=500, echo_auth=True)
    with pytest.raises(BackendError) as info:
        b.next_token_logprobs([PROMPT], CANDIDATES)
    assert "***" in str(info.value)
    server.default = Fault("status", status=401, echo_auth=True)
    with pytest.raises(BackendError, match="DENSEREWARD_TEST_KEY") as info401:
        b.generate([PROMPT], max_new_tokens=2)
    texts = [
        str(info.value),
        repr(info.value),
        str(info401.value),
        repr(b),
        repr(vars(b)),
        repr(b._router.client.headers),
        repr(vars(b._router)),
    ]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert any("retry" in r.getMessage() for r in caplog.records)  # the retry was logged
    for text in texts:
        assert PLANTED_KEY not in text
    b.close()
    with pytest.raises(BackendUnavailableError) as unreachable:
        OpenAIBackend(make_config(f"http://127.0.0.1:{free_port()}/v1"))
    assert PLANTED_KEY not in str(unreachable.value)


# ------------------------------------------------------------------ concurrency


def test_concurrency_is_bounded(server):
    server.default = Fault("stall", delay_s=0.3)
    with OpenAIBackend(make_config(server.base_url, backend_options={"max_concurrency": 2})) as b:
        t0 = time.monotonic()
        outs = b.next_token_logprobs([PROMPT] * 6, CANDIDATES)
        elapsed = time.monotonic() - t0
    assert len(outs) == 6 and server.max_in_flight == 2
    assert elapsed >= 0.9


def test_requests_per_minute_limit(server):
    with OpenAIBackend(
        make_config(server.base_url, backend_options={"requests_per_minute": 300})
    ) as b:  # 0.2 s apart
        t0 = time.monotonic()
        b.next_token_logprobs([PROMPT] * 4, CANDIDATES)
        elapsed = time.monotonic() - t0
    t = sorted(r["t"] for r in server.chat_requests())
    assert elapsed >= 0.6
    assert t[-1] - t[0] >= 0.45, [round(x - t[0], 3) for x in t]


def test_sync_inside_a_running_loop_and_async_from_another_loop(backend):
    async def main():
        sync_out = backend.next_token_logprobs(
            [PROMPT], CANDIDATES
        )  # blocks this loop, must not deadlock
        async_out = await backend.anext_token_logprobs([PROMPT, PROMPT], CANDIDATES)
        texts = await backend.agenerate([PROMPT], max_new_tokens=3, seed=1)
        return sync_out, async_out, texts

    sync_out, async_out, texts = asyncio.run(main())
    assert sync_out[0].logprobs == async_out[1].logprobs and texts == ["T"]
    assert asyncio.run(backend.anext_token_logprobs([PROMPT], CANDIDATES))[0].logprobs["T"] == -0.5


def test_generate_forwards_sampling_parameters(server, backend):
    server.script(Fault(text="Looks right."), Fault(text="Wrong."))
    out = backend.generate(
        [PROMPT, PROMPT], max_new_tokens=16, temperature=0.7, seed=5, stop=["</analysis>"]
    )
    assert sorted(out) == ["Looks right.", "Wrong."]
    bodies = sorted((r["body"] for r in server.chat_requests()), key=lambda b: b["seed"])
    assert [b["seed"] for b in bodies] == [5, 6]
    assert all(
        b["max_tokens"] == 16 and b["temperature"] == 0.7 and b["stop"] == ["</analysis>"]
        for b in bodies
    )


def test_close_is_idempotent_and_final(server):
    b = OpenAIBackend(make_config(server.base_url))
    b.close()
    b.close()
    with pytest.raises(BackendError, match="closed"):
        b.next_token_logprobs([PROMPT], CANDIDATES)


# ------------------------------------------------------------------ sampled fallback


@pytest.mark.parametrize("use_n", [True, False])
def test_sampled_backend_empirical_distribution(server, use_n):
    texts = ["K</score>", " K", "**L**</score>", "I think", "K", "Kind", " L</score>", "<score>M"]
    server.default = Fault(text=texts, top_logprobs=[])
    cfg = make_config(server.base_url, backend="sampled", seed=3, backend_options={"n_samples": 8})
    with SampledBackend(cfg, use_n=use_n) as b:
        [out] = b.next_token_logprobs([PROMPT], CANDIDATES)
    reqs = server.chat_requests()
    if use_n:
        assert len(reqs) == 1 and reqs[0]["body"]["n"] == 8
    else:
        assert len(reqs) == 8 and sorted(r["body"]["seed"] for r in reqs) == list(range(3, 11))
        # without `n` the scripted server answers texts[0] to every request
        texts = [texts[0]] * 8
    assert all(r["body"]["temperature"] == 1.0 and r["body"]["max_tokens"] == 4 for r in reqs)
    assert "logprobs" not in reqs[0]["body"]
    assert out.sampled and out.n_samples == 8 and not out.exact and not out.restricted
    probs = {c: math.exp(v) for c, v in out.logprobs.items() if v > -math.inf}
    expected_counts: dict[str, int] = {}
    for t in texts:
        tok = parse_score_token(t, CANDIDATES)
        if tok is not None:
            expected_counts[tok] = expected_counts.get(tok, 0) + 1
    assert probs == pytest.approx({c: k / 8 for c, k in expected_counts.items()})
    if use_n:
        assert probs == pytest.approx(
            {"K": 2 / 8, " K": 1 / 8, "L": 1 / 8, " L": 1 / 8, "M": 1 / 8}
        )
        assert sum(probs.values()) == pytest.approx(
            6 / 8
        )  # "I think" and "Kind" count against mass
    assert set(out.logprobs) == set(CANDIDATES)


def test_sampled_backend_tops_up_missing_choices(server):
    # A server that ignores `n` answers one choice; the backend tops up with single requests.
    class OneChoice(MisbehavingServer):
        def _completion(self, fault, body):
            return super()._completion(fault, {**body, "n": 1})

    with OneChoice(default=Fault(text="B")) as srv:
        cfg = make_config(srv.base_url, backend="sampled", backend_options={"n_samples": 4})
        with SampledBackend(cfg) as b:
            [out] = b.next_token_logprobs([PROMPT], ["A", "B"])
        assert len(srv.chat_requests()) == 4
    assert out.logprobs == {"A": -math.inf, "B": 0.0} and out.n_samples == 4


def test_sampled_backend_surfaces_failures(server):
    server.default = Fault("status", status=503)
    cfg = make_config(
        server.base_url, backend="sampled", backend_options={"n_samples": 4, "max_retries": 1}
    )
    with SampledBackend(cfg, retry_base_s=0.01) as b, pytest.raises(BackendError, match="HTTP 503"):
        b.next_token_logprobs([PROMPT], CANDIDATES)
    assert b.usage.n_failures == 1 and b.usage.n_retries == 1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("T", "T"),
        (" T</score>", " T"),
        ("**Q**", "Q"),
        ("Score: B", "B"),
        ("(C)", "C"),
        ("\n\nD.", "D"),
        ("A good answer", None),
        ("I think it is right", None),
        ("K - mostly right", "K"),
        (" K\n", " K"),
        ("Kind", None),
        ("", None),
        ("Z", None),
        ("</score>", None),
        ("7", None),
    ],
)
def test_parse_score_token(text, expected):
    assert parse_score_token(text, CANDIDATES) == expected


def test_registered_by_name():
    from densereward.backends import get_backend_class

    assert get_backend_class("openai") is OpenAIBackend
    assert get_backend_class("sampled") is SampledBackend


def test_verifier_engine_abstains_on_backend_failure(server):
    """End to end with the engine: a persistent 500 becomes a counted abstention, never 0.5."""
    from densereward import verifier

    server.default = Fault("status", status=500)
    cfg = make_config(server.base_url, on_error="abstain", backend_options={"max_retries": 1})
    backend = OpenAIBackend(cfg, retry_base_s=0.01)
    with pytest.warns(UserWarning, match="cannot tokenize"):  # the scripted server has no /tokenize
        v = verifier.Verifier(cfg, backend=backend)
    try:
        r = v.score(problem="What is 2+2?", response="4")
        assert r.value is None and r.abstained
        assert v.stats.as_dict()["n_failures"] >= 1
        server.default = Fault(top_logprobs=[("T", -0.1), ("A", -3.0)])
        r = v.score(problem="What is 2+2?", response="4")
        assert r.value is not None and 0.5 < r.value <= 1.0
    finally:
        v.close()
        backend.close()
