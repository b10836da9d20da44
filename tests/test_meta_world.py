"""Meta-World MT1 tasks (issue 31 item 4): registration, success info, describer, frames, SAC runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import require

from densereward import envs
from densereward.config import load_yaml
from densereward.envs.meta_world import _TASKS, MetaWorldDescriber
from densereward.errors import ConfigError, DataError

require("metaworld", "robotics")  # pyproject, constraints/cpu.txt

REPO = Path(__file__).resolve().parents[1]
REACH = "densereward/MetaWorld-reach-v3"


def make(env_id: str = REACH, **kwargs) -> gym.Env:
    envs.register_robotics()
    return gym.make(env_id, **kwargs)


def to_goal(obs: np.ndarray) -> np.ndarray:
    """A proportional controller of the gripper towards the goal (reach-v3's scripted policy)."""
    tcp = obs[0:3] + envs.meta_world.TCP_OFFSET
    return np.append(np.clip(10.0 * (obs[36:39] - tcp), -1.0, 1.0), 0.0)


def test_mt1_tasks_are_registered_with_success_info_and_seeded_goals():
    envs.register_robotics()
    ids = [i for i in gym.registry if envs.meta_world.is_metaworld_id(i)]
    assert len(ids) == 50 and REACH in ids and "densereward/MetaWorld-pick-place-v3" in ids
    env = make()
    assert env.spec.max_episode_steps == 500
    assert len(env.get_wrapper_attr("tasks")) == 50  # MT1: 50 goal variations
    goals = [env.reset(seed=s)[0][36:39] for s in (0, 1, 0)]
    assert np.array_equal(goals[0], goals[2]) and not np.array_equal(goals[0], goals[1])
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)  # the goal-visible space (Meta-World's stays zeros)
    success = []
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(to_goal(obs))
        assert info["is_success"] == float(info["success"]) and 0.0 <= reward <= 10.0
        success.append(info["is_success"])
    assert success[0] == 0.0 and success[-1] == 1.0  # the scripted reach gets there
    env.close()
    with pytest.raises(ConfigError, match="did you mean"):
        envs.meta_world.make_mt1("reach-v2")


def test_sparse_and_env_rewards_on_meta_world():
    sparse = envs.make_env(REACH, reward="sparse", monitor=False)
    dense = envs.make_env(REACH, reward="env", monitor=False)
    (o1, _), (o2, _) = sparse.reset(seed=3), dense.reset(seed=3)
    r_sparse, r_dense, infos = [], [], []
    for _ in range(60):
        o1, r1, *_, info = sparse.step(to_goal(o1))
        o2, r2, *_ = dense.step(to_goal(o2))
        r_sparse.append(r1), r_dense.append(r2), infos.append(info)
    assert r_sparse == [i["is_success"] for i in infos] and r_sparse[-1] == 1.0
    assert r_dense == pytest.approx([i["true_reward"] for i in infos])  # same states, own reward
    assert r_dense[-1] > r_dense[0] > 0.0
    sparse.close(), dense.close()


def test_describer_is_picked_for_meta_world_ids_and_reads_real_states():
    d = envs.default_describer(REACH)
    assert isinstance(d, MetaWorldDescriber) and d.name == "reach-v3"
    env = make()
    obs, _ = env.reset(seed=0)
    traj = [obs]
    states = []
    for _ in range(60):
        obs, _, _, _, info = env.step(to_goal(obs))
        traj.append(obs)
        states.append((d.describe_state(obs), info))
    env.close()
    assert d.task(traj[0]).startswith("Move the robot gripper to the goal at (")
    for text, info in states:  # Meta-World's success distance, to about 1 cm (TCP_OFFSET)
        cm = float(re.match(r"Gripper-goal distance now (\d+) cm", text).group(1))
        assert cm == pytest.approx(100 * info["obj_to_target"], abs=1.5)
        if abs(info["obj_to_target"] - 0.05) > 0.015:
            assert ("success: yes" in text) == bool(info["success"])
    text = d.describe(traj, [])
    assert (
        text.startswith("Step 60. Gripper-goal distance at start ") and "steps 30, 40, 50: " in text
    )
    assert len(text) < 400  # one read per scored state: short
    with pytest.raises(DataError, match="39-value"):
        d.describe_state(np.zeros(10))
    with pytest.raises(ConfigError, match="not a Meta-World id"):
        MetaWorldDescriber.for_env_id("FetchReach-v4")


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(_TASKS))
def test_describer_distance_is_the_success_tests_distance(task):
    """Each task the describer makes a success claim for: its distance is ``info["obj_to_target"]``."""
    env = make(f"densereward/MetaWorld-{task}-v3")
    d = envs.default_describer(env.spec.id)
    obs, _ = env.reset(seed=0)
    for _ in range(15):
        obs, _, _, _, info = env.step(env.action_space.sample())
        cm = float(re.search(r"-goal distance now (\d+) cm", d.describe_state(obs)).group(1))
        assert cm == pytest.approx(100 * info["obj_to_target"], abs=1.0), d.describe_state(obs)
    env.close()


def test_other_tasks_get_positions_and_distances_without_a_success_claim():
    env = make("densereward/MetaWorld-drawer-open-v3")
    obs, _ = env.reset(seed=0)
    env.close()
    d = envs.default_describer(env.spec.id)
    assert d.task(obs).startswith("Do the Meta-World task 'drawer open' with the robot arm")
    text = d.describe_state(obs)
    assert "object-goal distance" in text and "success" not in text


def triton_before_gl() -> None:
    """Load triton (if installed) before the first offscreen frame: loading its LLVM after Mesa's
    llvmpipe rendered one kills the process (SIGSEGV, measured with Meta-World and Fetch), and
    torch loads triton lazily (SAC's first optimiser step in a later test of this process)."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401


@pytest.mark.slow
def test_frames_are_rendered_upright_offscreen_and_reach_a_multimodal_progress_fn():
    """Runs, not skips: MUJOCO_GL=egl is chosen on a headless machine before MuJoCo loads."""
    triton_before_gl()
    env = make(render_mode="rgb_array", width=96, height=64)
    assert envs.rendering_available(), f"no offscreen GL (MUJOCO_GL={os.environ.get('MUJOCO_GL')})"
    obs, _ = env.reset(seed=0)
    first = env.render()
    assert first.shape == (64, 96, 3) and first.dtype == np.uint8 and first.std() > 10
    raw = env.unwrapped.mujoco_renderer.render("rgb_array")  # Meta-World's own: upside down
    assert np.array_equal(first, raw[::-1, ::-1])
    for _ in range(30):
        obs, *_ = env.step(to_goal(obs))
    assert np.abs(env.render().astype(int) - first).mean() > 0.5  # the arm moved in the frame
    env.close()

    from densereward.wrappers import ProgressRewardConfig, VerifierProgressReward

    seen = []

    def multimodal(tasks, trajectories, images):
        seen.append(images)
        return [0.5] * len(tasks)

    wrapped = VerifierProgressReward(
        envs.make_env(REACH, monitor=False, render_mode="rgb_array", width=64, height=64),
        multimodal,
        envs.default_describer(REACH),
        ProgressRewardConfig(mode="shaping", render_frames=True, score_every=5),
        gamma=0.99,
    )
    wrapped.reset(seed=0)
    for _ in range(10):
        wrapped.step(wrapped.action_space.sample())
    wrapped.close()
    assert len(seen) == 3 and seen[-1][0][-1].shape == (64, 64, 3) and seen[-1][0][-1].std() > 0


def _short(kind: str, **sac) -> dict:
    config = load_yaml(REPO / "configs" / f"sac_metaworld_reach_{kind}.yaml")
    config["env"]["n_envs"] = 1
    config["sac"].update({"learning_starts": 250, "batch_size": 32, "buffer_size": 1000, **sac})
    config["sac"]["policy_kwargs"] = {"net_arch": [32, 32]}
    config["training"].update(
        {
            "total_timesteps": 500,
            "checkpoint_every": 0,
            "eval_every": 0,
            "log_interval": 1,
            "curve_every": 250,
        }
    )
    config["wandb"] = {"enabled": False}
    return config


def _trained(run_dir: Path) -> None:
    """SAC made gradient steps and the one 500-step episode ended (success rate logged)."""
    header = (run_dir / "logs" / "progress.csv").read_text().splitlines()[0]
    assert "train/actor_loss" in header and "rollout/success_rate" in header


@pytest.mark.slow
def test_sac_trains_on_meta_world_with_the_sparse_reward(tmp_path):
    """500 environment steps (one 500-step episode), 250 gradient steps, reward 1 on success."""
    from densereward.trainers import sac

    summary = sac.run(_short("sparse"), output_dir=tmp_path)
    assert summary["env_steps"] == 500 and summary["verifier_stats"] is None
    _trained(tmp_path)


@pytest.mark.slow
def test_sac_trains_on_meta_world_with_the_verifier_reward(tmp_path, default_model_dir):
    """The same with sparse + shaping from the embedded SmolLM2 verifier reading
    MetaWorldDescriber's text of the state every 250 steps."""
    from densereward.trainers import sac

    config = _short("verifier")
    config["reward"]["score_every"] = 250
    summary = sac.run(config, output_dir=tmp_path)
    assert summary["env_steps"] == 500
    stats = summary["verifier_stats"]
    # s_0, steps 250 and 500 (the last state always) and the next episode's s_0: 4 reads, 1 env
    assert stats["n_queries"] == 4 and stats["n_calls"] + stats["n_cache_hits"] == 4
    assert stats["n_scored"] + stats["n_abstained"] + stats["n_cache_hits"] == 4
    assert stats["n_scored"] >= 1
    _trained(tmp_path)
    assert "rollout/ep_training_rew_mean" in (tmp_path / "logs" / "progress.csv").read_text()
    assert np.isfinite(summary["metrics"]["verifier/final_progress_mean"])
