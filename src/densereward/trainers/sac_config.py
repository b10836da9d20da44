"""The SAC run's configuration: YAML sections -> dataclasses (unknown keys are errors).

``env`` -> :class:`EnvConfig`, ``reward`` -> :class:`densereward.progress_reward.ProgressRewardConfig`,
``verifier`` -> :class:`densereward.config.VerifierConfig`, ``training`` -> :class:`TrainingConfig`;
``sac`` is passed through to ``stable_baselines3.SAC`` and ``her`` (optional) to
``HerReplayBuffer`` as ``replay_buffer_kwargs``. :func:`parse_config` validates all of it
before any run starts; the run itself is :mod:`densereward.trainers.sac`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from densereward.config import VerifierConfig, check_sections, field_names, unknown_key_hints
from densereward.config_files import from_dict
from densereward.errors import ConfigError
from densereward.progress_reward import ProgressRewardConfig
from densereward.sections import check_passthrough_values
from densereward.wandb_config import WandbConfig, refuse_old_keys

__all__ = [
    "EVAL_REWARD_LABELS",
    "EVAL_SEED_OFFSET",
    "SECTIONS",
    "EnvConfig",
    "TrainingConfig",
    "SACRunConfig",
    "eval_reward_label",
    "parse_config",
]

EVAL_SEED_OFFSET = 10_000
"""Evaluation environment ``i`` is seeded with ``training.seed + EVAL_SEED_OFFSET + i``."""

SECTIONS = ("env", "reward", "verifier", "sac", "her", "training", "wandb")

EVAL_REWARD_LABELS = {
    "sparse": "sparse success reward (1 per step at the goal, else 0), summed",
    "env": "the environment's own reward, summed",
}
"""What ``eval/mean_reward`` sums, by the evaluation environment's reward (never the verifier's).
No label says "true": the training episodes' ``rollout/ep_env_rew_mean`` is the environment's
own reward (FetchReach: -1 per step away from the goal), another scale than the sparse one."""


def eval_reward_label(kind: str) -> str:
    """The :data:`EVAL_REWARD_LABELS` entry of ``kind``; a kind without one (a plugin's): its name."""
    return EVAL_REWARD_LABELS.get(kind, f"{kind} reward, summed")


@dataclass(frozen=True)
class EnvConfig:
    """The environment (YAML section ``env:``)."""

    id: str = "FetchReach-v4"
    """Gymnasium id; Fetch tasks come from Gymnasium-Robotics (``FetchReach-v4``, ``FetchPush-v4``, ``FetchReachDense-v4``)."""
    reward: str = "verifier"
    """A kind of :data:`densereward.envs.SAC_REWARDS` (a plugin may add more): ``env``: the
    registered reward; ``sparse``: 1 on success else 0; ``verifier``: verifier progress."""
    base: str = "sparse"
    """For ``reward: verifier`` / ``distilled``: the kind the shaping term is added to / mixed
    with (``sparse``, ``env`` or a plugin's)."""
    reward_options: Any = None
    """The reward kind's own parameters (``{...}``), validated when the config is read into the
    options dataclass of the kind that builds the reward (``reward``'s, or ``base``'s under
    ``verifier`` / ``distilled``; :class:`~densereward.envs.kinds.SACRewardKind`); this field then
    holds that instance. The built-in kinds take none."""
    reward_model: str | None = None
    """For ``reward: distilled``: the reward model directory ``densereward distill`` wrote; its
    potential shapes the base reward (``F = gamma * Phi(s') - Phi(s)``, gamma = ``sac.gamma``)
    at every step, with no verifier call."""
    n_envs: int = 2
    """Environments stepped together; the verifier scores all due states in one batched call a
    step (a second one scores the first states of the episodes that reset at that step)."""
    task: str | None = None
    """Task text for describers that need one (the generic ``box`` describer)."""
    describer: str | None = None
    """For ``reward: verifier``: a name in :data:`densereward.envs.DESCRIBERS` (``fetch``,
    ``box`` or a plugin's); ``None`` = the describer whose ``env_ids`` match ``id``."""
    normalize_obs: bool = False
    """Wrap the vector env in ``VecNormalize(norm_obs=True, norm_reward=False)``: running
    mean/std normalisation of the policy's observations (and goals), clipped to +-``clip_obs``,
    as in the HER paper and the RL Zoo's Fetch settings. Rewards, the verifier and the success
    metric see the raw observations; the statistics are saved with every checkpoint and the
    final model (``vecnormalize.pkl``) and restored by ``--resume``."""
    clip_obs: float = 5.0
    """Clip of the normalised observations (``normalize_obs`` only; HER paper: 5)."""
    render_size: int | None = None
    """Side in pixels of the frames rendered for the verifier (``width`` = ``height`` passed to
    ``gym.make``; ``reward: verifier`` with ``reward.render_frames`` only); ``null`` = the
    environment's default (Fetch: 480). A FetchReach frame took 26 ms at 480 and 12 ms at 128
    (software EGL on the 2-core x86_64 CPU at load 1.7, ``benchmarks/render_cost.py``;
    ``docs/robot_frames.md``); the verifier shrinks frames to its own
    ``verifier.frames.max_side`` anyway."""

    def __post_init__(self) -> None:
        from densereward.envs.kinds import (
            DESCRIBERS,
            check_sac_reward,
            reward_options,
            sac_reward_kind,
        )

        check_sac_reward(self.reward, self.base)
        kind = sac_reward_kind(self.reward)
        if kind.check_config is not None:  # distilled: env.reward_model
            kind.check_config(self)
        options = reward_options(self.reward, self.base, self.reward_options)
        object.__setattr__(self, "reward_options", options)
        if self.describer is not None:
            try:
                DESCRIBERS.check(self.describer)
            except ConfigError as e:
                raise ConfigError(f"env.describer: {e}") from None
        if self.n_envs < 1:
            raise ConfigError(f"env.n_envs must be >= 1, got {self.n_envs}")
        if not self.clip_obs > 0:
            raise ConfigError(f"env.clip_obs must be > 0, got {self.clip_obs}")
        if self.render_size is not None and not 16 <= self.render_size <= 4096:
            raise ConfigError(
                f"env.render_size must be in [16, 4096] or null, got {self.render_size}"
            )


@dataclass(frozen=True)
class TrainingConfig:
    """The run (YAML section ``training:``)."""

    total_timesteps: int = 20_000
    """Environment steps in total (summed over ``n_envs``), including those before a resume."""
    seed: int = 0
    """Seed of SAC, the environments (env ``i`` gets ``seed + i``) and the verifier."""
    output_dir: str = "runs/sac"
    """Root of run directories (one per run, ``<output_dir>/<run_name or timestamp>``)."""
    run_name: str | None = None
    """Name of the run directory; ``None`` = a timestamp."""
    log_interval: int = 4
    """Episodes between SB3 log dumps (``logs/progress.csv`` and W&B)."""
    curve_every: int = 500
    """Environment steps between points of the training-episode success-rate curve (``train_curve.jsonl``)."""
    eval_every: int = 1000
    """Environment steps between deterministic evaluations on a separate environment (also at
    step 0 of a fresh run and at the end); their success rate is the learning curve
    (``eval_curve.jsonl``, the summary's ``curve``) that ``densereward compare`` reads. 0 = no evaluation: the curve is then
    the success rate of the training episodes."""
    eval_episodes: int = 10
    """Episodes per evaluation (deterministic actions, split over ``env.n_envs`` evaluation environments)."""
    checkpoint_every: int = 5_000
    """Environment steps between checkpoints (model and replay buffer); 0 disables them."""
    metrics_window: int = 100
    """Episodes in the windows of ``verifier/*`` and ``rollout/*`` means."""
    device: str = "cpu"
    """Torch device of SAC: ``cpu``, ``cuda``, ``auto``."""
    torch_threads: int | None = None
    """CPU threads of torch (SAC and a local verifier); ``None`` = torch's default. On a small
    shared CPU, 1 avoids oversubscription (measured 5-10x faster verifier calls on 2 busy cores)."""
    verbose: int = 0
    """SB3 verbosity (1 also prints the log table to stdout)."""

    def __post_init__(self) -> None:
        if self.total_timesteps < 1:
            raise ConfigError(f"training.total_timesteps must be >= 1, got {self.total_timesteps}")
        if self.log_interval < 1 or self.curve_every < 1 or self.metrics_window < 1:
            raise ConfigError("training.log_interval, curve_every and metrics_window must be >= 1")
        if self.eval_every < 0 or self.eval_episodes < 1:
            raise ConfigError(
                f"training.eval_every must be >= 0 (0 = off) and eval_episodes >= 1, got "
                f"{self.eval_every} and {self.eval_episodes}"
            )
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError(
                f"training.torch_threads must be >= 1 or null, got {self.torch_threads}"
            )
        if self.checkpoint_every < 0:
            raise ConfigError(
                f"training.checkpoint_every must be >= 0, got {self.checkpoint_every}"
            )


@dataclass(frozen=True)
class SACRunConfig:
    """All sections of a SAC config file."""

    env: EnvConfig = field(default_factory=EnvConfig)
    reward: ProgressRewardConfig = field(default_factory=ProgressRewardConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    sac: dict[str, Any] = field(default_factory=dict)
    her: dict[str, Any] | None = None
    wandb: WandbConfig = field(default_factory=WandbConfig)


_SET_BY_TRAINER = ("policy", "env", "seed", "device", "verbose")
"""``SAC`` arguments the trainer sets itself (from ``env``, ``training``)."""


def _check_sac_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Reject keys of section ``sac`` that ``stable_baselines3.SAC`` would reject, and values of
    the wrong type or range (:func:`~densereward.sections.check_passthrough_values`: a float
    takes a finite number, ``gamma`` and ``tau`` one in [0, 1]), before any run starts (a
    comparison would otherwise fail only when that condition's first run begins;
    ``sac.learning_rate=abc`` was an AssertionError inside SB3, ``sac.gamma=nan`` a TypeError).

    Returns:
        ``kwargs``, numeric strings of numeric arguments converted.
    """
    import inspect

    try:
        from stable_baselines3 import SAC
    except ImportError:  # the run itself reports the missing extra
        return dict(kwargs)
    allowed = set(inspect.signature(SAC.__init__).parameters) - {"self", *_SET_BY_TRAINER}
    for key in kwargs:
        if key in _SET_BY_TRAINER:
            raise ConfigError(
                f"sac.{key} is set by the trainer; use "
                + {
                    "policy": "the observation space (automatic)",
                    "env": "env.id",
                    "seed": "training.seed",
                    "device": "training.device",
                    "verbose": "training.verbose",
                }[key]
            )
        if key not in allowed:
            raise ConfigError(
                f"unknown key {unknown_key_hints([key], allowed, prefix='sac.')}; section 'sac' "
                "takes the arguments of stable_baselines3.SAC"
            )
    return check_passthrough_values(
        kwargs,
        {n: p.annotation for n, p in inspect.signature(SAC.__init__).parameters.items()},
        prefix="sac.",
        owner="stable_baselines3.SAC",
        ranges={"learning_rate": (0, None), "gamma": (0, 1), "tau": (0, 1)},
    )


def _section_fields() -> dict[str, Any]:
    """Section -> its field names, for the unknown-section hints (evaluated only on error)."""
    import inspect

    def init_args(qualname: str) -> list[str]:
        import importlib

        module, name = qualname.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    classes = {"env": EnvConfig, "reward": ProgressRewardConfig, "verifier": VerifierConfig}
    out: dict[str, Any] = {k: (lambda c=c: field_names(c)) for k, c in classes.items()}
    out["sac"] = lambda: [a for a in init_args("stable_baselines3.SAC") if a not in _SET_BY_TRAINER]
    out["her"] = lambda: init_args("stable_baselines3.HerReplayBuffer")
    out["training"] = lambda: field_names(TrainingConfig)
    out["wandb"] = lambda: field_names(WandbConfig)
    return out


def parse_config(config: dict[str, Any]) -> SACRunConfig:
    """Validate a config dict into :class:`SACRunConfig`.

    Raises:
        ConfigError: on unknown sections/keys or invalid values.
    """
    check_sections(config, _section_fields(), command="train sac")
    refuse_old_keys(config)
    for name in ("sac", "her"):
        if config.get(name) is not None and not isinstance(config[name], dict):
            raise ConfigError(f"section {name!r} must be a mapping")
    sac = _check_sac_kwargs(config.get("sac") or {})
    cfg = SACRunConfig(
        env=from_dict(EnvConfig, config.get("env"), prefix="env."),
        reward=from_dict(ProgressRewardConfig, config.get("reward"), prefix="reward."),
        verifier=from_dict(VerifierConfig, config.get("verifier"), prefix="verifier."),
        training=from_dict(TrainingConfig, config.get("training"), prefix="training."),
        sac=sac,
        her=config.get("her"),
        wandb=WandbConfig.from_section(config.get("wandb")),
    )
    if cfg.her is not None and cfg.env.reward == "verifier":
        raise ConfigError(
            "her: HER recomputes rewards from goals and would discard the verifier reward; set her: null"
        )
    return cfg
