"""``densereward serve`` under restarts and load (issue 40 items 6 and 7): a real uvicorn server
on loopback, reward functions scripted to hang where the verifier or Math-Verify would, and the
console command under SIGTERM and Ctrl-C against a scripted OpenAI-compatible verifier."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import require

require("starlette", "serve")
require("uvicorn", "serve")
require("prometheus_client", "serve")

import httpx  # noqa: E402
from servers import Fault, MisbehavingServer, free_port, scripted_verifier  # noqa: E402

from densereward.serve.app import RewardService, ServeConfig, make_app  # noqa: E402
from densereward.serve.lifecycle import make_server  # noqa: E402

# an in-process verifier loaded from the cache directory, as /health saw it
VERIFIER = SimpleNamespace(
    config=SimpleNamespace(model=None),
    backend=SimpleNamespace(model_id="/root/.cache/densereward/smollm2-135m"),
)


class Hangs:
    """A reward function whose call for a response containing "hang" never returns."""

    __name__ = "hangs"

    def __init__(self) -> None:
        self.entered = threading.Event()

    async def __call__(self, prompts, completions, answer, log_metric):
        if any("hang" in c for c in completions):
            self.entered.set()
            await asyncio.sleep(3600)
        return [float(len(c)) for c in completions]


class SyncHangs(Hangs):
    """The same, synchronous (runs in a worker thread, as an in-process model's reward does)."""

    def __call__(self, prompts, completions, answer, log_metric):  # type: ignore[override]
        if any("hang" in c for c in completions):
            self.entered.set()
            time.sleep(3600)
        return [float(len(c)) for c in completions]


class Served:
    """A real uvicorn server (this module's lifecycle) in a thread, on a free loopback port."""

    def __init__(self, funcs, service=None, on_close=None, **serve):
        self.config = ServeConfig(**{"port": free_port(), "batch_wait_ms": 1, **serve})
        if service is not None:
            self.config = service.config = ServeConfig(
                **{**vars(service.config), "port": self.config.port}
            )
        self.service = service or RewardService(funcs, None, VERIFIER, self.config)
        self.out = io.StringIO()
        self.server = make_server(
            make_app(self.service, on_close=on_close),
            self.config,
            self.service.drain,
            out=self.out,
        )
        self.url = f"http://127.0.0.1:{self.config.port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started

    def post_in_thread(self, path: str, body: dict) -> dict:
        out: dict = {}

        def send() -> None:
            try:
                out["resp"] = httpx.post(f"{self.url}{path}", json=body, timeout=60)
            except httpx.HTTPError as e:
                out["error"] = e

        out["thread"] = threading.Thread(target=send, daemon=True)
        out["thread"].start()
        return out

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def score_body(*responses: str) -> dict:
    return {"problems": ["1+1?"] * len(responses), "responses": list(responses)}


@pytest.mark.parametrize("kind", [Hangs, SyncHangs])
def test_sigterm_drain_is_bounded_and_cut_requests_get_503(kind):
    """Issue 40 item 6: after SIGTERM the server waited for a hung reward call for as long as it
    hung (a verifier read: timeout_s x (max_retries + 1)); item 7: the request cut by the drain
    got a bare 500 and a traceback. Now the drain lasts serve.shutdown_timeout_s: the request
    still running gets 503 with a message and Retry-After, the process is free to exit."""
    fn = kind()
    served = Served([fn], shutdown_timeout_s=1.5)
    try:
        ok = httpx.post(f"{served.url}/score", json=score_body("fine"), timeout=10)
        assert ok.status_code == 200 and ok.json()["rewards"] == [4.0]
        hung = served.post_in_thread("/score", score_body("hang"))
        assert fn.entered.wait(10)
        t0 = time.monotonic()
        served.server.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
        hung["thread"].join(timeout=30)
        served.thread.join(timeout=30)
        took = time.monotonic() - t0
    finally:
        served.stop()
    resp = hung["resp"]
    assert resp.status_code == 503, resp.text
    assert "serve.shutdown_timeout_s=1.5" in resp.json()["error"]
    assert resp.headers["retry-after"] == "1"
    assert not served.thread.is_alive() and 1.4 <= took < 6.0, took
    assert "SIGTERM: draining" in served.out.getvalue()
    assert served.server.signals == [signal.SIGTERM]


def test_a_second_ctrl_c_answers_the_requests_in_flight_at_once():
    """Issue 40 item 7: a second Ctrl-C (uvicorn's force exit) cancelled the request in flight
    into a bare 500 with two tracebacks. Now it ends the drain at once with 503s."""
    fn = Hangs()
    served = Served([fn], shutdown_timeout_s=60)
    try:
        hung = served.post_in_thread("/score", score_body("hang"))
        assert fn.entered.wait(10)
        t0 = time.monotonic()
        served.server.handle_exit(signal.SIGINT, None)
        time.sleep(0.3)
        assert hung["thread"].is_alive()  # the first Ctrl-C drains: the request still runs
        served.server.handle_exit(signal.SIGINT, None)
        hung["thread"].join(timeout=10)
        served.thread.join(timeout=10)
        took = time.monotonic() - t0
    finally:
        served.stop()
    assert hung["resp"].status_code == 503 and "second Ctrl-C" in hung["resp"].json()["error"]
    assert took < 5.0 and not served.thread.is_alive()
    out = served.out.getvalue()
    assert "SIGINT: draining" in out and "stopping now" in out


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP/1.1 response (headers, then Content-Length bytes): uvicorn may send the
    headers and the body in two segments, and a second recv would read the first's body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_idle_connections_outlive_the_client_pools():
    """Issue 40 item 6: uvicorn closes an idle connection after 5 s, before aiohttp's pool (15 s)
    drops it, so a client reusing it races the close. The server keeps it serve.keep_alive_s
    (75 s): a request on a connection idle for 6 s is answered on that same connection."""
    served = Served([Hangs()])
    try:
        with socket.create_connection(("127.0.0.1", served.config.port), timeout=10) as sock:
            request = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
            sock.sendall(request)
            assert _read_response(sock).startswith(b"HTTP/1.1 200")
            time.sleep(6.0)
            sock.sendall(request)
            again = _read_response(sock)
    finally:
        served.stop()
    assert again.startswith(b"HTTP/1.1 200"), again
    assert ServeConfig().keep_alive_s > 15


def test_health_names_the_model_not_its_cache_path():
    """Issue 40 item 7: /health reported the cache directory the embedded model loads from."""
    served = Served([Hangs()])
    try:
        health = httpx.get(f"{served.url}/health", timeout=10).json()
    finally:
        served.stop()
    assert health["model"] == "SmolLM2-135M-Instruct", health


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {"problems": [7], "responses": ["a"]},
            422,
            "'problems' must be a list of strings; item 0 is int (7)",
        ),
        ({"problems": ["a", None], "responses": ["a", "b"]}, 422, "item 1 is NoneType"),
        (
            {"problems": ["a"] * 5, "responses": ["a"] * 5},
            413,
            "at most 4 per request (serve.max_items)",
        ),
        (
            {"problems": ["x" * 3000], "responses": ["a"]},
            413,
            "at most 2000 (serve.max_body_bytes)",
        ),
    ],
)
def test_refusals_name_the_item_and_the_setting(body, status, message):
    """Issue 40 item 7: "'problems' must be a list of strings, got list" for an int item; 413s
    that did not say which setting to raise."""
    served = Served([Hangs()], max_items=4, max_body_bytes=2000)
    try:
        resp = httpx.post(f"{served.url}/score", json=body, timeout=10)
    finally:
        served.stop()
    assert resp.status_code == status and message in resp.json()["error"], resp.text


def test_a_served_format_warning_names_the_clients_length_setting(caplog):
    """Issue 40 item 7: the reward server's format warning told the user to check
    training.max_completion_length, a setting the server does not have: the completions' length
    is the trainer's (OpenRLHF --generate_max_len, slime --rollout-max-response-len, verl
    data.max_response_length)."""
    from densereward.serve.cli import build_service

    with MisbehavingServer() as verifier:
        service, close = build_service(
            {
                "reward": {"type": "dense", "use_async": True},
                "verifier": {
                    "backend": "openai",
                    "granularity": 20,
                    "calibrate": False,
                    "backend_options": {"base_url": verifier.base_url},
                },
            }
        )
        served = Served([], service=service)
        try:
            with caplog.at_level("WARNING"):
                body = score_body("I am not sure", "Let me think", "Hmm", "It is 2")
                body["references"] = ["2"] * 4
                resp = httpx.post(f"{served.url}/score", json=body, timeout=60)
        finally:
            served.stop()
            close()
    assert resp.status_code == 200, resp.text
    warning = next(
        m for r in caplog.records if "final answer" in (m := r.getMessage()) and "Said once" in m
    )
    assert "--generate_max_len" in warning and "data.max_response_length" in warning
    assert "training.max_completion_length" not in warning


def _serve_command(tmp_path, verifier_url: str, port: int, shutdown_timeout_s: float):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "reward: {type: dense, track: false, use_async: true}\n"
        f"verifier: {{backend: openai, granularity: 20, calibrate: false, backend_options: "
        f"{{base_url: [{verifier_url}], timeout_s: 30, max_retries: 0}}}}\n"
        f"serve: {{shutdown_timeout_s: {shutdown_timeout_s}, require_labels: false}}\n"
    )
    return _start_serve(cfg, port)


def _start_serve(cfg, port: int, wait_s: float = 120):
    """``densereward serve --config cfg --port port`` in a subprocess, once /health answers."""
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
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(proc.stdout.read() if proc.stdout else "no output")


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_the_command_drains_on_a_signal_and_exits_with_its_status(tmp_path, sig, status):
    """Issue 40 items 6 and 7, end to end: a verifier read that hangs (the scripted server stalls
    20 s) while the command gets Ctrl-C or SIGTERM. Before: nothing printed, the in-flight
    request a bare 500 with tracebacks after waiting out the read, exit status 0 for Ctrl-C.
    Now: "draining" printed, the request a 503 naming serve.shutdown_timeout_s, the exit within
    the drain, 130 after Ctrl-C (docs/configuration.md) and 0 after SIGTERM."""
    with MisbehavingServer(default=Fault("stall", delay_s=20)) as verifier:
        port = free_port()
        proc = _serve_command(tmp_path, verifier.base_url, port, shutdown_timeout_s=2)
        try:
            out: dict = {}

            def send() -> None:
                body = score_body("2")
                out["resp"] = httpx.post(f"http://127.0.0.1:{port}/score", json=body, timeout=60)

            t = threading.Thread(target=send, daemon=True)
            t.start()
            deadline = time.monotonic() + 10
            while not verifier.chat_requests() and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.monotonic()
            proc.send_signal(sig)
            rc = proc.wait(timeout=60)
            took = time.monotonic() - t0
            t.join(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = proc.stdout.read() if proc.stdout else ""
    assert rc == status, text
    assert took < 10, (took, text)
    assert (
        out["resp"].status_code == 503
        and "serve.shutdown_timeout_s=2" in out["resp"].json()["error"]
    )
    assert f"{signal.Signals(sig).name}: draining" in text
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text


def test_serve_prints_the_verl_module_path(capsys):
    """Issue 40 item 7: docs/scaling.md gave verl's custom_reward_function.path as
    ``.../densereward/serve/verl_reward.py`` with no way to find it."""
    from densereward.cli import main

    assert main(["serve", "--verl-path"]) == 0
    path = capsys.readouterr().out.strip()
    assert path.endswith(os.path.join("densereward", "serve", "verl_reward.py")) and os.path.isfile(
        path
    )


# ---------------------------------------------------------------------------------------- verl


def _load_as_verl_does(path: str):
    """verl's ``get_custom_reward_fn`` (verl/trainer/ppo/reward.py): the file by path, as
    ``custom_module``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    return module


def test_verl_functions_pickle_however_the_file_is_loaded(monkeypatch):
    """Issue 40 item 6: loaded by path twice (as verl does), the first load's functions no longer
    pickled ("not the same object as custom_module.compute_score"), and a worker without
    ``custom_module`` could not load any. Both loads' functions now pickle, with pickle and
    cloudpickle, and load in a fresh interpreter."""
    import pickle

    import densereward.serve.verl_reward as installed

    monkeypatch.delitem(sys.modules, "custom_module", raising=False)
    first = _load_as_verl_does(installed.__file__)
    second = _load_as_verl_does(installed.__file__)
    dumps = [pickle.dumps(m.compute_score) for m in (first, second)]
    dumps += [pickle.dumps(m.compute_score_batch) for m in (first, second)]
    cloudpickle = require("cloudpickle", "robotics")
    dumps.append(cloudpickle.dumps(first.compute_score))
    code = (
        "import pickle, sys; fns = [pickle.loads(bytes.fromhex(h)) for h in sys.argv[1:]]; "
        "assert 'custom_module' not in sys.modules; print(sorted({f.__name__ for f in fns}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    got = subprocess.run(
        [sys.executable, "-c", code, *(d.hex() for d in dumps)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "['compute_score', 'compute_score_batch']"


def test_verl_reward_retries_through_a_restart_and_refuses_at_once_on_a_4xx():
    """Issue 40 item 6: verl_reward made one attempt, so a rolling restart of the server crashed
    the verl worker. A server that comes up 1.5 s after the call starts now answers it; a 422
    (too many items) is raised at once with the server's message."""
    from densereward.serve.verl_reward import compute_score

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict = {}

    def call() -> None:
        t0 = time.monotonic()
        out["value"] = compute_score(
            "gsm8k",
            "hello",
            "5",
            {"question": "q"},
            url=url,
            retry_base_s=0.2,
            retry_max_s=0.5,
            max_retries=20,
        )
        out["took"] = time.monotonic() - t0

    t = threading.Thread(target=call, daemon=True)
    t.start()
    time.sleep(1.5)  # the server is down: connections are refused
    served = Served([Hangs()], port=port)
    try:
        t.join(timeout=30)
        # len("hello"): Hangs' reward
        assert out.get("value") == {"score": 5.0, "abstained": 0.0} and out["took"] >= 1.4, out
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"refused the request: HTTP 413 .*serve.max_items"):
            from densereward.serve.verl_reward import compute_score_batch

            compute_score_batch(
                ["d"] * 2000,
                ["x"] * 2000,
                ["1"] * 2000,
                [{"question": "q"}] * 2000,
                url=url,
                retry_base_s=5,
            )
        assert time.monotonic() - t0 < 3
    finally:
        served.stop()


# ------------------------------------------------------------------------------ Math-Verify


def sparse_service(verifier, reward, serve=None, **verifier_settings):
    """``build_service`` of a sparse reward (``reward``: its other settings) with the scripted
    ``verifier`` server as the verifier (``verifier_settings``: its other settings):
    ``(service, close)``."""
    from densereward.serve.cli import build_service

    return build_service(
        {
            "reward": {"type": "sparse", **reward},
            "verifier": {
                "backend": "openai",
                "granularity": 20,
                "calibrate": False,
                **verifier_settings,
                "backend_options": {"base_url": verifier.base_url},
            },
            "serve": serve or {},
        }
    )


def test_an_answer_that_hangs_math_verify_does_not_stall_other_requests():
    """Issue 40 item 6: one completion whose answer hangs SymPy (9^9^9^9) held every other
    request until its Math-Verify deadline: one worker behind one lock, and the server's lock
    around every sync reward function. Now the checks of concurrent requests run on
    serve.math_workers workers, each with its own deadline (reward.math_timeout_s)."""
    with MisbehavingServer() as verifier:
        service, close = sparse_service(
            verifier, {"track": False, "math_timeout_s": 6.0}, {"math_workers": 2}
        )
        served = Served([], service=service)
        try:
            warm = {**score_body(r"\boxed{1}", r"\boxed{2}"), "references": ["1", "2"]}
            assert httpx.post(f"{served.url}/score", json=warm, timeout=60).json()["rewards"] == [
                1.0,
                1.0,
            ]
            hung = served.post_in_thread(
                "/score", {**score_body(r"\boxed{9^{9^{9^{9}}}}"), "references": ["5"]}
            )
            time.sleep(0.5)
            t0 = time.monotonic()
            fine = httpx.post(
                f"{served.url}/score",
                timeout=60,
                json={**score_body(r"\boxed{4}"), "references": ["4"]},
            )
            took = time.monotonic() - t0
            hung["thread"].join(timeout=60)
        finally:
            served.stop()
            close()
    assert fine.json()["rewards"] == [1.0] and took < 3.0, took  # was: after the hung check's 6 s
    assert hung["resp"].json() == {"rewards": [None], "abstained": [True]}  # its deadline passed


@pytest.mark.slow
def test_a_hanging_answer_costs_one_check_and_the_log_says_it_once(caplog):
    """F8: `serve` with reward.type=sparse (the tracker on) and reward.math_timeout_s=1 logged
    "math-verify check exceeded 1.0 s" twice per hanging item, each a timeout: the sparse reward
    and the reward-quality tracker both checked it. Now each item is checked once (one timeout),
    and three hanging items give one warning with the fix; the others are counted."""
    import logging

    with MisbehavingServer() as verifier:
        service, close = sparse_service(verifier, {"track": True, "math_timeout_s": 1.0})
        served = Served([], service=service)
        checker = service.funcs[0].checker
        try:
            with caplog.at_level(logging.WARNING, logger="densereward.rewards.math"):
                for b in (9, 8, 7):
                    hanging = rf"\boxed{{{b}^{{{b}^{{{b}^{{{b}}}}}}}}}"
                    body = {**score_body(hanging, r"\boxed{2}"), "references": ["5", "2"]}
                    got = httpx.post(f"{served.url}/score", json=body, timeout=120).json()
                    assert got["rewards"] == [None, 1.0], got
        finally:
            served.stop()
            close()
    assert checker.n_timeouts == 3  # was 6: the tracker checked each item again
    lines = [r.getMessage() for r in caplog.records if r.name == "densereward.rewards.math"]
    assert len(lines) == 1 and "reward.math_timeout_s" in lines[0], lines


@pytest.mark.slow
def test_a_hanging_answer_is_an_abstention_under_the_gated_reward_too():
    """F1: `serve` with reward.type=gated (the default) answered an item whose Math-Verify check
    timed out as an ordinary wrong answer (`{"reward": -0.0104, "abstained": false}`, header 0)
    while the log said "the reward abstains"; sparse flagged it. Now every client is told."""
    with MisbehavingServer() as verifier:
        service, close = sparse_service(
            verifier, {"type": "gated", "track": False, "math_timeout_s": 1.0}
        )
        served = Served([], service=service)
        try:
            hanging = {"prompt": "What is 2+3?", "response": HANGING, "label": "5"}
            resp = httpx.post(f"{served.url}/slime?details=1", json=hanging, timeout=120)
            wrong = {**hanging, "response": r"\boxed{7}"}
            scored = httpx.post(f"{served.url}/slime?details=1", json=wrong, timeout=120)
            metrics = httpx.get(f"{served.url}/metrics", timeout=30).text
        finally:
            served.stop()
            close()
    assert resp.json() == {"reward": 0.0, "abstained": True}, resp.text
    assert resp.headers["x-densereward-abstained"] == "1"
    assert 'densereward_abstentions_total{endpoint="slime"} 1.0' in metrics
    assert scored.json()["abstained"] is False and scored.headers["x-densereward-abstained"] == "0"


HANGING = r"\boxed{9^{9^{9^{9}}}}"


def test_the_served_tracker_reads_at_the_configured_threshold():
    """F4: the reward server built its reward-quality tracker without verifier.threshold, so
    with `verifier.threshold=0.5` /metrics reported TPR / TNR at an in-sample auto threshold
    (`verifier/threshold 0.4404`, `threshold_in_sample 1`). `train grpo` passes it; so does serve."""
    with MisbehavingServer() as verifier:
        service, close = sparse_service(verifier, {"track": True}, threshold=0.5)
        served = Served([], service=service)
        try:
            body = {**score_body(r"\boxed{2}", r"\boxed{3}"), "references": ["2", "2"]}
            assert httpx.post(f"{served.url}/score", json=body, timeout=60).status_code == 200
            metrics = httpx.get(f"{served.url}/metrics", timeout=30).text
        finally:
            served.stop()
            close()
    assert 'densereward_verifier_metric{name="verifier/threshold"} 0.5' in metrics, metrics
    assert 'name="verifier/threshold_in_sample"} 1.0' not in metrics


def test_a_long_rank_on_a_served_verifier_does_not_hold_the_reward_calls():
    """Issue 40 item 6: /rank held the server's model lock for its whole run, so every sync
    reward call of every other client waited for it. A served verifier (the openai backend)
    takes concurrent reads: the lock is for an in-process model only."""
    from densereward.backends.openai_http import OpenAIBackend

    ranking = threading.Event()

    def rank(problem, candidates, pivots):
        ranking.set()
        time.sleep(3.0)
        return SimpleNamespace(
            winner=0,
            order=list(range(len(candidates))),
            win_rate=[0.5] * len(candidates),
            n_comparisons=1,
        )

    verifier = SimpleNamespace(
        config=SimpleNamespace(model="judge"),
        rank=rank,
        backend=SimpleNamespace(thread_safe=OpenAIBackend.thread_safe),
    )
    served = Served([], service=RewardService([SyncHangs()], None, verifier, ServeConfig()))
    try:
        ranked = served.post_in_thread("/rank", {"problem": "p", "candidates": ["a", "b"]})
        assert ranking.wait(10)
        t0 = time.monotonic()
        resp = httpx.post(f"{served.url}/score", json=score_body("fine"), timeout=30)
        took = time.monotonic() - t0
        ranked["thread"].join(timeout=30)
    finally:
        served.stop()
    assert resp.json()["rewards"] == [4.0] and took < 1.5, took  # was: after the rank's 3 s
    assert ranked["resp"].json()["order"] == [0, 1]


def test_the_drain_log_names_the_cut_requests_and_the_503_names_the_signal(caplog):
    """F1: a /rank still running when the SIGTERM drain ended was answered 503, but the only log
    line about the drain's outcome said "0 reward call(s) still running ...; abandoned" (a /rank
    is no reward call), and the 503 told the client "a second Ctrl-C ends it" after a SIGTERM.
    Now the log counts and names the requests cut off, and the 503 names the signal."""
    import logging

    ranking = threading.Event()

    def rank(problem, candidates, pivots):
        ranking.set()
        time.sleep(3600)  # a verifier that hangs: abandoned in its daemon thread

    verifier = SimpleNamespace(config=SimpleNamespace(model="judge"), rank=rank)
    service = RewardService([Hangs()], None, verifier, ServeConfig(shutdown_timeout_s=1.0))
    served = Served([], service=service)
    try:
        with caplog.at_level(logging.WARNING, logger="densereward.serve.app"):
            ranked = served.post_in_thread("/rank", {"problem": "p", "candidates": ["a", "b"]})
            assert ranking.wait(10)
            served.server.handle_exit(signal.SIGTERM, None)
            ranked["thread"].join(timeout=30)
            served.thread.join(timeout=30)
    finally:
        served.stop()
    error = ranked["resp"].json()["error"]
    assert ranked["resp"].status_code == 503 and "SIGTERM" in error, error
    assert "Ctrl-C" not in error.split("SIGTERM")[0], error  # the signal named is the one sent
    lines = [r.getMessage() for r in caplog.records if r.name == "densereward.serve.app"]
    assert len(lines) == 1, lines
    assert "1 request" in lines[0] and "/rank" in lines[0] and "SIGTERM" in lines[0], lines
    assert "0 reward call" not in lines[0], lines
    out = served.out.getvalue()
    assert "SIGTERM: draining" in out and "SIGTERM or Ctrl-C again" in out, out


@pytest.mark.slow
def test_the_reads_of_a_rank_the_drain_cut_off_are_not_logged_as_backend_failures(caplog):
    """F3: after the drain cut a /rank off (logged) and the server closed the in-process
    verifier, the abandoned rank's next reads hit the closed backend and each logged "verifier
    backend failed on N prompt(s): the transformers backend was closed", as if the backend had
    failed. Those reads are the abandoned request's, ended by the server's own close: the drain
    line says it once, and nothing more is logged as a failure."""
    import logging

    from densereward.serve.cli import build_service

    service, close = build_service(
        {
            "reward": {"type": "sparse", "track": False},
            "verifier": {
                "backend": "transformers",  # the embedded SmolLM2-135M on the CPU
                "calibrate": False,
                "batch_size": 1,  # one prompt a read: reads left after the close
                "backend_options": {"device": "cpu", "dtype": "float32"},
            },
            "serve": {"shutdown_timeout_s": 0.5},
        }
    )
    stats = service.verifier.stats
    served = Served([], service=service, on_close=close)
    try:
        with caplog.at_level(logging.DEBUG, logger="densereward.verifier"):
            ranked = served.post_in_thread(
                "/rank", {"problem": "What is 2+3?", "candidates": ["4", "5", "6"], "pivots": 1}
            )
            deadline = time.monotonic() + 60
            while not stats.n_backend_calls and time.monotonic() < deadline:
                time.sleep(0.01)  # the rank's first read has begun
            served.server.handle_exit(signal.SIGTERM, None)
            ranked["thread"].join(timeout=60)
            served.thread.join(timeout=60)
            while not stats.n_failures and time.monotonic() < deadline + 60:
                time.sleep(0.05)  # the abandoned rank reads on, on the closed backend
            time.sleep(0.5)  # its failure's log line (after the count)
    finally:
        served.stop()
    assert ranked["resp"].status_code == 503, ranked["resp"].text
    assert stats.n_failures, stats  # the abandoned reads did end on the closed backend
    drained = [r.getMessage() for r in caplog.records if "the drain" in r.getMessage()]
    assert len(drained) == 1 and "cut off 1 request(s)" in drained[0], drained
    assert "/rank" in drained[0] and "daemon threads" in drained[0], drained
    failed = [
        r.getMessage()
        for r in caplog.records
        if r.name == "densereward.verifier" and r.levelno >= logging.WARNING
    ]
    assert not failed, failed  # was: "verifier backend failed on 1 prompt(s): ... was closed"


@pytest.mark.parametrize("abandon", [False, True])
def test_a_read_after_close_warns_unless_the_closer_abandoned_it(caplog, abandon):
    """F3's other side: only a close that abandons the reads still running (the server's, after
    its drain said so) quiets their reads on the closed backend. A read after a plain close is
    still the "verifier backend failed" warning, with the abstention it always was."""
    import logging

    from densereward.errors import BackendClosedError

    with MisbehavingServer() as srv:
        verifier = scripted_verifier(srv.base_url, granularity=20, calibrate=False)
        verifier.close(abandon=abandon)
        with caplog.at_level(logging.DEBUG, logger="densereward.verifier"):
            (got,) = verifier.score_batch(problems=["1+1?"], responses=["2"])
    assert got.value is None and verifier.stats.n_failures == 1, (got, verifier.stats)
    closed = [r for r in caplog.records if "is closed" in r.getMessage()]
    assert len(closed) == 1, [r.getMessage() for r in caplog.records]
    if abandon:
        assert closed[0].levelno == logging.DEBUG, closed[0].getMessage()
    else:
        assert closed[0].levelno == logging.WARNING, closed[0].getMessage()
        assert "verifier backend failed on 1 prompt(s)" in closed[0].getMessage()
    with pytest.raises(BackendClosedError):
        verifier.backend.next_token_logprobs([], ["A"])


@pytest.mark.slow  # the embedded SmolLM2 loaded in a served subprocess (~30 s)
def test_sigterm_during_an_in_process_read_ends_the_command_with_0_not_an_abort(tmp_path):
    """Rerun 14 F1: ``serve`` with the in-process verifier, SIGTERMed 3 s into a 12-candidate
    /rank with serve.shutdown_timeout_s=1: the drain cut the rank off (503) and closing the
    verifier waited out its 5 s while the cut-off forward pass ran on; the interpreter's
    teardown under it then aborted ("terminate called without an active exception", exit 134,
    2 of 2). The command ends at once instead, its logs flushed, with status 0."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "reward: {type: sparse, track: false}\n"
        "verifier: {backend: transformers, calibrate: false, batch_size: 12, backend_options: "
        "{device: cpu, dtype: float32}}\n"
        "serve: {shutdown_timeout_s: 1, require_labels: false}\n"
    )
    port = free_port()
    proc = _start_serve(cfg, port, wait_s=180)
    try:
        out: dict = {}
        long = " ".join(["First add the two numbers, then check the sum carefully."] * 12)
        body = {
            "problem": "What is 7+5?",
            "candidates": [f"{long} The answer is \\boxed{{{k}}}." for k in range(6, 18)],
            "pivots": 3,
        }

        def send() -> None:
            out["resp"] = httpx.post(f"http://127.0.0.1:{port}/rank", json=body, timeout=120)

        t = threading.Thread(target=send, daemon=True)
        t.start()
        time.sleep(3)  # the rank's reads run in the backend
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
        t.join(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = proc.stdout.read() if proc.stdout else ""
    assert rc == 0, (rc, text)
    assert "terminate called" not in text and "Traceback" not in text, text
    assert out["resp"].status_code == 503, out["resp"].text
    assert "SIGTERM: draining" in text and "cut off 1 request(s)" in text, text
