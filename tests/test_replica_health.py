"""Replica health by reads, and the model check at start (issue 40 item 6).

A served engine can hang while its API server keeps answering ``GET /v1/models``, and a replica
can serve another model than the others; both used to stay in rotation, their reads timing out
or answered 404 (an abstention each). Scripted OpenAI-compatible servers on loopback
(:class:`servers.MisbehavingServer`), nothing mocked.
"""

from __future__ import annotations

import time

import pytest
from servers import Fault, MisbehavingServer

from densereward.backends.base import ChatPrompt
from densereward.backends.openai_http import OpenAIBackend
from densereward.config import VerifierConfig
from densereward.errors import BackendUnavailableError


def prompt(i: int) -> ChatPrompt:
    return ChatPrompt(
        messages=({"role": "user", "content": f"Problem {i}\n<response>\n{i}\n</response>"},),
        prefill="<score>",
    )


def backend(urls, model: str | None = None, **options) -> OpenAIBackend:
    opts = {
        "base_url": urls,
        "max_retries": 3,
        "timeout_s": 0.5,
        "max_concurrency": 2,
        "health_interval_s": 0.2,
        "retry_base_s": 0.01,
        **options,
    }
    return OpenAIBackend(VerifierConfig(backend="openai", model=model, backend_options=opts))


def test_a_replica_whose_engine_hangs_is_taken_out_by_its_read_timeouts_and_probed_back():
    with MisbehavingServer(default=Fault("stall", delay_s=3.0)) as hung, MisbehavingServer() as ok:
        b = backend([hung.base_url, ok.base_url])
        try:
            t0 = time.monotonic()
            for i in range(24):  # one read at a time, 24 affinity keys: about half prefer `hung`
                got = b.next_token_logprobs([prompt(i)], ["T", "S"])
                assert got[0].logprobs["T"] == -0.5
            took = time.monotonic() - t0
            state = {r["url"]: r for r in b.replicas}
            assert not state[hung.base_url]["healthy"]  # /models answered all along
            reads = [
                r
                for r in hung.chat_requests()
                if r["body"]["max_tokens"] == 1 and "logprobs" in r["body"]
            ]
            assert len(reads) == 2  # the two timeouts that took it out; the rest are probes
            assert took < 6.0, took  # was: every read for it waited out a 0.5 s timeout
            hung.default = Fault("ok")  # the engine recovers: a probe read puts it back
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not b.replicas[0]["healthy"]:
                time.sleep(0.05)
            assert b.replicas[0]["healthy"] and b.replicas[0]["n_timeouts"] == 0
        finally:
            b.close()


def test_a_replica_serving_another_model_starts_out_and_reads_do_not_abstain():
    with MisbehavingServer(model="other-model") as wrong, MisbehavingServer(model="judge") as right:
        b = backend([wrong.base_url, right.base_url], model="judge")
        try:
            assert [r["healthy"] for r in b.replicas] == [False, True]
            got = b.next_token_logprobs([prompt(i) for i in range(8)], ["T"])
            assert all(g.logprobs == {"T": -0.5} for g in got)
            assert not wrong.chat_requests() and len(right.chat_requests()) == 8
            time.sleep(0.5)  # health checks keep it out: it still lists another model
            assert not b.replicas[0]["healthy"]
        finally:
            b.close()


def test_the_start_refuses_replicas_that_serve_no_common_model():
    with MisbehavingServer(model="a") as a, MisbehavingServer(model="b") as b:
        with pytest.raises(BackendUnavailableError, match="serve different models.*verifier.model"):
            backend([a.base_url, b.base_url])
        with pytest.raises(
            BackendUnavailableError, match=r"no verifier server serves 'c'.*serves \['a'\]"
        ):
            backend([a.base_url, b.base_url], model="c")
        with pytest.raises(BackendUnavailableError, match="serves \\['a'\\], not 'b'"):
            backend(a.base_url, model="b")  # one server: its reads would all be 404s


def test_a_replica_restarted_with_another_model_fails_over_on_404():
    with MisbehavingServer(model="judge") as a, MisbehavingServer(model="judge") as b:
        c = backend([a.base_url, b.base_url], health_interval_s=60)
        try:
            a.default = Fault("status", status=404)  # "The model `judge` does not exist."
            got = c.next_token_logprobs([prompt(i) for i in range(12)], ["T"])
            assert all(g.logprobs == {"T": -0.5} for g in got)
            assert not c.replicas[0]["healthy"] and c.replicas[1]["healthy"]
        finally:
            c.close()
