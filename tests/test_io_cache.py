"""Crash safety of the score cache and of result / metric files (nothing half-written)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from densereward.cache import ScoreCache, cache_key
from densereward.errors import DataError
from densereward.io import append_jsonl, atomic_write_json, read_jsonl, redact


def _spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_cache_key_is_order_independent_and_sensitive():
    assert cache_key(a=1, b=2) == cache_key(b=2, a=1)
    assert cache_key(a=1, b=2) != cache_key(a=1, b=3)


def test_cache_survives_kill_during_writes(tmp_path):
    d = tmp_path / "cache"
    proc = _spawn(f"""
        from densereward.cache import ScoreCache
        c = ScoreCache({str(d)!r})
        i = 0
        while True:
            c.set(f"k{{i}}", {{"logprobs": {{"A": -0.1 * i}}, "i": i}})
            if i == 50:
                print("ready", flush=True)
            i += 1
    """)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    c = ScoreCache(d)
    n = len(c)
    assert n > 50
    for i in range(n):  # every committed entry is complete and readable
        v = c.get(f"k{i}")
        assert v == {"logprobs": {"A": -0.1 * i}, "i": i}
    c.set("after", 1)
    assert c.get("after") == 1
    c.close()


def test_cache_concurrent_writers(tmp_path):
    d = tmp_path / "cache"
    code = """
        import sys
        from densereward.cache import ScoreCache
        c = ScoreCache({d!r})
        for i in range(200):
            c.set(f"{{sys.argv[1]}}-{{i}}", i)
    """
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code.format(d=str(d))), w])
        for w in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    c = ScoreCache(d)
    assert len(c) == 400 and c.get("a-199") == 199 and c.get("b-0") == 0
    c.close()


def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path):
    from densereward.io import atomic_write_text

    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic = atomic_write_text(tmp_path / "atomic.txt", "x")
    assert atomic.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # not mkstemp's 0o600


def test_atomic_write_never_leaves_partial_file(tmp_path):
    path = tmp_path / "results.json"
    atomic_write_json(path, {"v": 0})
    proc = _spawn(f"""
        from densereward.io import atomic_write_json
        i = 0
        print("go", flush=True)
        while True:
            atomic_write_json({str(path)!r}, {{"v": i, "pad": "x" * 200000}})
            i += 1
    """)
    assert proc.stdout.readline().strip() == b"go"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = json.loads(path.read_text())  # complete JSON, whichever version won
    assert "v" in data
    leftovers = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert len(leftovers) <= 1  # at most the killed writer's temp file, never the target


def test_jsonl_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "reward_quality.jsonl"
    append_jsonl(path, {"step": 1, "verifier/tpr": 0.5})
    append_jsonl(path, {"step": 2, "verifier/tpr": float("nan")})
    with open(path, "a") as f:
        f.write('{"step": 3, "verifier/t')  # a crash mid-line
    rows = list(read_jsonl(path))
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["verifier/tpr"] is None  # NaN stored as null, the file stays valid JSON


def test_jsonl_corruption_in_the_middle_raises_naming_file_and_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{broken\n{"a": 2}\n')
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: not valid JSON \("):
        list(read_jsonl(path))


def test_strict_jsonl_refuses_a_torn_last_line_and_a_non_object(tmp_path):
    """A file a user hands over: a cut-off last line is an error (rows must not vanish)."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2')
    assert list(read_jsonl(path)) == [{"a": 1}]  # a run file's torn line: skipped
    with pytest.raises(
        DataError, match=r"in\.jsonl:3: not valid JSON .*the last line looks cut off"
    ):
        list(read_jsonl(path, strict=True))
    path.write_text('{"a": 1}\n"text"\n')
    with pytest.raises(
        DataError, match=r"in\.jsonl:2: a row must be a JSON object \{\.\.\.\}, got str"
    ):
        list(read_jsonl(path, strict=True))


def test_redact_masks_secret_keys_and_values():
    key = "sk-planted-0123456789"
    out = redact(
        {
            "OPENAI_API_KEY": key,
            "nested": {"url": f"http://x?key={key}", "hf_token": "abc"},
            "n": 1,
        },
        [key],
    )
    assert key not in json.dumps(out)
    assert out["OPENAI_API_KEY"] == "***" and out["nested"]["hf_token"] == "***" and out["n"] == 1


def test_backend_options_are_part_of_the_cache_key(tmp_path):
    """Two verifiers sharing one cache but asking for a different ``top_logprobs`` must not
    answer each other's requests; the same options hit the cache."""
    from servers import MisbehavingServer, scripted_verifier

    def score(srv, **opts):
        v = scripted_verifier(srv.base_url, granularity=5, cache_dir=str(tmp_path / "c"), **opts)
        try:
            return v.score(problem="2+2?", response="4"), v.stats.n_cache_hits
        finally:
            v.close()

    with MisbehavingServer() as srv:
        _, hits = score(srv, backend_options={"top_logprobs": 5})
        assert hits == 0 and len(srv.chat_requests()) == 1
        _, hits = score(srv, backend_options={"top_logprobs": 5})
        assert hits == 1 and len(srv.chat_requests()) == 1
        _, hits = score(srv, backend_options={"top_logprobs": 10})
        assert hits == 0 and len(srv.chat_requests()) == 2
        assert [r["body"]["top_logprobs"] for r in srv.chat_requests()] == [5, 10]


def test_the_cache_key_holds_what_changes_a_read_not_how_it_is_made(tmp_path):
    """Issue 42: retry, health-check and replica-balancing settings (like a timeout) leave a
    warm cache warm; another model or another prompt misses it."""
    from servers import MisbehavingServer, scripted_verifier

    def read(srv, response="4", **config):
        v = scripted_verifier(srv.base_url, granularity=5, cache_dir=str(tmp_path / "c"), **config)
        try:
            v.score(problem="2+2?", response=response)
            return v.stats.n_cache_hits
        finally:
            v.close()

    transport = {
        "timeout_s": 5.0,
        "max_retries": 1,
        "retry_base_s": 0.1,
        "retry_max_s": 2.0,
        "health_timeout_s": 2.0,
        "health_interval_s": 1.0,
        "max_imbalance": 3,
        "max_concurrency": 2,
        "requests_per_minute": 600,
    }
    with MisbehavingServer(model="m-a") as a, MisbehavingServer(model="m-b") as b:
        assert read(a, model="m-a") == 0 and len(a.chat_requests()) == 1
        for name, value in transport.items():
            assert read(a, model="m-a", backend_options={name: value}) == 1, name
        assert read(a, model="m-a", backend_options=transport) == 1
        assert len(a.chat_requests()) == 1  # every one of them answered from the cache
        assert read(b, model="m-b") == 0 and len(b.chat_requests()) == 1  # another model
        assert read(a, model="m-a", response="5") == 0 and len(a.chat_requests()) == 2


def test_every_builtin_backend_option_is_sorted_into_answer_or_transport():
    """Each built-in option either changes a read's answer (in the cache key) or only how the
    read is made (left out); a new option must be put on one side on purpose."""
    import dataclasses

    from densereward import backend_options as bo

    transport = {
        "TransformersOptions": {"dtype", "device", "prefix_cache_size"},
        "VLLMOptions": {
            "dtype",
            "device",
            "gpu_memory_utilization",
            "max_model_len",
            "kv_cache_bytes",
        },
        "OpenAIOptions": {
            "base_url",
            "api_key_env",
            "max_concurrency",
            "requests_per_minute",
            "timeout_s",
            "max_retries",
            "retry_base_s",
            "retry_max_s",
            "health_timeout_s",
            "health_interval_s",
            "max_imbalance",
        },
    }
    transport["SampledOptions"] = transport["OpenAIOptions"]
    for cls, expected in transport.items():
        fields = dataclasses.fields(getattr(bo, cls))
        assert {f.name for f in fields if f.metadata.get("transport")} == expected, cls
