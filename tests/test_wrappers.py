"""Verifier-progress reward wrappers: shaping arithmetic, real Fetch environments, batching, relabelling."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from densereward import envs
from densereward.envs.describers import BoxDescriber, FetchDescriber
from densereward.errors import ConfigError, DataError, StateError
from densereward.wrappers import (
    ProgressRewardConfig,
    ProgressRewardCore,
    SparseSuccessReward,
    VerifierProgressReward,
    combine_reward,
    held_potentials,
    potential_shaping,
    shaped_rewards,
    verifier_progress_fn,
)

# ---------------------------------------------------------------------------------------
# A deterministic progress function (a real extension point: an oracle from the text)
# ---------------------------------------------------------------------------------------


def distance_progress(tasks, trajectories, **kwargs):
    """Progress = 1 - distance/30 cm, read from the describer's ``now N cm``; clipped to [0, 1]."""
    out = []
    for text in trajectories:
        d = float(re.search(r"now (\d+) cm", text).group(1))
        out.append(float(np.clip(1.0 - d / 30.0, 0.0, 1.0)))
    return out


class Recorder:
    """Wraps a progress function and records each batch (sizes and texts)."""

    def __init__(self, fn=distance_progress, abstain_every: int = 0):
        self.fn = fn
        self.batches: list[list[str]] = []
        self.abstain_every = abstain_every

    def __call__(self, tasks, trajectories, **kwargs):
        self.batches.append(list(trajectories))
        values = self.fn(tasks, trajectories)
        if self.abstain_every:
            n = len(self.batches)
            values = [None if n % self.abstain_every == 0 else v for v in values]
        return values


def reach_controller(obs) -> np.ndarray:
    """Proportional controller that drives the Fetch gripper to the goal (reaches it in ~10 steps)."""
    delta = obs["desired_goal"] - obs["observation"][:3]
    return np.concatenate([np.clip(10.0 * delta, -1.0, 1.0), [0.0]]).astype(np.float32)


def raw_env(env_id: str = "FetchReach-v4") -> gym.Env:
    envs.register_robotics()
    return gym.make(env_id)


# ---------------------------------------------------------------------------------------
# Shaping arithmetic
# ---------------------------------------------------------------------------------------


def test_shaping_uses_gamma_and_zero_terminal_potential():
    assert potential_shaping(0.2, 0.6, 0.9) == pytest.approx(0.9 * 0.6 - 0.2)
    assert potential_shaping(0.2, 0.6, 1.0) == pytest.approx(0.4)
    # terminal state: Phi = 0 whatever the verifier said about it
    assert potential_shaping(0.7, 0.95, 0.9, terminated=True) == pytest.approx(-0.7)
    with pytest.raises(ConfigError):
        potential_shaping(0.1, 0.2, 1.5)


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("terminated", [False, True])
def test_discounted_shaping_telescopes(gamma, terminated):
    rng = np.random.default_rng(0)
    phi = rng.uniform(size=13)  # T = 12 steps
    f = shaped_rewards(phi, gamma, terminated=terminated)
    assert f.shape == (12,)
    discounted = np.sum(gamma ** np.arange(12) * f)
    last = 0.0 if terminated else phi[-1]
    assert discounted == pytest.approx(gamma**12 * last - phi[0], abs=1e-12)


def test_constant_progress_episode_earns_zero_shaping():
    phi = np.full(51, 0.8)
    f = shaped_rewards(phi, 1.0, terminated=False)
    assert np.all(f == 0.0) and f.sum() == 0.0
    # with gamma < 1 each held step pays exactly -(1 - gamma) * Phi, and the discounted
    # sum is still gamma^T Phi - Phi: hovering earns nothing positive
    g = 0.95
    f = shaped_rewards(phi, g, terminated=False)
    np.testing.assert_allclose(f, -(1 - g) * 0.8)
    assert np.sum(g ** np.arange(50) * f) == pytest.approx(g**50 * 0.8 - 0.8)


def test_held_potentials_keep_previous_on_abstention_and_start_at_zero():
    phis, n_abs = held_potentials({0: None, 3: 0.4, 6: None, 9: 0.9}, 10)
    np.testing.assert_allclose(phis, [0, 0, 0, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.9, 0.9])
    assert n_abs == 2
    with pytest.raises(DataError, match="outside the episode"):
        held_potentials({12: 0.5}, 10)
    with pytest.raises(DataError, match=r"progress must be in \[0, 1\]"):
        held_potentials({0: 1.5}, 10)


def test_runtime_faults_are_data_or_state_errors_not_config_errors():
    with pytest.raises(DataError, match="non-empty 1-D"):
        shaped_rewards(np.zeros((2, 2)), 0.9, terminated=False)
    core = ProgressRewardCore(
        lambda tasks, trajs: [0.5] * len(trajs),
        BoxDescriber("Reach the origin."),
        ProgressRewardConfig(),
        gamma=0.9,
    )
    with pytest.raises(StateError, match="environment 0 stepped before reset"):
        core.advance(0, np.zeros(2), np.array([0.1, 0.2]), 0.0, False)
    assert not issubclass(DataError, ConfigError) and not issubclass(StateError, ConfigError)


def test_combine_reward_modes():
    assert combine_reward("shaping", -1.0, 0.7, 0.25, 0.3) == pytest.approx(-0.75)
    assert combine_reward("progress", -1.0, 0.7, 0.25, 0.3) == pytest.approx(0.7)
    assert combine_reward("mixture", -1.0, 0.7, 0.25, 0.3) == pytest.approx(0.3 * -1.0 + 0.7 * 0.7)
    with pytest.raises(ConfigError, match="shaping | progress | mixture"):
        combine_reward("potential", 0.0, 0.0, 0.0, 0.5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "dense"},
        {"timing": "sometimes"},
        {"score_every": 0},
        {"gamma": 1.2},
        {"alpha": -0.1},
        {"cache_size": -1},
    ],
)
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ConfigError):
        ProgressRewardConfig(**kwargs)


def test_core_needs_a_discount():
    """A Python user is told the Python argument (``gamma=``), not only the YAML key."""
    with pytest.raises(ConfigError, match=r"gamma= .*to the wrapper.*ProgressRewardConfig\(gamma"):
        ProgressRewardCore(distance_progress, FetchDescriber("reach"), ProgressRewardConfig())


def test_a_verifier_passed_as_progress_fn_is_told_to_wrap_it(server):
    from servers import scripted_verifier

    from densereward.wrappers import verifier_progress_fn

    v = scripted_verifier(server.base_url)
    with pytest.raises(
        ConfigError, match=r"wrap it as progress_fn=verifier_progress_fn\(verifier\)"
    ):
        VerifierProgressReward(raw_env(), v, FetchDescriber("reach"), gamma=0.99)
    env = VerifierProgressReward(
        raw_env(), verifier_progress_fn(v), FetchDescriber("reach"), gamma=0.99
    )
    assert env.core.gamma == 0.99


# ---------------------------------------------------------------------------------------
# The gymnasium wrapper on the real FetchReach environment
# ---------------------------------------------------------------------------------------


def run_episode(env, seed=0, policy=None):
    obs, _ = env.reset(seed=seed)
    rewards, infos = [], []
    done = False
    while not done:
        action = policy(obs) if policy else env.action_space.sample()
        obs, r, term, trunc, info = env.step(action)
        rewards.append(r)
        infos.append(info)
        done = term or trunc
    return np.array(rewards), infos


def test_online_shaping_on_fetchreach_scores_every_k_and_telescopes():
    rec = Recorder()
    env = VerifierProgressReward(
        SparseSuccessReward(raw_env()),
        rec,
        FetchDescriber("reach"),
        ProgressRewardConfig(mode="shaping", score_every=10, gamma=1.0),
    )
    env.action_space.seed(0)
    rewards, infos = run_episode(env, policy=reach_controller)
    assert len(rewards) == 50
    # s_0 at reset, then steps 10, 20, 30, 40, 50 (the last is also the final state); the
    # gripper rests at the goal from step 20 on, so that state's text hits the cache
    stats = env.verifier_stats
    assert stats.n_queries == 6 and all(len(b) == 1 for b in rec.batches)
    assert len(rec.batches) == stats.n_calls == 6 - stats.n_cache_hits < 6
    for info in infos:
        for key in (
            "true_reward",
            "is_success",
            "verifier_progress",
            "verifier_reward",
            "verifier_shaping",
        ):
            assert key in info
    shaping = np.array([i["verifier_shaping"] for i in infos])
    scored = {10, 20, 30, 40, 50}
    # Phi held between scorings and gamma = 1: shaping is zero except at scored steps
    assert all(shaping[t - 1] == 0.0 for t in range(1, 51) if t not in scored)
    ep = infos[-1]["verifier_episode"]
    assert ep["scored_steps"] == [0, 10, 20, 30, 40, 50]
    assert shaping.sum() == pytest.approx(ep["progress"][-1] - ep["progress"][0])
    # the controller reaches the goal: success reward 1, progress near 1, true reward 0
    assert infos[-1]["is_success"] and ep["is_success"]
    assert ep["final_progress"] > 0.8
    assert infos[-1]["true_reward"] == 0.0  # FetchReach's own sparse reward on success
    sparse = np.array([float(i["is_success"]) for i in infos])
    np.testing.assert_allclose(rewards, sparse + shaping)
    assert ep["verifier_return"] == pytest.approx(rewards.sum())


def test_abstentions_keep_the_previous_potential_and_are_counted():
    rec = Recorder(abstain_every=2)  # every 2nd call abstains
    env = VerifierProgressReward(
        raw_env(),
        rec,
        FetchDescriber("reach"),
        ProgressRewardConfig(mode="progress", score_every=5),
        gamma=0.9,
    )
    env.action_space.seed(1)
    rewards, infos = run_episode(env, seed=1)
    ep = infos[-1]["verifier_episode"]
    assert ep["n_abstained"] == env.verifier_stats.n_abstained == 5  # calls 2, 4, 6, 8, 10 of 11
    progress = [i["verifier_progress"] for i in infos]
    # step 5 is the 2nd call (abstained): progress stays at Phi(s_0) from the reset call
    first = ep["progress"][0]
    assert ep["progress"][1] is None
    assert progress[4] == pytest.approx(first) and rewards[4] == pytest.approx(first)
    assert None not in progress and all(0.0 <= p <= 1.0 for p in progress)


class _Abstaining:
    """A progress function that abstains on every read and says why (``last_reasons``)."""

    def __init__(self):
        self.last_reasons = []

    def __call__(self, tasks, trajectories, **kwargs):
        self.last_reasons = ["backend error: TimeoutError"] * len(tasks)
        return [None] * len(tasks)


def test_mostly_abstaining_progress_warns_once_with_the_reasons_counted(caplog):
    """Issue 26 item 2: reads that abstain feed nothing into the shaping; not silently."""
    from densereward.abstentions import FIXES

    env = VerifierProgressReward(
        raw_env(),
        _Abstaining(),
        FetchDescriber("reach"),
        ProgressRewardConfig(score_every=1),
        gamma=0.9,
    )
    with caplog.at_level(logging.WARNING, logger="densereward.progress_reward"):
        run_episode(env, seed=0)  # 51 reads, one per call
    said = [r.getMessage() for r in caplog.records if "abstained" in r.getMessage()]
    assert said == [
        "8 of 8 verifier progress reads abstained: backend error 8 (e.g. 'backend error: "
        "TimeoutError'); fix: " + FIXES["backend error"] + " (said once)"
    ]
    assert env.verifier_stats.abstain_reasons == {"backend error": 51}


@pytest.mark.slow
def test_a_verifier_abstaining_on_every_read_warns_once_in_a_real_sac_loop(
    default_model_dir, caplog
):
    """Issue 26 item 2 (SAC side): the embedded verifier forced to abstain (min_mass=0.999) in
    SB3's SAC on FetchReach: one warning, the reasons counted, the fix named."""
    import torch
    from stable_baselines3 import SAC

    from densereward.callbacks import find_verifier_stats
    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    torch.set_num_threads(1)
    # calibrate=False: the start-up read on the prompt's demonstration would refuse this
    # verifier outright; here the reads during training are the ones that abstain
    v = Verifier(VerifierConfig(min_mass=0.999, calibrate=False))
    try:
        venv = envs.make_vec_env(
            "FetchReach-v4",
            1,
            seed=0,
            reward="verifier",
            progress_fn=verifier_progress_fn(v),
            describer=FetchDescriber.for_env_id("FetchReach-v4"),
            reward_config=ProgressRewardConfig(score_every=2),
            gamma=0.95,
        )
        model = SAC(
            "MultiInputPolicy",
            venv,
            seed=0,
            learning_starts=10,
            batch_size=8,
            policy_kwargs={"net_arch": [16, 16]},
            device="cpu",
        )
        with caplog.at_level(logging.WARNING, logger="densereward.progress_reward"):
            model.learn(30)  # reads: s_0 and every 2nd state, 16 in all
    finally:
        v.close()
    said = [r.getMessage() for r in caplog.records if "abstained" in r.getMessage()]
    assert len(said) == 1, said
    assert re.fullmatch(
        r"8 of 8 verifier progress reads abstained: low score-token mass 8 \(e\.g\. 'low "
        r"score-token mass: [0-9.e-]+ < min_mass 0\.999'\); fix: .*verifier\.min_mass.* \(said once\)",
        said[0],
    ), said[0]
    (stats,) = find_verifier_stats(venv)
    assert stats.n_abstained == 16 and stats.abstain_reasons == {"low score-token mass": 16}
    assert v.stats.as_dict()["n_low_mass"] == 16


def test_invalid_progress_values_raise():
    for bad in (
        lambda t, x: [1.7] * len(t),
        lambda t, x: [0.5] * (len(t) + 1),
        lambda t, x: ["high"] * len(t),
    ):
        env = VerifierProgressReward(raw_env(), bad, FetchDescriber("reach"), gamma=0.9)
        with pytest.raises(DataError, match="progress_fn returned"):
            env.reset(seed=0)


def test_render_frames_without_rgb_array_is_a_config_error():
    with pytest.raises(ConfigError, match="rgb_array"):
        VerifierProgressReward(
            raw_env(),
            distance_progress,
            FetchDescriber("reach"),
            ProgressRewardConfig(render_frames=True),
            gamma=0.9,
        )


def test_verifier_progress_fn_needs_progress_batch():
    with pytest.raises(ConfigError):
        verifier_progress_fn(object())


# ---------------------------------------------------------------------------------------
# Sparse-success wrapper and Monitor order (real FetchReach)
# ---------------------------------------------------------------------------------------


def test_sparse_success_reward_on_real_fetchreach():
    env = SparseSuccessReward(raw_env())
    rewards, infos = run_episode(env, seed=3, policy=reach_controller)
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    np.testing.assert_array_equal(rewards, [float(i["is_success"]) for i in infos])
    np.testing.assert_array_equal(
        [i["true_reward"] for i in infos], [r - 1.0 for r in rewards]
    )  # FetchReach: -1/0
    assert rewards[-1] == 1.0 and rewards[0] == 0.0


@pytest.mark.parametrize("batch", [1, 2, 256])
def test_sparse_success_compute_reward_takes_batches(batch):
    """What HER calls: env_method("compute_reward", (B, 3), (B, 3), infos) -> (B,) float32."""
    venv = envs.make_vec_env("FetchReach-v4", 2, seed=0, reward="sparse")
    rng = np.random.default_rng(batch)
    goal = rng.uniform([1.2, 0.6, 0.4], [1.5, 0.9, 0.7], size=(batch, 3))
    achieved = goal + rng.normal(0.0, 0.04, size=(batch, 3))  # about half within 5 cm
    r = venv.env_method("compute_reward", achieved, goal, [{}] * batch, indices=[0])[0]
    assert r.shape == (batch,) and r.dtype == np.float32
    single = [
        venv.env_method("compute_reward", a, g, {}, indices=[0])[0]
        for a, g in zip(achieved, goal, strict=True)
    ]
    assert all(np.asarray(x).shape == () and np.asarray(x).dtype == np.float32 for x in single)
    np.testing.assert_array_equal(r, single)
    # the 1/0 of the episode's rewards: Fetch's own -1/0 goal test, shifted
    fetch = venv.envs[0].unwrapped.compute_reward(achieved, goal, {})
    np.testing.assert_array_equal(r, fetch + 1.0)
    if batch == 256:
        assert 0 < r.sum() < batch
    with pytest.raises(DataError, match="must both be"):
        SparseSuccessReward(raw_env()).compute_reward(achieved, goal[:, :2], {})
    with pytest.raises(ConfigError, match="distance_threshold"):
        SparseSuccessReward(gym.make("Pendulum-v1")).compute_reward(achieved, goal, {})


def test_sparse_success_needs_is_success():
    env = SparseSuccessReward(gym.make("Pendulum-v1"))
    env.reset(seed=0)
    with pytest.raises(DataError, match="is_success"):
        env.step(env.action_space.sample())


def test_monitor_sees_the_training_reward():
    env = envs.make_env(
        "FetchReach-v4",
        reward="verifier",
        progress_fn=distance_progress,
        reward_config=ProgressRewardConfig(mode="mixture", alpha=0.5, score_every=10),
        gamma=0.95,
    )
    env.action_space.seed(0)
    rewards, infos = run_episode(env)
    assert infos[-1]["episode"]["r"] == pytest.approx(rewards.sum(), abs=1e-4)
    true = sum(i["true_reward"] for i in infos)
    assert true == infos[-1]["verifier_episode"]["true_return"]
    assert infos[-1]["episode"]["r"] != pytest.approx(true)


def test_make_env_errors():
    with pytest.raises(ConfigError, match="progress_fn"):
        envs.make_env("FetchReach-v4", reward="verifier")
    with pytest.raises(ConfigError, match="did you mean"):
        envs.make_env("FetchReach-v9")
    with pytest.raises(ConfigError):
        envs.make_env("FetchReach-v4", reward="shaped")


# ---------------------------------------------------------------------------------------
# Batching across vectorised environments, cache, episode-end relabelling
# ---------------------------------------------------------------------------------------


def test_vec_wrapper_batches_and_matches_the_single_env_wrapper():
    n = 3
    cfg = ProgressRewardConfig(mode="shaping", score_every=7, gamma=0.9)
    rec = Recorder()
    venv = envs.make_vec_env(
        "FetchReach-v4", n, seed=10, reward="verifier", progress_fn=rec, reward_config=cfg
    )
    obs = venv.reset()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(60, n, 4)).astype(np.float32)
    vec_rewards = []
    for t in range(60):
        obs, r, dones, infos = venv.step(actions[t])
        vec_rewards.append(r)
    vec_rewards = np.array(vec_rewards)
    # one call at reset, one per scoring step (7, 14, ..., 49, 50) and one for the new episodes' s_0
    sizes = [len(b) for b in rec.batches]
    # (a scoring step whose texts are all cached makes no call: texts are cm-rounded relations)
    assert sizes[0] == n and max(sizes) <= n and 8 <= len(rec.batches) <= 1 + 8 + 1 + 1
    read = [text for batch in rec.batches for text in batch]
    assert len(read) == len(set(read))  # the cache never lets a text be read twice
    # the single-env wrapper (same core) gives the same rewards for env 1
    single = VerifierProgressReward(
        SparseSuccessReward(raw_env()), distance_progress, FetchDescriber("reach"), cfg
    )
    single.reset(seed=11)
    ref = [single.step(actions[t, 1])[1] for t in range(50)]
    np.testing.assert_allclose(vec_rewards[:50, 1], ref, rtol=1e-6)


def test_identical_trajectories_are_scored_once_and_cached():
    rec = Recorder()
    core = ProgressRewardCore(
        rec,
        BoxDescriber("Reach the origin.", n_recent=0, show_action=False),
        ProgressRewardConfig(score_every=1),
        gamma=1.0,
        n_envs=2,
    )

    def progress(tasks, trajs):
        return [0.5] * len(trajs)

    rec.fn = progress
    s0 = np.array([0.1, 0.2])
    core.resolve(core.start(0, s0) + core.start(1, s0))
    assert [len(b) for b in rec.batches] == [1]  # the two identical texts in one batch: one query
    core.resolve(core.start(0, s0))
    assert len(rec.batches) == 1  # cache hit
    assert core.stats.n_cache_hits == 2 and core.stats.n_queries == 3 and core.stats.n_calls == 1


def text_progress(tasks, trajectories, **kwargs):
    """A deterministic progress function that tells every text apart (CRC-32 of task + text)."""
    import zlib

    return [
        zlib.crc32(f"{t}|{x}".encode()) % 1001 / 1000
        for t, x in zip(tasks, trajectories, strict=True)
    ]


def _potential_after(history: list, mode: str) -> float:
    """Phi of the last state of ``history`` (dict observations), scored by the wrapper core."""
    core = ProgressRewardCore(
        text_progress,
        FetchDescriber("reach"),
        ProgressRewardConfig(mode=mode, score_every=1, cache_size=0),
        gamma=0.95,
    )
    core.resolve(core.start(0, history[0]))
    for obs in history[1:]:
        core.resolve(core.advance(0, np.zeros(4), obs, 0.0, done=False))
    return core.episodes[0].scores[len(history) - 1]


def test_shaping_potential_is_a_function_of_the_state_not_of_the_history():
    env = raw_env()
    o0, _ = env.reset(seed=5)
    path = [o0] + [env.step(reach_controller(o0) * 0.2)[0] for _ in range(3)]
    state = path[-1]
    other_start = {k: v.copy() for k, v in o0.items()}  # same goal, gripper 8 cm off
    other_start["observation"][:3] += np.array([0.08, -0.03, 0.0])
    other_start["achieved_goal"] = other_start["observation"][:3].copy()
    a = path  # reaches ``state`` at step 3
    b = [other_start, path[1], state]  # the same state at step 2, from another start
    # mode shaping: the verifier reads describe_state(s_t); same state, same potential
    assert _potential_after(a, "shaping") == _potential_after(b, "shaping")
    # the history-reading text of mode progress differs, and this progress function sees it
    assert _potential_after(a, "progress") != _potential_after(b, "progress")

    # a describer without describe_state cannot give a potential of the state
    class TrajectoryOnly:
        task, describe = FetchDescriber("reach").task, FetchDescriber("reach").describe

    with pytest.raises(ConfigError, match="describe_state"):
        ProgressRewardCore(text_progress, TrajectoryOnly(), ProgressRewardConfig(), gamma=0.9)
    # and revisiting a state hits the cache: the text is that of the state alone
    core = ProgressRewardCore(
        Recorder(text_progress),
        FetchDescriber("reach"),
        ProgressRewardConfig(score_every=1),
        gamma=0.95,
    )
    core.resolve(core.start(0, state))
    core.resolve(core.advance(0, np.zeros(4), path[2], 0.0, done=False))
    core.resolve(core.advance(0, np.zeros(4), state, 0.0, done=False))
    assert core.stats.n_cache_hits == 1 and core.stats.n_calls == 2


@pytest.mark.slow
def test_episode_end_timing_scores_once_and_relabels_the_replay_buffer():
    from stable_baselines3 import SAC

    from densereward.callbacks import ReplayRelabelCallback, VerifierDynamicsCallback

    rec = Recorder()
    cfg = ProgressRewardConfig(mode="shaping", timing="episode_end", score_every=10, gamma=0.95)
    venv = envs.make_vec_env(
        "FetchReach-v4", 2, seed=0, reward="verifier", progress_fn=rec, reward_config=cfg
    )
    model = SAC(
        "MultiInputPolicy",
        venv,
        learning_starts=10_000,
        buffer_size=1000,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    dynamics, relabel = VerifierDynamicsCallback(), ReplayRelabelCallback()
    model.learn(200, callback=[dynamics, relabel])  # no gradient steps: learning_starts not reached
    # no scoring during the episode, one batched call of both envs' 6 checkpoints at the end
    # (each distinct text once: cm-rounded relations repeat, and a repeat is not read again)
    assert len(rec.batches) == 2 and all(0 < len(b) <= 12 for b in rec.batches)
    assert all(len(b) == len(set(b)) for b in rec.batches)
    assert relabel.n_relabelled_episodes == 4 and relabel.n_relabelled_steps == 200
    ep0 = dynamics.episodes[0]
    buf = model.replay_buffer.rewards
    np.testing.assert_allclose(buf[:50, 0], ep0["rewards"], rtol=1e-6)
    phis, _ = held_potentials(dict(zip(ep0["scored_steps"], ep0["progress"], strict=True)), 50)
    expected = combine_reward(
        "shaping",
        buf[:50, 0] * 0 + 0.0,
        phis[1:],
        shaped_rewards(phis, 0.95, terminated=False),
        0.5,
    )
    # the env part is the sparse success (0 for a random policy here)
    np.testing.assert_allclose(ep0["rewards"], expected, atol=1e-6)
    # episode 3 (second episode of env 0) relabelled too, rows 50..99
    assert not np.allclose(buf[50:100, 0], 0.0)


# ---------------------------------------------------------------------------------------
# Describers
# ---------------------------------------------------------------------------------------


def test_fetch_push_describer_on_real_observations():
    env = raw_env("FetchPush-v4")
    obs, _ = env.reset(seed=0)
    d = FetchDescriber.for_env_id("FetchPush-v4")
    observations = [obs]
    for _ in range(12):
        obs = env.step(env.action_space.sample())[0]
        observations.append(obs)
    task, text = d.task(observations[0]), d.describe(observations, [])
    assert "push the block" in task and "5 cm" in task
    assert text.startswith("Step 12.") and "Stage" in text and "(success: at most 5 cm)" in text
    assert "(1." not in task + text  # relations, not raw coordinates
    assert "steps 2, 7:" in text  # recent distances every 5 steps before now
    assert len(task) + len(text) < 600  # compact: well under a few hundred tokens
    block_goal = np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"])
    assert f"now {100 * block_goal:.0f} cm" in text


def test_fetch_reach_describer_claims_no_approach_when_the_distance_did_not_change():
    """User note: at step 0 the FetchReach text said "at start 16 cm; now 16 cm ... The gripper
    is closing in on the target": an approach that did not happen. On real FetchReach states the
    trajectory text now says "no change in distance" when the distance moved less than
    :attr:`FetchDescriber.TREND_TOLERANCE` since the previous step (step 0, a zero action), and
    "closing in" only when the gripper did come closer; describe_state (no history) is as before."""
    env = raw_env("FetchReach-v4")
    d = FetchDescriber.for_env_id("FetchReach-v4")
    for seed in range(50):  # a start 10..20 cm from the target: the "closing in" band
        obs, _ = env.reset(seed=seed)
        if 0.105 < d._goal_distance(obs) < 0.195:
            break
    else:
        pytest.fail("no FetchReach start in the 10..20 cm band")
    start = d.describe([obs], [])
    assert start.startswith("Step 0.") and "closing in" not in start, start
    assert "no change in distance since the start" in start, start
    still = env.step(np.zeros(4))[0]
    assert abs(d._goal_distance(still) - d._goal_distance(obs)) <= d.TREND_TOLERANCE
    text = d.describe([obs, still], [np.zeros(4)])
    assert "closing in" not in text and "no change in distance since step 0" in text, text
    towards = np.append((obs["desired_goal"] - obs["achieved_goal"]) / 0.05, 0.0).clip(-0.4, 0.4)
    closer = env.step(towards)[0]
    assert d._goal_distance(closer) < d._goal_distance(still) - d.TREND_TOLERANCE
    text = d.describe([obs, still, closer], [np.zeros(4), towards])
    assert "The gripper is closing in on the target" in text and "no change" not in text, text
    assert "closing in" in d.describe_state(obs)  # the state alone: its band, no history


def test_describer_errors():
    with pytest.raises(ConfigError):
        FetchDescriber.for_env_id("FetchSlide-v4")
    with pytest.raises(ConfigError):
        envs.default_describer("Pendulum-v1")
    assert isinstance(envs.default_describer("Pendulum-v1", "Swing up."), BoxDescriber)
    # the registry: chosen by env id (env_ids patterns) or by name (env.describer)
    assert isinstance(envs.default_describer("FetchPushDense-v4"), FetchDescriber)
    assert isinstance(envs.default_describer("FetchReach-v4", "t", name="box"), BoxDescriber)
    with pytest.raises(ConfigError, match="needs env.task"):
        envs.default_describer("FetchReach-v4", name="box")
    with pytest.raises(ConfigError, match="Did you mean 'fetch'"):
        envs.default_describer("FetchReach-v4", name="fetchh")
    with pytest.raises(DataError, match="dict observations"):
        FetchDescriber("reach").describe([np.zeros(3)], [])
    with pytest.raises(DataError, match="at least the initial observation"):
        FetchDescriber("reach").describe([], [])


def test_the_box_describer_refuses_a_task_that_is_not_text():
    """F1: a mapping as the task (a YAML ``Goal: ...`` read as ``{'Goal': ...}``) failed with an
    AttributeError (``dict.strip``), or reached the verifier as its repr once made a string."""
    for task in ({"Goal": "reach"}, ["reach"], 5):
        with pytest.raises(ConfigError) as err:
            BoxDescriber(task)  # type: ignore[arg-type]
        assert str(err.value) == (
            f"BoxDescriber's task must be text (the task description), got "
            f"{type(task).__name__} {task!r}"
        )


def test_describer_choice_by_priority_is_said_and_a_tie_is_refused(caplog):
    """Two describers matching one id: the higher priority wins and the choice is said once with
    the way to pick the other; two at the same top priority are refused (issue 42)."""
    from densereward.envs.kinds import DESCRIBERS, DescriberSpec

    DESCRIBERS.register("test_low", DescriberSpec(FetchDescriber, env_ids=("FetchReach*",)))
    try:
        with caplog.at_level("WARNING", logger="densereward.envs.kinds"):
            assert isinstance(envs.default_describer("FetchReach-v4"), FetchDescriber)
            envs.default_describer("FetchReach-v4")
        said = [r.getMessage() for r in caplog.records if "matches describers" in r.getMessage()]
        assert said == [
            "'FetchReach-v4' matches describers fetch (priority 10), test_low (priority 0): "
            "using 'fetch' (the highest priority); set env.describer to use another (said once)"
        ]
        DESCRIBERS.register("test_tie", DescriberSpec(FetchDescriber, ("FetchReach*",), 10))
        with pytest.raises(ConfigError, match=r"two of the same top priority: set env.describer"):
            envs.default_describer("FetchReach-v4")
        assert isinstance(envs.default_describer("FetchReach-v4", name="test_tie"), FetchDescriber)
    finally:
        for name in ("test_low", "test_tie"):
            DESCRIBERS._entries.pop(name, None)
    with pytest.raises(ConfigError, match="must be a densereward.envs.kinds.DescriberSpec"):
        DESCRIBERS.register("test_class", FetchDescriber)


def test_render_hook_needs_rgb_array():
    from densereward.envs.describers import RenderHook

    with pytest.raises(ConfigError, match="rgb_array"):
        RenderHook()(raw_env())
    with pytest.raises(ConfigError):
        RenderHook(stride=0)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "n_frames"), [("shaping", 1), ("progress", 2)])
def test_rendered_frames_reach_a_multimodal_progress_fn(mode, n_frames):
    """Runs, not skips (issue 31): register_robotics picks MUJOCO_GL=egl on a headless machine.
    A potential of the state (shaping) sees that state's frame only; the trajectory modes see
    the last ``max_frames`` frames."""
    assert envs.rendering_available(), f"no offscreen GL (MUJOCO_GL={os.environ.get('MUJOCO_GL')})"
    seen = []

    def multimodal(tasks, trajectories, images):
        seen.append(images)
        return [0.5] * len(tasks)

    env = VerifierProgressReward(
        envs.make_env("FetchReach-v4", monitor=False, render_mode="rgb_array"),
        multimodal,
        FetchDescriber("reach"),
        ProgressRewardConfig(mode=mode, render_frames=True, max_frames=2, score_every=5),
        gamma=0.9,
    )
    env.reset(seed=0)
    for _ in range(10):
        env.step(env.action_space.sample())
    env.close()  # frees the EGL context now, not in a destructor at interpreter exit
    assert len(seen) == 3 and len(seen[-1][0]) == n_frames
    assert seen[-1][0][-1].ndim == 3 and seen[-1][0][-1].shape[-1] == 3
    assert seen[-1][0][-1].std() > 0  # a rendered scene, not a blank buffer


def test_register_robotics_drops_only_the_adroit_notice():
    import subprocess
    import sys

    code = "from densereward import envs; envs.register_robotics(); import gymnasium as gym; gym.make('FetchReach-v4')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "AdroitHand" not in done.stderr
    import farama_notifications  # the notice is still there upstream; we only filter it

    assert any(
        "AdroitHand" in v
        for versions in farama_notifications.notifications.values()
        for v in versions.values()
    )


@pytest.mark.parametrize(("kind", "env_id"), [("push", "FetchReach-v4"), ("reach", "FetchPush-v4")])
def test_fetch_describer_refuses_an_observation_without_what_it_reads(kind, env_id):
    """A push describer on FetchReach would describe a block that is not there (and a reach
    describer on FetchPush the block's distance as the gripper's): both refuse, naming the fix."""
    obs, _ = raw_env(env_id).reset(seed=0)
    d = FetchDescriber(kind)
    with pytest.raises(DataError, match=r"not a Fetch.* observation.*for_env_id"):
        d.task(obs)
    with pytest.raises(DataError, match="not a Fetch"):
        d.describe([obs], [])
    right = FetchDescriber.for_env_id(env_id)
    assert right.task(obs) and right.describe([obs], [])
