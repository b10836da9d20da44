"""The GRPO launcher: config validation, dry run of the Qwen3-8B config, a real 2-step run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from test_wandb_config import kill_wandb_core_during, offline_run

from densereward.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _parse(argv: list[str]) -> argparse.Namespace:
    from densereward.trainers import grpo

    parser = argparse.ArgumentParser(prog="densereward train grpo")
    grpo.add_arguments(parser)
    return parser.parse_args(argv)


def test_help_documents_flags_and_example():
    from densereward.trainers import grpo

    parser = argparse.ArgumentParser(prog="densereward train grpo")
    grpo.add_arguments(parser)
    text = parser.format_help()
    for flag in (
        "--config",
        "--data",
        "--max-steps",
        "--output-dir",
        "--reward",
        "--dry-run",
        "--resume",
    ):
        assert flag in text
    assert "configs/grpo_math_cpu.yaml" in text and "key=value" in text


def test_overrides_and_shortcuts_compose():
    from densereward.trainers.grpo import config_from_args

    args = _parse(
        [
            "--config",
            str(REPO / "configs/grpo_math_cpu.yaml"),
            "verifier.granularity=5",
            "--set",
            "training.learning_rate=2e-6",
            "--data",
            "x.jsonl",
            "--max-steps",
            "3",
            "--reward",
            "group",
        ]
    )
    cfg = config_from_args(args)
    assert cfg["verifier"]["granularity"] == 5 and cfg["training"]["learning_rate"] == 2e-6
    assert cfg["data"]["path"] == "x.jsonl" and "source" not in cfg["data"]
    assert cfg["training"]["max_steps"] == 3 and cfg["reward"]["type"] == "group"


@pytest.mark.slow  # imports trl / transformers
def test_dry_run_qwen3_8b_config_validates_without_weights(capsys, monkeypatch):
    """The GPU config validates here; what this machine lacks (the Hub's model and data, as
    under HF_HUB_OFFLINE) is listed under !! and makes the exit 2; its verifier server (a
    scripted one here, serving the config's model name) is contacted."""
    from huggingface_hub import constants
    from servers import MisbehavingServer

    from densereward.trainers.grpo import main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with MisbehavingServer(model="Qwen/Qwen3-8B") as server:
        rc = main(
            _parse(
                [
                    "--config",
                    str(REPO / "configs/grpo_math_qwen3_8b.yaml"),
                    "--dry-run",
                    f"verifier.backend_options.base_url={server.base_url}",
                ]
            )
        )
    out = capsys.readouterr().out
    assert rc == 2, out
    assert "use_vllm=True" in out and "verifier_gated" in out
    assert "bf16=True" in out
    assert "NOT downloaded" not in out, out  # issue 41 item 3: the !! line only, no ok line
    assert f"ok  verifier server: {server.base_url} -- contacted, model 'Qwen/Qwen3-8B'" in out
    problems = [line for line in out.splitlines() if line.startswith("  !!  ")]
    assert len(problems) == 2, out
    assert "'DigitalLearningGmbH/MATH-lighteval' cannot be reached offline" in problems[0]
    assert problems[1].startswith("  !!  model.name='Qwen/Qwen3-8B' is not in the local Hugging")


@pytest.mark.slow
def test_unknown_keys_are_errors_naming_the_fix():
    from densereward.trainers.grpo import run

    base = {"training": {"max_steps": 1}}
    with pytest.raises(ConfigError, match="learning_rate"):
        run({**base, "training": {"learnig_rate": 1e-6}}, dry_run=True)
    with pytest.raises(ConfigError, match="granularity"):
        run({**base, "verifier": {"granularty": 5}}, dry_run=True)
    with pytest.raises(
        ConfigError, match="num_generations"
    ):  # groups must fit in a generation batch
        run(
            {
                "reward": {"type": "group"},
                "training": {
                    "per_device_train_batch_size": 2,
                    "num_generations": 4,
                    "use_cpu": True,
                },
            },
            dry_run=True,
        )
    assert run(
        {
            "reward": {"type": "group"},
            "training": {"use_cpu": True, "per_device_train_batch_size": 4, "num_generations": 4},
        },
        dry_run=True,
    )["dry_run"]


@pytest.mark.slow
def test_real_two_step_grpo_run_dense_reward(tmp_path, data_dir, default_model_dir, monkeypatch):
    """Real GRPO: SmolLM2 policy, SmolLM2 verifier, the config's gated reward, W&B offline, 2 steps."""
    from densereward.config import load_yaml
    from densereward.trainers.grpo import run

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = load_yaml(REPO / "configs/grpo_math_cpu.yaml")
    config_tags = config["wandb"]["tags"]
    config["data"] = {"path": str(data_dir / "math500" / "test.jsonl"), "limit": 4, "levels": [1]}
    config["training"].update(
        max_steps=2,
        max_completion_length=16,
        per_device_train_batch_size=4,
        num_generations=2,
        save_steps=2,
    )
    config["verifier"]["granularity"] = 5
    run_dir = tmp_path / "run"
    result = run(config, output_dir=run_dir)

    assert result["steps"] == 2 and Path(result["run_dir"]) == run_dir
    rows = [
        json.loads(line) for line in (run_dir / "reward_quality.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "verifier/tpr",
        "verifier/tnr",
        "verifier/auroc",
        "verifier/pass_rate",
        "verifier/tie_rate",
        "verifier/mean_mass",
        "verifier/n_abstained",
        "verifier/frac_zero_spread_sparse",
        "verifier/frac_zero_spread_dense",
        "verifier/balanced_accuracy",
        "verifier/verifier_gain",
    ):
        assert key in rows[0]
    assert (run_dir / "reward_quality.png").stat().st_size > 5000
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    wandb_bytes = next(offline[0].glob("*.wandb")).read_bytes()
    assert b"verifier/pass_rate" in wandb_bytes and b"rewards/verifier_gated/mean" in wandb_bytes
    # the config's wandb: section, applied as SAC's is (tests/test_wandb_config.py)
    project, group, name, tags, _ = offline_run(run_dir)
    assert (project, group, name, tags) == ("densereward", "grpo-math-cpu", "run", config_tags)
    assert (run_dir / "checkpoint-2").is_dir()
    assert result["metric"] == "verifier/pass_rate" and len(result["curve"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # exactly one run directory

    # --resume: continue from checkpoint-2 to step 3 in the same directory and W&B run
    config["training"]["max_steps"] = 3
    resumed = run(config, output_dir=run_dir, resume="latest")
    assert resumed["steps"] == 3
    rows = [
        json.loads(line) for line in (run_dir / "reward_quality.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2, 3]  # appended, the first two kept as they were
    assert [p["step"] for p in resumed["curve"]] == [1, 2, 3]
    # F2: the resumed start continues the first start's W&B run id (wandb_id.txt), as SAC does
    run_id = (run_dir / "wandb_id.txt").read_text().strip()
    ids = {p.name.rsplit("-", 1)[1] for p in (run_dir / "wandb").glob("offline-run-*")}
    assert ids == {run_id}, (ids, run_id)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# --------------------------------------------------------------------------------------------
# A dry run that validates, and a rerun after a failed start
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # imports trl to validate GRPOConfig
def test_dry_run_checks_local_data_and_says_when_a_hub_id_is_unreachable(
    tmp_path, data_dir, capsys, monkeypatch
):
    from huggingface_hub import constants

    from densereward.errors import DataError
    from densereward.trainers.grpo import config_from_args, main, run

    cpu = str(REPO / "configs/grpo_math_cpu.yaml")
    out = tmp_path / "run"
    typo = str(data_dir / "math500" / "tset.jsonl")
    with pytest.raises(DataError, match="data file not found"):
        run(config_from_args(_parse(["--config", cpu, "--data", typo])), dry_run=True)
    typo_cli = ["--config", cpu, "--data", typo, "--output-dir", str(out), "--dry-run"]
    assert main(_parse(typo_cli)) == 2
    no_suffix = str(data_dir / "math500" / "test")  # a path without .jsonl is not a Hub id
    assert main(_parse(["--config", cpu, "--data", no_suffix, "--dry-run"])) == 2
    assert "looks like a local path" in capsys.readouterr().err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub = ["--config", cpu, "--data", "HuggingFaceH4/MATH-500", "--output-dir", str(out)]
    assert main(_parse([*hub, "--dry-run"])) == 2  # the run would stop here: exit 2
    printed = capsys.readouterr().out
    assert "!!  the Hub id 'HuggingFaceH4/MATH-500' cannot be reached offline" in printed
    good = ["--config", cpu, "--data", str(data_dir / "math500" / "test.jsonl"), "--dry-run"]
    assert main(_parse([*good, "--output-dir", str(out)])) == 0
    assert "ok  data: jsonl" in capsys.readouterr().out
    assert not out.exists()  # a dry run creates nothing


def test_the_dry_run_shows_a_system_prompt_that_is_not_the_default(tmp_path, capsys):
    """F1: ``data.system_prompt=Reply with one sentence: The answer is <number>.`` was read as a
    YAML mapping and its repr became the prompt, and the dry run said nothing of the prompt, so
    the user could not see it. It names a system prompt of the user's own (or none), as used."""
    from densereward.cli import main

    cpu = str(REPO / "configs/grpo_math_cpu.yaml")
    base = ["train", "grpo", "--config", cpu, "--dry-run", "--output-dir", str(tmp_path / "r")]
    prompt = "Reply with one sentence: The answer is <number>."
    assert main([*base, f"data.system_prompt={prompt}"]) == 0
    data = [line for line in capsys.readouterr().out.splitlines() if "ok  data:" in line]
    assert data == [
        "  ok  data: reasoning_gym task 'basic_arithmetic': 64 problems loaded (data.size=64, "
        f"generated with data.seed=0); system prompt {prompt!r} (data.system_prompt)"
    ]
    assert main([*base, "data.system_prompt=null"]) == 0
    out = capsys.readouterr().out
    assert "data.seed=0); no system prompt (data.system_prompt: None)" in out
    assert main(base) == 0  # the default prompt: not repeated
    assert (
        "64 problems loaded (data.size=64, generated with data.seed=0)\n" in capsys.readouterr().out
    )


def _wandb_only():
    from densereward.trainers.grpo import WandbConfig

    return {"wandb": WandbConfig()}


def test_run_directory_rules_name_the_choices(tmp_path):
    from densereward.trainers.grpo import _run_dir

    failed_start = tmp_path / "failed"  # what a start that failed before step 1 leaves
    failed_start.mkdir()
    (failed_start / "config.json").write_text("{}")
    assert _run_dir(_wandb_only(), failed_start, None) == failed_start  # reused, not refused
    with pytest.raises(ConfigError, match=r"--resume: no checkpoint in .*without --resume"):
        _run_dir(_wandb_only(), failed_start, "latest")
    with pytest.raises(ConfigError, match="directory does not exist"):
        _run_dir(_wandb_only(), tmp_path / "nothing", "latest")

    with_ckpt = tmp_path / "ckpt"
    (with_ckpt / "checkpoint-2").mkdir(parents=True)
    assert _run_dir(_wandb_only(), with_ckpt, "latest") == with_ckpt
    with pytest.raises(ConfigError, match=r"checkpoint-2.*add --resume.*another --output-dir"):
        _run_dir(_wandb_only(), with_ckpt, None)
    with pytest.raises(ConfigError, match="not a checkpoint-<step> directory"):
        _run_dir(_wandb_only(), None, str(with_ckpt / "checkpoint-9"))

    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "result.json").write_text("{}")
    with pytest.raises(ConfigError, match="finished run"):
        _run_dir(_wandb_only(), finished, None)


@pytest.mark.slow  # a real start: imports trl and vLLM, fails on the data before any model loads
def test_a_failed_start_leaves_no_run_directory_and_prints_no_known_noise(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "densereward.cli",
        "train",
        "grpo",
        "--config",
        str(REPO / "configs/grpo_math_cpu.yaml"),
        "--data",
        str(tmp_path / "tset.jsonl"),
        "--output-dir",
        str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "data file not found" in done.stderr
    assert not out.exists()  # so the corrected command is not refused
    assert "TRL currently supports vLLM versions" not in done.stderr
    assert "Disabling Triton." not in done.stderr


@pytest.mark.slow  # a real one-step GRPO start with the embedded model (~1 min)
def test_a_one_step_grpo_start_prints_each_known_notice_at_most_once(tmp_path):
    """Issue 41 item 3: a new user's first ``train grpo`` printed TRL's vLLM-version warning
    (five copies), vLLM's Triton notice and, at step 1, five near-identical "is undefined"
    warnings, one per reward-quality metric. Each is now at most one line."""
    import os
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "densereward.cli",
        "train",
        "grpo",
        "--config",
        str(REPO / "configs/grpo_math_cpu.yaml"),
        "--max-steps",
        "1",
        "--output-dir",
        str(tmp_path / "run"),
        "data.size=4",
        "data.limit=4",
        "training.num_generations=2",
        "training.per_device_train_batch_size=2",
        "training.max_completion_length=16",
        "wandb.enabled=false",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert not any("TRL currently supports vLLM" in line for line in lines), done.stderr[-3000:]
    for notice in ("Triton is installed", "undefined at step"):
        assert sum(notice in line for line in lines) <= 1, (notice, done.stderr[-3000:])
    undefined = [line for line in lines if "undefined at step" in line]
    assert len(undefined) == 1 and "undefined at step 1" in undefined[0]  # still said, once
    # its lines below: one per reason (F9: one reason was repeated for each of 8 metrics)
    import itertools

    below = lines[lines.index(undefined[0]) + 1 :]
    said = itertools.takewhile(lambda line: line.startswith("  verifier/"), below)
    reasons = [line.split(": ", 1)[1] for line in said]
    assert reasons and len(reasons) == len(set(reasons)), done.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# Issue 28: the dry run names the field; bf16 follows the device; a resume keeps the tracker
# --------------------------------------------------------------------------------------------

DYNAMICS_CPU = str(REPO / "configs/grpo_dynamics_cpu.yaml")


@pytest.mark.slow  # imports trl to validate GRPOConfig
def test_dry_run_fails_naming_the_model_dtype_and_batch_size_fields(tmp_path, capsys, monkeypatch):
    """Item 9: each of these printed ``ok`` before; now the dry run fails naming the field."""
    from huggingface_hub import constants

    from densereward.trainers.grpo import main

    dry = ["--config", DYNAMICS_CPU, "--output-dir", str(tmp_path / "run"), "--dry-run"]
    no_config = tmp_path / "empty-dir"
    no_config.mkdir()
    for override, field in [
        ("verifier.model=/no/such/dir", "verifier.model='/no/such/dir': no such file"),
        (f"verifier.model={no_config}", "verifier.model="),
        ("model.name=", "model.name is empty"),
        ("model.name=./no/such/dir", "model.name='./no/such/dir': no such file"),
        ("model.name=smollm2-135", "model.name: unknown offline model name"),
        (
            "verifier.backend_options.dtype=bfloat61",
            "verifier.backend_options.dtype: 'bfloat61' (did you mean 'bfloat16'?)",
        ),
        ("model.dtype=float23", "model.dtype: 'float23'"),
        ("verifier.batch_size=0", "verifier.batch_size must be >= 1, got 0"),
    ]:
        assert main(_parse([*dry, override])) == 2, override
        captured = capsys.readouterr()
        assert field in captured.err and "ok  " not in captured.out, (override, captured)
    # a Hub id that cannot load here is reported with the offline names, and the exit is 2
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(_parse([*dry, "model.name=Qwen/Qwen3-8B", "verifier.model=Qwen/Qwen3-0.6B"])) == 2
    out = capsys.readouterr().out
    assert (
        "!!  model.name='Qwen/Qwen3-8B' is not in the local Hugging Face cache and the Hub "
        "cannot be reached (HF_HUB_OFFLINE is set): use an offline name"
    ) in out
    assert "!!  verifier.model='Qwen/Qwen3-0.6B' is not in the local Hugging Face cache" in out
    # issue 41 item 3: one line per check, the !! one (there was an ok line before it too)
    assert "ok  model.name" not in out and "ok  verifier.model" not in out, out
    assert "NOT downloaded" not in out, out
    # an offline model name, the embedded model and a served model's name pass
    names = ["model.name=smollm2-135m", "verifier.model=smollm2-135m"]
    assert main(_parse([*dry, *names])) == 0
    out = capsys.readouterr().out
    assert "ok  model.name: offline model 'smollm2-135m'" in out and "!!" not in out
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # imports trl to validate GRPOConfig
def test_the_dry_run_contacts_a_served_verifier(tmp_path, capsys):
    """Issue 41 item 6b: with the verifier's server down the dry run said "not contacted" and
    exited 0, and the run then stopped at its start; it now asks the server as the run's start
    does (GET /models, a short timeout) and exits 2 naming the URL."""
    import time

    from servers import free_port

    from densereward.cli import main as cli_main

    dry = [
        "train",
        "grpo",
        "--config",
        DYNAMICS_CPU,
        "--output-dir",
        str(tmp_path / "run"),
        "--dry-run",
        "verifier.backend=openai",
        "verifier.model=my-served-name",
    ]
    closed = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.monotonic()
    assert cli_main([*dry, f"verifier.backend_options={{base_url: '{closed}'}}"]) == 2
    out = capsys.readouterr().out
    assert time.monotonic() - t0 < 60  # imports TRL; the check itself is refused at once
    assert f"!!  verifier server at {closed} is not reachable (ConnectError" in out, out
    assert "start it or fix verifier.backend_options.base_url" in out and "not contacted" not in out
    from servers import MisbehavingServer

    with MisbehavingServer(model="my-served-name") as server:  # serves the configured name
        assert cli_main([*dry, f"verifier.backend_options={{base_url: '{server.base_url}'}}"]) == 0
    out = capsys.readouterr().out
    assert f"ok  verifier server: {server.base_url} -- contacted, model 'my-served-name'" in out
    assert "!!" not in out and not (tmp_path / "run").exists()


@pytest.mark.slow  # imports trl to validate GRPOConfig
def test_dry_run_catches_a_misspelt_backend_option_a_bad_dtype_and_a_missing_base_url(
    tmp_path, capsys, server
):
    """Issue 29 item 2: each backend owns a frozen options dataclass, validated at config load,
    so ``densereward train grpo --dry-run`` names the field and the fix."""
    from densereward.cli import main as cli_main

    dry = [
        "train",
        "grpo",
        "--config",
        DYNAMICS_CPU,
        "--output-dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    for overrides, message in [
        (
            ["verifier.backend_options.share_prefx=false"],
            "'verifier.backend_options.share_prefx' (did you mean "
            "'verifier.backend_options.share_prefix'?)",
        ),
        (
            ["verifier.backend_options.dtype=bf16"],
            "verifier.backend_options.dtype: 'bf16' (did you mean 'bfloat16'?); use auto | float32",
        ),
        (
            ["verifier.backend=openai", "verifier.backend_options={}"],
            "verifier.backend='openai': verifier.backend_options.base_url is required by this "
            "backend: set verifier.backend_options.base_url=http://",
        ),
        (
            [
                "verifier.backend=openai",
                "verifier.backend_options={base_url: 'http://h/v1'}",
                "verifier.backend_options.timout_s=5",
            ],
            "(did you mean 'verifier.backend_options.timeout_s'?)",
        ),
        (
            ["verifier.dtype=float32"],
            "verifier.dtype moved into the backend's options: set verifier.backend_options.dtype",
        ),
        (
            ["training.report_to=[wandb]"],
            "W&B is switched by the top-level wandb: section (wandb.enabled, default true)",
        ),
        (  # rerun 11 F4: a misspelt W&B key gets its suggestion, as every other section's does
            ["wandb.mod=offline"],
            "unknown key(s) in section 'wandb': 'mod' (did you mean 'mode'?); the keys are enabled",
        ),
    ]:
        assert cli_main([*dry, *overrides]) == 2, overrides
        captured = capsys.readouterr()
        assert message in captured.err and "ok  " not in captured.out, (overrides, captured)
    served = [
        "verifier.backend=openai",
        "verifier.model=misbehaving-model",  # the served name
        f"verifier.backend_options={{base_url: '{server.base_url}', timeout_s: 5}}",
    ]
    assert cli_main([*dry, *served]) == 0
    out = capsys.readouterr().out
    assert f"OpenAIOptions(base_url='{server.base_url}'" in out
    assert (
        "ok  wandb: project densereward, entity (default), group grpo-dynamics-cpu, name run, "
        in out
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # imports trl to validate GRPOConfig
def test_bf16_follows_the_device_like_dtype_auto_and_the_dry_run_says_so(
    tmp_path, capsys, monkeypatch
):
    """Item 16: TRL's default bf16=True autocast is resolved from the device (training.bf16 unset)."""
    from densereward.backends import dtype
    from densereward.trainers.grpo import main

    dry = [
        "--config",
        DYNAMICS_CPU,
        "--output-dir",
        str(tmp_path / "run"),
        "--dry-run",
        "model.dtype=auto",
    ]
    monkeypatch.setattr(dtype, "bf16_supported", lambda device_type: False)  # a CPU without AMX
    assert main(_parse(dry)) == 0
    out = capsys.readouterr().out
    assert "bf16=False (auto: cpu, no native bf16, fp32 faster)" in out
    assert "(dtype auto: float32 on cpu) -- weights NOT loaded" in out
    monkeypatch.setattr(dtype, "bf16_supported", lambda device_type: device_type == "cpu")
    assert main(_parse(dry)) == 0
    out = capsys.readouterr().out
    assert "bf16=True (auto: cpu, native bf16)" in out
    assert "(dtype auto: bfloat16 on cpu) -- weights NOT loaded" in out  # issue 42: one rule
    assert main(_parse([*dry, "training.bf16=false"])) == 0  # a set value wins
    assert "bf16=False (training.bf16)" in capsys.readouterr().out


_RESUME_SCRIPT = """
import sys
from densereward.config import load_yaml
from densereward.trainers.grpo import run

config = load_yaml("configs/grpo_dynamics_cpu.yaml")
config.pop("heldout")
config["data"].update(size=8, limit=8)
config["verifier"]["granularity"] = 5
config["training"].update(max_steps=1, save_steps=1, per_device_train_batch_size=4,
                          num_generations=2, max_completion_length=8)
config["wandb"] = {"enabled": False}
run(config, output_dir=sys.argv[1])
config["training"]["max_steps"] = 2
run(config, output_dir=sys.argv[1], resume="latest")
"""


@pytest.mark.slow  # two GRPO starts of one step each with the embedded model (~1-2 min)
def test_resume_keeps_the_tracker_window_and_the_card_names_the_model(tmp_path, default_model_dir):
    """Items 14 and 15, through the library's own entry point in a fresh process: the resumed
    step's window holds both steps' completions (it restarted at one step's before), the model
    card names the embedded model (``[None]`` before), and TRL's vLLM-version warning printed
    at most once over both starts (five times per start before)."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    done = subprocess.run(
        [sys.executable, "-c", _RESUME_SCRIPT, str(run_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (run_dir / "reward_quality.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    n_read = [int(r["verifier/n_read"]) for r in rows]
    assert n_read[0] > 0
    assert rows[1]["verifier/window/n_read"] == n_read[0] + n_read[1]  # not n_read[1]: restored
    card = (run_dir / "README.md").read_text()
    assert (
        "fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct]" in card
        and "[None]" not in card
    )
    assert done.stderr.count("TRL currently supports vLLM versions") <= 1
    assert (run_dir / "checkpoint-1" / "reward_quality_state.json").is_file()


def test_a_start_that_fails_after_creating_its_run_directory_removes_it(tmp_path, monkeypatch):
    """Issue 41 rerun: a start that failed before its first training step (here TRL refusing
    its arguments when the trainer is built) left its run directory behind, although
    docs/configuration.md says a failed start leaves none."""
    import trl

    from densereward.config import apply_overrides, load_yaml
    from densereward.trainers import grpo

    class Refuses:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("refused before training")

    monkeypatch.setattr(trl, "GRPOTrainer", Refuses)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = apply_overrides(
        load_yaml(REPO / "configs/grpo_math_cpu.yaml"),
        [
            "data.size=4",
            "data.limit=4",
            "reward.type=sparse",
            "reward.track=false",
            "wandb.enabled=false",
        ],
    )
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="refused before training"):
        grpo.run(config, output_dir=out)
    assert not out.exists()


def test_the_final_value_says_what_it_rests_on(tmp_path):
    """Issue 41 second rerun (kind 4): a run's result printed ``"final": 0.25`` with no count;
    ``final_rests_on`` says how many completions (or held-out problems) it is computed from."""
    from densereward.io import append_jsonl
    from densereward.trainers.grpo import _final_rests_on, _records

    for step, n in ((1, 8.0), (2, 8.0), (2, 8.0)):  # two generation batches at step 2
        append_jsonl(tmp_path / "reward_quality.jsonl", {"step": step, "verifier/n": n})
    curve = [{"step": 1, "value": 0.1}, {"step": 2, "value": 0.25}]
    assert (
        _final_rests_on(_records(tmp_path), "verifier/pass_rate", curve, None)
        == "16 completions of step 2"
    )
    held = {"n_problems": 50}
    assert (
        _final_rests_on(_records(tmp_path), "heldout/pass_rate_greedy", curve, held)
        == "50 held-out problems"
    )
    assert _final_rests_on(_records(tmp_path), "verifier/pass_rate", [], None) is None
    # the curve's points count their completions (compare sums them: issue 41 third rerun F4)
    from densereward.trainers.grpo import _curve

    for step, n, rate in ((1, 8.0, 0.0), (2, 8.0, 0.25), (2, 8.0, 0.0)):
        append_jsonl(
            tmp_path / "curve" / "reward_quality.jsonl",
            {"step": step, "verifier/n": n, "verifier/pass_rate": rate},
        )
    assert _curve(_records(tmp_path / "curve"), None, True) == (
        [
            {"step": 1, "value": 0.0, "n_completions": 8},
            {"step": 2, "value": 0.125, "n_completions": 16},
        ],
        "verifier/pass_rate",
    )


@pytest.mark.slow  # imports trl
def test_a_generation_setting_transformers_refuses_is_a_config_error_in_dry_run_and_run(
    tmp_path, capsys, monkeypatch, data_dir
):
    """Issue 41 third rerun F12: `--dry-run training.temperature=-1` said "configuration valid"
    (exit 0); the run loaded both models and ended in "internal error: ValueError ... This is a
    bug". transformers' own checks now run in the config check: one line naming the key, exit 2,
    in the dry run and at the run's start, before any directory or model."""
    from densereward.backends import models
    from densereward.cli import main as cli_main

    def no_model(*a, **k):
        raise AssertionError("a model loaded before the generation settings were checked")

    monkeypatch.setattr(models, "resolve_model", no_model)
    out = tmp_path / "run"
    base = ["train", "grpo", "--config", str(REPO / "configs/grpo_math_cpu.yaml")]
    base += ["--data", str(data_dir / "math500" / "test.jsonl"), "--output-dir", str(out)]
    for extra in (["--dry-run"], ["wandb.enabled=false"]):
        for setting, key in (
            ("training.temperature=-1", "training.temperature=-1: `temperature` (=-1)"),
            ("training.generation_kwargs={top_k: -2}", "training.generation_kwargs.top_k=-2"),
        ):
            assert cli_main([*base, *extra, setting]) == 2, (extra, setting)
            captured = capsys.readouterr()
            assert captured.err.startswith("densereward: error: " + key), captured.err
            assert captured.err.count("\n") == 1 and "internal error" not in captured.err
            assert "configuration valid" not in captured.out and not out.exists()


def test_a_trainer_start_value_error_naming_a_training_setting_is_the_configs():
    """Issue 41 third rerun F12: a ValueError from TRL / transformers at the trainer's start that
    names a training.* setting the config gave is a ConfigError naming it; one that names none
    stays a bug."""
    from densereward.trainers.grpo_config import training_error

    training = {"temperature": -1, "top_p": 0.9, "max_completion_length": 16}
    error = training_error(
        ValueError("`temperature` (=-1) has to be a strictly positive float\nmore"), training
    )
    assert isinstance(error, ConfigError)
    assert str(error) == (
        "training.temperature=-1: trl / transformers refused it when the trainer started: "
        "`temperature` (=-1) has to be a strictly positive float"
    )
    assert training_error(ValueError("list index out of range"), training) is None
    assert training_error(ValueError("model.top_p_head is broken"), training) is None
    assert training_error(KeyError("temperature"), training) is None  # not a ValueError


def _rows(path: Path, counts: list[tuple[int, int]]) -> None:
    path.write_text(
        "".join(
            json.dumps({"step": i + 1, "verifier/n_read": r, "verifier/n_unread": u}) + "\n"
            for i, (r, u) in enumerate(counts)
        )
    )


def test_the_summary_says_loudly_when_the_verifier_read_no_completion(
    tmp_path, capsys, monkeypatch
):
    """Issue 41 third rerun F13: the README's quick start read 0 of 20 completions (the 135M
    policy never reached a final answer in 64 tokens): the dense reward was constant, loss 0,
    exit 0, and only step 1 warned. The end-of-run summary (console and result.json) says so."""
    from densereward.rewards import RewardConfig
    from densereward.trainers import grpo

    rq = tmp_path / "reward_quality.jsonl"
    dense = {"reward": RewardConfig(type="dense"), "training": {}}
    _rows(rq, [(0, 4)] * 5)
    reads = grpo.verifier_reads(tmp_path, dense, 64)
    assert reads["n_read"] == 0 and reads["n"] == 20
    assert reads["warning"].startswith(
        "the dense reward's verifier read 0 of 20 completions over the run"
    )
    assert "it was constant: the policy trained on nothing" in reads["warning"]
    assert "training.max_completion_length (now 64)" in reads["warning"]
    gated = {"reward": RewardConfig(type="gated"), "training": {}}
    assert (
        "only the Math-Verify answer check trained"
        in grpo.verifier_reads(tmp_path, gated)["warning"]
    )
    _rows(rq, [(1, 3)] + [(0, 4)] * 4)  # 1 of 20: fewer than a tenth
    assert "read 1 of 20" in grpo.verifier_reads(tmp_path, dense)["warning"]
    _rows(rq, [(2, 2)] * 5)  # half read: nothing to say
    assert grpo.verifier_reads(tmp_path, dense) == {"n_read": 10, "n": 20, "warning": None}
    sparse = {"reward": RewardConfig(type="sparse"), "training": {}}
    assert grpo.verifier_reads(tmp_path, sparse) is None  # the reward reads no verifier

    # the console summary ends with it
    _rows(rq, [(0, 4)] * 5)
    warning = grpo.verifier_reads(tmp_path, dense, 64)["warning"]
    result = {"run_dir": str(tmp_path), "wall_s": 1.0, "verifier_reads": {"warning": warning}}
    monkeypatch.setattr(grpo, "run", lambda *a, **k: result)
    cpu = str(REPO / "configs/grpo_math_cpu.yaml")
    assert grpo.main(_parse(["--config", cpu])) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == f"!! WARNING: {warning}"


# --------------------------------------------------------------------------------------------
# Resume from a checkpoint (F3, F4)
# --------------------------------------------------------------------------------------------


def _one_layer_policy(model_dir: Path, tie: bool):
    """The embedded policy's architecture (SmolLM2: Llama, tied embeddings) with one layer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, num_hidden_layers=1, tie_word_embeddings=tie)
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.slow  # imports transformers' Trainer
def test_a_resume_drops_the_missing_keys_notice_only_for_tied_weights(tmp_path, default_model_dir):
    """F4: every --resume of the SmolLM2 policy printed transformers' "There were missing keys
    in the checkpoint model loaded: ['lm_head.weight']": its embeddings are tied, so the head
    is the embedding matrix and was loaded with it. transformers' own Trainer emits the notice
    here (a one-layer SmolLM2 saved and loaded as a resume does); the filter drops it for a tied head,
    and keeps it for the same key of an untied model, whose head was really not loaded."""
    import contextlib
    import logging

    import safetensors.torch
    from transformers import Trainer, TrainingArguments

    from densereward._quiet import tied_weights_notice_dropped

    said: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    def resume(model, ckpt: Path, quiet: bool) -> list[str]:
        said.clear()
        args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[])
        trainer = Trainer(model=model, args=args)
        with tied_weights_notice_dropped(model) if quiet else contextlib.nullcontext():
            trainer._load_from_checkpoint(str(ckpt))  # what train(resume_from_checkpoint) calls
        return [m for m in said if "missing keys" in m]

    handler = Collect()
    emitter = logging.getLogger("transformers.trainer")
    emitter.addHandler(handler)
    try:
        tied = _one_layer_policy(default_model_dir, tie=True)
        tied.save_pretrained(tmp_path / "tied")  # saves the embedding once, no lm_head.weight
        notice = "There were missing keys in the checkpoint model loaded: ['lm_head.weight']."
        assert resume(tied, tmp_path / "tied", quiet=False) == [notice]  # the control
        assert resume(tied, tmp_path / "tied", quiet=True) == []
        assert not emitter.filters  # the filter is removed when the resume has loaded

        untied = _one_layer_policy(default_model_dir, tie=False)
        untied.save_pretrained(tmp_path / "untied")
        weights = tmp_path / "untied" / "model.safetensors"
        state = safetensors.torch.load_file(weights)
        del state["lm_head.weight"]  # a head that really is missing
        safetensors.torch.save_file(state, weights, metadata={"format": "pt"})
        assert resume(untied, tmp_path / "untied", quiet=True) == [notice]
        # a tied head and a missing norm: the norm is news, so the notice stays whole
        tied.save_pretrained(tmp_path / "tied-no-norm")
        weights = tmp_path / "tied-no-norm" / "model.safetensors"
        state = safetensors.torch.load_file(weights)
        del state["model.norm.weight"]
        safetensors.torch.save_file(state, weights, metadata={"format": "pt"})
        (kept,) = resume(tied, tmp_path / "tied-no-norm", quiet=True)
        assert "model.norm.weight" in kept and "lm_head.weight" in kept
    finally:
        emitter.removeHandler(handler)


def _two_step_config() -> dict:
    """A 2-step GRPO config of the embedded policy: 4 completions of 8 tokens a step, the
    sparse reward alone (no verifier to load), a checkpoint at step 2, W&B off."""
    from densereward.config import load_yaml

    config = load_yaml(REPO / "configs/grpo_dynamics_cpu.yaml")
    config.pop("heldout")
    config["reward"]["track"] = False  # the sparse reward alone: no verifier to load
    config["data"].update(size=8, limit=8)
    config["training"].update(
        max_steps=2,
        save_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
    )
    config["wandb"] = {"enabled": False}
    return config


def _two_step_cli(tmp_path: Path, run_dir: Path, *, save_only_model: bool):
    """``cli(*argv)``: ``densereward train grpo`` in a fresh process (exit 0 asserted) of a
    2-step run of the embedded policy, 4 completions of 8 tokens a step, the sparse reward
    alone (no verifier to load), a checkpoint at step 2, the linear schedule from 3e-5, in
    ``run_dir``."""
    import os
    import subprocess
    import sys

    import yaml

    config = _two_step_config()
    config["training"]["save_only_model"] = save_only_model
    assert config["training"]["learning_rate"] == 3e-5
    assert config["training"].get("lr_scheduler_type", "linear") == "linear"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    def cli(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "densereward.cli", "train", "grpo", "--config", str(path)]
        done = subprocess.run(
            [*cmd, "--output-dir", str(run_dir), *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    return cli


def _learning_rates(run_dir: Path) -> dict[int, float]:
    """``{step: the learning rate that step trained at}`` of ``run_dir/trainer_state.json``."""
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    return {h["step"]: h["learning_rate"] for h in history if "learning_rate" in h}


RESPREAD = (
    "re-spread over max_steps=4 (checkpoint-2 was trained with max_steps=2): step 3 trains at "
    "learning rate 1.5e-05, the linear schedule's rate over 4 steps at step 2 (over the "
    "checkpoint's 2 steps: 0)"
)
"""What the dry run and the start say of a --resume --max-steps 4 from a 2-step run's
checkpoint-2: transformers builds the schedule for the new max_steps (3e-5 * (1 - 2/4) at
step 3), where the checkpoint's own schedule had ended at 0."""


@pytest.mark.slow  # a 2-step GRPO start and a resume to 4 steps with the embedded model (~1 min)
def test_a_resume_with_another_max_steps_says_the_schedule_is_re_spread_over_it(tmp_path):
    """F6: ``--resume --max-steps 6`` of the 5-step demo said "the learning-rate schedule
    continues from step 5", but transformers builds the schedule for the new max_steps: step 6
    trained at 3e-5 * (1 - 5/6), where the 5-step schedule had ended at 0. The dry run and the
    start say the schedule is re-spread over the new total, with the rate of the first resumed
    step; a resume with the same max_steps says nothing of it. From a checkpoint with the
    optimizer and scheduler state, the first resumed step trained at the rate the checkpoint's
    schedule ended on (0) and only the next one on the re-spread schedule: it trains on the
    re-spread one now, as a weights-only checkpoint's resume does."""
    run_dir = tmp_path / "run"
    cli = _two_step_cli(tmp_path, run_dir, save_only_model=False)
    cli()
    assert (run_dir / "checkpoint-2" / "scheduler.pt").is_file()
    assert _learning_rates(run_dir) == pytest.approx({1: 3e-5, 2: 1.5e-5})
    # the same max_steps says nothing of a re-spread (a resume at max_steps is refused:
    # test_resume_of_a_finished_run_at_max_steps_is_refused_with_the_fix)
    from types import SimpleNamespace

    from densereward.trainers.grpo import _respread

    assert _respread(run_dir / "checkpoint-2", SimpleNamespace(max_steps=2)) is None
    dry = cli("--resume", "--max-steps", "4", "--dry-run").stdout
    assert (
        f"ok  run directory: {run_dir} (continues from checkpoint-2; the learning-rate "
        f"schedule continues from step 2, {RESPREAD})"
    ) in dry, dry  # rerun 17 F3: no rows to speak of (reward.track: false writes none)
    resumed = cli("--resume", "--max-steps", "4")
    said = [line for line in resumed.stderr.splitlines() if "re-spread" in line]
    assert said == [
        f"WARNING densereward.trainers.grpo: --resume from {run_dir / 'checkpoint-2'}: the "
        f"learning-rate schedule continues from step 2, {RESPREAD}"
    ], resumed.stderr
    # 3e-5 * (1 - (k - 1) / 4) at steps 3 and 4; step 3 trained at 0 before
    lr = _learning_rates(run_dir)
    assert lr[3] == pytest.approx(1.5e-5) and lr[4] == pytest.approx(7.5e-6), lr


@pytest.mark.slow  # two GRPO starts of two steps each with the embedded model (~2 min)
def test_a_resume_from_a_weights_only_checkpoint_continues_the_schedule_and_says_so(tmp_path):
    """F3: ``make demo`` saves weights-only checkpoints (``training.save_only_model: true``: no
    optimizer.pt, no scheduler.pt). transformers then skips the optimizer and the scheduler
    without a word and builds the schedule at step 0, so the resumed steps' learning rate
    jumped back to its peak (the demo: 6e-06 at step 5, 3e-05 at step 6), while the run, its
    dry run and its summary called it a continuation. The schedule now continues from the
    checkpoint's step, and the dry run, the start and the summary say that the optimizer's
    state starts afresh and how to keep it. Through the command line, as a user runs it.
    F5: the resumed run's wall_s and "finished in" were its own start's alone beside steps 4;
    F6: "heldout": null came with no reason."""
    run_dir = tmp_path / "run"
    cli = _two_step_cli(tmp_path, run_dir, save_only_model=True)
    first = cli()
    ckpt = run_dir / "checkpoint-2"
    assert not (ckpt / "optimizer.pt").exists() and not (ckpt / "scheduler.pt").exists()
    (ends,) = [line for line in first.stdout.splitlines() if "checkpoints (resume with" in line]
    assert ends.endswith(
        f"{ckpt} (weights only: a resume restarts the optimizer and random-number states; "
        "training.save_only_model: false keeps them)"
    ), ends
    # F6: "heldout": null (no heldout: section) comes with its reason, in the file and the console
    first_result = json.loads((run_dir / "result.json").read_text())
    assert first_result["heldout"] is None
    # reward.track: false with the sparse reward: no reward_quality.jsonl, and the result and
    # the summary said its path (a missing file) and "None"; the curve is the 0/1 reward's mean
    assert not (run_dir / "reward_quality.jsonl").exists()
    assert first_result["reward_quality"] is None and first_result["plot"] is None
    assert first_result["reward_quality_reason"] == (
        "off: reward.track: false and the reward reads no verifier, so the verifier's "
        "reward-quality metrics (TPR, TNR, AUROC, ...) were not measured; the curve "
        "(verifier/pass_rate) is TRL's mean 0/1 reward per step, the Math-Verify pass rate of "
        "the training completions; reward.track: true measures them"
    )
    assert first_result["metric"] == "verifier/pass_rate" and len(first_result["curve"]) == 2
    # rerun 17 F2: final_rests_on was null without a reason; 4 completions a step (4 x 1 x 1)
    assert first_result["final_rests_on"] == "4 completions of step 2"
    assert first_result["curve"][-1]["n_completions"] == 4
    off = "none (off: reward.track: false and the reward reads no verifier)"
    assert f"  reward-quality metrics (verifier/* per step): {off}" in first.stdout
    assert f"  reward-quality dynamics plot:                 {off}" in first.stdout
    assert first_result["heldout_reason"].startswith("off: the config has no heldout: section")
    (held,) = [line for line in first.stdout.splitlines() if "held-out pass rate" in line]
    assert held.endswith("off (no heldout: section in the config; docs/grpo.md)"), held
    # F5: the checkpoint keeps the run's wall time up to it; a fresh run's wall_s is its one start
    assert first_result["wall_s"] == first_result["wall_s_this_start"] > 0
    assert first_result["starts"] == 1 and "resumed_from" not in first_result
    kept = json.loads((ckpt / "wall_time.json").read_text())
    assert 0 < kept["wall_s"] <= first_result["wall_s"] and kept["starts"] == 1
    dry = cli("--resume", "--max-steps", "4", "--dry-run").stdout  # F6: re-spread over 4 steps
    assert (
        f"ok  run directory: {run_dir} (continues from checkpoint-2, weights only: the "
        f"learning-rate schedule continues from step 2, {RESPREAD}, the optimizer state (Adam's "
        "moments) and the random-number state (rng_state.pth: completion sampling) start "
        "afresh; training.save_only_model: false keeps them)"
    ) in dry, dry
    # rerun 17 F3: the dry run listed the verifier as if it would be used; the run loads none
    assert (
        "ok  verifier: not used (reward.type=sparse reads no verifier and reward.track: false): "
        "no verifier model is loaded or checked"
    ) in dry, dry
    assert "VerifierConfig ok" not in dry and "ok  verifier.model" not in dry
    resumed = cli("--resume", "--max-steps", "4")
    said = [line for line in resumed.stderr.splitlines() if "weights only" in line]
    assert len(said) == 1 and "training.save_only_model: false" in said[0], resumed.stderr
    assert (
        f"the resume continues the learning-rate schedule from step 2, {RESPREAD}, but" in (said[0])
    )  # F6: --max-steps 4 of a 2-step run
    assert "random-number state" in said[0] and not (ckpt / "rng_state.pth").exists()
    assert "missing keys" not in resumed.stderr  # F4: the tied lm_head is no missing key
    # F5: after --resume, wall_s covers both starts (up to checkpoint-2, then this one) and
    # says so; before, it was this start's alone beside steps 4 and the curve of steps 1-4
    result = json.loads((run_dir / "result.json").read_text())
    assert result["steps"] == 4 and result["starts"] == 2
    assert result["resumed_from"] == "checkpoint-2"
    assert result["wall_s"] == pytest.approx(kept["wall_s"] + result["wall_s_this_start"], abs=0.11)
    assert result["wall_s_covers"] == (
        f"2 starts: {kept['wall_s']:.1f} s up to checkpoint-2, then "
        f"{result['wall_s_this_start']:.1f} s in this start"
    )
    (done,) = [line for line in resumed.stdout.splitlines() if "GRPO run finished" in line]
    assert done == (
        f"GRPO run finished in {result['wall_s']:.0f} s ({result['wall_s_this_start']:.0f} s in "
        f"this start, resumed from checkpoint-2). Results are in {run_dir}/:"
    ), done
    later = json.loads((run_dir / "checkpoint-4" / "wall_time.json").read_text())
    assert later["starts"] == 2 and kept["wall_s"] < later["wall_s"] <= result["wall_s"]
    lr = _learning_rates(run_dir)
    # the linear schedule, rebuilt for 4 steps, at its steps 3 and 4: 3e-5 * (1 - (k - 1) / 4);
    # before, it restarted at step 0: 3e-5 and 2.25e-5
    assert lr[3] == pytest.approx(1.5e-5) and lr[4] == pytest.approx(7.5e-6), lr


def test_a_resume_from_a_checkpoint_without_a_wall_time_says_its_wall_s_is_this_starts(tmp_path):
    """F5: a checkpoint saved before densereward kept the run's wall time (``make demo``'s
    runs/grpo-demo/checkpoint-5 from an earlier version) cannot give the earlier starts' time:
    the result says ``wall_s`` is this start's alone, and the summary says so, instead of
    reading as the whole run's."""
    from densereward.trainers.grpo import WALL_FILE, _finished_in, _wall_before, _wall_fields

    ckpt = tmp_path / "checkpoint-5"
    ckpt.mkdir()
    assert _wall_before(None) is None and _wall_before(ckpt) is None
    fields = _wall_fields(41.24, ckpt, _wall_before(ckpt))
    assert fields["wall_s"] == fields["wall_s_this_start"] == 41.2 and fields["starts"] is None
    assert fields["wall_s_covers"].startswith(
        "this start only: checkpoint-5 records no earlier wall time (no wall_time.json"
    )
    assert _finished_in(fields) == (
        "41 s in this start, resumed from checkpoint-5, which records no earlier wall time "
        "(no wall_time.json)"
    )
    (ckpt / WALL_FILE).write_text(json.dumps({"wall_s": 176.8, "starts": 1}))
    fields = _wall_fields(41.24, ckpt, _wall_before(ckpt))
    assert (fields["wall_s"], fields["starts"]) == (218.0, 2)
    assert _finished_in(fields) == "218 s (41 s in this start, resumed from checkpoint-5)"
    fresh = _wall_fields(176.84, None, None)
    assert _finished_in(fresh) == "177 s" and fresh["wall_s_covers"] == "the whole run (one start)"


def test_a_start_resumed_without_a_wall_time_writes_none_into_its_checkpoints(tmp_path):
    """A start resumed from a checkpoint without wall_time.json used to write
    ``{"wall_s": <this start's>, "starts": 1}`` into its own checkpoints, so a later resume
    from them claimed "2 starts" with the first start's time missing. It writes none now, and a
    later resume says the earlier time is unknown."""
    import time
    from types import SimpleNamespace

    from densereward.trainers.grpo import WALL_FILE, _WallClock

    (tmp_path / "checkpoint-6").mkdir()
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=6, is_world_process_zero=True)
    _WallClock(time.monotonic(), None, known=False).on_save(args, state, None)
    assert not (tmp_path / "checkpoint-6" / WALL_FILE).exists()
    _WallClock(time.monotonic() - 3, {"wall_s": 10.0, "starts": 1}).on_save(args, state, None)
    kept = json.loads((tmp_path / "checkpoint-6" / WALL_FILE).read_text())
    assert kept["starts"] == 2 and kept["wall_s"] >= 13.0


def _saved_schedule(ckpt: Path, *, lr: float, max_steps: int, step: int) -> None:
    """A checkpoint directory with transformers' ``scheduler.pt`` (the linear schedule from
    ``lr`` over ``max_steps``, stepped to ``step``) and ``trainer_state.json``."""
    import torch
    from transformers import get_scheduler

    ckpt.mkdir(parents=True)
    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=max_steps
    )
    for _ in range(step):
        optimizer.step()
        scheduler.step()
    torch.save(scheduler.state_dict(), ckpt / "scheduler.pt")
    (ckpt / "trainer_state.json").write_text(
        json.dumps({"global_step": step, "max_steps": max_steps})
    )


def test_a_resume_with_another_learning_rate_says_it_peaks_at_the_setting(tmp_path):
    """A full checkpoint's scheduler.pt restores the peak learning rate it was trained with,
    so ``training.learning_rate`` changed on --resume was ignored without a word (a resume from
    a 3e-5 run with 1e-4 trained at 3e-5's schedule). The resume applies the setting now, and
    the dry run and the start say so with the checkpoint's rate beside it."""
    from transformers import TrainingArguments

    from densereward.trainers.grpo import _ContinueSchedule, _schedule_change

    ckpt = tmp_path / "checkpoint-2"
    _saved_schedule(ckpt, lr=3e-5, max_steps=4, step=2)
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-4, max_steps=4)
    assert _schedule_change(ckpt, args) == (
        "peaking at training.learning_rate=0.0001: step 3 trains at 5e-05 (checkpoint-2's "
        "scheduler.pt holds 3e-05, which transformers alone would restore over the setting)"
    )
    same = TrainingArguments(output_dir=str(tmp_path), learning_rate=3e-5, max_steps=4)
    assert _schedule_change(ckpt, same) is None
    # the callback applies it to the restored schedule at the start of training
    import torch
    from transformers import TrainerState, get_scheduler

    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=3e-5)
    scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=4
    )
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
    assert scheduler.base_lrs == [3e-5] and scheduler.last_epoch == 2  # transformers alone
    state = TrainerState(global_step=2)
    _ContinueSchedule(1e-4).on_train_begin(args, state, None, lr_scheduler=scheduler)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(5e-5)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-5)


def test_resume_of_a_finished_run_at_max_steps_is_refused_with_the_fix(tmp_path, capsys):
    """The GRPO twin of rerun 9's F1 (SAC): --resume of a run that finished (result.json) with
    its checkpoint at training.max_steps trained nothing and rewrote its result with a zero-step
    start's. The dry run and the run refuse it, naming the step and the fix (a larger
    --max-steps), whether --resume names the checkpoint or takes the newest."""
    from densereward.cli import main
    from densereward.rewards.tracking import STATE_FILE

    run = tmp_path / "run"
    ckpt = run / "checkpoint-5"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 5, "max_steps": 5}))
    (ckpt / STATE_FILE).write_text("{}")
    (run / "result.json").write_text("{}")
    config = str(REPO / "configs" / "grpo_demo_cpu.yaml")
    base = ["train", "grpo", "--config", config, "--output-dir", str(run), "--dry-run"]
    expected = (
        f"densereward: error: --resume: {run} holds a finished run (result.json) whose "
        "checkpoint checkpoint-5 is at step 5, and training.max_steps=5: there is nothing to "
        "train; fix: --max-steps above 5 (e.g. 10) to continue it"
    )
    assert main([*base, "--resume"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == expected
    assert main([*base, "--resume", str(ckpt)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == expected.replace(
        f"{run} holds", f"{run.resolve()} holds"
    )
    assert main([*base, "--resume", "--max-steps", "6"]) == 0  # a larger budget continues
    assert "continues from checkpoint-5" in capsys.readouterr().out
    # the twin of rerun 15 F1 (SAC): a stopped run (no result.json) resumed with a budget at or
    # below its checkpoint: transformers checks the budget only after a step, so it trained one
    # step past it (measured: checkpoint-2 with --max-steps 1 or 2 trained step 3) and wrote a
    # result.json marking the run finished there
    (run / "result.json").unlink()
    for max_steps, where in ((3, "beyond"), (5, "at")):
        assert main([*base, "--resume", "--max-steps", str(max_steps)]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"densereward: error: --resume: checkpoint-5 of {run} is at step 5, {where} "
            f"training.max_steps={max_steps}: its budget is spent, yet transformers would train "
            "one more step (to step 6) and mark the run finished there; fix: --max-steps above "
            "5 to train on (the stopped run's budget is in its config.json)"
        )
    assert not (run / "result.json").exists()
    assert main([*base, "--resume", "--max-steps", "6"]) == 0
    assert "continues from checkpoint-5" in capsys.readouterr().out


@pytest.mark.slow  # one GRPO start with the embedded model, stopped in its first step (~30 s)
def test_a_run_stopped_in_its_first_step_keeps_its_directory_and_says_so(
    tmp_path, monkeypatch, default_model_dir
):
    """Rerun 10 F1: a GRPO run stopped by SIGTERM after its first step's rewards were computed
    but before the step ended printed only "stopped by SIGTERM" and deleted its whole run
    directory (config.json, the step's reward-quality row, its W&B run), where SAC and the
    docs say what was left. It keeps the directory now and the stop line says there is nothing
    to resume from and that the same command starts afresh there. The signal is the exception
    SIGTERM becomes (densereward.errors.sigterm_interrupts), raised inside the reward."""
    from densereward.errors import Interrupted
    from densereward.rewards.math import MathCorrectnessReward
    from densereward.trainers.grpo import run

    config = _two_step_config()

    def stopped(self, *args, **kwargs):
        raise Interrupted(signal_name="SIGTERM")

    monkeypatch.setattr(MathCorrectnessReward, "__call__", stopped)
    run_dir = tmp_path / "run"
    with pytest.raises(Interrupted) as stop:
        run(config, output_dir=run_dir)
    assert stop.value.exit_code == 143
    assert stop.value.detail == (
        f"at step 0 of 2, before its first checkpoint (training.save_steps): {run_dir} holds "
        "nothing to resume from; the same command starts the run afresh there and replaces "
        "its files"
    )
    assert (run_dir / "config.json").is_file()


@pytest.mark.slow  # a 6-step GRPO run of the embedded policy through the command line (~40 s)
def test_train_grpo_goes_on_without_wandb_when_its_service_ends_and_says_so_once(tmp_path):
    """Rerun 11 F2's GRPO twin: W&B's service process (wandb-core) killed during a run made
    TRL's profiling wandb.log raise ConnectionResetError out of training ("internal error
    ... This is a bug", exit 1) and W&B's exit hook print a traceback. The run goes on without
    W&B now, saying so once, and finishes (exit 0, every step in result.json)."""
    import yaml

    config = _two_step_config()
    config["training"].update(max_steps=6, save_steps=2, logging_steps=1)
    config["wandb"] = {"enabled": True, "mode": "offline"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    argv = ["train", "grpo", "--config", str(path), "--output-dir", str(run_dir)]
    said, _ = kill_wandb_core_during(
        argv, (run_dir / "checkpoint-2").is_dir, TRANSFORMERS_OFFLINE="1"
    )
    assert "the W&B service (wandb-core) ended during the run at step " in said
    result = json.loads((run_dir / "result.json").read_text())
    assert result["curve"][-1]["step"] == 6, result["curve"]


def test_a_curve_without_tracked_rows_is_named_by_what_it_is():
    """Without reward_quality.jsonl rows (reward.track: false, a reward that reads no
    verifier) the run's curve is TRL's mean reward per step: the pass rate of the 0/1
    ``sparse`` reward, but for a reward kind of one's own it was labelled
    verifier/pass_rate all the same."""
    from types import SimpleNamespace

    from densereward.trainers.grpo import _curve

    trainer = SimpleNamespace(state=SimpleNamespace(log_history=[{"step": 1, "reward": 0.25}]))
    assert _curve([], trainer, True) == ([{"step": 1, "value": 0.25}], "verifier/pass_rate")
    assert _curve([], trainer, False) == ([{"step": 1, "value": 0.25}], "train/reward")
    # rerun 17 F2: with the completions a logged step holds, the points count them
    assert _curve([], trainer, True, 16)[0] == [{"step": 1, "value": 0.25, "n_completions": 16}]
    rows = [{"step": 1, "verifier/pass_rate": 0.5, "verifier/n": 4}]
    assert _curve(rows, trainer, False) == (
        [{"step": 1, "value": 0.5, "n_completions": 4}],
        "verifier/pass_rate",
    )
