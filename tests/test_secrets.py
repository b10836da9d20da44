"""Secrets (issue 8): an API key comes only from the environment or ``.env`` and never leaks.

A fake key is planted, really used against a loopback server (:class:`servers.MisbehavingServer`)
that echoes the ``Authorization`` header back in its error bodies (as some proxies do), and then
searched for in everything a run leaves behind: error messages, log records, the score cache,
``config.json`` / ``result.json``, ``reward_quality.jsonl`` and the offline W&B files.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from servers import Fault, free_port, scripted_verifier

from densereward.errors import BackendError, BackendUnavailableError, ConfigError

REPO = Path(__file__).resolve().parents[1]
PLANTED = "sk-planted-7c1e9a4b2f6d-never-in-a-run-dir"
PROBLEM = "What is 6 * 7?"


def _files_containing(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle`` (plain, UTF-16 or hex-escaped)."""
    forms = [needle.encode(), needle.encode("utf-16-le"), needle.encode().hex().encode()]
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            if any(f in data for f in forms):
                hits.append(str(p.relative_to(root)))
    return hits


def _verifier(base_url: str, **overrides):
    options = {"max_retries": 1, "timeout_s": 2.0, **overrides.pop("backend_options", {})}
    return scripted_verifier(base_url, backend_options=options, **overrides)


def test_planted_key_is_used_but_never_in_errors_logs_or_cache(
    server, monkeypatch, caplog, tmp_path
):
    """Engine level, key from the environment (the default ``OPENAI_API_KEY``)."""
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    cache_dir = tmp_path / "cache"
    v = _verifier(server.base_url, cache_dir=str(cache_dir), on_error="abstain")
    try:
        assert v.score(problem=PROBLEM, response="42").value is not None  # fills the cache
        # the key is really sent ...
        assert server.chat_requests()[-1]["headers"]["Authorization"] == f"Bearer {PLANTED}"
        # ... and echoed back by a failing server: abstain mode logs the (redacted) error
        server.default = Fault("status", status=500, echo_auth=True)
        r = v.score(problem=PROBLEM, response="41")
        assert r.value is None and v.stats.n_failures == 1
        texts += [str(r.reason), repr(r), repr(v.stats.as_dict())]
        assert any("scripted 500" in m for m in caplog.messages)  # the echo reached the logs
    finally:
        v.close()
    v = _verifier(server.base_url, on_error="raise")
    try:
        for status in (500, 401):
            server.default = Fault("status", status=status, echo_auth=True)
            # a 401 before any read was answered is a configuration error naming the key
            with pytest.raises(BackendError if status == 500 else ConfigError) as info:
                v.score(problem=PROBLEM, response="40")
            assert "Authorization" in str(info.value) or "$OPENAI_API_KEY" in str(info.value)
            texts += [str(info.value), repr(info.value), str(info.value.__cause__ or "")]
    finally:
        v.close()
    with pytest.raises(BackendUnavailableError) as unreachable:
        _verifier(f"http://127.0.0.1:{free_port()}/v1")
    texts += [str(unreachable.value), caplog.text] + caplog.messages
    for t in texts:
        assert PLANTED not in t
    assert _files_containing(cache_dir, PLANTED) == []
    assert any(p.is_file() for p in cache_dir.rglob("*"))  # the cache was really written


def test_key_from_dotenv_file_is_used_and_redacted(server, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={PLANTED}\n")
    v = _verifier(server.base_url, on_error="raise")
    try:
        assert v.score(problem=PROBLEM, response="42").value is not None
        assert server.chat_requests()[-1]["headers"]["Authorization"] == f"Bearer {PLANTED}"
        server.default = Fault("status", status=500, echo_auth=True)
        with pytest.raises(BackendError) as info:
            v.score(problem=PROBLEM, response="41")
        assert "Authorization" in str(info.value) and PLANTED not in str(info.value)
    finally:
        v.close()


def test_a_key_put_in_the_config_is_rejected_without_echoing_it():
    from densereward.trainers.grpo import run

    config = {
        "verifier": {
            "backend": "openai",
            "backend_options": {"base_url": "http://127.0.0.1:1/v1", "api_key": PLANTED},
        }
    }
    with pytest.raises(ConfigError, match="api_key") as info:
        run(config, dry_run=True)
    assert PLANTED not in str(info.value)


@pytest.mark.slow
def test_grpo_run_directory_never_contains_the_key(server, tmp_path, data_dir, monkeypatch):
    """A real 2-step GRPO run (SmolLM2 policy, HTTP verifier, W&B offline, score cache in the run dir)."""
    from densereward.config import load_yaml
    from densereward.trainers.grpo import run

    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    run_dir = tmp_path / "run"
    log_file = tmp_path / "train.log"
    # every request of the first reward call fails with the key echoed back (-> logged abstentions)
    # (the start-up calibration reads get the healthy default, not these faults)
    server.script(*[Fault("status", status=500, echo_auth=True)] * 4, skip_calibration=True)
    server.default = Fault(top_logprobs=[("E", -0.3), ("D", -1.5)])  # then healthy (G = 5: A..E)
    config = load_yaml(REPO / "configs/grpo_math_cpu.yaml")
    config["data"] = {"path": str(data_dir / "math500" / "test.jsonl"), "limit": 2, "levels": [1]}
    # every completion is read (answer_match would skip these 4-token answers without a request)
    config["reward"]["reference_prompt"] = "anchored"
    config["verifier"] = {
        "backend": "openai",
        "granularity": 5,
        "cache_dir": str(run_dir / "score_cache"),
        "backend_options": {"base_url": server.base_url, "max_retries": 1, "timeout_s": 5.0},
    }
    config["training"].update(
        max_steps=2,
        max_completion_length=4,
        per_device_train_batch_size=2,
        num_generations=2,
        save_strategy="no",
    )
    # a user's logging set-up: everything of ours and of the HTTP stack, DEBUG included
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    loggers = [logging.getLogger(n) for n in ("densereward", "httpx", "httpcore", "trl", "wandb")]
    old_levels = [(lg, lg.level) for lg in (root, *loggers)]
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
            result = run(config, output_dir=run_dir)
    finally:
        root.removeHandler(handler)
        handler.close()
        for lg, level in old_levels:
            lg.setLevel(level)

    assert result["steps"] == 2
    # the key was really sent, and echoed back into at least one logged error (redacted)
    auth = {r["headers"].get("Authorization") for r in server.chat_requests()}
    assert auth == {f"Bearer {PLANTED}"}
    log_text = log_file.read_text(errors="replace")
    assert "scripted 500" in log_text and "Authorization: Bearer ***" in log_text
    rows = (run_dir / "reward_quality.jsonl").read_text().splitlines()
    assert '"verifier/n_abstained": 2.0' in rows[0] and '"verifier/n_abstained": 0.0' in rows[1]
    # the run directory holds what we expect to search ...
    assert (run_dir / "config.json").is_file() and (run_dir / "result.json").is_file()
    assert list((run_dir / "wandb").glob("offline-run-*/*.wandb"))
    assert any(p.is_file() for p in (run_dir / "score_cache").rglob("*"))
    # ... and none of it contains the key
    assert _files_containing(run_dir, PLANTED) == []
    assert PLANTED not in log_text
