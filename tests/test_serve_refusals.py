"""What ``densereward serve`` guarantees and refuses (issue 40 items 1-3, 5 in part; item 4 in
tests/test_verifier_refusals.py).

A real uvicorn server on loopback over a scripted OpenAI-compatible verifier
(:class:`servers.MisbehavingServer`), whose answer shows what was scored: the verifier reads
letter T (the top score) when the text inside ``<response>`` holds ``FEWSHOT`` -- the answer of
the prompt's few-shot example -- or ``RIGHT``, and letter A (the lowest) otherwise.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import require

require("starlette", "serve")
require("uvicorn", "serve")
require("prometheus_client", "serve")

import httpx  # noqa: E402
from servers import MisbehavingServer  # noqa: E402
from test_serve import Running, chat  # noqa: E402

from densereward.errors import ConfigError  # noqa: E402
from densereward.serve.app import make_app  # noqa: E402
from densereward.serve.cli import build_service  # noqa: E402
from densereward.serve.split import split_query  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FEWSHOT = "Example: Q: What is 1 + 1 ? A: FEWSHOT 2 .\n\nQ: What is 2 + 2 ?"


def _responses_scored(server: MisbehavingServer) -> list[str]:
    out = []
    for r in server.chat_requests():
        text = str((r["body"] or {}).get("messages", [{}])[-2].get("content", ""))
        found = re.search(r"<response>\n(.*)\n</response>", text, re.S)
        if found:
            out.append(found.group(1))
    return out


def _answer(body) -> list[tuple[str, float]]:
    text = str(body["messages"][-2]["content"])
    found = re.search(r"<response>\n(.*)\n</response>", text, re.S)
    if found and "ABSTAIN" in found.group(1):  # no score token among the alternatives
        return [("zebra", -0.01)]
    top = found and ("FEWSHOT" in found.group(1) or "RIGHT" in found.group(1))
    return [("T", -0.01)] if top else [("A", -0.01)]


def _config(url: str, **serve) -> dict:
    return {
        "reward": {"type": "dense", "track": False, "use_async": True, "reference_guided": False},
        "verifier": {"backend": "openai", "backend_options": {"base_url": url}, "granularity": 20},
        "serve": {"batch_wait_ms": 1, **serve},
    }


@pytest.fixture(scope="module")
def scripted():
    with MisbehavingServer(answer=_answer) as server:
        service, close = build_service(_config(server.base_url))
        running = Running(make_app(service))
        yield server, service, running
        running.stop()
        close()


def _metric(running: Running, name: str, **labels: str) -> float:
    text = httpx.get(f"{running.url}/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}}" if labels else f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --------------------------------------------------------------------------- item 1: the split


def _decoded(prompt: str, response: str) -> str:
    """What OpenRLHF sends as ``query``: ``tokenizer.decode(prompt_ids + response_ids,
    skip_special_tokens=False)`` of a tokenizer that cleans the space before punctuation."""
    return re.sub(r" ([?.,!])", r"\1", prompt + response)


@pytest.mark.parametrize(
    "make_query",
    [
        pytest.param(_decoded, id="spaces-cleaned"),
        pytest.param(lambda p, r: "<|endoftext|><|endoftext|>" + _decoded(p, r), id="left-pads"),
        pytest.param(
            lambda p, r: re.sub(r"<\|[a-z_]+\|>", "", _decoded(p, r)), id="specials-dropped"
        ),
        pytest.param(lambda p, r: _decoded(p, r).replace("fi", "ﬁ"), id="nfkc"),  # noqa: RUF001
    ],
)
def test_the_response_is_what_follows_the_prompt_however_it_was_detokenised(scripted, make_query):
    """Before: the decoded prompt differed from ``prompts`` and the whole query (with the few-shot
    example's answer) was scored as the response: letter T, reward 1.0."""
    server, _, running = scripted
    prompt = chat(FEWSHOT + " Think first .")
    response = "It is 5 .<|im_end|>"
    payload = {"query": [make_query(prompt, response)], "prompts": [prompt]}
    got = httpx.post(f"{running.url}/get_reward", json=payload, timeout=30)
    assert got.status_code == 200, got.text
    assert got.json()["rewards"] == [0.0]  # the response alone: letter A
    assert _responses_scored(server)[-1] in ("It is 5.", "It is 5 .")


def test_a_split_that_cannot_be_trusted_is_refused_and_counted(scripted):
    server, _, running = scripted
    before = _metric(running, "densereward_refusals_total", endpoint="get_reward", reason="split")
    n_reads = len(server.chat_requests())
    prompt = chat("What is 2 + 2?")
    cases = [
        {"query": [chat("What is 3 + 3?") + "It is 6."], "prompts": [prompt]},  # not in it
        {"query": ["Q: 2+2? Q: 2+2? so 4"], "prompts": ["2+2?"]},  # twice, not at the start
        {"query": ["What is 2 + 2? It is 4."]},  # no prompts and no template to split at
    ]
    for payload in cases:
        got = httpx.post(f"{running.url}/get_reward", json=payload, timeout=30)
        assert got.status_code == 422, got.text
        assert "query[0]" in got.json()["error"] and "cannot be told" in got.json()["error"]
    after = _metric(running, "densereward_refusals_total", endpoint="get_reward", reason="split")
    assert after - before == 3 and len(server.chat_requests()) == n_reads  # nothing was scored


@pytest.mark.parametrize(
    "marker", ["<|im_end|>", "<|eot_id|>", "</s>", "<end_of_turn>\n<eos>", "<｜end▁of▁sentence｜>"]
)
def test_end_of_sequence_markers_of_other_families_are_not_scored(scripted, marker):
    """Before: a marker left in the response was read as text addressed to the grader (the
    injection pre-filter scored it 0) or shown to the verifier."""
    server, _, running = scripted
    prompt = chat("What is 2 + 2?")
    for path, payload in (
        ("/get_reward", {"query": [prompt + "RIGHT: 4." + marker], "prompts": [prompt]}),
        ("/slime", {"prompt": "What is 2 + 2?", "response": "RIGHT: 4." + marker}),
        ("/score", {"problems": ["What is 2 + 2?"], "responses": ["RIGHT: 4." + marker]}),
    ):
        n_reads = len(_responses_scored(server))
        got = httpx.post(f"{running.url}{path}", json=payload, timeout=30)
        assert got.status_code == 200, got.text
        reward = got.json() if path == "/slime" else got.json()["rewards"][0]
        assert reward == 1.0, (path, reward)
        assert _responses_scored(server)[n_reads:] == ["RIGHT: 4."], path


def test_split_without_prompts_takes_the_last_assistant_turn_of_known_templates():
    llama3 = (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
    )
    gemma = "<bos><start_of_turn>user\nHi?<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>"
    for query in (llama3, gemma, "<s>[INST] Hi? [/INST] Hello.</s>", chat("Hi?") + "Hello."):
        assert split_query(query, None) == ("Hi?", "Hello."), query
    # the prompt sent without its chat template: found once, the header after it dropped
    assert split_query(chat("Hi?") + "Hello.<|im_end|>", "Hi?") == ("Hi?", "Hello.")


# --------------------------------------------------------------------------- item 2: bad bodies


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),  # json.loads: RecursionError
        (b'{"query": ' + b"[" * 40 + b"]" * 40 + b"}", "more than 32 levels"),
        (b'{"query": ["\\ud800"]}', "lone surrogate"),
    ],
)
def test_bodies_too_deep_or_not_text_get_400_with_a_message(scripted, content, message):
    """Before: 500 with a traceback in the log (the first two), or a surrogate sent on."""
    _, _, running = scripted
    got = httpx.post(
        f"{running.url}/get_reward",
        content=content,
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert got.status_code == 400 and message in got.json()["error"], got.text


def test_a_client_that_disconnects_mid_body_is_not_a_server_error(scripted):
    _, _, running = scripted
    with socket.create_connection(("127.0.0.1", running.port)) as s:
        s.sendall(
            b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"query": ['
        )
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while _metric(running, "densereward_requests_total", endpoint="get_reward", status="499") < 1:
        assert time.monotonic() < deadline, "the disconnect was not counted"
        time.sleep(0.05)
    assert _metric(running, "densereward_requests_total", endpoint="get_reward", status="500") == 0


# --------------------------------------------------------------------------- item 3: settings


@pytest.mark.parametrize(
    ("section", "values", "key"),
    [
        ("serve", {"abstain_reward": float("nan")}, "serve.abstain_reward"),
        ("serve", {"abstain_reward": float("inf")}, "serve.abstain_reward"),
        ("serve", {"batch_wait_ms": float("nan")}, "serve.batch_wait_ms"),
        ("reward", {"type": "mixed", "weights": [1.0, float("inf")]}, "reward.weights"),
        ("reward", {"type": "gated", "weights": [float("inf"), 0.1]}, "reward.weights"),
        ("reward", {"type": "mixed", "weights": [1e308, 1e308]}, "reward.weights"),
    ],
)
def test_non_finite_settings_are_refused_at_start_naming_the_key(section, values, key):
    """Before: each started a server whose affected answers failed to serialise (a 500)."""
    with pytest.raises(ConfigError, match=re.escape(key)):
        build_service({section: values})


def test_a_reward_that_is_not_finite_is_sent_as_abstained_not_a_500():
    """Weights of a plugin kind come at run time; a function's inf reaches the sum: the item
    abstains (counted), the answer serialises."""
    from densereward.serve.app import RewardService, ServeConfig

    def inf_reward(prompts, completions, answer, log_metric):
        return [float("inf")] * len(prompts)

    with pytest.raises(ConfigError, match="reward.weights"):
        RewardService([inf_reward], [float("nan")], None, ServeConfig())
    service = RewardService([inf_reward], None, None, ServeConfig(abstain_reward=-1.0))
    running = Running(make_app(service))
    try:
        got = httpx.post(f"{running.url}/score", json={"problems": ["p"], "responses": ["r"]})
        assert got.status_code == 200 and got.json()["rewards"] == [None]
        slime = httpx.post(f"{running.url}/slime", json={"prompt": "p", "response": "r"})
        assert slime.status_code == 200 and slime.json() == -1.0
        assert _metric(running, "densereward_non_finite_total") == 2
    finally:
        running.stop()


# --------------------------------------------------------------------------- item 5 (part)


def test_require_labels_refuses_requests_without_labels_for_reference_guided_rewards(scripted):
    server, _, _ = scripted
    config = _config(server.base_url)
    config["reward"]["reference_guided"] = True
    service, close = build_service(config)
    assert service.config.require_labels is True  # the default for a reference-guided reward
    running = Running(make_app(service))
    try:
        prompt = chat("What is 2 + 2?")
        for path, payload in (
            ("/get_reward", {"query": [prompt + "It is 4."], "prompts": [prompt]}),
            ("/slime", {"prompt": "What is 2 + 2?", "response": "It is 4."}),
            ("/score", {"problems": ["What is 2 + 2?"], "responses": ["It is 4."]}),
        ):
            got = httpx.post(f"{running.url}{path}", json=payload, timeout=30)
            assert got.status_code == 422 and "serve.require_labels" in got.json()["error"]
        assert (
            _metric(running, "densereward_refusals_total", endpoint="slime", reason="labels") == 1
        )
        labelled = {"query": [prompt + "The answer is 4."], "prompts": [prompt], "labels": ["4"]}
        assert httpx.post(f"{running.url}/get_reward", json=labelled, timeout=30).status_code == 200
    finally:
        running.stop()
        close()
    config["serve"]["require_labels"] = False  # asked for: the reference-free judge
    service, close = build_service(config)
    close()
    assert service.config.require_labels is False
    config["reward"]["reference_guided"] = False  # the reference-free dense reward: off
    service, close = build_service({**config, "serve": {}})
    close()
    assert service.config.require_labels is False


def test_abstentions_are_flagged_to_every_client_kind(scripted):
    """Before: slime got ``serve.abstain_reward`` (0.0) as a bare number and verl a float, each
    indistinguishable from a read of the lowest score (also 0.0 here)."""
    from densereward.serve.verl_reward import compute_score, compute_score_batch

    _, _, running = scripted
    url, header = running.url, "X-Densereward-Abstained"
    before = {
        e: _metric(running, "densereward_abstentions_total", endpoint=e)
        for e in ("get_reward", "slime", "score")
    }
    # OpenRLHF: extra_logs (a logged tensor per name), and the header counts them
    prompt = chat("What is 2 + 2?")
    payload = {"query": [prompt + "ABSTAIN", prompt + "It is 5."], "prompts": [prompt] * 2}
    got = httpx.post(f"{url}/get_reward", json=payload, timeout=30)
    assert got.json()["rewards"] == [0.0, 0.0] and got.headers[header] == "1"
    assert got.json()["extra_logs"] == {"densereward_abstained": [1.0, 0.0]}
    # slime: the bare number (its default) carries the header; ?details=1 (with slime's
    # --reward-key reward) carries the flag in the reward itself
    for response, abstained in (("ABSTAIN", True), ("It is 5.", False)):
        item = {"prompt": "What is 2 + 2?", "response": response, "label": None}
        bare = httpx.post(f"{url}/slime", json=item, timeout=30)
        assert bare.json() == 0.0 and bare.headers[header] == str(int(abstained))
        for query in ("?details=1", "?details", "?details=true"):
            got = httpx.post(f"{url}/slime{query}", json=item, timeout=30)
            assert got.json() == {"reward": 0.0, "abstained": abstained}, query
    got = httpx.post(f"{url}/slime?details=maybe", json=item, timeout=30)
    assert got.status_code == 422 and "details" in got.json()["error"]
    # verl: a dict per item, as verl's reward managers take it (score + reward_extra_info)
    one = compute_score("gsm8k", "ABSTAIN", None, {"question": "What is 2 + 2?"}, url=url)
    assert one == {"score": 0.0, "abstained": 1.0}
    many = compute_score_batch(
        ["gsm8k"] * 2,
        ["It is 5.", "ABSTAIN"],
        [None, None],
        [{"question": "What is 2 + 2?"}] * 2,
        url=url,
        abstain_reward=-1.0,
    )
    assert many == [{"score": 0.0, "abstained": 0.0}, {"score": -1.0, "abstained": 1.0}]
    bare = compute_score_batch(
        ["gsm8k"], ["ABSTAIN"], [None], [{"question": "What is 2 + 2?"}], url=url, return_dict=False
    )
    assert bare == [0.0]
    # counted per client kind (verl's requests are /score's)
    after = {e: _metric(running, "densereward_abstentions_total", endpoint=e) for e in before}
    assert {e: after[e] - before[e] for e in before} == {"get_reward": 1, "slime": 4, "score": 3}


def test_verl_without_the_question_abstains_and_says_so_once(scripted, monkeypatch, caplog):
    """Issue 41 rerun item 3: a verl row whose extra_info had no question was scored with an
    empty problem, silently. Now it is not read: it abstains, one warning per process names the
    fix, and the responses that came with their question are scored as before."""
    from densereward.serve import verl_reward

    server, _, running = scripted
    monkeypatch.setattr(verl_reward, "_said", set())
    n_reads = len(_responses_scored(server))
    counted = _metric(running, "densereward_abstentions_total", endpoint="score")
    with caplog.at_level("WARNING", logger="densereward.serve.verl_reward"):
        one = verl_reward.compute_score("gsm8k", "RIGHT: 4.", "4", {"index": 3}, url=running.url)
        many = verl_reward.compute_score_batch(
            ["gsm8k"] * 3,
            ["RIGHT: 4.", "RIGHT: 4.", "RIGHT: 4."],
            ["4"] * 3,
            [None, {"question": "What is 2 + 2?"}, {"question": "  "}],
            url=running.url,
        )
    assert one == {"score": 0.0, "abstained": 1.0}
    assert many == [
        {"score": 0.0, "abstained": 1.0},
        {"score": 1.0, "abstained": 0.0},
        {"score": 0.0, "abstained": 1.0},
    ]
    assert _responses_scored(server)[n_reads:] == ["RIGHT: 4."]  # only the one with its question
    # the client's own abstentions never reach the server, so /metrics does not count them: the
    # docs said it counted verl's abstentions (third rerun F8); they now say which it counts
    assert _metric(running, "densereward_abstentions_total", endpoint="score") == counted
    scaling = " ".join((REPO / "docs" / "scaling.md").read_text().split())
    assert "The server counts only what reaches it: verl's client abstains by itself" in scaling
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "1 of 1 responses came without the problem" in said[0], said
    assert "put the question into extra_info in verl's data preprocessing" in said[0]
    # scoring without the problem is a choice the user makes by name
    scored = verl_reward.compute_score(
        "gsm8k", "RIGHT: 4.", "4", url=running.url, missing_problem="score"
    )
    assert scored == {"score": 1.0, "abstained": 0.0}
    with pytest.raises(ValueError, match="missing_problem='skip'; use abstain"):
        verl_reward.compute_score("gsm8k", "x", "4", url=running.url, missing_problem="skip")


def test_verl_misspelt_reward_kwargs_are_named_once_not_dropped(scripted, monkeypatch, caplog):
    """Issue 41 item 3: ``missing_problm="score"`` (misspelt) returned a score with no word:
    the keyword was swallowed by ``**kwargs``. Now one warning per process per unknown key names
    it, the closest valid one and the list; verl's own keywords say nothing."""
    from densereward.serve import verl_reward

    _, _, running = scripted
    monkeypatch.setattr(verl_reward, "_said", set())
    with caplog.at_level("WARNING", logger="densereward.serve.verl_reward"):
        for _ in range(2):
            got = verl_reward.compute_score(
                "gsm8k",
                "RIGHT: 4.",
                "4",
                {"question": "What is 2 + 2?"},
                url=running.url,
                missing_problm="score",
                tokenizer=None,
            )
    assert got == {"score": 1.0, "abstained": 0.0}  # still scored: raising would crash verl
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "unknown keyword 'missing_problm' ignored (did you mean 'missing_problem'?)" in said[0]
    assert "Valid reward_kwargs: url, abstain_reward, timeout_s" in said[0]
    assert "tokenizer" not in said[0].split("Valid")[0]


def test_the_servers_quality_tracker_is_bounded(monkeypatch):
    """Before: every labelled item was kept and the auto threshold recomputed over all of them
    on every batch."""
    import numpy as np

    from densereward.metrics import classification
    from densereward.rewards import RewardQualityTracker

    sizes: list[int] = []
    real = classification.best_threshold

    def counting(scores, labels):
        sizes.append(len(scores))
        return real(scores, labels)

    monkeypatch.setattr(classification, "best_threshold", counting)
    tracker = RewardQualityTracker(history=64, max_records=10, alarm=False)
    rng = np.random.default_rng(0)
    for step in range(200):
        s = rng.random(8).tolist()
        y = [float(x > 0.5) for x in s]
        tracker.update(prompts=[f"p{step}"] * 8, scores=s, correct=y)
    assert len(tracker.records) == 10 and tracker.records[-1]["step"] == 200
    assert len(tracker._seen[0]) == 64 and max(sizes) <= 64 + 8
    assert math.isfinite(tracker.threshold)
    # the server builds its tracker with serve.quality_history
    with MisbehavingServer() as server:
        config = _config(server.base_url, quality_history=100)
        config["reward"].update(track=True, reference_guided=True)
        service, close = build_service(json.loads(json.dumps(config)))
        close()
    trackers = [getattr(f, "tracker", None) for f in service.funcs]
    assert any(t is not None and t.history == 100 and t.max_records == 100 for t in trackers)


def test_more_rank_pivots_than_candidates_is_a_422_not_a_500(scripted):
    """The tournament refuses k > n pivots (DataError) after the body was accepted, which the
    server answered 500 with a traceback; the body check now refuses it with its message."""
    _, _, running = scripted
    body = {"problem": "1+1?", "candidates": ["2", "3"], "pivots": 3}
    got = httpx.post(f"{running.url}/rank", json=body, timeout=30)
    assert got.status_code == 422 and "at most the number of candidates (2)" in got.json()["error"]


# ------------------------------------------------- issue 41 rerun item 2: per-sample rewards


def _graded(body) -> list[tuple[str, float]]:
    """Letter I (score 8/19) for a response holding MID, B for one holding LOW, else A."""
    text = str(body["messages"][-2]["content"])
    found = re.search(r"<response>\n(.*)\n</response>", text, re.S)
    shown = found.group(1) if found else ""
    return (
        [("I", -0.01)] if "MID" in shown else [("B", -0.01)] if "LOW" in shown else [("A", -0.01)]
    )


def test_a_gated_reward_served_is_the_same_alone_in_a_batch_and_beside_another_client():
    """Before: the gated reward normalised the judge inside correctness strata of any run of
    equal prompts in a call, so a correct sample scored 1 + 0.1 * (8/19 - 1/2) = 0.992 alone got
    1.0 in a request (or a micro-batch of another client's request) with wrong answers to the
    same problem. A served reward is a function of the sample."""
    config = {
        "reward": {"type": "gated", "track": False, "use_async": True, "reference_guided": False},
        "verifier": {"backend": "openai", "granularity": 20},
        "serve": {"batch_wait_ms": 300},
    }
    prompt = chat("What is 2 + 3?")
    target = "MID so the answer is \\boxed{5}"
    others = ["LOW so \\boxed{6}", "so \\boxed{7}", "LOW MID? \\boxed{4}"]

    def get_reward(responses):
        payload = {
            "query": [prompt + r for r in responses],
            "prompts": [prompt] * len(responses),
            "labels": ["5"] * len(responses),
        }
        got = httpx.post(f"{running.url}/get_reward", json=payload, timeout=60)
        assert got.status_code == 200, got.text
        return got.json()["rewards"]

    with MisbehavingServer(answer=_graded) as server:
        config["verifier"]["backend_options"] = {"base_url": server.base_url}
        service, close = build_service(config)
        running = Running(make_app(service))
        try:
            alone = get_reward([target])[0]
            in_batch = get_reward([others[0], target, *others[1:]])
            results: dict[str, list] = {}
            threads = [
                threading.Thread(target=lambda k=k, r=r: results.__setitem__(k, get_reward(r)))
                for k, r in (("target", [target]), ("other", others))
            ]
            n_calls = service.n_calls
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            merged = service.n_calls - n_calls == 1  # the two requests went to one reward call
        finally:
            running.stop()
            close()
    assert alone == pytest.approx(1 + 0.1 * (8 / 19 - 0.5), abs=1e-6)
    assert in_batch[1] == alone and results["target"] == [alone]
    assert merged, "the two clients' requests were not micro-batched together"
    assert in_batch[0] == pytest.approx(0.1 * (1 / 19 - 0.5), abs=1e-6)  # wrong: its own read
