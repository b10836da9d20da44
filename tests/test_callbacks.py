"""SB3 callbacks (densereward.callbacks) in real SB3 training loops on real environments:
reward-quality metrics, learning and evaluation curves, replay relabelling."""

from __future__ import annotations

import json
import logging
import math

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO, SAC, HerReplayBuffer
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

from densereward.callbacks import (
    MIN_EPISODES,
    EvaluationCallback,
    LearningCurveCallback,
    ReplayRelabelCallback,
    VerifierDynamicsCallback,
    find_verifier_stats,
)
from densereward.errors import ConfigError, DataError
from densereward.io import read_jsonl
from densereward.metrics import best_threshold


def _fetch(n_envs: int = 1, seed: int = 0, **kwargs):
    from densereward import envs

    return envs.make_vec_env("FetchReach-v4", n_envs, seed=seed, **kwargs)


def _tiny_sac(venv, learning_starts=50, policy="MultiInputPolicy", **kwargs):
    return SAC(
        policy,
        venv,
        seed=0,
        learning_starts=learning_starts,
        batch_size=32,
        policy_kwargs={"net_arch": [16, 16]},
        device="cpu",
        **kwargs,
    )


# ---- constructor checks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: VerifierDynamicsCallback(threshold=2.0), r"threshold must be in \[0, 1\]"),
        (lambda: VerifierDynamicsCallback(threshold=-0.1), r"threshold must be in \[0, 1\]"),
        (lambda: VerifierDynamicsCallback(window=0), "window must be >= 1"),
        (lambda: LearningCurveCallback("c.jsonl", every=0), "every/window must be >= 1"),
        (lambda: LearningCurveCallback("c.jsonl", window=0), "every/window must be >= 1"),
        (lambda: EvaluationCallback(None, "e.jsonl", every=0), "every/n_episodes must be >= 1"),
        (lambda: EvaluationCallback(None, "e.jsonl", every=5, n_episodes=0), "n_episodes"),
    ],
)
def test_bad_arguments_are_config_errors(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


# ---- VerifierDynamicsCallback -----------------------------------------------------------------


def test_dynamics_metrics_on_known_episodes():
    cb = VerifierDynamicsCallback(threshold=0.5, min_episodes=1)
    episodes = [  # (progress at steps 0, 10, 20), success
        ([0.1, 0.4, 0.8], True),  # rising, accepted: TP
        ([0.2, 0.3, 0.4], True),  # rising, rejected: FN
        ([0.6, 0.5, 0.3], False),  # falling, rejected: TN
        ([0.3, 0.3, 0.3], False),  # constant: VOC undefined, rejected: TN
        ([0.1, None, 0.9], False),  # abstained in the middle, accepted: FP
    ]
    for progress, success in episodes:
        cb.episodes.append(
            {
                "scored_steps": [0, 10, 20],
                "progress": progress,
                "final_progress": progress[-1],
                "is_success": success,
                "verifier_return": sum(p or 0 for p in progress),
            }
        )
    m = cb.metrics()
    assert m["verifier/tpr"] == pytest.approx(0.5)
    assert m["verifier/tnr"] == pytest.approx(2 / 3)
    assert m["verifier/balanced_accuracy"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert m["verifier/voc"] == pytest.approx((1 + 1 - 1 + 1) / 4)
    assert m["verifier/voc_undefined_episode_frac"] == pytest.approx(0.2)
    assert m["verifier/voc_success"] == pytest.approx(1.0)
    assert m["verifier/progress_success_mean"] == pytest.approx(0.6)
    assert m["verifier/progress_failure_mean"] == pytest.approx((0.3 + 0.3 + 0.9) / 3)
    assert m["rollout/success_rate"] == pytest.approx(0.4)


def test_dynamics_window_keeps_the_last_episodes_and_abstained_finals_are_not_judged():
    cb = VerifierDynamicsCallback(threshold=0.5, window=2, min_episodes=1)
    for final, success in [(0.9, True), (0.1, True), (None, True)]:
        cb.episodes.append(
            {
                "scored_steps": [0, 5],
                "progress": [0.2, final],
                "final_progress": final,
                "is_success": success,
                "verifier_return": 1.0,
            }
        )
    m = cb.metrics()
    assert m["rollout/success_rate"] == 1.0  # the first episode left the window
    assert m["verifier/tpr"] == 0.0  # only (0.1, success) is judged: rejected
    assert np.isnan(m["verifier/tnr"])  # no failed episode: undefined, not 0 or 1
    assert (
        m["verifier/voc_undefined_episode_frac"] == 0.5
    )  # one prediction left after the abstention


def _episode(final, success):
    return {
        "scored_steps": [0, 10],
        "progress": [0.0, final],
        "final_progress": final,
        "is_success": success,
        "verifier_return": 0.0,
    }


def test_rates_of_few_episodes_are_null_beside_their_counts():
    """Issue 41 rerun B6: verifier/tpr and verifier/voc_success were printed from one episode with
    no count. Each rate now has the count it rests on, and below MIN_EPISODES of its class it
    is null (not recorded in SB3's table), with the count; the training success rate is
    rollout/success_rate, left to SB3 to record (no second value under its key)."""
    from types import SimpleNamespace

    from stable_baselines3.common.logger import Logger

    cb = VerifierDynamicsCallback(threshold=0.5)
    cb.model = SimpleNamespace(logger=Logger(folder=None, output_formats=[]))  # SB3's logger
    cb.add_episode(_episode(0.9, True))
    cb.add_episode(_episode(0.1, False))
    m = cb.metrics()
    assert (
        m["verifier/n_success_episodes"],
        m["verifier/n_failure_episodes"],
        m["verifier/n_voc_success_episodes"],
        m["verifier/n_voc_episodes"],
    ) == (1.0, 1.0, 1.0, 2.0)
    undefined = (
        "verifier/tpr",
        "verifier/tnr",
        "verifier/balanced_accuracy",
        "verifier/voc_success",
        "verifier/voc",  # issue 41 kind 4: was 1.0 from 2 episodes, with no count
    )
    assert all(math.isnan(m[k]) for k in undefined), m
    cb.record()
    logged = cb.logger.name_to_value
    assert not set(undefined) & set(logged) and logged["verifier/n_success_episodes"] == 1.0
    assert "rollout/success_rate" not in logged and m["rollout/success_rate"] == 0.5
    for _ in range(MIN_EPISODES - 1):
        cb.add_episode(_episode(0.9, True))
    m = cb.metrics()
    assert m["verifier/n_success_episodes"] == MIN_EPISODES and m["verifier/tpr"] == 1.0
    assert m["verifier/voc_success"] == pytest.approx(1.0) and math.isnan(m["verifier/tnr"])
    with pytest.raises(ConfigError, match="min_episodes"):
        VerifierDynamicsCallback(min_episodes=0)


def test_every_null_metric_comes_with_its_reason():
    """Issue 41 third rerun F9: SAC's summary.json held "verifier/voc": null beside
    "verifier/n_voc_episodes": 6.0 and "verifier/voc_undefined_frac": 0.0, the reason (fewer
    than MIN_EPISODES) only under the plot. undefined_reasons gives every null its reason with
    the count it rests on, and the per-episode fraction is named as one."""
    from densereward.callbacks import undefined_reasons

    cb = VerifierDynamicsCallback(threshold=0.5)
    for i in range(6):
        cb.add_episode(_episode(0.9, i % 2 == 0))
    m = cb.metrics()
    assert (
        m["verifier/voc_undefined_episode_frac"] == 0.0 and "verifier/voc_undefined_frac" not in m
    )
    why = undefined_reasons(m)
    assert set(why) == {k for k, v in m.items() if v != v}, (why, m)
    assert why["verifier/voc"] == (
        "6 episodes with a defined VOC in the window (verifier/n_voc_episodes), need 10 "
        "(densereward.callbacks.MIN_EPISODES)"
    )
    assert why["verifier/tpr"].startswith("3 successful episodes with a final progress")
    assert why["verifier/balanced_accuracy"] == "verifier/tpr and verifier/tnr undefined"
    assert undefined_reasons(VerifierDynamicsCallback(min_episodes=2).metrics()) == {
        "rollout/ep_env_rew_mean": "no training episode had ended"
    }


def test_dynamics_auto_threshold_is_youdens_j_of_earlier_episodes(caplog, monkeypatch):
    """Issue 28 item 8: verifier.threshold=auto in SAC is Youden's J, as in GRPO and
    eval-verifier (metrics.best_threshold), on the final progress of the *earlier* episodes
    against their success; 0.5 until both classes were seen, logged and said once per process
    (a comparison's second run said it again)."""
    from densereward import callbacks

    monkeypatch.setattr(callbacks, "_SAID", set())
    cb = VerifierDynamicsCallback(threshold="auto", min_episodes=1)
    assert cb.threshold_source == "auto (Youden's J)"
    with caplog.at_level(logging.INFO, logger="densereward.callbacks"):
        cb.add_episode(_episode(0.2, False))
        first = cb.metrics()
        for final, success in [(0.3, True), (0.1, False), (0.35, True)]:
            cb.add_episode(_episode(final, success))
    assert first["verifier/threshold"] == 0.5 and first["verifier/threshold_fallback"] == 1.0
    # judged at 0.5, 0.5 (only a failure before each), then at J of [0.2 fail, 0.3 success]
    assert [e["threshold"] for e in cb.episodes] == [0.5, 0.5, 0.3, 0.3]
    m = cb.metrics()
    assert m["verifier/tpr"] == 0.5  # 0.3 rejected at 0.5; 0.35 accepted at 0.3
    assert m["verifier/tnr"] == 1.0
    assert m["verifier/threshold_fallback"] == 0.0
    assert (
        m["verifier/threshold"]
        == best_threshold([0.2, 0.3, 0.1, 0.35], [0, 1, 0, 1])["threshold"]
        == 0.3
    )
    said = [r.getMessage() for r in caplog.records if "threshold=auto" in r.getMessage()]
    assert len(said) == 2  # the 0.5 fallback (a warning, once) and the calibration
    assert "until then" in said[0] and "at 0.5" in said[0]
    assert "Youden's J on 2 episodes: 0.3" in said[1]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="densereward.callbacks"):
        VerifierDynamicsCallback(threshold="auto", min_episodes=1).add_episode(_episode(0.2, False))
    assert not [r for r in caplog.records if "until then" in r.getMessage()]  # said once
    # a fixed threshold stays fixed
    fixed = VerifierDynamicsCallback(threshold=0.5, min_episodes=1)
    for final, success in [(0.2, False), (0.3, True), (0.1, False), (0.35, True)]:
        fixed.add_episode(_episode(final, success))
    assert fixed.metrics()["verifier/tpr"] == 0.0 and fixed.threshold_source == "fixed 0.5"


def test_dynamics_state_continues_the_window_as_an_uninterrupted_run_would():
    """F3 (rerun 7): a resumed SAC run's verifier window restarted empty. A callback that
    loads another's state_dict (through JSON, as train sac's checkpoints hold it) continues
    exactly as the uninterrupted one: the window, the episode count and auto's calibration."""
    episodes = [
        (0.2, False),
        (0.3, True),
        (0.1, False),
        (0.35, True),
        (0.6, True),
        (None, False),
        (0.05, False),
        (0.7, True),
    ]
    whole = VerifierDynamicsCallback(threshold="auto", window=5, min_episodes=2)
    first = VerifierDynamicsCallback(threshold="auto", window=5, min_episodes=2)
    for final, success in episodes:
        whole.add_episode(_episode(final, success))
    for final, success in episodes[:5]:
        first.add_episode(_episode(final, success))
        first.true_returns.append(-50.0)
        first.n_episodes += 1
    resumed = VerifierDynamicsCallback(threshold="auto", window=5, min_episodes=2)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    for final, success in episodes[5:]:
        resumed.add_episode(_episode(final, success))
    got, want = resumed.metrics(), whole.metrics()
    assert got.pop("rollout/ep_env_rew_mean") == -50.0  # the stopped part's returns stay
    want.pop("rollout/ep_env_rew_mean")
    assert json.dumps(got) == json.dumps(want)  # NaN == NaN here
    assert resumed.threshold == whole.threshold and resumed.n_episodes == 5
    assert [e["threshold"] for e in resumed.episodes] == [e["threshold"] for e in whole.episodes]
    # a smaller window keeps the newest episodes; a fixed threshold stays fixed
    small = VerifierDynamicsCallback(threshold=0.5, window=2, min_episodes=1)
    small.load_state_dict(first.state_dict())
    assert [e["final_progress"] for e in small.episodes] == [0.35, 0.6]
    assert small.threshold == 0.5 and small.threshold_fallback is False
    with pytest.raises(DataError, match="verifier-dynamics state"):
        small.load_state_dict({"episodes": []})


def test_dynamics_leaves_success_metrics_out_for_an_env_without_is_success(caplog):
    """Issue 41: an environment whose step info has no is_success (Pendulum-v1) gives episodes
    with is_success None; the metrics that need success are left out, not computed as if every
    episode failed, and the auto threshold's fallback is not said (nothing to calibrate)."""
    cb = VerifierDynamicsCallback(threshold="auto", min_episodes=1)
    with caplog.at_level(logging.INFO, logger="densereward.callbacks"):
        for final in (0.2, 0.9, None):
            cb.add_episode(_episode(final, None))
    m = cb.metrics()
    needs_success = {
        "verifier/tpr",
        "verifier/tnr",
        "verifier/balanced_accuracy",
        "verifier/threshold",
        "verifier/threshold_fallback",
        "rollout/success_rate",
        "verifier/voc_success",
        "verifier/progress_success_mean",
        "verifier/progress_failure_mean",
    }
    assert not needs_success & set(m), sorted(needs_success & set(m))
    assert m["verifier/final_progress_mean"] == pytest.approx(0.55)
    assert m["verifier/voc"] == pytest.approx(1.0) and "rollout/ep_training_rew_mean" in m
    assert not caplog.records
    # an episode whose environment does report success counts; the others stay out
    cb.add_episode(_episode(0.8, True))
    m = cb.metrics()
    assert m["rollout/success_rate"] == 1.0 and m["verifier/progress_success_mean"] == 0.8


def test_a_return_curve_is_the_environments_own_reward_not_the_shaped_one(tmp_path):
    """Issue 41 third rerun F2: with evaluation off the curve of an env without is_success was
    the training return (rollout/ep_rew_mean), which under the verifier includes the shaping
    term (-1.3 an episode on the user's env), so compare set env_only against verifier_dense on
    two scales. The curve is now the environment's own return, info["true_reward"] summed."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    class Shaped(gym.Wrapper):  # a shaping term of -1 a step, the env's reward kept aside
        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            info["true_reward"] = float(r)
            return obs, float(r) - 1.0, term, trunc, info

    def make():
        return Shaped(gym.wrappers.TimeLimit(gym.make("Pendulum-v1").unwrapped, 10))

    venv = VecMonitor(DummyVecEnv([make]))
    curve = LearningCurveCallback(tmp_path / "train.jsonl", every=10, success=False)
    model = _tiny_sac(venv, learning_starts=100, policy="MlpPolicy")
    model.learn(30, callback=[curve])
    trained_on = [float(ep["r"]) for ep in model.ep_info_buffer]  # 3 episodes of 10 steps
    assert curve.metric == "rollout/ep_env_rew_mean"
    assert curve.curve[-1]["value"] == pytest.approx(np.mean(trained_on) + 10.0, abs=1e-3)


def test_curves_of_an_env_without_is_success_are_returns_not_zero_success(tmp_path):
    """Issue 41: densereward's make_vec_env on Pendulum-v1 (no info["is_success"]) no longer
    dies at the first episode end (SB3's VecMonitor was told to record is_success); the
    learning curve without success is the episode return, evaluation logs no success rate, and
    a curve that expects success writes no point rather than a made-up 0."""
    import csv

    from stable_baselines3.common.logger import configure

    from densereward import envs

    def pendulum(seed):
        return envs.make_vec_env("Pendulum-v1", 1, seed=seed, reward="env", max_episode_steps=10)

    venv = pendulum(0)
    assert venv.info_keywords == ()  # the success key only where a step reports it
    returns = LearningCurveCallback(tmp_path / "train.jsonl", every=10, success=False)
    expects_success = LearningCurveCallback(tmp_path / "success.jsonl", every=10)
    evaluation = EvaluationCallback(
        pendulum(10_000), tmp_path / "eval.jsonl", every=20, n_episodes=1, success=False
    )
    model = _tiny_sac(venv, learning_starts=100, policy="MlpPolicy")
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(40, callback=[returns, expects_success, evaluation])
    sb3 = [float(ep["r"]) for ep in model.ep_info_buffer]  # 4 episodes of 10 steps
    assert [p["step"] for p in returns.curve] == [10, 20, 30, 40]
    assert returns.curve[-1]["value"] == pytest.approx(np.mean(sb3), abs=1e-4)
    assert returns.curve[-1]["value"] < 0  # Pendulum's reward: a return, not a success rate
    assert returns.metric == "rollout/ep_env_rew_mean" and evaluation.metric == "eval/mean_reward"
    assert expects_success.curve == [] and not (tmp_path / "success.jsonl").exists()
    assert [p["step"] for p in evaluation.curve] == [0, 20, 40]
    assert all(p["value"] == p["mean_reward"] < 0 for p in evaluation.curve)
    # issue 41 third rerun F10: each row of either curve says what its value is
    assert list(read_jsonl(tmp_path / "train.jsonl")) == returns.curve
    assert all(
        p["metric"] == "rollout/ep_env_rew_mean"
        and p["reward"] == "the environment's own reward, summed over a training episode"
        and p["n_episodes"] >= 1
        for p in returns.curve
    )
    assert all(p["metric"] == "eval/mean_reward" for p in read_jsonl(tmp_path / "eval.jsonl"))
    with open(tmp_path / "log" / "progress.csv") as f:
        keys = set(next(csv.reader(f)))
    assert "eval/mean_reward" in keys and not any("success" in k for k in keys), keys


def test_dynamics_without_a_verifier_logs_the_true_return_of_sb3_episodes():
    """Through model.learn on a plain Gymnasium env: the true return is SB3's episode return."""
    venv = sb3_make_vec_env("Pendulum-v1", n_envs=2, seed=0, env_kwargs={"max_episode_steps": 10})
    cb = VerifierDynamicsCallback(window=100)
    model = _tiny_sac(venv, learning_starts=100, policy="MlpPolicy")
    model.learn(40, callback=cb)  # 20 steps per env: 2 episodes each
    m = cb.metrics()
    assert cb.n_episodes == 4 and len(cb.true_returns) == 4
    sb3 = [ep["r"] for ep in model.ep_info_buffer]
    assert m["rollout/ep_env_rew_mean"] == pytest.approx(np.mean(sb3), abs=1e-4)
    assert not any(k.startswith("verifier/") for k in m)  # nothing to judge without a verifier
    assert find_verifier_stats(venv) == []


def test_dynamics_with_the_verifier_wrapper_counts_its_calls(server):
    """FetchReach with the verifier progress reward (the openai backend against the scripted
    loopback server): cost per step from the wrapper's stats, episodes with progress."""
    from servers import scripted_verifier

    from densereward import envs
    from densereward.wrappers import ProgressRewardConfig, verifier_progress_fn

    v = scripted_verifier(server.base_url, granularity=20)
    try:
        venv = _fetch(
            2,
            reward="verifier",
            progress_fn=verifier_progress_fn(v),
            describer=envs.FetchDescriber.for_env_id("FetchReach-v4"),
            reward_config=ProgressRewardConfig(score_every=10),
            gamma=0.99,
        )
        (stats,) = find_verifier_stats(venv)  # once, though VecMonitor forwards `core`
        cb = VerifierDynamicsCallback(engine_stats=v.stats)
        _tiny_sac(venv, learning_starts=200).learn(100, callback=cb)  # 50 steps per env
    finally:
        v.close()
    m = cb.metrics()
    assert cb.n_episodes == len(cb.episodes) == 2
    assert stats.n_env_steps == 100 and stats.n_calls > 0
    assert m["verifier/calls_per_step"] == pytest.approx(stats.n_calls / 100)
    assert m["verifier/seconds_per_step"] > 0 and m["verifier/abstain_rate"] == 0.0
    # the scripted server puts its mass on T and S: the same progress at every read
    assert (
        m["verifier/voc_undefined_episode_frac"] == 1.0
        and 0.9 < m["verifier/final_progress_mean"] < 1
    )
    assert m["verifier/total/n_low_mass"] == 0.0 and m["verifier/mean_mass"] > 0.5


# ---- LearningCurveCallback ------------------------------------------------------------------


def test_learning_curve_is_sb3_success_rate_and_appends(tmp_path):
    path = tmp_path / "curve.jsonl"
    model = _tiny_sac(_fetch(1, reward="sparse"), learning_starts=200)
    cb = LearningCurveCallback(path, every=20, window=100)
    model.learn(100, callback=cb)  # FetchReach episodes end at 50 and 100
    # a point every 20 steps once an episode has ended (FetchReach: 50 steps)
    assert [p["step"] for p in cb.curve] == [50, 60, 80, 100]
    # the window's episodes and those finished so far (windows overlap: compare counts each once)
    assert [(p["n_episodes"], p["n_episodes_total"]) for p in cb.curve] == [
        (1, 1),
        (1, 1),
        (1, 1),
        (2, 2),
    ]
    assert cb.curve[-1]["value"] == pytest.approx(np.mean(model.ep_success_buffer))
    assert list(read_jsonl(path)) == cb.curve
    assert all(p["metric"] == "rollout/success_rate" and "reward" not in p for p in cb.curve)
    again = LearningCurveCallback(path, every=20)  # a resumed run continues the file
    model.learn(50, callback=again, reset_num_timesteps=False)
    # the new callback writes once it has seen an episode end (at 150), after the old points
    assert [p["step"] for p in read_jsonl(path)] == [50, 60, 80, 100, 150]


# ---- EvaluationCallback ---------------------------------------------------------------------


def _normalized_fetch(seed: int, *, training: bool = True):
    from stable_baselines3.common.vec_env import VecNormalize

    return VecNormalize(
        _fetch(2, seed=seed, reward="sparse"), norm_obs=True, norm_reward=False, training=training
    )


@pytest.mark.slow
def test_evaluation_uses_frozen_training_statistics_and_does_not_change_training(tmp_path):
    import torch
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    eval_env = _normalized_fetch(seed=10_000, training=False)
    cb = EvaluationCallback(eval_env, tmp_path / "eval.jsonl", every=50, n_episodes=2)
    model = _tiny_sac(_normalized_fetch(seed=0))
    model.learn(100, callback=cb)
    # evaluated at 0, every 50 environment steps and at the end, 2 episodes each
    assert [p["step"] for p in cb.curve] == [0, 50, 100]
    assert all(p["n_episodes"] == 2 and 0.0 <= p["value"] <= 1.0 for p in cb.curve)
    assert [p["step"] for p in read_jsonl(tmp_path / "eval.jsonl")] == [0, 50, 100]
    # the last evaluation ran on the training statistics, and did not update them (frozen)
    train_rms = model.get_vec_normalize_env().obs_rms
    for key in ("observation", "desired_goal"):
        np.testing.assert_array_equal(eval_env.obs_rms[key].mean, train_rms[key].mean)
        assert eval_env.obs_rms[key].count == train_rms[key].count
    assert eval_env.training is False and eval_env.norm_reward is False
    # its own environment and deterministic actions: training is the same without it
    plain = _tiny_sac(_normalized_fetch(seed=0))
    plain.learn(100)
    for a, b in zip(model.policy.parameters(), plain.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # an evaluation environment that reads raw observations while training normalises them
    raw = _normalized_fetch(seed=0).venv
    with pytest.raises(ConfigError, match="VecNormalize"):
        _tiny_sac(_normalized_fetch(seed=0)).learn(
            10, callback=EvaluationCallback(raw, tmp_path / "x.jsonl", every=50)
        )
    assert isinstance(eval_env, VecNormalize)


def test_evaluation_without_normalisation_logs_sb3_keys(tmp_path):
    import csv

    from stable_baselines3.common.logger import configure

    eval_env = _fetch(1, seed=10_000, reward="sparse")
    cb = EvaluationCallback(eval_env, tmp_path / "eval.jsonl", every=30, n_episodes=1)
    model = _tiny_sac(_fetch(1, reward="sparse"), learning_starts=200)
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(60, callback=cb)
    assert [p["step"] for p in cb.curve] == [0, 30, 60]
    assert all(p["n_episodes"] == 1 and p["value"] in (0.0, 1.0) for p in cb.curve)
    assert all(0 <= p["mean_reward"] <= 50 for p in cb.curve)  # 1 per step at the goal
    with open(tmp_path / "log" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["eval/success_rate"]) for r in rows] == [p["value"] for p in cb.curve]
    assert all(float(r["eval/mean_ep_length"]) == 50 for r in rows) and cb.seconds > 0


def test_evaluation_says_which_reward_its_mean_reward_sums(tmp_path):
    """Issue 28 item 13: eval/mean_reward beside eval/success_rate names its reward."""
    import csv

    from stable_baselines3.common.logger import configure

    label = "sparse success reward (1 per step at the goal, else 0), summed"
    cb = EvaluationCallback(
        _fetch(1, seed=10_000, reward="sparse"),
        tmp_path / "eval.jsonl",
        every=30,
        n_episodes=1,
        reward_label=label,
    )
    model = _tiny_sac(_fetch(1, reward="sparse"), learning_starts=200)
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    model.learn(30, callback=cb)
    assert [p["reward"] for p in read_jsonl(tmp_path / "eval.jsonl")] == [label, label]
    with open(tmp_path / "log" / "progress.csv") as f:
        assert [r["eval/reward"] for r in csv.DictReader(f)] == [label, label]


# ---- ReplayRelabelCallback ------------------------------------------------------------------


class _EpisodeEndRewards(gym.Wrapper):
    """At each episode end, report ``n_rewards(T)`` rewards ``1, 2, ...`` in
    ``info["verifier_episode"]["rewards"]`` (what the verifier wrappers do with
    ``timing='episode_end'``), for an episode of ``T`` steps."""

    def __init__(self, env, n_rewards=lambda t: t):
        super().__init__(env)
        self.n_rewards = n_rewards
        self.t = 0

    def reset(self, **kwargs):
        self.t = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if terminated or truncated:
            info = {
                **info,
                "verifier_episode": {"rewards": list(range(1, self.n_rewards(self.t) + 1))},
            }
        return obs, 0.0, terminated, truncated, info


def _pendulum(n_rewards=lambda t: t):
    return sb3_make_vec_env(
        "Pendulum-v1",
        n_envs=2,
        seed=0,
        wrapper_class=_EpisodeEndRewards,
        wrapper_kwargs={"n_rewards": n_rewards},
        env_kwargs={"max_episode_steps": 10},
    )


def test_replay_relabel_writes_each_episode_end_reward_into_its_rows():
    model = SAC(
        "MlpPolicy",
        _pendulum(),
        learning_starts=1000,
        buffer_size=100,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    cb = ReplayRelabelCallback()
    model.learn(50, callback=cb)  # 25 steps per env: episodes end at steps 10 and 20
    assert cb.n_relabelled_episodes == 4 and cb.n_relabelled_steps == 40
    rewards = model.replay_buffer.rewards
    for env in range(2):
        np.testing.assert_array_equal(rewards[:10, env], np.arange(1, 11))
        np.testing.assert_array_equal(rewards[10:20, env], np.arange(1, 11))
        np.testing.assert_array_equal(rewards[20:25, env], 0.0)  # the open episode: placeholder


def test_replay_relabel_rejects_a_wrong_reward_count_her_and_on_policy_models():
    model = SAC(
        "MlpPolicy",
        _pendulum(n_rewards=lambda t: t - 1),
        learning_starts=1000,
        buffer_size=100,
        seed=0,
        device="cpu",
    )
    with pytest.raises(DataError, match="episode of 10 stored steps got 9 relabelled rewards"):
        model.learn(30, callback=ReplayRelabelCallback())
    ppo = PPO(
        "MlpPolicy",
        sb3_make_vec_env("Pendulum-v1", n_envs=1, seed=0),
        n_steps=8,
        batch_size=8,
        device="cpu",
    )
    with pytest.raises(ConfigError, match="needs an off-policy model with a replay buffer"):
        ppo.learn(8, callback=ReplayRelabelCallback())
    her = _tiny_sac(_fetch(1, reward="sparse"), replay_buffer_class=HerReplayBuffer)
    with pytest.raises(ConfigError, match="incompatible with HER"):
        her.learn(10, callback=ReplayRelabelCallback())


def test_the_training_and_evaluation_returns_are_named_apart(tmp_path):
    """Issue 41 item 4: a SAC run printed ``rollout/ep_true_rew_mean=-50.0`` (FetchReach's own
    reward, -1 per step away from the goal) beside an evaluation "true sparse success reward"
    of 1.600: two "true" rewards on two scales. Each name now says which reward it sums, and an
    older run's file still plots under the new name."""
    from densereward.trainers import sac_plots
    from densereward.trainers.sac_config import EVAL_REWARD_LABELS, eval_reward_label

    keys = set(VerifierDynamicsCallback(window=4).metrics())
    assert "rollout/ep_env_rew_mean" in keys and not any("true" in k for k in keys)
    assert (
        eval_reward_label("sparse")
        == "sparse success reward (1 per step at the goal, else 0), summed"
    )
    assert eval_reward_label("env") == "the environment's own reward, summed"
    assert not any("true" in label for label in EVAL_REWARD_LABELS.values())
    old = tmp_path / "verifier_dynamics.jsonl"
    old.write_text(json.dumps({"step": 50, "rollout/ep_true_rew_mean": -50.0}) + "\n")
    assert sac_plots._read(old) == [{"step": 50, "rollout/ep_env_rew_mean": -50.0}]


def test_episodes_that_end_at_one_step_give_one_record(tmp_path):
    """With n_envs = 2 both Fetch episodes end at the same step (a 50-step horizon): the
    dynamics file had two near-identical rows per step, the first without the second episode.
    A real SAC on two FetchReach environments, 200 steps, no gradient step."""
    import json

    from stable_baselines3 import SAC

    from densereward import envs

    venv = envs.make_vec_env("FetchReach-v4", 2, seed=0, reward="sparse")
    cb = VerifierDynamicsCallback(threshold=0.5, path=tmp_path / "dyn.jsonl")
    SAC("MultiInputPolicy", venv, learning_starts=1000, seed=0).learn(200, callback=cb)
    rows = [json.loads(line) for line in (tmp_path / "dyn.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [100, 200]
    assert cb.n_episodes == 4
