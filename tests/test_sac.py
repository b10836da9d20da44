"""SAC trainer: configs, reward-quality metrics, checkpoints/resume, and a real run with the verifier."""

from __future__ import annotations

import argparse
import copy
import csv
import json
import logging
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from densereward.config import load_yaml
from densereward.errors import ConfigError, DataError
from densereward.io import read_jsonl
from densereward.trainers import sac

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("sac_*.yaml"))


def logged_keys(run_dir: Path) -> set[str]:
    with open(run_dir / "logs" / "progress.csv") as f:
        return set(next(csv.reader(f)))


def logged_column(run_dir: Path, key: str) -> list[float]:
    with open(run_dir / "logs" / "progress.csv") as f:
        return [float(r[key]) for r in csv.DictReader(f) if r.get(key)]


def test_all_sac_configs_parse():
    names = {p.name for p in CONFIGS}
    assert {
        "sac_fetchreach_sparse.yaml",
        "sac_fetchreach_dense.yaml",
        "sac_fetchreach_verifier.yaml",
        "sac_fetchpush_verifier.yaml",
        "sac_metaworld_reach_sparse.yaml",
        "sac_metaworld_reach_dense.yaml",
        "sac_metaworld_reach_verifier.yaml",
    } <= names
    for path in CONFIGS:
        cfg = sac.parse_config(load_yaml(path))
        assert cfg.env.id.startswith(("FetchReach", "FetchPush", "densereward/MetaWorld-"))
    dense = sac.parse_config(load_yaml(REPO / "configs" / "sac_fetchreach_dense.yaml"))
    assert dense.env.id == "FetchReachDense-v4" and dense.env.reward == "env"
    assert (
        sac.parse_config(
            load_yaml(REPO / "configs" / "sac_fetchreach_verifier.yaml")
        ).training.total_timesteps
        >= 2000
    )


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"envs": {}}, "unknown section"),
        ({"env": {"n_env": 2}}, "did you mean 'n_envs'"),
        ({"env": {"reward": "verifier"}, "her": {"n_sampled_goal": 4}}, "HER"),
        ({"reward": {"score_every": 0}}, "score_every"),
        ({"training": {"total_timesteps": 0}}, "total_timesteps"),
        ({"sac": {"tua": 0.05}}, r"unknown key 'sac.tua' \(did you mean 'sac.tau'\?\)"),
        ({"sac": {"seed": 3}}, "sac.seed is set by the trainer; use training.seed"),
        ({"env": {"reward": "sprase"}}, r"env.reward: unknown SAC reward kind .*'sparse'"),
        ({"env": {"base": "verifier"}}, "env.base is the reward under the shaping term"),
        ({"env": {"describer": "fetchh"}}, r"env.describer: .*Did you mean 'fetch'"),
    ],
)
def test_bad_configs_are_rejected(config, match):
    with pytest.raises(ConfigError, match=match):
        sac.parse_config(config)


def _dummy_venv():
    from densereward import envs

    return envs.make_vec_env("FetchReach-v4", 1, seed=0, reward="sparse")


def small_config(name: str, **training) -> dict:
    config = load_yaml(REPO / "configs" / name)
    config["training"].update({"log_interval": 1, "curve_every": 100, **training})
    config["wandb"] = {"enabled": False}
    return config


@pytest.mark.slow
def test_checkpoint_and_resume_continue_the_run(tmp_path, caplog):
    config = small_config("sac_fetchreach_sparse.yaml", total_timesteps=100, checkpoint_every=100)
    config["sac"].update({"learning_starts": 60, "batch_size": 32})
    first = sac.run(config, output_dir=tmp_path)
    assert first["env_steps"] == 100
    assert (tmp_path / "checkpoints" / "sac_100_steps.zip").is_file()
    assert (tmp_path / "checkpoints" / "sac_replay_buffer_100_steps.pkl").is_file()
    norm_pkl = tmp_path / "checkpoints" / "sac_vecnormalize_100_steps.pkl"
    assert config["env"]["normalize_obs"] and norm_pkl.is_file()
    from stable_baselines3.common.vec_env import VecNormalize

    saved = VecNormalize.load(str(norm_pkl), _dummy_venv())
    assert saved.obs_rms["observation"].count > 100  # statistics of the 100 steps, not fresh
    config["training"]["total_timesteps"] = 200
    # rerun 11 F3: the resume's dry run names the checkpoint it continues from
    said = "\n".join(sac.dry_run(config, output_dir=tmp_path, resume=True))
    assert (
        "continues from its newest checkpoint sac_100_steps.zip (step 100, with its replay "
        "buffer); no curve row was written after it: none to drop, monitor.csv keeps" in said
    ), said
    second = sac.run(config, output_dir=tmp_path, resume=True)
    assert second["env_steps"] == 200
    final = VecNormalize.load(str(tmp_path / "vecnormalize.pkl"), _dummy_venv())
    # resumed from the checkpoint's statistics and kept updating them
    assert final.obs_rms["observation"].count > saved.obs_rms["observation"].count + 90
    # evaluation curve: step 0 of the fresh run, the end of each part; training curve too
    assert [p["step"] for p in second["curve"]] == [0, 100, 200]
    assert [p["step"] for p in second["train_curve"]] == [100, 200]
    assert second["metric"] == "eval/success_rate" and 0.0 <= second["final"] <= 1.0
    with pytest.raises(ConfigError, match="no checkpoint"):
        sac.run(config, output_dir=tmp_path / "empty", resume=True)
    # a checkpoint whose replay buffer is gone: said in the dry run and at the start, not silent
    (tmp_path / "checkpoints" / "sac_replay_buffer_200_steps.pkl").unlink()
    config["training"]["total_timesteps"] = 250
    said = "\n".join(sac.dry_run(config, output_dir=tmp_path, resume=True))
    gone = (
        "no replay buffer beside it (sac_replay_buffer_<steps>_steps.pkl): SAC continues from an "
        "empty buffer and learns again from new transitions only"
    )
    assert f"checkpoint sac_200_steps.zip (step 200, {gone})" in said, said
    with caplog.at_level("WARNING", logger="densereward.trainers.sac"):
        assert sac.run(config, output_dir=tmp_path, resume=True)["env_steps"] == 250
    assert f"--resume from sac_200_steps.zip: {gone}" in caplog.messages, caplog.messages


@pytest.mark.slow
def test_sac_200_steps_with_the_real_verifier(tmp_path, default_model_dir, capsys):
    """A real SAC run: FetchReach-v4, 2 envs, the embedded SmolLM2 verifier, W&B offline."""
    parser = argparse.ArgumentParser()
    sac.add_arguments(parser)
    args = parser.parse_args(
        [
            "--config",
            str(REPO / "configs" / "sac_fetchreach_verifier.yaml"),
            "--output-dir",
            str(tmp_path),
            "--total-timesteps",
            "200",
            "--seed",
            "1",
            "reward.score_every=20",
            "sac.learning_starts=100",
            "sac.batch_size=64",
            "training.log_interval=1",
            "training.curve_every=100",
            "training.checkpoint_every=0",
            "verifier.threshold=auto",
        ]
    )
    assert sac.main(args) == 0
    printed = capsys.readouterr().out
    assert (
        "verifier/n_voc_episodes=" in printed
        and f"plot: {tmp_path / 'training_curves.png'}" in printed
    )
    keys = logged_keys(tmp_path)
    for key in (
        "verifier/n_voc_episodes",
        "verifier/calls_per_step",
        "verifier/seconds_per_step",
        "verifier/final_progress_mean",
        "rollout/success_rate",
        "rollout/ep_env_rew_mean",
        "rollout/ep_training_rew_mean",
        "rollout/ep_rew_mean",
        "train/actor_loss",
    ):
        assert key in keys, key
    vocs = logged_column(tmp_path, "verifier/voc")
    assert all(-1.0 <= v <= 1.0 for v in vocs)  # null below MIN_EPISODES defined-VOC episodes
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == 200 and summary["steps_per_second"] > 0
    stats = summary["verifier_stats"]
    # 2 envs x 2 episodes x (s_0, steps 20, 40, 50) + s_0 of the next 2 episodes = 18 queries,
    # batched across the envs: 1 call at reset + 4 per episode (20, 40, 50, next s_0) x 2 = 9 calls
    assert stats["n_env_steps"] == 200 and stats["n_queries"] == 18
    assert stats["n_calls"] == 9
    assert stats["n_scored"] + stats["n_abstained"] + stats["n_cache_hits"] == 18
    # the Monitor sees the training reward; true and verifier returns are both logged
    ep_rew = logged_column(tmp_path, "rollout/ep_rew_mean")
    ep_ver = logged_column(tmp_path, "rollout/ep_training_rew_mean")
    assert ep_rew and ep_ver and ep_rew[-1] == pytest.approx(ep_ver[-1], abs=1e-3)
    voc, n_voc = (summary["metrics"].get(k) for k in ("verifier/voc", "verifier/n_voc_episodes"))
    assert n_voc is not None and 0 < n_voc <= 4  # 2 envs x 2 episodes
    assert voc is None or math.isnan(voc)  # fewer than MIN_EPISODES (10): null, not a rate
    # issue 41 third rerun F9: the null comes with its reason, in the summary and the console
    why = (
        f"{int(n_voc)} episodes with a defined VOC in the window (verifier/n_voc_episodes), need 10"
    )
    assert summary["undefined"]["verifier/voc"].startswith(why)
    assert f"verifier/voc: undefined, {why}" in printed
    assert list((tmp_path / "wandb").glob("offline-run-*")), "W&B offline run directory missing"
    assert summary["curve"] and summary["curve"][-1]["step"] == 200
    # issue 28 item 8: threshold auto is calibrated (Youden's J), not a silent 0.5
    assert summary["threshold_source"] == "auto (Youden's J)"
    assert {"verifier/threshold", "verifier/threshold_fallback"} <= keys
    # issue 28 item 13: the run plots its evaluation and verifier curves
    assert summary["plot"] == str(tmp_path / "training_curves.png")
    assert (tmp_path / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dynamics = list(read_jsonl(tmp_path / "verifier_dynamics.jsonl"))
    assert dynamics and "verifier/tnr" in dynamics[-1] and dynamics[-1]["step"] == 200


# ---------------------------------------------------------------------------------------------
# evaluation episodes (issue 17.1) and the sparse baseline with HER (issue 17.3)
# ---------------------------------------------------------------------------------------------


def _normalized_fetch(seed: int, *, training: bool = True):
    from stable_baselines3.common.vec_env import VecNormalize

    from densereward import envs

    venv = envs.make_vec_env("FetchReach-v4", 2, seed=seed, reward="sparse")
    return VecNormalize(venv, norm_obs=True, norm_reward=False, training=training)


def _tiny_sac(venv, learning_starts=50, **kwargs):
    from stable_baselines3 import SAC

    return SAC(
        "MultiInputPolicy",
        venv,
        seed=0,
        learning_starts=learning_starts,
        batch_size=32,
        policy_kwargs={"net_arch": [16, 16]},
        device="cpu",
        **kwargs,
    )


@pytest.mark.slow
def test_run_reports_the_evaluation_curve(tmp_path):
    config = small_config(
        "sac_fetchreach_sparse.yaml",
        total_timesteps=200,
        checkpoint_every=0,
        eval_every=100,
        eval_episodes=2,
    )
    config["sac"].update({"learning_starts": 100, "batch_size": 32})
    summary = sac.run(config, output_dir=tmp_path)
    assert summary["metric"] == "eval/success_rate"
    assert "deterministic evaluation: 2 episodes every 100" in summary["curve_source"]
    assert [p["step"] for p in summary["curve"]] == [0, 100, 200]
    assert summary["final"] == summary["curve"][-1]["value"]
    assert [p["step"] for p in summary["train_curve"]] == [100, 200]  # training episodes
    assert {"eval/success_rate", "eval/mean_reward"} <= logged_keys(tmp_path)
    assert summary["eval_seconds"] > 0
    # evaluation off: the curve is the training episodes' success rate, and says so
    config["training"]["eval_every"] = 0
    off = sac.run(config, output_dir=tmp_path / "off")
    assert off["metric"] == "rollout/success_rate" and off["curve"] == off["train_curve"]
    assert off["curve_source"].startswith("training episodes")
    with pytest.raises(ConfigError, match="eval_every"):
        sac.parse_config({"training": {"eval_every": -1}})


@pytest.mark.slow
def test_her_relabels_with_the_sparse_success_reward(tmp_path):
    """HER's relabelled rewards are on the episode's 1/0 scale (not Fetch's own -1/0)."""
    from stable_baselines3 import HerReplayBuffer

    her = load_yaml(REPO / "configs" / "sac_fetchreach_sparse_her.yaml")
    assert sac.parse_config(her).her == {"n_sampled_goal": 4, "goal_selection_strategy": "future"}
    venv = _normalized_fetch(seed=0)
    model = _tiny_sac(
        venv,
        learning_starts=120,  # HER samples finished episodes (50 steps)
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=her["her"],
    )
    model.learn(160)
    batch = model.replay_buffer.sample(256, env=None)  # raw goals (no normalisation)
    rewards = batch.rewards.numpy().ravel()
    assert set(np.unique(rewards)) == {0.0, 1.0}  # relabelled goals do succeed sometimes
    achieved = batch.next_observations["achieved_goal"].numpy().astype(np.float64)
    desired = batch.observations["desired_goal"].numpy().astype(np.float64)
    np.testing.assert_array_equal(rewards, np.linalg.norm(achieved - desired, axis=-1) < 0.05)
    # and the shipped config trains end to end
    her["training"].update(
        {"total_timesteps": 120, "checkpoint_every": 0, "eval_every": 100, "eval_episodes": 2}
    )
    her["wandb"] = {"enabled": False}
    her["sac"].update({"learning_starts": 110, "batch_size": 32})
    summary = sac.run(her, output_dir=tmp_path / "her")
    assert summary["env_steps"] == 120 and 0.0 <= summary["final"] <= 1.0


# --------------------------------------------------------------------------------------------
# --dry-run, and run directories: reused after a failed start, --resume needs a checkpoint
# --------------------------------------------------------------------------------------------


def _sac_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sac.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_sac_config_passes_its_dry_run(path, tmp_path, capsys):
    """Each shipped config: env id made and reset, describer on a real first observation
    (verifier configs), SAC arguments, run directory; nothing created, no weights loaded. A
    served verifier is contacted: a scripted server serving the config's model stands in."""
    from servers import MisbehavingServer

    out = tmp_path / "run"
    argv = ["--config", str(path), "--output-dir", str(out), "--dry-run"]
    verifier = load_yaml(path).get("verifier") or {}
    served = verifier.get("backend") == "openai"
    if served:
        with MisbehavingServer(model=verifier.get("model") or "misbehaving-model") as server:
            argv.append(f"verifier.backend_options.base_url={server.base_url}")
            assert sac.main(_sac_args(*argv)) == 0
    else:
        assert sac.main(_sac_args(*argv)) == 0
    printed = capsys.readouterr().out
    assert ("ok  verifier server: " in printed) == served, printed
    assert "configuration valid" in printed and "!!" not in printed and not out.exists()
    if load_yaml(path)["env"]["reward"] == "verifier":
        assert "ok  describer: " in printed
    if (load_yaml(path).get("reward") or {}).get("render_frames"):  # one frame rendered, offscreen
        assert re.search(r"ok  frames: \S+ renders \d+x\d+x3 uint8", printed), printed


def test_sac_dry_run_exits_2_when_its_served_verifier_does_not_answer(tmp_path, capsys):
    """Issue 41 item 6b on the SAC side: the frames config with its server down."""
    from servers import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"
    argv = [
        "--config",
        str(REPO / "configs" / "sac_fetchreach_frames.yaml"),
        "--dry-run",
        "--output-dir",
        str(tmp_path / "run"),
        f"verifier.backend_options.base_url={closed}",
    ]
    assert sac.main(_sac_args(*argv)) == 2
    printed = capsys.readouterr().out
    assert "1 problem(s) the run would hit here" in printed
    assert f"  !!  verifier server at {closed} is not reachable" in printed
    assert not (tmp_path / "run").exists()


def test_sac_dry_run_builds_the_reward_kind_and_refuses_frames_for_a_text_only_verifier(
    tmp_path, capsys
):
    """The reward kinds env.reward / env.base name are imported, built and stepped by the dry
    run (a broken plugin fails there, not at the run's first step); reward.render_frames with a
    verifier known to read text only is refused before anything loads."""
    from densereward.envs import SAC_REWARDS
    from densereward.envs.kinds import SACRewardKind
    from densereward.trainers.checks import verifier_reads_images

    cfg = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    verifier_cfg = str(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    assert sac.main(_sac_args("--config", cfg, "--dry-run")) == 0
    assert "ok  reward: 'sparse' built and stepped once" in capsys.readouterr().out

    def explodes(env, ctx):
        raise RuntimeError("no reward here")

    SAC_REWARDS.register("test_missing", "densereward.envs:no_such_builder")
    SAC_REWARDS.register("test_explodes", SACRewardKind(explodes))
    try:
        with pytest.raises(ConfigError, match=r"cannot load 'densereward.envs:no_such_builder'"):
            sac.main(_sac_args("--config", cfg, "--dry-run", "env.reward=test_missing"))
        with pytest.raises(
            ConfigError, match=r"'test_explodes' failed on FetchReach-v4.*no reward"
        ):
            sac.main(_sac_args("--config", verifier_cfg, "--dry-run", "env.base=test_explodes"))
    finally:
        for name in ("test_missing", "test_explodes"):
            SAC_REWARDS._entries.pop(name, None)

    with pytest.raises(ConfigError, match=r"render_frames=true needs a verifier that reads images"):
        sac.main(_sac_args("--config", verifier_cfg, "--dry-run", "reward.render_frames=true"))
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {}}))
    from densereward.config import VerifierConfig

    assert verifier_reads_images(VerifierConfig(model=str(vlm)))[0] is True
    assert verifier_reads_images(VerifierConfig())[0] is False  # the embedded SmolLM2
    served = VerifierConfig(backend="openai", backend_options={"base_url": "http://127.0.0.1:1/v1"})
    assert verifier_reads_images(served)[0] is None  # only the server can tell


def test_sac_dry_run_checks_env_describer_and_run_dir_and_creates_nothing(tmp_path, capsys):
    verifier_cfg = str(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    out = tmp_path / "run"
    assert sac.main(_sac_args("--config", verifier_cfg, "--output-dir", str(out), "--dry-run")) == 0
    printed = capsys.readouterr().out
    assert "ok  describer: FetchDescriber on a real first observation" in printed
    assert "Gripper-target distance" in printed and "NOT loaded" in printed
    assert not out.exists()
    with pytest.raises(ConfigError, match="did you mean \\['FetchReach-v4'"):
        sac.main(_sac_args("--config", verifier_cfg, "--dry-run", "env.id=FetchReech-v4"))
    with pytest.raises(ConfigError, match=r"no checkpoint in .*without --resume"):
        sac.main(
            _sac_args("--config", verifier_cfg, "--output-dir", str(out), "--resume", "--dry-run")
        )
    # issue 28 item 9 on the SAC side: a verifier model that cannot exist fails the dry run
    with pytest.raises(ConfigError, match=r"verifier\.model='/no/such/dir'"):
        sac.main(_sac_args("--config", verifier_cfg, "--dry-run", "verifier.model=/no/such/dir"))
    assert (
        sac.main(
            _sac_args("--config", verifier_cfg, "--dry-run", "verifier.model=qwen2.5-coder-0.5b")
        )
        == 0
    )
    assert "offline model 'qwen2.5-coder-0.5b'" in capsys.readouterr().out


def test_sac_run_directory_rules(tmp_path):
    failed_start = tmp_path / "failed"
    failed_start.mkdir()
    (failed_start / "config.yaml").write_text("env: {}\n")
    assert sac._check_run_dir(failed_start, resume=False) == "reuse"
    with pytest.raises(ConfigError, match="the earlier run stopped before its first checkpoint"):
        sac._check_run_dir(failed_start, resume=True)
    (failed_start / "checkpoints").mkdir()
    (failed_start / "checkpoints" / "sac_100_steps.zip").write_bytes(b"")
    assert sac._check_run_dir(failed_start, resume=True) == "resume"
    with pytest.raises(ConfigError, match=r"sac_100_steps.zip.*add --resume"):
        sac._check_run_dir(failed_start, resume=False)


def test_resume_of_a_finished_run_at_its_budget_is_refused_with_the_fix(tmp_path, capsys):
    """Rerun 9 F1: --resume of a SAC run that had finished (summary.json) at its budget was
    accepted, called it "the stopped run", trained 0 steps and rewrote summary.json with a
    zero-step start's counts (verifier_stats all 0, verifier/mean_mass null). The dry run and
    the run refuse it now, naming the checkpoint's step and the fix; a larger budget resumes."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "sac_400_steps.zip").write_bytes(b"")
    assert sac._check_run_dir(run, resume=True, total_timesteps=400) == "resume"  # not finished
    # rerun 15 F1: a stopped run resumed with a budget below its checkpoint trained nothing and
    # wrote summary.json, so the next command called the stopped run finished
    with pytest.raises(ConfigError) as below:
        sac._check_run_dir(run, resume=True, total_timesteps=300)
    assert str(below.value) == (
        f"--resume: the newest checkpoint of {run}, sac_400_steps.zip, is at step 400, beyond "
        "training.total_timesteps=300: there is nothing to train, and the run would be marked "
        "finished at step 400; fix: --total-timesteps 400 or more (the budget the stopped run "
        "was given, in its config.yaml)"
    )
    assert not (run / "summary.json").exists()
    (run / "summary.json").write_text("{}")
    with pytest.raises(ConfigError) as refused:
        sac._check_run_dir(run, resume=True, total_timesteps=400)
    assert str(refused.value) == (
        f"--resume: {run} holds a finished run (summary.json) whose newest checkpoint "
        "sac_400_steps.zip is at step 400, and training.total_timesteps=400: there is nothing "
        "to train; fix: --total-timesteps above 400 (e.g. 800) to continue it"
    )
    assert sac._check_run_dir(run, resume=True, total_timesteps=800) == "resume"
    # rerun 10 F2: a fresh run into it said only "add --resume", which the budget then refused
    with pytest.raises(ConfigError) as fresh:
        sac._check_run_dir(run, resume=False)
    assert str(fresh.value) == (
        f"run directory {run} holds a finished run (summary.json; latest checkpoint "
        "sac_400_steps.zip). Choices: add --resume with a larger budget (--total-timesteps / "
        "--max-steps) to continue it, or choose another --output-dir for a new run"
    )
    config = REPO / "configs" / "sac_fetchreach_sparse.yaml"
    argv = ["--config", str(config), "--output-dir", str(run), "--resume", "--dry-run"]
    with pytest.raises(ConfigError, match="nothing to train"):
        sac.main(_sac_args(*argv, "--total-timesteps", "400"))


def test_the_resume_dry_run_counts_the_curve_rows_it_drops(tmp_path):
    """Rerun 14 F2: the resume dry run said "the curve rows written after it are dropped" when
    none had been written after the checkpoint. It counts them per file now (what
    ``drop_rows_after`` will drop), and says when there are none; the files are not changed."""
    from densereward.io import append_jsonl

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "sac_100_steps.zip").write_bytes(b"")
    for step in (0, 100):
        append_jsonl(run / "eval_curve.jsonl", {"step": step})
    said = sac._state_text("resume", run, run)
    assert said.startswith(
        "continues from its newest checkpoint sac_100_steps.zip (step 100, "
        f"{sac._NO_BUFFER}); no curve row was written after it: none to drop, monitor.csv"
    ), said
    append_jsonl(run / "eval_curve.jsonl", {"step": 200})
    for step in (100, 200, 300):
        append_jsonl(run / "train_curve.jsonl", {"step": step})
    before = (run / "eval_curve.jsonl").read_text()
    said = sac._state_text("resume", run, run)
    assert (
        "; the curve rows written after it are dropped (eval_curve.jsonl: 1, "
        "train_curve.jsonl: 2), monitor.csv keeps"
    ) in said, said
    assert (run / "eval_curve.jsonl").read_text() == before


def test_resume_of_a_finished_run_without_checkpoints_gives_one_consistent_choice(tmp_path):
    """A finished run that saved no checkpoint: neither a new run nor --resume may use it, and
    neither message sends the user to the other."""
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="finished run.*choose another --output-dir") as new:
        sac._check_run_dir(tmp_path, resume=False)
    with pytest.raises(
        ConfigError, match="finished.*without saving one.*another --output-dir"
    ) as res:
        sac._check_run_dir(tmp_path, resume=True)
    assert "--resume" not in str(new.value) and "without --resume" not in str(res.value)


# --------------------------------------------------------------------------------------------
# nothing silent, nothing misleading (issue 28 item 13)
# --------------------------------------------------------------------------------------------


def test_learning_starts_past_the_run_warns_once_with_the_fix(tmp_path, caplog):
    """SAC with learning_starts >= total_timesteps trains nothing: the run and the dry run say so."""
    config = small_config(
        "sac_fetchreach_sparse.yaml", total_timesteps=60, checkpoint_every=0, eval_every=0
    )
    config["sac"].update({"learning_starts": 100, "batch_size": 32})
    with caplog.at_level(logging.WARNING, logger="densereward.trainers.sac"):
        sac.run(config, output_dir=tmp_path / "run")
    said = [r.getMessage() for r in caplog.records if "learning_starts" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("sac.learning_starts=100 >= training.total_timesteps=60: ")
    assert "no gradient step" in said[0] and "fix: sac.learning_starts=15" in said[0]
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    assert lines[-1].startswith("!! sac.learning_starts=100 >= training.total_timesteps=60")
    # SB3's default (100) counts when the config leaves it out; a run that trains is not warned
    del config["sac"]["learning_starts"]
    config["training"]["total_timesteps"] = 100
    assert "sac.learning_starts=100 >= " in sac._learning_starts_problem(sac.parse_config(config))
    config["training"]["total_timesteps"] = 101
    assert sac._learning_starts_problem(sac.parse_config(config)) is None


@pytest.mark.slow
def test_sac_run_plots_its_curves_and_labels_the_evaluation_reward(tmp_path, capsys):
    """A SAC run writes training_curves.png, and its evaluation's mean_reward says which reward."""
    out = tmp_path / "run"
    args = _sac_args(
        "--config",
        str(REPO / "configs" / "sac_fetchreach_sparse.yaml"),
        "--output-dir",
        str(out),
        "--total-timesteps",
        "100",
        "sac.learning_starts=60",
        "sac.batch_size=32",
        "training.eval_every=50",
        "training.eval_episodes=2",
        "training.checkpoint_every=0",
        "wandb.enabled=false",
        "training.curve_every=50",
    )
    assert sac.main(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    label = "sparse success reward (1 per step at the goal, else 0), summed"
    assert summary["eval_reward"] == label and summary["curve"][-1]["reward"] == label
    # issue 41 rerun B5: the evaluation and the training success rates are named apart (it
    # printed "success_rate" for the evaluation beside "verifier/success_rate" for training)
    assert re.search(r"eval/success_rate=[01]\.\d{3} ", printed)
    assert "verifier/success_rate" not in printed and " success_rate=" not in printed
    assert re.search(
        r"evaluation at step 100: eval/success_rate [01]\.\d{3} \(fraction of 2 "
        r"deterministic episodes ending at the goal\), mean_reward \d+\.\d{3} "
        r"\(sparse success reward \(1 per step at the goal, else 0\), summed over an "
        r"episode; not the verifier's shaped reward\)",
        printed,
    )
    assert summary["plot"] == str(out / "training_curves.png")
    assert (out / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["threshold_source"] is None  # no verifier: no verifier panels


# --------------------------------------------------------------------------------------------
# a new user's own environment (issue 41): Gymnasium's "module:Id" form, and no is_success
# --------------------------------------------------------------------------------------------


def own_env_module(directory: Path) -> Path:
    """docs/extending.md's ``myreach.py`` ("Bring your own environment"), written as it reads."""
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    section = text[text.index("## Bring your own environment") :]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)
    path = directory / "myreach.py"
    path.write_text(block)
    return path


@pytest.fixture
def myreach(tmp_path, monkeypatch):
    import gymnasium as gym

    own_env_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("myreach", None)
    gym.registry.pop("Reach1D-v0", None)


def test_own_environment_by_its_module_id_in_the_api_dry_run_and_compare(myreach, tmp_path):
    """env.id=myreach:Reach1D-v0 (gymnasium.make's own form: import myreach, which registers
    Reach1D-v0) was refused by the dry run ("doesn't exist. Did you mean FetchReach?")."""
    from densereward import envs
    from densereward.sample_efficiency import dry_run_comparison

    venv = envs.make_vec_env("myreach:Reach1D-v0", 2, seed=0, reward="sparse")
    try:
        obs = venv.reset()
        _, rewards, _, _ = venv.step(np.ones((2, 1), dtype=np.float32))
    finally:
        venv.close()
    assert obs.shape == (2, 1) and set(rewards) <= {0.0, 1.0}
    assert venv.info_keywords == ("is_success",)  # the module's env reports success
    config = load_yaml(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    config["env"].update(id="myreach:Reach1D-v0", describer="box", task="Reach x >= 0.5.")
    lines = sac.dry_run(config, output_dir=tmp_path / "run")
    assert lines[0].startswith("env: Reach1D-v0 (max_episode_steps 50)")
    assert any(line.startswith("describer: BoxDescriber") for line in lines)
    assert not (tmp_path / "run").exists()
    compare = {
        "name": "own",
        "trainer": "sac",
        "base": "configs/sac_fetchreach_sparse.yaml",
        "common": ["env.id=myreach:Reach1D-v0"],
        "conditions": {"sparse": {}, "env": ["env.reward=env"]},
        "seeds": [0],
        "budget": 100,
        "output_dir": str(tmp_path / "cmp"),
    }
    assert any("Reach1D-v0" in line for line in dry_run_comparison(compare, base_dir=REPO))
    assert not (tmp_path / "cmp").exists()
    # a module that is not there: one line naming it, from the API and from the dry run
    with pytest.raises(ConfigError, match=r"no module named 'no_such_envs_41'"):
        envs.make_vec_env("no_such_envs_41:Reach1D-v0", 1)
    with pytest.raises(
        ConfigError, match=r"^env\.id: environment id 'no_such_envs_41:Reach1D-v0': no module "
    ):
        sac.dry_run({**config, "env": {"id": "no_such_envs_41:Reach1D-v0"}}, output_dir=tmp_path)


def test_train_sac_dry_run_takes_a_module_id_from_the_command_line(tmp_path):
    """The CLI as a new user runs it: the module on PYTHONPATH, env.id=myreach:Reach1D-v0; and
    an unknown module is one line and exit status 2, not a traceback."""
    import densereward

    own_env_module(tmp_path)
    src = Path(densereward.__file__).parents[1]  # the densereward under test
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(src), os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "densereward.cli",
        "train",
        "sac",
        "--config",
        str(REPO / "configs" / "sac_fetchreach_verifier.yaml"),
        "--dry-run",
        "--output-dir",
        str(out),
        "env.id=myreach:Reach1D-v0",
        "env.describer=box",
        "env.task=Move the point right until x >= 0.5.",
    ]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok  env: Reach1D-v0" in done.stdout and "ok  describer: BoxDescriber" in done.stdout
    assert not out.exists()
    cmd[cmd.index("env.id=myreach:Reach1D-v0")] = "env.id=no_such_envs_41:Reach1D-v0"
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "densereward: error: env.id: environment id 'no_such_envs_41:Reach1D-v0': no module "
        "named 'no_such_envs_41' (the 'module:Id' form imports it to register 'Reach1D-v0'); "
        "install it or put its directory on PYTHONPATH"
    ]


def test_a_task_text_with_a_colon_reaches_the_describer_as_written(myreach, tmp_path, capsys):
    """F1: ``env.task="Goal: ..."`` on the command line was read as the YAML mapping
    ``{'Goal': ...}`` and the dry run showed its repr under ``ok``; the text now arrives as
    written. A mapping (``env.task={Goal: reach}``, or one in the file) is refused."""
    from densereward.cli import main

    config = str(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    task = "Move the point to the origin: both coordinates within 0.2 of 0."
    common = ["train", "sac", "--config", config, "--dry-run", "--output-dir", str(tmp_path / "r")]
    argv = [*common, "env.id=myreach:Reach1D-v0", "env.describer=box", f"env.task={task}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"ok  describer: BoxDescriber on a real first observation: {task!r}" in out, out
    assert main([*argv[:-1], "env.task={Goal: reach}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "densereward: error: env.task: expected text, got a mapping {'Goal': 'reach'}; put "
        "text that holds ': ' or starts with '- ' in quotes"
    )


def test_sac_on_an_env_without_is_success_trains_with_success_metrics_off(tmp_path, caplog):
    """Issue 41: Pendulum-v1 with the env reward passed the dry run, then died at its first
    episode end (KeyError: 'is_success' in SB3's VecMonitor) and left its run directory. Now it
    trains; success rates are left out (never a made-up 0), said once, and the learning curve
    is the evaluation's mean reward. A run refused before training leaves no directory."""
    from densereward import envs

    envs._NO_SUCCESS_SAID.discard("Pendulum-v1")
    config = small_config(
        "sac_fetchreach_dense.yaml",
        total_timesteps=400,
        checkpoint_every=0,
        eval_every=200,
        eval_episodes=1,
        curve_every=200,
    )
    config["env"].update(id="Pendulum-v1", n_envs=1)
    config["sac"].update(
        {"learning_starts": 300, "batch_size": 32, "policy_kwargs": {"net_arch": [16, 16]}}
    )
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    assert (
        "no 'is_success': success-rate metrics off, the learning curve is eval/mean_reward"
        in (lines[3])
    )
    with caplog.at_level(logging.WARNING, logger="densereward.envs"):
        summary = sac.run(config, output_dir=tmp_path / "run")
    said = [r.getMessage() for r in caplog.records if "is_success" in r.getMessage()]
    assert said == [
        "success-rate metrics are off for Pendulum-v1: its step info has no 'is_success', so "
        "success rates (eval/success_rate, verifier/tpr, ...) are left out, not counted as "
        "failures (said once)"
    ]
    assert summary["env_steps"] == 400 and summary["success_metrics"] is False
    assert summary["metric"] == "eval/mean_reward" and "no success rate" in summary["curve_source"]
    assert [p["step"] for p in summary["curve"]] == [0, 200, 400]
    assert all(p["value"] == p["mean_reward"] < 0 for p in summary["curve"])
    assert summary["train_curve"] and all(p["value"] < 0 for p in summary["train_curve"])
    # issue 41 third rerun F10: the training curve said nothing of holding a return, not a rate
    assert summary["train_curve_metric"] == "rollout/ep_env_rew_mean"
    assert all(
        p["metric"] == "rollout/ep_env_rew_mean" and p["reward"] == sac.ENV_RETURN_LABEL
        for p in read_jsonl(tmp_path / "run" / "train_curve.jsonl")
    )
    assert all(p["metric"] == "eval/mean_reward" for p in summary["curve"])
    keys = logged_keys(tmp_path / "run")
    assert "eval/mean_reward" in keys and not any("success" in k for k in keys), sorted(keys)
    # the sparse reward needs is_success: refused before training, and nothing left behind
    config["env"]["reward"] = "sparse"
    with pytest.raises(
        DataError, match=r"needs info\['is_success'\] from Pendulum-v1.*env\.reward=env"
    ):
        sac.run(config, output_dir=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_the_final_line_names_each_metric_once(tmp_path, capsys):
    """Rerun 17 F4: `train sac` on Pendulum-v1 with env.reward=env and evaluation off ended
    "... rollout/ep_env_rew_mean=-1108.585 rollout/ep_env_rew_mean=-1108.585": the learning
    curve's metric (the training episodes' env return, with no evaluation and no is_success)
    is also one of the last window's metrics. Each metric is named once."""
    out = tmp_path / "run"
    args = _sac_args(
        "--config",
        str(REPO / "configs" / "sac_fetchreach_verifier.yaml"),
        "--total-timesteps",
        "400",
        "--output-dir",
        str(out),
        "env.id=Pendulum-v1",
        "env.reward=env",
        "sac.learning_starts=100",
        "sac.batch_size=32",
        "sac.policy_kwargs.net_arch=[16,16]",
        "training.checkpoint_every=0",
        "training.eval_every=0",
        "training.curve_every=100",
        "training.metrics_window=5",
        "wandb.enabled=false",
    )
    assert sac.main(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("run_dir="))
    names = re.findall(r" ([\w/]+)=", line)
    assert "rollout/ep_env_rew_mean" in names and len(names) == len(set(names)), line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "rollout/ep_env_rew_mean"
    assert f"rollout/ep_env_rew_mean={summary['final']:.3f}" in line, line


def test_training_curves_give_a_constant_curve_a_sane_axis_and_say_the_episode_count(
    tmp_path, monkeypatch
):
    """Issue 41 rerun: a constant-0 evaluation return was drawn on matplotlib's -0.04..0.04
    axis (ticks that read as a measured spread), and no panel said how many episodes each
    point averages."""
    from densereward.io import append_jsonl
    from densereward.trainers import sac_plots

    for step in (100, 200, 300):
        append_jsonl(
            tmp_path / "eval_curve.jsonl",
            {"step": step, "value": 0.0, "n_episodes": 5, "mean_reward": 0.0},
        )
    figs = []
    monkeypatch.setattr(sac_plots, "_save", lambda fig, plt, path: figs.append(fig) or path)
    sac_plots.plot_sac_run(
        tmp_path,
        eval_reward="sparse success reward",
        training_reward=None,
        threshold_source=None,
        title="t",
    )
    axes = {ax.get_title(): ax for ax in figs[0].axes}
    ret = axes["evaluation episodes: mean return of 5 episodes"]
    assert ret.get_ylim() == (-1.0, 1.0)
    legend = [t.get_text() for t in axes["success rate"].get_legend().get_texts()]
    assert "evaluation (5 deterministic episodes)" in legend


def test_one_evaluation_episode_is_counted_in_the_singular(tmp_path, monkeypatch):
    """F13: the console line and the plot said "1 deterministic episodes"."""
    from densereward.io import append_jsonl
    from densereward.trainers import sac_plots

    append_jsonl(
        tmp_path / "eval_curve.jsonl",
        {"step": 100, "value": 0.0, "n_episodes": 1, "mean_reward": 0.5},
    )
    figs = []
    monkeypatch.setattr(sac_plots, "_save", lambda fig, plt, path: figs.append(fig) or path)
    sac_plots.plot_sac_run(
        tmp_path, eval_reward="r", training_reward=None, threshold_source=None, title="t"
    )
    axes = {ax.get_title(): ax for ax in figs[0].axes}
    assert "evaluation episodes: mean return of 1 episode" in axes
    legend = [t.get_text() for t in axes["success rate"].get_legend().get_texts()]
    assert "evaluation (1 deterministic episode)" in legend
    last = {"step": 100, "value": 0.0, "n_episodes": 1, "mean_reward": 0.5}
    for success, words in (
        (True, "(fraction of 1 deterministic episode ending at the goal)"),
        (False, "evaluation at step 100: 1 deterministic episode (no success rate"),
    ):
        line = sac.evaluation_line(
            {"curve": [last], "success_metrics": success, "eval_reward": "r"}
        )
        assert words in line and "episodes" not in line
    two = sac.evaluation_line(
        {"curve": [{**last, "n_episodes": 2}], "success_metrics": True, "eval_reward": "r"}
    )
    assert "fraction of 2 deterministic episodes ending at the goal" in two


def test_the_plot_reads_the_training_return_of_a_run_written_before_its_rename(
    tmp_path, monkeypatch
):
    """Issue 41 third rerun F10: rollout/ep_verifier_rew_mean was the base reward plus the
    verifier's shaping, not the verifier's reward; it is rollout/ep_training_rew_mean now, and a
    run directory written under the old name still draws its training return."""
    from densereward.io import append_jsonl
    from densereward.trainers import sac_plots

    for step, old in ((100, True), (200, False)):
        key = "rollout/ep_verifier_rew_mean" if old else "rollout/ep_training_rew_mean"
        append_jsonl(
            tmp_path / "verifier_dynamics.jsonl",
            {"step": step, "rollout/ep_env_rew_mean": -5.0, key: -4.0},
        )
    figs = []
    monkeypatch.setattr(sac_plots, "_save", lambda fig, plt, path: figs.append(fig) or path)
    sac_plots.plot_sac_run(
        tmp_path,
        eval_reward="the environment's own reward, summed",
        training_reward="env reward + verifier shaping",
        threshold_source=None,
        title="t",
        success=False,
    )
    axes = {ax.get_title(): ax for ax in figs[0].axes}
    lines = {ln.get_label(): ln for ln in axes["training episodes: return"].get_lines()}
    ys = list(lines["training reward: env reward + verifier shaping"].get_ydata())
    assert ys == [-4.0, -4.0]


def test_a_start_refused_when_sac_is_built_leaves_no_run_directory(tmp_path, monkeypatch):
    """Issue 41 rerun: a start that failed after creating its run directory but before
    training (SB3 refusing its arguments: only a TypeError was caught) left the directory
    behind; docs/configuration.md says a failed start leaves none."""
    import stable_baselines3

    from densereward.config import load_yaml
    from densereward.trainers import sac

    def refuses(self):
        raise AssertionError("learning rate schedule must be a float or callable")

    monkeypatch.setattr(stable_baselines3.SAC, "_setup_model", refuses)
    out = tmp_path / "run"
    with pytest.raises(AssertionError, match="learning rate schedule"):
        sac.run(load_yaml(REPO / "configs/sac_fetchreach_sparse.yaml"), output_dir=out)
    assert not out.exists()


def test_an_unknown_id_of_ones_own_module_suggests_only_that_modules_ids(myreach, tmp_path):
    """Issue 41 rerun item 5: env.id=myreach:Nope-v0 suggested Hopper (an id of another
    package); the suggestions come from the ids the module registered, or there are none."""
    from densereward import envs

    config = load_yaml(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    for env_id, expect in (
        (
            "myreach:Nope-v0",
            "unknown environment 'myreach:Nope-v0': module 'myreach' registers ['Reach1D-v0'] "
            "(give one as env.id=myreach:Reach1D-v0)",
        ),
        (
            "myreach:Reach1D-v1",  # F6: the suggestion is the form to type, module included
            "unknown environment 'myreach:Reach1D-v1': did you mean ['myreach:Reach1D-v0']?",
        ),
    ):
        with pytest.raises(ConfigError) as api:
            envs.make_vec_env(env_id, 1)
        with pytest.raises(ConfigError) as dry:
            sac.dry_run({**config, "env": {"id": env_id}}, output_dir=tmp_path / "run")
        assert str(api.value) == expect and str(dry.value) == f"env.id: {expect}"
        assert "Hopper" not in str(dry.value) and "Fetch" not in str(dry.value)
    (tmp_path / "registers_nothing_41.py").write_text("X = 1\n")
    with pytest.raises(
        ConfigError,
        match=r"importing module 'registers_nothing_41' registered no "
        r"environment \(it must call gymnasium.register\(id='Nope-v0'",
    ):
        envs.make_vec_env("registers_nothing_41:Nope-v0", 1)
    sys.modules.pop("registers_nothing_41", None)


def test_an_unknown_plain_id_says_how_to_name_ones_own_environment(tmp_path):
    """Issue 41 item 2: env.id=NoSuchEnv-v0 gave Gymnasium's "Environment `NoSuchEnv` doesn't
    exist." and no fix; it now names close ids (when any) and the 'module:Id' form."""
    config = load_yaml(REPO / "configs" / "sac_fetchreach_dense.yaml")
    fix = "for your own environment give 'module:Id' (e.g. env.id=myreach:Reach1D-v0"
    for env_id, close in (
        ("NoSuchEnv-v0", ""),
        ("FetchReachDens-v4", " (did you mean ['FetchReachDense-v4', "),
    ):
        with pytest.raises(ConfigError) as err:
            sac.dry_run({**config, "env": {"id": env_id}}, output_dir=tmp_path / "run")
        msg = str(err.value)
        assert msg.startswith(f"env.id: unknown environment {env_id!r}{close}"), msg
        assert fix in msg and "PYTHONPATH=." in msg and "docs/extending.md" in msg, msg


def test_her_on_an_environment_without_goals_is_refused_by_the_dry_run_and_the_start(
    myreach, tmp_path
):
    """Issue 41 second rerun (kind 2): configs/sac_fetchreach_sparse_her.yaml on one's own
    Box-observation env passed the dry run, then the run died with SB3's "internal error:
    AssertionError: DictReplayBuffer must be used with Dict obs space only"."""
    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse_her.yaml")
    config["env"]["id"] = "myreach:Reach1D-v0"
    config["wandb"] = {"enabled": False}
    expect = "her: HerReplayBuffer needs a goal-conditioned Dict observation"
    with pytest.raises(ConfigError, match=expect) as dry:
        sac.dry_run(copy.deepcopy(config), output_dir=tmp_path / "dry")
    assert "set her: null" in str(dry.value) and "observes Box" in str(dry.value)
    with pytest.raises(ConfigError, match=expect):
        sac.run(copy.deepcopy(config), output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # a refused start leaves no run directory
    fetch = load_yaml(REPO / "configs" / "sac_fetchreach_sparse_her.yaml")
    fetch["wandb"] = {"enabled": False}
    lines = sac.dry_run(fetch, output_dir=tmp_path / "fetch")
    assert any(line.startswith("her: HerReplayBuffer") for line in lines), lines


# --------------------------------------------------------------------------------------------
# --resume keeps the whole run: monitor.csv, the training curve's window and episode count
# --------------------------------------------------------------------------------------------


def _monitor_rows(run_dir: Path) -> tuple[dict, list[dict]]:
    with open(run_dir / "monitor.csv", newline="") as f:
        header = json.loads(f.readline()[1:])
        return header, list(csv.DictReader(f))


def _progress_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "logs" / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_resume_keeps_the_episodes_before_the_checkpoint_in_monitor_csv_and_the_curve(
    tmp_path, caplog
):
    """F2: SB3's VecMonitor reopened monitor.csv on --resume, so the episodes before the
    checkpoint were lost (and SB3's CSV logger its logs/progress.csv dumps). F3: the training
    curve's window and n_episodes_total restarted from zero at the resume step. They continue
    now from the episodes that ended by (and the dumps logged by) the checkpoint."""
    config = small_config(
        "sac_fetchreach_sparse.yaml", total_timesteps=300, checkpoint_every=200, eval_every=0
    )
    config["sac"].update({"learning_starts": 60, "batch_size": 32})
    # two environments, 50-step episodes: two end at each of steps 100, 200 and 300
    sac.run(config, output_dir=tmp_path)
    header, before = _monitor_rows(tmp_path)
    assert [int(r["l"]) for r in before] == [50] * 6
    dumps_before = _progress_rows(tmp_path)
    config["training"]["total_timesteps"] = 500
    with caplog.at_level(logging.WARNING, logger="densereward.trainers.sac"):
        sac.run(config, output_dir=tmp_path, resume=True)  # from sac_200_steps.zip
    new_header, after = _monitor_rows(tmp_path)
    # rerun 11: the header names the environment (SB3 wrote "None" for a DummyVecEnv)
    assert header["env_id"] == new_header["env_id"] == "FetchReach-v4", (header, new_header)
    # the four episodes that ended by step 200, then the resumed run's six (300, 400, 500)
    assert len(after) == 10, after
    assert [r["is_success"] for r in after[:4]] == [r["is_success"] for r in before[:4]]
    assert [r["r"] for r in after[:4]] == [r["r"] for r in before[:4]]
    # t stays seconds since this file's t_start: the kept episodes ended before it
    for old, new in zip(before[:4], after[:4], strict=True):
        t_abs = float(old["t"]) + header["t_start"]
        assert float(new["t"]) + new_header["t_start"] == pytest.approx(t_abs, abs=1e-3)
    said = [r.getMessage() for r in caplog.records if "monitor.csv" in r.getMessage()]
    assert len(said) == 1 and "keeps the 4 episode(s) that ended by the checkpoint" in said[0]
    # SB3's logs/progress.csv (reopened with mode w+) keeps the dumps logged by step 200 too
    dumps_after = _progress_rows(tmp_path)
    kept = [r for r in dumps_before if float(r["time/total_timesteps"]) <= 200]
    assert kept and len(kept) < len(dumps_before)
    steps = [float(r["time/total_timesteps"]) for r in dumps_after]
    assert steps == sorted(steps) and steps[-1] == 500, steps
    assert dumps_after[: len(kept)] == kept
    said = [r.getMessage() for r in caplog.records if "progress.csv" in r.getMessage()]
    assert len(said) == 1 and f"keeps the {len(kept)} dump(s) logged by the checkpoint" in said[0]
    # the training curve counts on from the 4 kept episodes
    curve = [p for p in read_jsonl(tmp_path / "train_curve.jsonl") if p["step"] > 200]
    assert [(p["step"], p["n_episodes"], p["n_episodes_total"]) for p in curve] == [
        (300, 6, 6),
        (400, 8, 8),
        (500, 10, 10),
    ]


@pytest.mark.slow
def test_resume_continues_the_verifier_dynamics_window_from_the_checkpoint(
    tmp_path, default_model_dir, caplog
):
    """F3 (rerun 7): after --resume the verifier's window (verifier_dynamics.jsonl: VOC, TPR,
    TNR, rollout/success_rate over training.metrics_window episodes) restarted empty, so its
    rates went null for the rest of the run and its success rate disagreed with
    train_curve.jsonl's, whose window continues. Its state is saved beside each checkpoint now
    and the resumed run continues it; a checkpoint without it is said once."""
    import shutil

    run, old = tmp_path / "run", tmp_path / "old"
    config = small_config(
        "sac_fetchreach_verifier.yaml", total_timesteps=600, checkpoint_every=600, eval_every=0
    )
    config["reward"]["score_every"] = 25
    config["verifier"]["threshold"] = "auto"
    config["sac"].update({"learning_starts": 100, "batch_size": 32})
    # two environments, 50-step episodes: two end at each 100 steps, 12 by the checkpoint
    sac.run(config, output_dir=run)
    at_ckpt = {r["step"]: r for r in read_jsonl(run / "verifier_dynamics.jsonl")}[600]
    shutil.copytree(run, old)
    config["training"]["total_timesteps"] = 700
    with caplog.at_level(logging.INFO, logger="densereward.trainers.sac"):
        summary = sac.run(config, output_dir=run, resume=True)
    # rerun 9 F2: the verifier's counters are this start's 100 steps, and the summary says so
    assert summary["verifier_stats"]["n_env_steps"] == 100
    assert summary["verifier_stats_covers"].startswith(
        "this start only: environment steps 600-700 after resuming from sac_600_steps.zip"
    )
    rows = [r for r in read_jsonl(run / "verifier_dynamics.jsonl") if r["step"] > 600]
    assert [r["step"] for r in rows] == [700]
    resumed = rows[0]

    def counts(row: dict) -> tuple[int, int]:
        judged = row["verifier/n_success_episodes"] + row["verifier/n_failure_episodes"]
        return int(judged), int(row["verifier/n_voc_episodes"])

    # the window holds the 12 episodes of the checkpoint and the 2 that ended at step 700
    (judged, n_voc), (judged_0, n_voc_0) = counts(resumed), counts(at_ckpt)
    assert judged_0 <= judged <= judged_0 + 2 and n_voc_0 <= n_voc <= n_voc_0 + 2, (
        at_ckpt,
        resumed,
    )
    if at_ckpt["verifier/voc"] is not None:
        assert resumed["verifier/voc"] is not None
    # its success rate is train_curve.jsonl's over the same 14 episodes
    curve = {p["step"]: p for p in read_jsonl(run / "train_curve.jsonl")}
    assert curve[700]["n_episodes"] == 14
    assert resumed["rollout/success_rate"] == pytest.approx(curve[700]["value"])
    # auto's calibration continues too: once out of its fallback, it stays out
    assert resumed["verifier/threshold_fallback"] <= at_ckpt["verifier/threshold_fallback"]
    state = json.loads((run / "checkpoints" / "sac_verifier_dynamics_600_steps.json").read_text())
    assert len(state["episodes"]) == 12 and state["n_episodes"] == 12
    said = [r.getMessage() for r in caplog.records if "sac_verifier_dynamics_" in r.getMessage()]
    assert len(said) == 1 and "continues" in said[0], said
    # a checkpoint written before the state was kept: the window restarts, said once
    (old / "checkpoints" / "sac_verifier_dynamics_600_steps.json").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="densereward.trainers.sac"):
        sac.run(config, output_dir=old, resume=True)
    said = [r.getMessage() for r in caplog.records if "sac_verifier_dynamics_" in r.getMessage()]
    assert len(said) == 1 and "start afresh" in said[0], said
    assert "verifier/voc" in said[0] and "training.metrics_window" in said[0]


def test_continue_episodes_refills_sb3s_rollout_window_and_the_curves(tmp_path):
    """F3: SB3 saves no ep_info_buffer / ep_success_buffer in the model zip; a resumed run
    refills them (and the training curve's window) from the kept monitor.csv episodes."""
    from stable_baselines3 import SAC

    from densereward.callbacks import LearningCurveCallback

    model = SAC("MultiInputPolicy", _dummy_venv(), stats_window_size=2, learning_starts=10)
    curve = LearningCurveCallback(tmp_path / "c.jsonl", window=2, success=True)
    episodes = [
        {"r": -50.0, "l": 50, "t": 1.0, "is_success": False},
        {"r": -3.0, "l": 50, "t": 2.0, "is_success": True},
        {"r": -2.0, "l": 50, "t": 3.0, "is_success": True},
    ]
    sac._continue_episodes(model, curve, episodes, env_return=False)
    assert list(model.ep_info_buffer) == episodes[1:]
    assert list(model.ep_success_buffer) == [True, True]
    assert list(curve.successes) == [1.0, 1.0] and curve.n_episodes_total == 3
    # SB3's learn (reset_num_timesteps=False, as --resume calls it) keeps the refilled windows
    model.learn(1, reset_num_timesteps=False)
    assert len(model.ep_info_buffer) == 2 and list(model.ep_success_buffer) == [True, True]
    # without is_success, the window holds the environment's return (the monitor's r) when
    # that is the training reward, and is left empty otherwise; the count goes on
    returns = LearningCurveCallback(tmp_path / "r.jsonl", window=5, success=False)
    plain = [{k: v for k, v in e.items() if k != "is_success"} for e in episodes]
    sac._continue_episodes(model, returns, plain, env_return=True)
    assert list(returns.successes) == [-50.0, -3.0, -2.0] and returns.n_episodes_total == 3
    shaped = LearningCurveCallback(tmp_path / "s.jsonl", window=5, success=False)
    sac._continue_episodes(model, shaped, plain, env_return=False)
    assert not shaped.successes and shaped.n_episodes_total == 3


def test_verifier_dynamics_writes_each_step_once(tmp_path):
    """F5: the record after model.learn wrote the last row of verifier_dynamics.jsonl twice
    (steps ..., 100, 100) when the run ended with an episode."""
    config = small_config(
        "sac_fetchreach_sparse.yaml", total_timesteps=100, checkpoint_every=0, eval_every=0
    )
    config["env"]["n_envs"] = 1
    config["sac"].update({"learning_starts": 50, "batch_size": 32})
    sac.run(config, output_dir=tmp_path)
    steps = [row["step"] for row in read_jsonl(tmp_path / "verifier_dynamics.jsonl")]
    assert steps == [50, 100]


def test_a_metrics_window_below_min_episodes_is_said_by_the_dry_run_and_the_start(tmp_path, capsys):
    """F8: training.metrics_window=6 < MIN_EPISODES=10 makes verifier/tpr, tnr and voc
    impossible; the dry run printed only `ok`. It says so, with the fix (the start logs the
    same line once). F4 (rerun 7): as a `note`, exit 0, in train sac's and compare's dry runs:
    it was a `!!` problem with exit 2, which the exit codes keep for a run that would fail here,
    while the run itself trains and ends 0."""
    from densereward.callbacks import MIN_EPISODES
    from densereward.cli import main

    config = small_config("sac_fetchreach_verifier.yaml", metrics_window=6)
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    said = [line for line in lines if "training.metrics_window=6" in line]
    assert len(said) == 1 and said[0].startswith("note: training.metrics_window=6 < 10"), lines
    assert f"fix: training.metrics_window={MIN_EPISODES}" in said[0]
    assert not [line for line in lines if line.startswith("!!")], lines
    verifier_cfg = str(REPO / "configs" / "sac_fetchreach_verifier.yaml")
    argv = ["train", "sac", "--config", verifier_cfg, "--output-dir", str(tmp_path / "dry")]
    assert main([*argv, "--dry-run", "training.metrics_window=6", "wandb.enabled=false"]) == 0
    printed = capsys.readouterr().out
    assert "\n  note  training.metrics_window=6 < 10: verifier/tpr" in printed, printed
    assert "!!" not in printed and "problem" not in printed
    # a comparison's dry run says it as a note of the condition, and exits 0 too
    compare = load_yaml(REPO / "configs" / "compare_fetchreach.yaml")
    compare["common"] = [*compare["common"], "training.metrics_window=6"]
    compare["conditions"] = {k: compare["conditions"][k] for k in ("sparse", "verifier_dense")}
    compare["wandb"] = {"enabled": False}
    path = tmp_path / "cmp.yaml"
    path.write_text(json.dumps(compare))
    cmp_argv = ["compare", "--config", str(path), "--output-dir", str(tmp_path / "cmp")]
    assert main([*cmp_argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "\n  note  verifier_dense: training.metrics_window=6 < 10: verifier/tpr" in printed
    assert "!!" not in printed and "sparse: training.metrics_window" not in printed, printed
    assert not (tmp_path / "dry").exists() and not (tmp_path / "cmp").exists()
    # rerun 9 F4: from 10 to 19 TPR and TNR can be defined, balanced accuracy (both classes
    # in one window) never: a note names it alone
    config["training"]["metrics_window"] = MIN_EPISODES
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    said = [line for line in lines if "training.metrics_window=" in line]
    assert len(said) == 1 and "!!" not in "".join(lines), lines
    assert said[0].startswith(
        f"note: training.metrics_window={MIN_EPISODES} < {2 * MIN_EPISODES}: "
        "verifier/balanced_accuracy needs 10 successful and 10 failed episodes in one window"
    ), said
    assert "verifier/voc" not in said[0] and said[0].endswith(
        f"fix: training.metrics_window={2 * MIN_EPISODES} or more"
    )
    config["training"]["metrics_window"] = 2 * MIN_EPISODES
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    assert not [line for line in lines if "training.metrics_window=" in line or "!!" in line]
    # the rates are the verifier reward's: a run with another reward is not warned
    sparse = small_config("sac_fetchreach_sparse.yaml", metrics_window=6)
    assert sac._metrics_window_problem(sac.parse_config(sparse)) is None
    problem = sac._metrics_window_problem(
        sac.parse_config(small_config("sac_fetchreach_verifier.yaml", metrics_window=6))
    )
    assert "verifier/tpr" in problem and "can never be" in problem


@pytest.mark.slow
def test_resume_reports_the_wall_time_of_every_start(tmp_path, caplog, capsys):
    """The SAC twin of GRPO's F5 (rerun 7): after --resume, summary.json's seconds,
    eval_seconds and steps_per_second covered only the resumed start, beside the whole run's
    env_steps, unlabelled. The wall time up to each checkpoint is kept beside it now and the
    resumed start adds its own; a checkpoint without the record says so."""
    import shutil

    run, old = tmp_path / "run", tmp_path / "old"
    config = small_config(
        "sac_fetchreach_sparse.yaml", total_timesteps=200, checkpoint_every=200, eval_every=100
    )
    config["sac"].update({"learning_starts": 60, "batch_size": 32})
    first = sac.run(config, output_dir=run)
    assert first["starts"] == 1 and first["seconds_covers"] == "the whole run (one start)"
    assert first["seconds"] == first["seconds_this_start"] and "resumed_from" not in first
    assert first["eval_seconds"] > 0
    assert first["steps_per_second"] == pytest.approx(
        200 / (first["seconds"] - first["eval_seconds"])
    )
    wall = json.loads((run / "checkpoints" / "sac_wall_time_200_steps.json").read_text())
    assert wall["starts"] == 1 and 0 < wall["seconds"] <= first["seconds"]
    assert 0 < wall["eval_seconds"] <= first["eval_seconds"]
    shutil.copytree(run, old)
    config["training"]["total_timesteps"] = 300
    second = sac.run(config, output_dir=run, resume=True)
    assert second["env_steps"] == 300 and second["starts"] == 2
    assert second["resumed_from"] == "sac_200_steps.zip"
    assert second["seconds"] == pytest.approx(wall["seconds"] + second["seconds_this_start"])
    assert second["eval_seconds"] == pytest.approx(
        wall["eval_seconds"] + second["eval_seconds_this_start"]
    )
    assert second["steps_per_second"] == pytest.approx(
        300 / (second["seconds"] - second["eval_seconds"])
    )
    assert (
        "2 starts" in second["seconds_covers"] and "sac_200_steps.zip" in second["seconds_covers"]
    )
    assert json.loads((run / "summary.json").read_text())["starts"] == 2
    # rerun 9 F2: the verifier's counters are this start's, said beside them (none here)
    assert second["verifier_stats"] is None and second["verifier_stats_covers"] is None
    assert sac._stats_covers("sac_200_steps.zip", 200, 300) == (
        "this start only: environment steps 200-300 after resuming from sac_200_steps.zip (the "
        "verifier's counts restart with each start; env_steps and seconds cover the run)"
    )
    assert sac._stats_covers(None, 0, 300) == "the whole run (one start)"
    words = sac.wall_words(second)
    assert words.startswith(f"in {second['seconds']:.0f} s over 2 starts") and "this start" in words
    # a checkpoint saved before the record was kept: this start only, said in the summary
    (old / "checkpoints" / "sac_wall_time_200_steps.json").unlink()
    with caplog.at_level(logging.WARNING, logger="densereward.trainers.sac"):
        third = sac.run(config, output_dir=old, resume=True)
    assert third["starts"] is None and third["seconds"] == third["seconds_this_start"]
    assert third["seconds_covers"].startswith("this start only (100 steps)")
    assert third["steps_per_second"] == pytest.approx(
        100 / (third["seconds"] - third["eval_seconds"])
    )
    said = [r.getMessage() for r in caplog.records if "sac_wall_time_" in r.getMessage()]
    assert len(said) == 1 and "this start only" in said[0], said
    assert "records no earlier wall time" in sac.wall_words(third)


def test_the_evaluation_curve_source_names_vecnormalize_only_where_there_is_one():
    """Rerun 9 F6: ``curve_source`` said "VecNormalize statistics frozen" on runs with
    ``env.normalize_obs=false``, which have no VecNormalize."""
    on = small_config("sac_fetchreach_sparse.yaml", eval_every=100, eval_episodes=2)
    assert on["env"]["normalize_obs"]
    assert sac.eval_curve_source(sac.parse_config(on)) == (
        "deterministic evaluation: 2 episodes every 100 environment steps (and at 0 and the "
        "end) on a separate environment with the training VecNormalize statistics frozen, no "
        "verifier calls"
    )
    on["env"]["normalize_obs"] = False
    off = sac.eval_curve_source(sac.parse_config(on))
    assert "VecNormalize" not in off and off.endswith(
        "on a separate environment, no verifier calls"
    )


@pytest.mark.slow  # a 100-step FetchReach run that trains nothing (learning_starts 100), ~10 s
def test_a_run_without_the_verifier_reports_its_training_success_rate(tmp_path):
    """Rerun 18 F2: a sparse run with evaluation off had train_curve_metric
    rollout/success_rate but no rollout/success_rate in summary.json's metrics and no reason
    in undefined (only verifier episodes carried the success); every training episode's
    info["is_success"] counts now, over the same window as rollout/ep_env_rew_mean."""
    config = small_config(
        "sac_fetchreach_sparse.yaml", total_timesteps=100, checkpoint_every=0, eval_every=0
    )
    config["sac"].update({"learning_starts": 100, "batch_size": 32})
    config["env"]["n_envs"] = 1
    summary = sac.run(config, output_dir=tmp_path / "run")
    assert summary["train_curve_metric"] == "rollout/success_rate"
    m = summary["metrics"]
    assert "rollout/success_rate" in m and 0.0 <= m["rollout/success_rate"] <= 1.0, m
    assert "rollout/success_rate" not in summary["undefined"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["metrics"]["rollout/success_rate"] == m["rollout/success_rate"]
    # the episodes' own is_success (monitor.csv): 100 steps of 50-step episodes
    rows = (tmp_path / "run" / "monitor.csv").read_text().splitlines()[2:]
    success = [float(r.split(",")[3]) for r in rows]
    assert len(success) == 2 and m["rollout/success_rate"] == pytest.approx(np.mean(success))


def test_resume_finds_the_run_directory_of_a_named_run(tmp_path, capsys):
    """Rerun 19 F1: a run started with training.run_name and training.output_dir (no
    --output-dir) was refused on a re-run with "add --resume to continue it"; adding --resume
    then gave "--resume needs --output-dir" without naming the directory. --resume now
    continues <training.output_dir>/<run_name>; without a run name the error names both ways."""
    run = tmp_path / "out" / "k1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "sac_100_steps.zip").write_bytes(b"")
    config = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    named = ["--config", config, f"training.output_dir={tmp_path / 'out'}", "training.run_name=k1"]
    with pytest.raises(ConfigError, match="already holds a run with checkpoints"):
        sac.main(_sac_args(*named, "--dry-run"))
    assert sac.main(_sac_args(*named, "--resume", "--dry-run", "--total-timesteps", "1000")) == 0
    out = capsys.readouterr().out
    assert f"run directory: {run} (continues from its newest checkpoint sac_100_steps.zip" in out
    with pytest.raises(ConfigError) as unnamed:
        sac.main(_sac_args("--config", config, "--resume", "--dry-run"))
    assert str(unnamed.value) == (
        "--resume needs the run directory to continue: --output-dir DIR (the directory the stop "
        "line and the refusal named), or training.run_name (the run is then "
        "<training.output_dir>/<run_name>)"
    )
