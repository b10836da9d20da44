"""Plugins (issue 29 item 1): each extension point, added by a real installed distribution's
entry points and used from YAML.

The fixture writes a tiny distribution into a temporary directory: one module and its
``densereward_test_plugin-0.1.dist-info`` (``METADATA`` + ``entry_points.txt``), puts the
directory on ``sys.path`` and reads the entry-point groups again (``reload_plugins``). Nothing
is registered in Python: every name below reaches densereward through ``importlib.metadata``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from plugin_dist import install

from densereward.backends.models import MODELS
from densereward.envs.kinds import DESCRIBERS, SAC_REWARDS
from densereward.errors import ConfigError
from densereward.rewards.kinds import GRPO_REWARDS
from densereward.sample_efficiency.config import TRAINERS

REPO = Path(__file__).resolve().parents[1]
MODULE = "densereward_test_plugin"

PLUGIN_SOURCE = '''
"""A densereward plugin: one file per extension point would do; one module holds them all here."""

import dataclasses

import gymnasium as gym
import numpy as np

from densereward.backends.models import SMOLLM2_135M
from densereward.envs.describers import FetchDescriber
from densereward.envs.kinds import DescriberSpec, SACRewardKind
from densereward.rewards._common import completion_texts
from densereward.rewards.kinds import RewardKind
from densereward.sample_efficiency import TrainerSpec


# GRPO reward kind (group densereward.grpo_rewards): a RewardKind, its builder
# build(ctx) -> (reward_funcs, weights) and its options (YAML reward.options)
@dataclasses.dataclass(frozen=True)
class ShortOptions:
    limit: int = 64

    def __post_init__(self):
        if self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")


class ShortReward:
    """1 for a completion of at most ``limit`` characters, else 0 (a callable class: picklable)."""

    def __init__(self, limit):
        self.limit = limit
        self.__name__ = "plugin_short"

    def __call__(self, prompts, completions, **kwargs):
        return [None if t is None else float(len(t) <= self.limit)
                for t in completion_texts(completions)]


def build_short(ctx):
    return [ShortReward(ctx.options.limit)], None


SHORT = RewardKind(build_short, options=ShortOptions, uses_verifier=False)
NOT_A_KIND = build_short  # a bare builder: refused when loaded


# SAC reward kind (group densereward.sac_rewards): a SACRewardKind, build(env, ctx) -> env and
# its options (YAML env.reward_options)
@dataclasses.dataclass(frozen=True)
class NegDistanceOptions:
    scale: float = 1.0  # reward per metre


class NegDistance(gym.Wrapper):
    def __init__(self, env, scale):
        super().__init__(env)
        self.scale = scale

    def step(self, action):
        obs, _, terminated, truncated, info = self.env.step(action)
        d = float(np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"]))
        return obs, -self.scale * d, terminated, truncated, info


NEG_DISTANCE = SACRewardKind(lambda env, ctx: NegDistance(env, ctx.options.scale),
                             options=NegDistanceOptions)


# describer (group densereward.describers): a DescriberSpec (the class, env ids, priority)
class PluginDescriber(FetchDescriber):
    @classmethod
    def for_env_id(cls, env_id, **kwargs):
        return cls("reach", **kwargs)

    def task(self, observation):
        return "PLUGIN. " + super().task(observation)


PLUGIN_FETCH = DescriberSpec(PluginDescriber, env_ids=("PluginEnv-*",))


# compare trainer (group densereward.trainers): a TrainerSpec
def _run(config, *, output_dir):
    rate, steps = float(config["reward"]["rate"]), int(config["training"]["steps"])
    output_dir.mkdir(parents=True)
    return {"metric": "plugin/score",
            "curve": [{"step": s, "value": min(1.0, rate * s / steps)} for s in range(0, steps + 1, 2)]}


def _dry_run(config, *, output_dir):
    return [f"plugin rate {config['reward']['rate']}"]


SPEC = TrainerSpec(run=_run, dry_run=_dry_run, budget_key=("training", "steps"),
                   x_label="plugin steps")

# offline model (group densereward.models): the embedded SmolLM2 under another name
MODEL = dataclasses.replace(SMOLLM2_135M, name="plugin-smol")
'''

ENTRY_POINTS = f"""
[densereward.grpo_rewards]
plugin_short = {MODULE}:SHORT
plugin_broken = {MODULE}:no_such_builder
plugin_bare = {MODULE}:NOT_A_KIND

[densereward.sac_rewards]
plugin_neg_distance = {MODULE}:NEG_DISTANCE

[densereward.describers]
plugin_fetch = {MODULE}:PLUGIN_FETCH

[densereward.trainers]
plugin_toy = {MODULE}:SPEC

[densereward.models]
plugin-smol = {MODULE}:MODEL
"""

REGISTRIES = (GRPO_REWARDS, SAC_REWARDS, DESCRIBERS, TRAINERS, MODELS)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Install the plugin distribution (a directory on sys.path) and re-read every group."""
    yield from install(tmp_path, monkeypatch, MODULE, PLUGIN_SOURCE, ENTRY_POINTS, REGISTRIES)


def _yaml(text: str) -> dict:
    return yaml.safe_load(textwrap.dedent(text))


def test_every_group_lists_the_plugin_and_builtins_stay(plugin):
    assert {"plugin_short", "plugin_broken", "sparse", "gated"} <= set(GRPO_REWARDS.names())
    assert {"plugin_neg_distance", "env", "sparse", "verifier"} <= set(SAC_REWARDS.names())
    assert {"plugin_fetch", "fetch", "box"} <= set(DESCRIBERS.names())
    assert {"plugin_toy", "sac", "grpo"} <= set(TRAINERS.names())
    assert {"plugin-smol", "smollm2-135m"} <= set(MODELS.names())
    # a broken entry point is named when used, not when listed
    from densereward.rewards import RewardConfig, build_reward_funcs

    with pytest.raises(ConfigError, match="cannot load 'densereward_test_plugin:no_such_builder'"):
        build_reward_funcs(RewardConfig(type="plugin_broken", track=False), lambda: None)
    with pytest.raises(ConfigError, match="Did you mean 'plugin_short'"):
        RewardConfig(type="plugin_shrt")
    with pytest.raises(
        ConfigError,
        match=r"reward.type: GRPO reward kind 'plugin_bare' must be a "
        r"densereward.rewards.kinds.RewardKind.*RewardKind\(build=your_function\)",
    ):
        RewardConfig(type="plugin_bare")


def test_a_plugin_reward_kinds_options_are_read_from_yaml(plugin):
    """reward.options is validated into the kind's dataclass when the config is read."""
    from densereward.config import from_dict
    from densereward.rewards import RewardConfig, build_reward_funcs

    reward = from_dict(
        RewardConfig,
        _yaml("""
        type: plugin_short
        track: false
        options: {limit: '3'}
    """),
        prefix="reward.",
    )
    assert type(reward.options).__name__ == "ShortOptions" and reward.options.limit == 3
    funcs, weights = build_reward_funcs(reward, lambda: None)
    assert funcs[0]([[]] * 2, ["abc", "abcd"]) == [1.0, 0.0] and weights is None
    assert RewardConfig(type="plugin_short").options.limit == 64  # the defaults, filled in
    with pytest.raises(
        ConfigError,
        match=r"unknown reward.options for reward.type=plugin_short: "
        r"'reward.options.limt' \(did you mean 'reward.options.limit'\?\); "
        r"it takes limit",
    ):
        RewardConfig(type="plugin_short", options={"limt": 3})
    with pytest.raises(ConfigError, match="reward.options.limit: expected int, got 'many'"):
        RewardConfig(type="plugin_short", options={"limit": "many"})
    with pytest.raises(ConfigError, match="reward.type=plugin_short: reward.options: limit must"):
        RewardConfig(type="plugin_short", options={"limit": 0})
    with pytest.raises(ConfigError, match="reward.type=dense takes no options"):
        RewardConfig(type="dense", options={"limit": 3})
    with pytest.raises(ConfigError, match="reward.weights does not apply to reward.type=plugin"):
        RewardConfig(type="plugin_short", weights=[1.0])


@pytest.mark.slow  # imports TRL / runs real environments and the embedded verifier
def test_grpo_reward_kind_from_yaml_dry_run_and_real_completions(plugin, tmp_path, data_dir):
    """reward.type: plugin_short and the plugin's offline model name, through trainers.grpo."""
    from densereward.config import load_yaml
    from densereward.trainers import grpo

    config = load_yaml(REPO / "configs" / "grpo_math_cpu.yaml")
    config.update(
        _yaml(f"""
        model: {{name: plugin-smol}}
        data: {{path: {data_dir / "math500" / "test.jsonl"}, limit: 4, levels: [1]}}
        reward: {{type: plugin_short, track: false, options: {{limit: 64}}}}
        verifier: {{model: plugin-smol, granularity: 5}}
    """)
    )
    config["training"].update(
        max_steps=1,
        max_completion_length=8,
        per_device_train_batch_size=2,
        num_generations=2,
        save_steps=10,
    )
    config["wandb"] = {"enabled": False}
    dry = grpo.dry_run(config, output_dir=tmp_path / "dry")
    assert not any(line.startswith("!! ") for line in dry), dry
    assert (
        "reward: plugin_short -> reward_funcs ['plugin_short'], options ShortOptions(limit=64)"
        in dry
    )
    assert any("offline model 'plugin-smol'" in line for line in dry), dry

    # the reward functions the run would hand TRL, on real completions of GSM8K problems
    import json

    from densereward.rewards import RewardQualityTracker, build_reward_funcs

    parts = grpo.resolve_config(config)
    funcs, weights = build_reward_funcs(
        parts["reward"], lambda: None, tracker=RewardQualityTracker(None), num_generations=2
    )
    assert [f.__name__ for f in funcs] == ["plugin_short"] and weights is None
    lines = (data_dir / "gsm8k" / "model_solutions_dev.jsonl").read_text().splitlines()[:4]
    rows = [json.loads(x) for x in lines]
    texts = [r["6b_finetuning"]["solution"] for r in rows] + ["A: 18"]
    prompts = [[{"role": "user", "content": r["question"]}] for r in rows] + [[]]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    assert funcs[0](prompts, completions) == [float(len(t) <= 64) for t in texts]
    assert funcs[0](prompts, completions)[-1] == 1.0


@pytest.mark.slow  # imports TRL / runs real environments and the embedded verifier
def test_sac_reward_kind_and_describer_from_yaml(plugin, tmp_path, capsys):
    """env.reward: plugin_neg_distance for a run; env.describer: plugin_fetch in the dry run and
    a run with the verifier reward on the plugin's base reward; env_ids pick it by id."""
    from densereward import envs
    from densereward.trainers import sac

    config = _yaml("""
        env: {id: FetchReach-v4, reward: plugin_neg_distance, n_envs: 1}
        training: {total_timesteps: 60, eval_every: 30, eval_episodes: 1, curve_every: 30,
                   checkpoint_every: 0, log_interval: 1}
        wandb: {enabled: false}
        sac: {learning_starts: 30, batch_size: 16, policy_kwargs: {net_arch: [16, 16]}}
    """)
    summary = sac.run(config, output_dir=tmp_path / "neg")
    assert summary["eval_reward"] == "plugin_neg_distance reward, summed"
    venv = envs.make_vec_env("FetchReach-v4", 1, reward="plugin_neg_distance")
    venv.reset()
    _, rewards, _, _ = venv.step(np.zeros((1, 4), dtype=np.float32))
    assert -0.5 < float(rewards[0]) < 0.0  # minus the gripper-goal distance in metres

    verifier = _yaml("""
        env: {id: FetchReach-v4, reward: verifier, base: plugin_neg_distance,
              describer: plugin_fetch, n_envs: 1}
        reward: {score_every: 20}
        verifier: {granularity: 5, backend_options: {device: cpu, dtype: float32}}
        training: {total_timesteps: 40, eval_every: 0, curve_every: 20, checkpoint_every: 0,
                   log_interval: 1, torch_threads: 1}
        wandb: {enabled: false}
        sac: {learning_starts: 20, batch_size: 16, policy_kwargs: {net_arch: [16, 16]}}
    """)
    lines = sac.dry_run(verifier, output_dir=tmp_path / "dry")
    assert any("describer: PluginDescriber" in x and "PLUGIN. Move" in x for x in lines), lines
    summary = sac.run(verifier, output_dir=tmp_path / "verifier")
    assert summary["eval_reward"] is None and summary["env_steps"] >= 40

    assert isinstance(envs.make_describer("PluginEnv-v0"), plugin_describer())
    with pytest.raises(ConfigError, match="env.describer: .*Did you mean 'plugin_fetch'"):
        sac.parse_config({"env": {"describer": "plugin_fech"}})


def plugin_describer() -> type:
    return DESCRIBERS.load("plugin_fetch").cls


def test_a_plugin_sac_reward_kind_with_options_in_the_dry_run(plugin, tmp_path):
    """env.reward_options reach the plugin kind's builder in ``train sac --dry-run``, which
    builds and steps one environment with it; the options are validated when read."""
    from densereward.trainers import sac

    config = _yaml("""
        env: {id: FetchReach-v4, reward: plugin_neg_distance, reward_options: {scale: '100'},
              n_envs: 1}
        training: {total_timesteps: 10}
        wandb: {enabled: false}
    """)
    lines = sac.dry_run(config, output_dir=tmp_path / "dry")
    assert any("reward: 'plugin_neg_distance' built and stepped once" in x for x in lines), lines
    cfg = sac.parse_config(config)
    assert type(cfg.env.reward_options).__name__ == "NegDistanceOptions"
    assert cfg.env.reward_options.scale == 100.0
    from densereward import envs

    env = envs.make_env(
        "FetchReach-v4",
        reward="plugin_neg_distance",
        monitor=False,
        reward_options=cfg.env.reward_options,
    )
    env.reset(seed=0)
    assert -50.0 < env.step(np.zeros(4, dtype=np.float32))[1] < 0.0  # minus 100 x metres
    with pytest.raises(
        ConfigError,
        match=r"unknown env.reward_options for "
        r"env.reward=plugin_neg_distance: 'env.reward_options.scal' "
        r"\(did you mean 'env.reward_options.scale'\?\); it takes scale",
    ):
        sac.parse_config({"env": {"reward": "plugin_neg_distance", "reward_options": {"scal": 1}}})
    # under the verifier the options are the base kind's; the built-in kinds take none
    cfg = sac.parse_config(
        {
            "env": {
                "reward": "verifier",
                "base": "plugin_neg_distance",
                "reward_options": {"scale": 2},
            }
        }
    )
    assert cfg.env.reward_options.scale == 2.0
    with pytest.raises(ConfigError, match="env.reward_options: env.reward=sparse takes no options"):
        sac.parse_config({"env": {"reward": "sparse", "reward_options": {"scale": 2}}})


def test_compare_runs_a_plugin_trainer_from_yaml(plugin, tmp_path):
    from densereward.sample_efficiency import dry_run_comparison, run_comparison

    config = _yaml(f"""
        name: plugin-compare
        trainer: plugin_toy
        output_dir: {tmp_path / "cmp"}
        base: {{training: {{steps: 8}}, reward: {{rate: 1.0}}}}
        conditions: {{slow: [reward.rate=0.3], fast: [reward.rate=3.0]}}
        seeds: [0, 1, 2, 3]
        threshold: 0.9
        n_bootstrap: 200
    """)
    lines = dry_run_comparison(config)
    assert "slow: plugin rate 0.3" in lines
    res = run_comparison(config, progress=False)
    assert res["trainer"] == "plugin_toy" and res["x_label"] == "plugin steps"
    # 4 runs a side: the fewest that can give a verdict (MIN_RUNS_FOR_A_VERDICT)
    assert res["pairs"][0]["verdict"].startswith("fast beats slow")
    assert "metric `plugin/score`" in (tmp_path / "cmp" / "report.md").read_text()


def test_models_lists_the_plugin_model(plugin, capsys):
    from densereward.backends import models
    from densereward.cli import main

    assert models.resolve_model("plugin-smol") == str(models.model_dir("smollm2-135m"))
    assert main(["models"]) == 0
    assert "plugin-smol" in capsys.readouterr().out
