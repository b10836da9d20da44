"""``densereward serve`` (issue 30 item 2): a real uvicorn server on loopback, backed by the
embedded SmolLM2-135M verifier and Math-Verify (reward.type gated, as ``train grpo`` uses it).

The OpenRLHF request is sent as OpenRLHF's client sends it (``aiohttp``, ``json=payload`` with
``query`` = chat-templated prompt + response, special tokens kept, ``prompts`` and ``labels``);
slime's as ``slime.rollout.rm_hub.remote_rm`` sends it.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import warnings

import pytest
from conftest import require

require("starlette", "serve")
require("uvicorn", "serve")
require("prometheus_client", "serve")

from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
from servers import free_port  # noqa: E402

from densereward.errors import ConfigError  # noqa: E402
from densereward.serve.app import make_app  # noqa: E402
from densereward.serve.cli import build_service  # noqa: E402
from densereward.serve.contracts import split_query  # noqa: E402

CONFIG = {
    "reward": {"type": "gated"},
    "verifier": {"granularity": 10, "backend_options": {"dtype": "float32"}},
    "serve": {"batch_wait_ms": 50, "max_items": 32, "max_body_bytes": 20000},
    "training": {"max_steps": 5},  # a train grpo file's other sections are not read
}


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


class Running:
    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=60
        )
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.server.started

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)


@pytest.fixture(scope="module")
def served():
    service, close = build_service(json.loads(json.dumps(CONFIG)))
    running = Running(make_app(service))
    yield service, running
    running.stop()
    close()


@pytest.mark.slow
def test_openrlhf_request_as_openrlhf_sends_it_gets_one_reward_per_query(served):
    aiohttp = require("aiohttp", "dev")
    service, running = served
    q = "What is 2 + 2?"
    cases = [
        ("2 + 2 = 4. The answer is 4.", "4"),
        ("2 + 2 = 5. The answer is 5.", "4"),
        ("3 * 3 = 9. The answer is 9.", "9"),
        ("3 * 3 = 6. The answer is 6.", "9"),
    ]
    questions = [q, q, "What is 3 * 3?", "What is 3 * 3?"]

    async def one(session, question, response, label):
        prompt = chat(question)
        payload = {
            "query": [prompt + response + "<|im_end|>"],
            "prompts": [prompt],
            "labels": [label],
        }
        async with session.post(f"{running.url}/get_reward", json=payload) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def main():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
            return await asyncio.gather(
                *(one(session, qq, r, lab) for qq, (r, lab) in zip(questions, cases, strict=True))
            )

    calls_before = service.n_calls
    answers = asyncio.run(main())
    for a in answers:
        assert set(a) == {"rewards", "scores", "extra_logs"}
        assert len(a["rewards"]) == 1 and a["scores"] == a["rewards"]
        assert a["extra_logs"] == {"densereward_abstained": [0.0]}
    r = [a["rewards"][0] for a in answers]
    # gated (w = [1, 0.1], one sample per prompt): a correct answer is >= 0.95, a wrong one <= 0.05
    assert r[0] >= 0.95 and r[2] >= 0.95 and r[1] <= 0.05 and r[3] <= 0.05
    assert service.n_calls - calls_before < 4  # the four concurrent requests were batched
    # several queries in one request, without prompts: one reward each (labels are required
    # for the gated reward: serve.require_labels, tests/test_serve_refusals.py)
    many = {"query": [chat(q) + "The answer is 4.<|im_end|>"] * 3, "labels": ["4"] * 3}
    got = httpx.post(f"{running.url}/get_reward", json=many, timeout=120).json()
    assert len(got["rewards"]) == 3 and all(isinstance(x, float) for x in got["rewards"])


@pytest.mark.slow
def test_slime_score_rank_health_and_verl(served):
    service, running = served
    slime = {
        "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        "response": "The answer is 4.",
        "label": "4",
    }
    reward = httpx.post(f"{running.url}/slime", json=slime, timeout=120).json()
    assert isinstance(reward, float) and reward >= 0.95
    body = {"problems": ["What is 2 + 2?"] * 2, "responses": ["4", "5"], "references": ["4", "4"]}
    scored = httpx.post(f"{running.url}/score", json=body, timeout=120).json()
    assert scored["abstained"] == [False, False] and scored["rewards"][0] > scored["rewards"][1]
    ranked = httpx.post(
        f"{running.url}/rank",
        timeout=120,
        json={"problem": "What is 2 + 2?", "candidates": ["2 + 2 = 4", "2 + 2 = 5", "It is 4."]},
    ).json()
    assert sorted(ranked["order"]) == [0, 1, 2] and len(ranked["win_rate"]) == 3
    health = httpx.get(f"{running.url}/health").json()
    assert health["status"] == "ok" and "SmolLM2" in health["model"]
    from densereward.serve.verl_reward import compute_score

    value = compute_score(
        "openai/gsm8k", "The answer is 4.", "4", {"question": "What is 2 + 2?"}, url=running.url
    )
    # gated: a correct answer is in [0.95, 1.05]; the flag for verl's reward_extra_info
    assert value["score"] >= 0.95 and value["abstained"] == 0.0
    metrics = httpx.get(f"{running.url}/metrics").text
    assert 'densereward_requests_total{endpoint="get_reward",status="200"}' in metrics
    assert (
        "densereward_abstentions_total" in metrics
        and "densereward_request_seconds_bucket" in metrics
    )
    assert 'densereward_verifier_metric{name="verifier/' in metrics  # labels came: quality metrics


@pytest.fixture(scope="module")
def refusing():
    """CONFIG's server with its verifier on a scripted OpenAI-compatible loopback server (no
    model load): the bad requests below are refused before any read reaches the verifier."""
    from servers import MisbehavingServer

    with MisbehavingServer() as verifier_server:
        config = json.loads(json.dumps(CONFIG))
        config["verifier"] = {
            "backend": "openai",
            "granularity": 10,
            "backend_options": {"base_url": verifier_server.base_url},
        }
        with warnings.catch_warnings():  # the scripted server has no /tokenize endpoint
            warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
            service, close = build_service(config)
        running = Running(make_app(service))
        yield verifier_server, running
        running.stop()
        close()


@pytest.mark.parametrize(
    ("path", "content", "status", "message"),
    [
        ("/get_reward", b"{not json", 400, "not JSON"),
        ("/get_reward", b'{"prompts": ["a"]}', 422, "'query' is missing"),
        ("/get_reward", b'{"query": ["a", "b"], "prompts": ["a"]}', 422, "'prompts' has 1 items"),
        ("/get_reward", b'{"query": ["a"], "labels": ["1", "2"]}', 422, "'labels' has 2 items"),
        ("/get_reward", b'{"query": "a"}', 422, "list of strings"),
        ("/get_reward", json.dumps({"query": ["a"] * 33}).encode(), 413, "at most 32"),
        ("/get_reward", b'{"query": ["' + b"x" * 30000 + b'"]}', 413, "at most 20000"),
        ("/slime", b'{"prompt": "a"}', 422, "'response' must be a string"),
        ("/score", b'{"problems": ["a"], "responses": []}', 422, "'responses' has 0"),
        ("/rank", b'{"problem": "a", "candidates": ["x"]}', 422, "at least 2"),
        ("/score", b"[1, 2]", 422, "JSON object"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message(refusing, path, content, status, message):
    verifier_server, running = refusing
    resp = httpx.post(
        f"{running.url}{path}",
        content=content,
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == status and message in resp.json()["error"]
    # refused before any read: the verifier saw its start-up calibration and nothing else
    assert verifier_server.chat_requests() == []
    assert verifier_server.chat_requests(calibration=True)


@pytest.mark.slow
def test_shutdown_finishes_requests_in_flight(served):
    service, _ = served
    running = Running(make_app(service))  # a second server on the same service
    body = {
        "problems": ["What is 2 + 2?"] * 12,
        "responses": [f"It is {k}." for k in range(12)],
        "references": ["4"] * 12,
    }
    out: dict = {}

    def send():
        out["resp"] = httpx.post(f"{running.url}/score", json=body, timeout=120)

    t = threading.Thread(target=send)
    t.start()
    deadline = time.monotonic() + 10
    while service.metrics.in_flight._value.get() < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    running.stop()  # SIGTERM's path: stop accepting, finish what is in flight
    t.join(timeout=120)
    assert out["resp"].status_code == 200 and len(out["resp"].json()["rewards"]) == 12
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{running.url}/health", timeout=2)


def test_config_refuses_the_group_reward_and_unknown_sections():
    with pytest.raises(ConfigError, match="reward.type=group"):
        build_service({"reward": {"type": "group"}})
    with pytest.raises(ConfigError, match="unknown section"):
        build_service({"rewards": {}})
    with pytest.raises(ConfigError, match="serve.max_batch"):
        build_service({"serve": {"max_batch": 0}})


def test_a_train_sac_or_compare_config_given_to_serve_is_named_as_such():
    """``serve --config configs/sac_fetchreach_verifier.yaml`` said "unknown section(s) ['env',
    'her', 'sac']"; now it names the command the file is for, as ``train`` does."""
    from densereward.config import load_yaml

    repo = Path(__file__).resolve().parents[1]
    sac = load_yaml(repo / "configs" / "sac_fetchreach_verifier.yaml")
    with pytest.raises(ConfigError) as err:
        build_service(sac)
    assert str(err.value).startswith(
        "this is a `train sac` config (it has env, sac, her), not a `serve` one: run "
        "`densereward train sac --config FILE`"
    )
    compare = load_yaml(repo / "configs" / "compare_fetchreach.yaml")
    with pytest.raises(ConfigError, match=r"^this is a `compare` config \(it has trainer"):
        build_service(compare)
    # a GRPO file's sections serve reads; a typo there is still an unknown section
    with pytest.raises(ConfigError, match=r"^unknown section\(s\) \['rewrd'\]"):
        build_service({"model": {}, "data": {}, "rewrd": {}})


def test_densereward_serve_command_answers_and_exits_cleanly_on_sigterm(tmp_path):
    """The console command end to end, on a scripted OpenAI-compatible verifier (no model load)."""
    import os
    import signal
    import subprocess
    import sys

    from servers import MisbehavingServer

    with MisbehavingServer() as verifier_server:
        port = free_port()
        cfg = tmp_path / "serve.yaml"
        cfg.write_text(
            "reward: {type: dense, track: false, use_async: true}\n"
            f"verifier: {{backend: openai, backend_options: {{base_url: [{verifier_server.base_url}]}}, "
            "granularity: 20}\n"
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "densereward.cli",
                "serve",
                "--config",
                str(cfg),
                "--port",
                str(port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            payload = {
                "query": [chat("1+1?") + "2<|im_end|>"],
                "prompts": [chat("1+1?")],
                "labels": ["2"],
            }
            got = httpx.post(f"http://127.0.0.1:{port}/get_reward", json=payload, timeout=30).json()
            assert len(got["rewards"]) == 1 and 0.0 <= got["rewards"][0] <= 1.0
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
        out = proc.stdout.read() if proc.stdout else ""
        assert "[serve] reward server on" in out


def test_split_query_takes_the_response_after_the_prompt():
    p = chat("What is 2 + 2?")
    assert split_query(p + "It is 4.<|im_end|>", p) == ("What is 2 + 2?", "It is 4.")
    # without prompts: after the last assistant header of the template (issue 40 item 1)
    assert split_query("<s>[INST] hi [/INST] yes</s>", None) == ("hi", "yes")


def test_the_documented_multi_replica_command_passes_its_dry_run(monkeypatch, capsys, caplog):
    """Issue 41 item 6e: docs/scaling.md's command switches verifier.backend to openai on a GRPO
    file whose backend_options hold the transformers backend's device and dtype; it failed
    ("unknown verifier.backend_options for backend 'openai': ... device; ... dtype"). The exact
    command, in dry-run form, with two scripted replicas standing in for 10.0.0.1 and 10.0.0.2."""
    import shlex
    from pathlib import Path

    from servers import MisbehavingServer

    from densereward.cli import main

    repo = Path(__file__).resolve().parents[1]
    lines = (repo / "docs" / "scaling.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("densereward serve --config"))
    command = lines[start]
    while command.endswith("\\"):
        start += 1
        command = command[:-1] + lines[start]
    argv = shlex.split(command)
    docs_urls = ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]
    assert argv[:2] == ["densereward", "serve"] and all(u in command for u in docs_urls)
    monkeypatch.chdir(repo)  # the command's config path is relative to the repository root
    with MisbehavingServer() as a, MisbehavingServer() as b:
        for docs_url, url in zip(docs_urls, (a.base_url, b.base_url), strict=True):
            argv = [x.replace(docs_url, url) for x in argv]
        with caplog.at_level("WARNING", logger="densereward.config"):
            rc = main([*argv[1:], "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"ok  verifier server: {a.base_url}, {b.base_url} -- contacted" in out, out
    assert "ok  serve: http://0.0.0.0:5000" in out and "ok  reward: gated (use_async True)" in out
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped == [
        "verifier.backend=openai: dropped verifier.backend_options device, dtype of the config "
        "(options of 'transformers' that 'openai' does not take)"
    ]


def test_serve_dry_run_exits_2_when_no_replica_answers(capsys):
    from densereward.cli import main

    closed = f"http://127.0.0.1:{free_port()}/v1"
    argv = [
        "serve",
        "--dry-run",
        "verifier.backend=openai",
        f"verifier.backend_options.base_url={closed}",
    ]
    assert main(argv) == 2
    assert f"!!  verifier server at {closed} is not reachable" in capsys.readouterr().out


def test_serve_dry_run_names_every_replica_that_is_down_and_the_ones_up(capsys):
    """Issue 41 rerun item 4: with several replicas down the dry run named only the first."""
    from servers import MisbehavingServer

    from densereward.cli import main

    closed = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]

    def dry_run(urls):
        argv = [
            "serve",
            "--dry-run",
            "verifier.backend=openai",
            f"verifier.backend_options.base_url=[{','.join(urls)}]",
        ]
        return main(argv), capsys.readouterr().out

    with MisbehavingServer() as up:
        rc, out = dry_run([closed[0], up.base_url, closed[1]])
    assert rc == 0, out
    line = next(x for x in out.splitlines() if "verifier server:" in x)
    assert (
        f"2 of 3 replicas did not answer: {closed[0]}, {closed[1]} (the run starts on "
        f"{up.base_url} and takes them back when they answer)"
    ) in line, line
    rc, out = dry_run(closed)
    assert rc == 2, out
    problems = [x for x in out.splitlines() if x.lstrip().startswith("!!")]
    assert len(problems) == 1, out
    assert "none of the 2 verifier servers answered: " in problems[0]
    assert all(f"verifier server at {u} is not reachable" in problems[0] for u in closed)
    assert problems[0].endswith("start them or fix verifier.backend_options.base_url")


def test_a_sparse_server_says_once_that_the_verifier_reads_every_labelled_item(capsys, caplog):
    """F12: a reward.type=sparse server loaded the verifier and read every labelled item with
    it, only to track reward quality (/metrics verifier/mean_mass, window/n_read), and neither
    the dry run nor the start said so. Now both say what the reads are for, what they cost and
    the key that turns them off (reward.track=false); not said with tracking off, nor for a
    reward that is the verifier's."""
    import logging

    from servers import MisbehavingServer

    from densereward.cli import main

    with MisbehavingServer() as up:
        argv = [
            "serve",
            "--dry-run",
            "reward.type=sparse",
            "verifier.backend=openai",
            f"verifier.backend_options.base_url={up.base_url}",
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "reward.track=false" in out and "every labelled item" in out, out
        assert main([*argv, "reward.track=false"]) == 0
        assert "every labelled item" not in capsys.readouterr().out
        assert main([*argv[:2], "reward.type=dense", *argv[3:]]) == 0
        assert "every labelled item" not in capsys.readouterr().out

        def start(reward: dict) -> list[str]:
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="densereward.serve.cli"):
                _, close = build_service(
                    {
                        "reward": reward,
                        "verifier": {
                            "backend": "openai",
                            "granularity": 20,
                            "calibrate": False,
                            "backend_options": {"base_url": up.base_url},
                        },
                    }
                )
                close()
            return [
                r.getMessage() for r in caplog.records if "every labelled item" in r.getMessage()
            ]

        said = start({"type": "sparse"})
        assert len(said) == 1 and "reward.track=false" in said[0], said
        assert start({"type": "sparse", "track": False}) == []
        assert start({"type": "gated"}) == []


def test_the_served_tracker_counts_batches_and_names_an_abstained_check(caplog):
    """Rerun 10 F5: a reward server's tracker log said "undefined at step 2" (a server has
    requests, not training steps), and a request whose label was sent but whose Math-Verify
    check timed out was told "no completion in the batch has a Math-Verify label". Rerun 11
    F1: /metrics then still showed the earlier batch's verifier/pass_rate (0.5 beside the
    latest batch's n_valid 0); it shows NaN for a metric the latest batch left undefined."""
    from prometheus_client import generate_latest

    from densereward.serve.contracts import Item

    def gauge(name: str) -> float:
        text = generate_latest(service.metrics.registry).decode()
        key = f'densereward_verifier_metric{{name="{name}"}} '
        return float(next(ln for ln in text.splitlines() if ln.startswith(key)).split()[-1])

    config = {"reward": {"type": "sparse", "math_timeout_s": 1}, "serve": {"math_workers": 1}}
    service, close = build_service(config)
    try:
        decided = [Item("What is 2+3?", "\\boxed{5}", "5"), Item("What is 2+3?", "\\boxed{6}", "5")]
        assert asyncio.run(service.reward_batch(decided)) == [1.0, 0.0]
        assert gauge("verifier/pass_rate") == 0.5
        huge = "\\boxed{9^{9^{9^{9}}}}"  # Math-Verify cannot decide it within 1 s
        with caplog.at_level("WARNING", logger="densereward.rewards.tracking"):
            got = asyncio.run(service.reward_batch([Item("What is 2+3?", huge, "5")]))
        assert math.isnan(gauge("verifier/pass_rate")) and gauge("verifier/n_valid") == 0
    finally:
        close()
    assert got == [None]  # the check abstained: no reward, not a 0
    said = [r.getMessage() for r in caplog.records if r.name == "densereward.rewards.tracking"]
    undefined = [m for m in said if "verifier/pass_rate" in m]
    assert len(undefined) == 1 and undefined[0].startswith("undefined at batch 2,"), said
    assert (
        "verifier/pass_rate: no completion in the batch has a Math-Verify verdict (no "
        in (undefined[0])
    )
    assert "check abstained: timed out" in undefined[0] and "Math-Verify label" not in undefined[0]
