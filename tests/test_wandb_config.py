"""One W&B shape for every command (``densereward.wandb_config``): the top-level ``wandb:``
section, validated in one place, applied the same way by ``train grpo``, ``train sac`` and
``compare``; each dry run shows the resolved settings; the earlier shapes are refused naming the
key that replaced them; a short real SAC run writes an offline W&B run with the configured
project, group, name and tags."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from densereward.config import load_yaml
from densereward.errors import ConfigError
from densereward.wandb_config import WandbConfig, describe_wandb, wandb_environment

REPO = Path(__file__).resolve().parents[1]
W_KEYS = "enabled, project, entity, group, name, tags, mode, dir"


def offline_run(run_dir: Path) -> tuple[str, str, str, list[str], str]:
    """(project, group, name, tags, job type) of the one offline W&B run under ``run_dir``, read
    from the run record of its ``.wandb`` file (LevelDB log framing: 32 KiB blocks of records,
    each a 7-byte header, crc, length and kind, before the bytes of a ``wandb`` protobuf
    ``Record``; the file starts with a 7-byte W&B header). Not a byte search: the run's config,
    which holds the ``wandb:`` section's values too, is in the same file."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/*.wandb")
    data, pos, buf = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header: padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        buf, pos = buf + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            if record.WhichOneof("record_type") == "run":
                r = record.run
                return r.project, r.run_group, r.display_name, list(r.tags), r.job_type
            buf = b""
    raise AssertionError(f"no run record in {path}")


def test_the_section_is_validated_in_one_place():
    w = WandbConfig.from_section({"project": "p", "group": "g", "tags": ["a", "b"]})
    assert (w.project, w.group, w.tags, w.enabled, w.mode) == ("p", "g", ("a", "b"), True, "auto")
    with pytest.raises(
        ConfigError, match=f"unknown key\\(s\\) in section 'wandb': projekt; the keys are {W_KEYS}"
    ):
        WandbConfig.from_section({"projekt": "p"})
    with pytest.raises(
        ConfigError, match="wandb.mode must be one of auto, online, offline, disabled"
    ):
        WandbConfig.from_section({"mode": "offlne"})
    with pytest.raises(ConfigError, match="wandb.enabled must be true or false"):
        WandbConfig.from_section({"enabled": "yes"})
    with pytest.raises(ConfigError, match="section 'wandb' must be a mapping"):
        WandbConfig.from_section(True)


def test_the_environment_is_set_for_one_run_and_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_RUN_GROUP", "someone-elses")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    w = WandbConfig(project="p", group="g", tags=("a", "b"))
    with wandb_environment(w, tmp_path / "run-1") as mode:
        assert mode == "offline"  # mode auto keeps the user's WANDB_MODE
        assert os.environ["WANDB_PROJECT"] == "p" and os.environ["WANDB_RUN_GROUP"] == "g"
        assert os.environ["WANDB_NAME"] == "run-1" and os.environ["WANDB_TAGS"] == "a,b"
        assert os.environ["WANDB_DIR"] == str(tmp_path / "run-1")
    assert "WANDB_PROJECT" not in os.environ and os.environ["WANDB_RUN_GROUP"] == "someone-elses"
    with wandb_environment(WandbConfig(mode="disabled", dir=str(tmp_path / "w")), tmp_path) as m:
        assert m == "disabled" and os.environ["WANDB_DIR"] == str(tmp_path / "w")
    assert os.environ["WANDB_MODE"] == "offline"
    with wandb_environment(WandbConfig(enabled=False), tmp_path) as m:
        assert m is None and "WANDB_PROJECT" not in os.environ
    line = describe_wandb(WandbConfig(group="g"), tmp_path / "run-2")
    assert "project densereward, entity (default), group g, name run-2" in line
    assert "mode offline (WANDB_MODE)" in line


@pytest.mark.parametrize(
    ("training", "message"),
    [
        (
            {"wandb": False},
            "training.wandb moved to the top-level wandb: section: set wandb.enabled "
            "(e.g. wandb: {enabled: false})",
        ),
        ({"wandb_project": "p"}, "set wandb.project (e.g. wandb: {project: p})"),
    ],
)
def test_sac_refuses_the_earlier_keys_naming_the_new_one(training, message):
    from densereward.trainers import sac

    with pytest.raises(ConfigError) as err:
        sac.parse_config({"training": training})
    assert message in str(err.value)


@pytest.mark.slow  # imports TRL to validate the GRPO config
@pytest.mark.parametrize("report_to", [["wandb"], "all", ["tensorboard", "wandb"]])
def test_grpo_refuses_wandb_in_report_to_and_adds_it_from_the_section(report_to, tmp_path):
    from densereward.trainers import grpo

    config = load_yaml(REPO / "configs" / "grpo_math_cpu.yaml")
    config["training"]["report_to"] = report_to
    with pytest.raises(
        ConfigError,
        match="switched by the top-level wandb: section .*drop wandb/all from training.report_to",
    ):
        grpo.resolve_config(config)
    config["training"]["report_to"] = ["tensorboard"]
    parts = grpo.resolve_config(config)
    assert grpo.build_grpo_args(parts, tmp_path / "r", cpu_check=True).report_to == [
        "tensorboard",
        "wandb",
    ]
    config["wandb"]["enabled"] = False
    parts = grpo.resolve_config(config)
    assert grpo.build_grpo_args(parts, tmp_path / "r", cpu_check=True).report_to == ["tensorboard"]
    config["training"]["report_to"] = "none"  # consistent with enabled: false
    assert grpo.build_grpo_args(grpo.resolve_config(config), tmp_path / "r").report_to == []
    config["wandb"]["enabled"] = True  # "none" used to switch W&B off: not silently on now
    with pytest.raises(ConfigError, match="asks for no W&B run, but wandb.enabled is true"):
        grpo.resolve_config(config)


def test_every_commands_dry_run_shows_the_resolved_settings(tmp_path, capsys, monkeypatch):
    """``train sac --dry-run`` (and ``compare --dry-run`` for its runs) print the ``wandb:``
    line; ``train grpo``'s is in tests/test_grpo.py's dry runs (it imports TRL)."""
    from densereward.cli import main as cli_main

    monkeypatch.setenv("WANDB_MODE", "offline")
    sac_cfg = REPO / "configs" / "sac_fetchreach_sparse.yaml"
    assert (
        cli_main(
            [
                "train",
                "sac",
                "--config",
                str(sac_cfg),
                "--output-dir",
                str(tmp_path / "sac-run"),
                "--dry-run",
                "wandb.group=g1",
                "wandb.tags=[x]",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "wandb: project densereward, entity (default), group g1, name sac-run, tags ['x'], "
        f"mode offline (WANDB_MODE), dir {tmp_path / 'sac-run'}" in out
    )
    compare = tmp_path / "compare.yaml"
    compare.write_text(
        f"trainer: sac\nbase: {sac_cfg}\nname: tiny\noutput_dir: {tmp_path / 'cmp'}\n"
        "conditions: {sparse: {}, dense: [env.id=FetchReachDense-v4, env.reward=env]}\n"
        "seeds: [0]\nbudget: 1000\nwandb: {project: dr-test, tags: [cmp]}\n"
    )
    assert cli_main(["compare", "--config", str(compare), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("wandb: ") == 1, out  # the comparison's line, not one per condition
    assert (
        "wandb: project dr-test, entity (default), group tiny, name <condition>-seed<k>, "
        "tags ['cmp'], mode offline (WANDB_MODE)" in out
    )
    bad = compare.read_text().replace(
        "conditions: {sparse: {}", "conditions: {sparse: [wandb.group=x]"
    )
    compare.write_text(bad)
    assert cli_main(["compare", "--config", str(compare), "--dry-run"]) == 2
    assert "wandb.group is set by the comparison for every run" in capsys.readouterr().err


def test_compare_gives_every_run_the_comparisons_section():
    from densereward.sample_efficiency import config as C

    cfg = C.parse_compare_config(
        {
            "trainer": "sac",
            "base": "configs/sac_fetchreach_sparse.yaml",
            "conditions": {"a": {}, "b": ["env.id=FetchReachDense-v4", "env.reward=env"]},
            "seeds": [0, 1],
            "wandb": {"project": "p", "enabled": False},
        },
        name="cmp",
    )
    runs = C.build_run_configs(cfg, base_dir=REPO)
    sections = [run["wandb"] for seeds in runs.values() for run in seeds.values()]
    assert len(sections) == 4 and all(s == sections[0] for s in sections)
    assert sections[0] == {
        **sections[0],
        "project": "p",
        "enabled": False,
        "group": "cmp",
        "name": None,
    }


def test_a_short_sac_run_writes_an_offline_run_with_the_configured_project_and_group(
    tmp_path, monkeypatch
):
    """The smallest SAC run the tests use (sparse FetchReach, no verifier), W&B on, offline."""
    from densereward.trainers import sac

    monkeypatch.setenv("WANDB_MODE", "offline")
    for key in ("WANDB_PROJECT", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(key, raising=False)
    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    config["env"]["n_envs"] = 1
    config["sac"].update(learning_starts=30, batch_size=16, policy_kwargs={"net_arch": [16, 16]})
    config["training"].update(
        total_timesteps=60, eval_every=0, curve_every=30, checkpoint_every=0, log_interval=1
    )
    config["wandb"] = {"project": "dr-wandb-test", "group": "dr-group", "tags": ["t1"]}
    sac.run(config, output_dir=tmp_path / "run-a")
    assert offline_run(tmp_path / "run-a") == ("dr-wandb-test", "dr-group", "run-a", ["t1"], "")
    assert "WANDB_PROJECT" not in os.environ and "WANDB_RUN_GROUP" not in os.environ


@pytest.mark.slow  # two short SAC runs
def test_a_comparison_groups_its_runs_and_names_each_after_its_run_directory(tmp_path, monkeypatch):
    from densereward.sample_efficiency import run_comparison

    monkeypatch.setenv("WANDB_MODE", "offline")
    config = {
        "name": "tiny-cmp",
        "trainer": "sac",
        "base": "configs/sac_fetchreach_sparse.yaml",
        "common": [
            "env.n_envs=1",
            "sac.learning_starts=30",
            "sac.batch_size=16",
            "sac.policy_kwargs={net_arch: [16, 16]}",
            "training.eval_every=0",
            "training.curve_every=30",
            "training.checkpoint_every=0",
        ],
        "conditions": {"sparse": {}, "dense": ["env.id=FetchReachDense-v4", "env.reward=env"]},
        "seeds": [0],
        "budget": 60,
        "n_bootstrap": 100,
        "output_dir": str(tmp_path / "cmp"),
        "wandb": {"project": "dr-cmp-test", "tags": ["cmp"]},
    }
    monkeypatch.chdir(REPO)
    run_comparison(config, progress=False)
    for cname in ("sparse", "dense"):
        run_dir = tmp_path / "cmp" / "runs" / cname / "seed0" / f"{cname}-seed0"
        want = ("dr-cmp-test", "tiny-cmp", f"{cname}-seed0", ["cmp"], cname)
        assert offline_run(run_dir) == want
