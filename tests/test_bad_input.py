"""Bad input and misbehaving backends, end to end at the level users hit them (issue 8).

Part 1 drives the TRL-facing reward functions (:mod:`densereward.rewards`) with the real
default verifier (embedded SmolLM2-135M on CPU, transformers backend): one reward call with
a batch that mixes every kind of bad completion must return exactly one documented value per
completion, count every abstention / truncation in ``Verifier.stats`` and log it through the
reward-quality tracker -- never crash, never a silent 0.5.

Part 2 drives the engine (``Verifier(VerifierConfig(backend="openai", ...))``) against a real
HTTP server on loopback (:class:`servers.MisbehavingServer`) that starts failing mid-run.

Lower-level rows are covered elsewhere and not repeated here: the engine with a table
backend (tests/test_verifier.py), the HTTP backend's retries and parsing (tests/test_faults.py),
cache / JSONL crash safety (tests/test_io_cache.py), injection with the real tokenizer
(tests/test_verifier_default_model.py).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from servers import Fault, free_port, scripted_verifier

from densereward import prompts as P
from densereward.config import VerifierConfig
from densereward.errors import BackendError, BackendUnavailableError
from densereward.rewards import (
    GroupVerifierReward,
    MathChecker,
    RewardQualityTracker,
    VerifierReward,
)

REPO = Path(__file__).resolve().parents[1]
PROBLEM = "What is 6 * 7?"
FINAL = r"So the answer is \boxed{42}."
MAX_CHARS = 1000


def _conv(text: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": text}]


@pytest.fixture(scope="module")
def checker():
    c = MathChecker(executor="inline", timeout_s=10.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def verifier(default_model_dir):
    """The real default verifier (SmolLM2-135M, CPU, G = 20), with a short truncation budget.

    ``max_response_chars`` is lowered from 6000 to 1000 only to keep the CPU cost of the
    truncated prompt small (~20 s -> ~4 s on a loaded 2-core machine); truncation works the
    same at any budget.
    """
    from densereward.verifier import Verifier

    v = Verifier(VerifierConfig(max_response_chars=MAX_CHARS))
    yield v
    v.close()


# ============================================================================ part 1
# One reward call, every kind of bad completion (standard and conversational formats).

LONG = "Let me compute this step by step. " + "We keep adding sixes to get there. " * 6000 + FINAL
BATCH: list[tuple[str, Any]] = [
    ("normal", r"6 * 7 = 42, so the answer is \boxed{42}."),
    ("empty", ""),
    ("whitespace", " \n\t  \n"),
    ("long", LONG),
    ("none", None),
    ("int", 7),
    ("surrogate", "\ud800abc"),
    ("conv_normal", _conv(r"6 * 7 = 42. \boxed{42}")),
    ("conv_empty", _conv("")),
    ("conv_none", _conv(None)),
]
IDX = {name: i for i, (name, _) in enumerate(BATCH)}


class _PromptSpy:
    """Records every prompt the engine sends to the real backend (the backend still runs)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.inner = backend.next_token_logprobs
        self.prompts: list[Any] = []

    def __call__(self, prompts, candidates):
        self.prompts.extend(prompts)
        return self.inner(prompts, candidates)

    def user_texts(self) -> list[str]:
        return [p.messages[-1]["content"] for p in self.prompts]


@pytest.fixture(scope="module")
def mixed_call(verifier, checker, tmp_path_factory):
    """The single reward call of part 1; returns what the tests below inspect."""
    assert len(LONG) > 200_000
    run_dir = tmp_path_factory.mktemp("bad_input_run")
    tracker = RewardQualityTracker(run_dir)
    reward = VerifierReward(
        verifier,
        reference_guided=False,
        injection_penalty=None,
        tracker=tracker,
        checker=checker,
        num_generations=len(BATCH),
    )
    spy = _PromptSpy(verifier.backend)
    verifier.backend.next_token_logprobs = spy  # instance attribute shadows the method
    before = dict(verifier.stats.as_dict())
    logged: dict[str, float] = {}
    extra: dict[str, list] = {}
    n = len(BATCH)
    t0 = time.perf_counter()
    try:
        out = reward(
            prompts=[[{"role": "user", "content": PROBLEM}]] * n,
            completions=[c for _, c in BATCH],
            problem=[PROBLEM] * n,
            answer=["42"] * n,
            level=[1] * n,
            log_metric=logged.__setitem__,
            log_extra=extra.__setitem__,
        )
    finally:
        del verifier.backend.next_token_logprobs
    seconds = time.perf_counter() - t0
    after = verifier.stats.as_dict()
    delta = {k: after[k] - before[k] for k in after if k != "mean_mass"}
    return {
        "out": out,
        "delta": delta,
        "spy": spy,
        "logged": logged,
        "extra": extra,
        "tracker": tracker,
        "seconds": seconds,
    }


@pytest.mark.slow
def test_one_value_per_completion_and_no_silent_half(mixed_call):
    out = mixed_call["out"]
    assert len(out) == len(BATCH)
    for (name, _), v in zip(BATCH, out, strict=True):
        assert v is None or (isinstance(v, float) and 0.0 <= v <= 1.0 and not math.isnan(v)), name
        assert v != 0.5, f"{name}: a silent neutral 0.5"
    # the model really scored the real completions
    for name in ("normal", "long", "surrogate", "conv_normal"):
        assert out[IDX[name]] is not None and 0.0 < out[IDX[name]] < 1.0, name


@pytest.mark.slow
def test_empty_and_whitespace_get_the_documented_zero_without_a_model_call(mixed_call):
    out, delta, spy = mixed_call["out"], mixed_call["delta"], mixed_call["spy"]
    for name in ("empty", "whitespace", "conv_empty"):
        assert out[IDX[name]] == 0.0, name
    assert delta["n_empty"] >= 3
    # no prompt was built for them (the model never sees an empty response)
    assert not any("<response>\n \n\t  \n\n</response>" in t for t in spy.user_texts())
    assert not any("<response>\n\n</response>" in t for t in spy.user_texts())


@pytest.mark.slow
def test_over_long_completion_is_truncated_with_a_marker_keeping_the_final_answer(mixed_call):
    spy, delta = mixed_call["spy"], mixed_call["delta"]
    max_chars = MAX_CHARS
    expected, cut = P.truncate_middle(P.sanitize_candidate(LONG), max_chars)
    assert cut and expected.endswith(FINAL)
    long_prompts = [t for t in spy.user_texts() if "truncated by the verifier" in t]
    assert len(long_prompts) == 1, "exactly one candidate was over-long"
    text = long_prompts[0]
    assert f"<response>\n{expected}\n</response>" in text  # what the engine built
    assert FINAL in text and len(text) < max_chars + 2_000  # final answer kept, 200k chars gone
    removed = len(P.sanitize_candidate(LONG)) - max_chars
    assert P.TRUNCATION_MARKER.format(n=removed) in text and removed > 190_000
    assert delta["n_truncated"] == 1


@pytest.mark.slow
def test_lone_surrogate_is_replaced_and_scored(mixed_call):
    texts = mixed_call["spy"].user_texts()
    assert any("<response>\n\ufffdabc\n</response>" in t for t in texts)
    assert not any("\ud800" in t for t in texts)
    assert mixed_call["out"][IDX["surrogate"]] is not None


@pytest.mark.slow
def test_conversational_completions_are_scored_as_their_text(mixed_call):
    texts = mixed_call["spy"].user_texts()
    assert any("<response>\n6 * 7 = 42. \\boxed{42}\n</response>" in t for t in texts)


@pytest.mark.slow
def test_abstentions_are_counted_and_logged(mixed_call):
    out, logged, tracker = mixed_call["out"], mixed_call["logged"], mixed_call["tracker"]
    n_none = sum(v is None for v in out)
    assert logged["verifier/n"] == len(BATCH)
    assert logged["verifier/n_abstained"] == n_none
    rows = [json.loads(line) for line in tracker.jsonl_path.read_text().splitlines()]
    assert rows[-1]["verifier/n_abstained"] == n_none and rows[-1]["verifier/n"] == len(BATCH)
    # the completions table gets one score per completion, NaN for an abstention (never 0.5)
    col = mixed_call["extra"]["verifier_dense_score"]
    assert len(col) == len(BATCH)
    assert [math.isnan(x) for x in col] == [v is None for v in out]


@pytest.mark.slow
def test_non_string_completions_abstain_and_are_counted(mixed_call):
    out, delta = mixed_call["out"], mixed_call["delta"]
    for name in ("none", "int", "conv_none"):
        assert out[IDX[name]] is None, name
    assert delta["n_invalid_input"] == 3


@pytest.mark.slow
def test_mixed_call_timing(mixed_call):
    # 4 real prompts through SmolLM2-135M on CPU (one ~2.5k-token truncated one)
    assert mixed_call["seconds"] < 120, mixed_call["seconds"]


# ---- lengths: N in, exactly N out, or a clear error ----------------------------------------


def _empty_call(reward, n: int = 2, **columns):
    """A call whose completions are all empty: the engine answers without a model call."""
    return reward(
        prompts=[[{"role": "user", "content": PROBLEM}]] * n,
        completions=[_conv("")] * n,
        **columns,
    )


def test_problem_column_shorter_than_completions_raises(verifier):
    with pytest.raises(ValueError, match="length mismatch.*'problem'"):
        _empty_call(
            VerifierReward(verifier, reference_guided=False, injection_penalty=None),
            problem=[PROBLEM],
        )


def test_prompts_shorter_than_completions_raises(verifier):
    reward = VerifierReward(verifier, reference_guided=False, injection_penalty=None)
    with pytest.raises(ValueError, match="length mismatch"):
        reward(prompts=[PROBLEM], completions=["a", "b"])
    with pytest.raises(ValueError, match="length mismatch"):
        GroupVerifierReward(verifier, reference_guided=False, injection_penalty=None)(
            prompts=[PROBLEM], completions=["a", "b"]
        )


def test_level_column_shorter_than_completions_raises(verifier, checker):
    reward = VerifierReward(
        verifier,
        reference_guided=False,
        injection_penalty=None,
        tracker=RewardQualityTracker(None),
        checker=checker,
    )
    with pytest.raises(ValueError, match="length mismatch.*'levels'"):
        _empty_call(reward, problem=[PROBLEM] * 2, answer=["42"] * 2, level=[1])


def test_answer_column_shorter_than_completions_raises(verifier, checker):
    reward = VerifierReward(
        verifier,
        reference_guided=False,
        injection_penalty=None,
        tracker=RewardQualityTracker(None),
        checker=checker,
    )
    with pytest.raises(ValueError, match="length mismatch.*'answer'"):
        _empty_call(reward, problem=[PROBLEM] * 2, answer=["42"])


def test_reference_guided_answer_column_shorter_raises(verifier):
    for reward in (
        VerifierReward(verifier, reference_guided=True),
        GroupVerifierReward(verifier, reference_guided=True, method="round_robin"),
    ):
        with pytest.raises(ValueError, match="length mismatch.*'answer'"):
            _empty_call(reward, problem=[PROBLEM] * 2, answer=["42"])


def test_group_reward_with_bad_completions_returns_one_value_each(verifier):
    """Empty / non-string members of a group: N values, each ``None`` or in [0, 1], no crash."""
    reward = GroupVerifierReward(
        verifier,
        reference_guided=False,
        injection_penalty=None,
        num_generations=3,
        method="round_robin",
    )
    out = reward(prompts=[PROBLEM] * 3, completions=["", None, " \n "], problem=[PROBLEM] * 3)
    assert len(out) == 3
    assert all(v is None or 0.0 <= v <= 1.0 for v in out)


# ============================================================================ part 2
# The engine against a real loopback HTTP server that starts misbehaving mid-run.


def _http_verifier(base_url: str, **overrides):
    options = {
        "max_retries": 1,
        "timeout_s": 1.0,
        "api_key_env": "DENSEREWARD_TEST_BAD_INPUT_KEY",
        **overrides.pop("backend_options", {}),
    }
    kw = dict(on_error="abstain", granularity=20, backend_options=options)
    return scripted_verifier(base_url, **{**kw, **overrides})


FAULTS = {
    "500": Fault("status", status=500),
    "503_retry_after": Fault("status", status=503, retry_after=0.2),
    "429": Fault("status", status=429, retry_after=0.2),
    "malformed_json": Fault("malformed"),
    "stall": Fault("stall", delay_s=3.0),
    "dropped_connection": Fault("drop"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_mid_run_faults_abstain_count_and_reach_the_tracker(server, checker, tmp_path, fault):
    v = _http_verifier(server.base_url)
    try:
        tracker = RewardQualityTracker(tmp_path)
        reward = VerifierReward(
            v,
            reference_guided=False,
            injection_penalty=None,
            tracker=tracker,
            checker=checker,
            num_generations=2,
        )
        cols = {"problem": [PROBLEM] * 2, "answer": ["42", "42"]}
        prompts = [PROBLEM] * 2
        # step 1: healthy server
        ok = reward(prompts=prompts, completions=[r"\boxed{42}", r"\boxed{41}"], **cols)
        assert all(x is not None and 0.0 <= x <= 1.0 for x in ok)
        assert v.stats.n_failures == 0
        # step 2: the server breaks (every request, retries included)
        server.default = FAULTS[fault]
        logged: dict[str, float] = {}
        bad = reward(
            prompts=prompts,
            completions=[r"\boxed{42}.", r"\boxed{40}"],
            log_metric=logged.__setitem__,
            **cols,
        )
        assert bad == [None, None]
        assert v.stats.n_failures == 2 and v.stats.n_abstained == 2
        # bounded: at most one try + max_retries (= 1) retry per prompt
        assert 2 + 2 <= len(server.chat_requests()) <= 2 + 2 * 2
        assert logged["verifier/n_abstained"] == 2
        rows = [json.loads(x) for x in tracker.jsonl_path.read_text().splitlines()]
        assert [r["verifier/n_abstained"] for r in rows] == [0, 2]
        # step 3: it recovers; no state was poisoned
        server.default = Fault("ok")
        again = reward(prompts=prompts, completions=[r"\boxed{42}!", r"\boxed{43}"], **cols)
        assert all(x is not None for x in again)
    finally:
        v.close()


def test_failure_counter_is_in_the_logged_metrics(server, checker):
    v = _http_verifier(server.base_url)
    try:
        reward = VerifierReward(
            v,
            reference_guided=False,
            injection_penalty=None,
            tracker=RewardQualityTracker(None),
            checker=checker,
        )
        server.default = Fault("status", status=500)
        logged: dict[str, float] = {}
        reward(
            prompts=[PROBLEM],
            completions=["42"],
            problem=[PROBLEM],
            answer=["42"],
            log_metric=logged.__setitem__,
        )
        assert logged.get("verifier/total/n_failures") == 1
    finally:
        v.close()


@pytest.mark.parametrize("fault", ["500", "malformed_json", "stall"])
def test_on_error_raise_raises_backend_error(server, fault):
    v = _http_verifier(server.base_url, on_error="raise")
    try:
        assert v.score(problem=PROBLEM, response="42").value is not None
        server.default = FAULTS[fault]
        with pytest.raises(BackendError):
            v.score(problem=PROBLEM, response="41")
        assert v.stats.n_failures == 1
    finally:
        v.close()


def test_no_score_token_among_alternatives_abstains(server):
    v = _http_verifier(server.base_url)
    try:
        server.default = Fault(
            top_logprobs=[("The", -0.1), ("Z", -2.0), ("<", -3.0), ("a", -3.5)], text="The"
        )
        r = v.score(problem=PROBLEM, response="42")
        assert r.value is None and r.abstained and "no probability mass" in r.reason
        assert v.stats.n_abstained == 1 and v.stats.n_failures == 0
    finally:
        v.close()


def test_nan_and_minus_inf_logprobs_are_ignored_not_propagated(server):
    v = _http_verifier(server.base_url)
    try:
        server.default = Fault(
            top_logprobs=[("T", float("nan")), ("A", float("-inf")), ("S", -0.3)]
        )
        r = v.score(problem=PROBLEM, response="42")
        # only S has finite mass: the distribution is a point mass on S (level 19 of 20)
        assert r.value == pytest.approx(v.scale.normalize(v.scale.values[18]))
        assert v.stats.n_nan_logprobs == 1
        server.default = Fault(top_logprobs=[("T", float("nan")), ("A", float("-inf"))])
        r = v.score(problem=PROBLEM, response="42")
        assert r.value is None and r.abstained
    finally:
        v.close()


def test_same_token_in_two_spellings_is_summed_through_the_engine(server):
    v = _http_verifier(server.base_url)
    try:
        server.default = Fault(
            top_logprobs=[("A", -1.0), ("A", -2.0), (" A", -3.0), ("B", float("-inf")), ("B", -4.0)]
        )
        r = v.score(problem=PROBLEM, response="42")
        p = np.zeros(20)
        p[0] = math.exp(-1.0) + math.exp(-2.0) + math.exp(-3.0)
        p[1] = math.exp(-4.0)
        expected = v.scale.normalize(float(p / p.sum() @ v.scale.phi))
        assert r.value == pytest.approx(expected)
        assert r.distribution[0] == pytest.approx(p[0] / p.sum())
        if r.mass is not None:  # unrestricted read: mass is the summed probability
            assert r.mass == pytest.approx(p.sum())
    finally:
        v.close()


def test_reasoning_content_with_empty_content_still_scores(server):
    v = _http_verifier(server.base_url)
    try:
        server.default = Fault("reasoning", text="thinking...", top_logprobs=[("K", -0.2)])
        r = v.score(problem=PROBLEM, response="42")
        assert r.value == pytest.approx(v.scale.normalize(v.scale.values[10]))
    finally:
        v.close()


def test_unreachable_server_at_verifier_construction_names_the_url():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=url.replace(".", r"\.")):
        _http_verifier(url)
    assert time.monotonic() - t0 < 10.0


@pytest.mark.slow
def test_unreachable_server_fails_grpo_before_the_first_training_step(
    tmp_path, data_dir, monkeypatch
):
    from densereward.config import load_yaml
    from densereward.trainers.grpo import run

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    url = f"http://127.0.0.1:{free_port()}/v1"
    config = load_yaml(REPO / "configs/grpo_math_cpu.yaml")
    config["data"] = {"path": str(data_dir / "math500" / "test.jsonl"), "limit": 2, "levels": [1]}
    config["verifier"] = {
        "backend": "openai",
        "backend_options": {"base_url": url},
        "granularity": 5,
    }
    config["training"].update(
        max_steps=1,
        max_completion_length=4,
        per_device_train_batch_size=2,
        num_generations=2,
        save_strategy="no",
    )
    config["wandb"] = {"enabled": False}
    with pytest.raises(BackendUnavailableError, match=url.replace(".", r"\.")) as info:
        run(config, output_dir=tmp_path / "run")
    frames = [entry.name for entry in info.traceback]
    # raised before training: no frame of the training loop / generation on the stack
    assert not any(f in ("_inner_training_loop", "training_step", "_generate") for f in frames)
