"""Values passed through to ``trl.GRPOConfig`` (``training:``) and ``stable_baselines3.SAC``
(``sac:``) are checked against the library's types when the config is read (issue 41, rerun):
five bad values passed ``--dry-run`` and the run died minutes later as an "internal error"."""

from __future__ import annotations

from pathlib import Path

import pytest

from densereward.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
GRPO_CPU = str(REPO / "configs" / "grpo_math_cpu.yaml")
SAC_SPARSE = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")

BAD = [
    (
        ["train", "grpo", "--config", GRPO_CPU],
        "training.learning_rate=abc",
        "training.learning_rate='abc': trl.GRPOConfig takes a finite number",
    ),
    (
        ["train", "grpo", "--config", GRPO_CPU],
        "training.learning_rate=nan",
        "training.learning_rate='nan': trl.GRPOConfig takes a finite number here (got NaN/inf)",
    ),
    (
        ["train", "grpo", "--config", GRPO_CPU],
        "training.max_completion_length=-5",
        "training.max_completion_length=-5: trl.GRPOConfig takes an integer >= 1",
    ),
    (
        ["train", "sac", "--config", SAC_SPARSE],
        "sac.learning_rate=abc",
        "sac.learning_rate='abc': stable_baselines3.SAC takes a finite number",
    ),
    (
        ["train", "sac", "--config", SAC_SPARSE],
        "sac.gamma=nan",
        "sac.gamma='nan': stable_baselines3.SAC takes a finite number here (got NaN/inf)",
    ),
]


@pytest.mark.parametrize(("argv", "override", "says"), BAD)
@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_passthrough_values_are_refused_by_the_dry_run_and_the_start(
    argv, override, says, dry_run, tmp_path, capsys
):
    """Exit 2, one line naming the key and what it takes; the start creates no run directory."""
    from densereward.cli import main

    run_dir = tmp_path / "run"
    extra = ["--dry-run"] if dry_run else ["--output-dir", str(run_dir)]
    assert main([*argv, *extra, override]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"learning_rate": "-inf"}, "got NaN/inf"),
        ({"learning_rate": float("nan")}, "got NaN/inf"),
        ({"learning_rate": True}, "not true/false"),
        ({"learning_rate": -1e-5}, ">= 0"),
        ({"per_device_train_batch_size": 0}, "integer >= 1"),
        ({"num_generations": 2.5}, "an integer"),
    ],
)
def test_grpo_training_values(values, says):
    from densereward.trainers.grpo_config import grpo_config_kwargs

    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        grpo_config_kwargs(values)


def test_valid_grpo_values_pass_and_numeric_strings_become_numbers():
    """YAML 1.1 reads ``1e-5`` as a string; TRL would hand it to the optimizer as one."""
    from densereward.trainers.grpo_config import grpo_config_kwargs

    given = {
        "learning_rate": "1e-5",
        "max_steps": -1,
        "seed": 0,
        "save_strategy": "no",
        "lr_scheduler_type": "cosine",
        "report_to": [],
        "pad_to_multiple_of": "auto",
    }
    assert grpo_config_kwargs(given) == {**given, "learning_rate": 1e-5}


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"tau": "inf"}, "got NaN/inf"),
        ({"ent_coef": "nan"}, "got NaN/inf"),
        ({"ent_coef": float("nan")}, "got NaN/inf"),
        ({"gamma": 1.5}, r"in \[0, 1\]"),
        ({"buffer_size": 0}, "integer >= 1"),
        ({"batch_size": "abc"}, "an integer"),
    ],
)
def test_sac_values(values, says):
    from densereward.trainers.sac_config import parse_config

    with pytest.raises(ConfigError, match=says):
        parse_config({"sac": values})


def test_valid_sac_values_pass():
    """SB3's settings that are not numbers (``ent_coef: auto_0.1``, ``train_freq: [1,
    episode]``) and its sentinels (``learning_starts: 0``, ``gradient_steps: -1``) pass."""
    from densereward.trainers.sac_config import parse_config

    given = {
        "ent_coef": "auto_0.1",
        "learning_rate": "3e-4",
        "gamma": 0.98,
        "train_freq": [1, "episode"],
        "learning_starts": 0,
        "gradient_steps": -1,
        "policy_kwargs": {"net_arch": [64, 64]},
    }
    assert parse_config({"sac": given}).sac == {**given, "learning_rate": 3e-4}


def test_a_field_without_a_numeric_type_is_left_to_the_library():
    from densereward.sections import check_passthrough_values

    assert check_passthrough_values(
        {"x": "abc", "y": None}, {"x": list[int], "y": float}, prefix="s.", owner="X"
    ) == {"x": "abc", "y": None}
