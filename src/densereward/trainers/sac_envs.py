"""The SAC run's environments: the training one (with the verifier reward, frames rendered for
the verifier when ``reward.render_frames``) and the evaluation one, which never renders.

:func:`build_envs` is step 2 of :func:`densereward.trainers.sac.run`; :func:`env_spec` checks
an id before anything is created, and :func:`check_reward_kind` (the dry run) builds and steps
one environment with the configured reward kind.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from densereward.errors import ConfigError

from .sac_config import EVAL_SEED_OFFSET, SACRunConfig

__all__ = [
    "eval_reward",
    "env_spec",
    "check_reward_kind",
    "render_kwargs",
    "build_envs",
    "drop_unstarted",
    "reward_model_stats",
    "episodes_by",
    "parse_episode",
]


def eval_reward(cfg: SACRunConfig) -> str:
    """The evaluation environment's reward kind: the run's base reward for the verifier reward."""
    from densereward.envs.kinds import sac_reward_kind

    return cfg.env.base if sac_reward_kind(cfg.env.reward).shapes_base else cfg.env.reward


def env_spec(env_id: str) -> Any:
    """The registered spec of ``env_id`` (Gymnasium-Robotics registered first). Gymnasium's
    ``"module:Id"`` form (``myreach:Reach1D-v0``) imports ``module`` first, which registers
    ``Id``, as ``gymnasium.make`` does; the spec is ``Id``'s.

    Raises:
        ConfigError: for a module that cannot be imported (naming it), or an id that is not
            registered (:func:`~densereward.envs.require_registered`: close ids, of the
            module's own ids for the ``"module:Id"`` form).
    """
    import gymnasium as gym

    from densereward import envs

    envs.register_robotics()
    try:
        # a plain id goes to Gymnasium first: its messages for a missing or deprecated
        # version name the one to use; an unknown name gets close ids and the own-env fix
        name = envs.require_registered(env_id) if ":" in env_id else env_id
        try:
            return gym.spec(name)
        except gym.error.NameNotFound:
            envs.require_registered(env_id)  # raises: close ids + the 'module:Id' fix
            raise
    except ConfigError as exc:
        raise ConfigError(f"env.id: {exc}") from None
    except gym.error.Error as exc:
        raise ConfigError(f"env.id={env_id!r}: {exc}") from None


def check_reward_kind(cfg: SACRunConfig) -> str:
    """Build and step one environment with the reward kind(s) ``env.reward`` / ``env.base``
    name (a plugin's builder is imported and called here, not at the run's first step).

    Returns:
        The dry run's line; it says so when the step's ``info`` has no ``is_success`` (the
        run's success-rate metrics are then off, and which curve it reports instead).

    Raises:
        ConfigError: for a kind that cannot load, or one whose builder or first step fails
            (e.g. ``sparse`` on an environment without ``is_success``).
    """
    from densereward import envs

    kind = cfg.env.base if cfg.env.reward == "verifier" else cfg.env.reward
    envs.SAC_REWARDS.load(cfg.env.reward)  # ConfigError naming the entry that cannot load
    try:
        env = envs.make_env(
            cfg.env.id,
            reward=kind,
            base=cfg.env.base,
            monitor=False,
            reward_model=cfg.env.reward_model,
            reward_options=cfg.env.reward_options,
            gamma=float(cfg.sac.get("gamma", 0.99)),
        )
        try:
            env.reset(seed=cfg.training.seed)
            info = env.step(env.action_space.sample())[4]
        finally:
            env.close()
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a plugin's builder: report it as the config's
        raise ConfigError(
            f"env reward kind {kind!r} failed on {cfg.env.id}: {type(e).__name__}: {e}"
        ) from e
    on = f" on base {kind!r}" if cfg.env.reward == "verifier" else ""
    line = f"reward: {cfg.env.reward!r}{on} built and stepped once"
    if envs.SUCCESS_KEY not in info:
        curve = "eval/mean_reward" if cfg.training.eval_every else "rollout/ep_env_rew_mean"
        line += (
            f"; its step info has no 'is_success': success-rate metrics off, the learning "
            f"curve is {curve}"
        )
    return line


def render_kwargs(cfg: SACRunConfig) -> dict[str, Any]:
    """``gym.make`` arguments of the training environments: ``render_mode="rgb_array"`` (and
    ``width`` = ``height`` = ``env.render_size`` when set) when the verifier reads frames
    (``env.reward: verifier`` with ``reward.render_frames``), else none. Rendering picks
    MuJoCo's offscreen EGL backend on a headless machine unless ``MUJOCO_GL`` is set
    (:func:`densereward.envs.registration.headless_gl`)."""
    if cfg.env.reward != "verifier" or not cfg.reward.render_frames:
        return {}
    out: dict[str, Any] = {"render_mode": "rgb_array"}
    if cfg.env.render_size is not None:
        out.update(width=cfg.env.render_size, height=cfg.env.render_size)
    return out


def build_envs(
    cfg: SACRunConfig,
    *,
    progress_fn: Any,
    gamma: float,
    monitor_dir: str | os.PathLike[str] | None,
) -> tuple[Any, Any]:
    """The training and evaluation vector environments of a run.

    Training: ``VecMonitor(VecVerifierProgressReward(DummyVecEnv([...])))`` for the verifier
    reward (rendering ``rgb_array`` frames of the scored states when ``reward.render_frames``),
    ``VecMonitor(DummyVecEnv([...]))`` otherwise; seeds ``training.seed + i``.

    Evaluation (``training.eval_every > 0``, else ``None``): same id and observation wrappers,
    made without ``render_mode`` and without the verifier wrapper, so it never renders and
    never calls the verifier; its reward is :func:`eval_reward`; seeds
    ``training.seed + EVAL_SEED_OFFSET + i``; inside ``VecNormalize(training=False)`` when
    ``env.normalize_obs`` (the trainer copies the training statistics before each evaluation).

    Args:
        cfg: the parsed run configuration.
        progress_fn: the verifier's progress function (``None`` unless ``env.reward: verifier``).
        gamma: the agent's discount (shaping, and ``VecNormalize``'s return statistics).
        monitor_dir: where the training ``VecMonitor`` writes ``monitor.csv``.

    Raises:
        ConfigError: from :func:`densereward.envs.make_vec_env` (unknown id, frames from an
            environment that cannot render them, a verifier that cannot read frames, ...).
    """
    from stable_baselines3.common.vec_env import VecNormalize

    from densereward import envs

    verifier_reward = cfg.env.reward == "verifier"
    venv = envs.make_vec_env(
        cfg.env.id,
        cfg.env.n_envs,
        seed=cfg.training.seed,
        reward=cfg.env.reward,
        base=cfg.env.base,
        progress_fn=progress_fn,
        describer=envs.default_describer(cfg.env.id, cfg.env.task, name=cfg.env.describer)
        if verifier_reward
        else None,
        reward_config=cfg.reward,
        gamma=gamma,
        monitor_dir=monitor_dir,
        reward_model=cfg.env.reward_model,
        reward_options=cfg.env.reward_options,
        **render_kwargs(cfg),
    )
    if not cfg.training.eval_every:
        return venv, None
    eval_venv = envs.make_vec_env(  # no render_mode, no verifier: never renders for it
        cfg.env.id,
        cfg.env.n_envs,
        seed=cfg.training.seed + EVAL_SEED_OFFSET,
        reward=eval_reward(cfg),
        reward_options=cfg.env.reward_options,  # the base kind's under the shaping
    )
    if cfg.env.normalize_obs:  # statistics copied from training before every evaluation
        eval_venv = VecNormalize(
            eval_venv,
            training=False,
            norm_obs=True,
            norm_reward=False,
            clip_obs=cfg.env.clip_obs,
            gamma=gamma,
        )
    return venv, eval_venv


def reward_model_stats(venv: Any, steps: int) -> dict[str, Any]:
    """Calls and seconds of the distilled reward model over the training environments."""
    from densereward.wrappers import RewardModelShaping

    calls = seconds = 0.0
    for env in getattr(venv.unwrapped, "envs", []):
        while env is not None:
            if isinstance(env, RewardModelShaping):
                calls, seconds = calls + env.n_calls, seconds + env.seconds
                break
            env = getattr(env, "env", None)
    return {
        "reward_model_calls": int(calls),
        "reward_model_seconds": seconds,
        "reward_model_seconds_per_step": seconds / steps if steps else None,
    }


def drop_unstarted(run_dir: Path, created: bool, verifier: Any) -> None:
    """A start refused before training (its environments, ``stable_baselines3.SAC`` refusing
    its arguments, a checkpoint that does not load) leaves no half-made run directory: the one
    it created is removed, as docs/configuration.md promises; the verifier is closed."""
    if created:
        shutil.rmtree(run_dir, ignore_errors=True)
    if verifier is not None and hasattr(verifier, "close"):
        verifier.close()


def episodes_by(monitor_csv: Path, steps: int) -> tuple[float | None, list[dict[str, str]], int]:
    """The episodes of an SB3 ``monitor.csv`` that ended by environment step ``steps``.

    For ``--resume`` from the checkpoint at ``steps``: SB3's ``VecMonitor`` reopens the file,
    so the trainer writes these back into the new one. Rows are in the order the episodes
    ended, those of all environments interleaved, and ``l`` (the episode's length) adds up to
    the environment steps summed over environments, as SB3's ``num_timesteps`` counts them, so
    the rows are kept while the running sum of ``l`` is at most ``steps`` (exact for one
    environment and for environments whose episodes end together). A torn last row (a run
    killed while writing it) is left out.

    Returns:
        ``(t_start, rows, n_rows)``: the file's ``t_start`` (seconds since the epoch; ``None`` with no
        file or no header) and the kept rows as written (``r``, ``l``, ``t``: seconds since
        ``t_start``, and the info keywords such as ``is_success``; text, :func:`parse_episode`
        reads them), and how many episode rows the file held in all.
    """
    import csv
    import json

    if not monitor_csv.is_file():
        return None, [], 0
    with open(monitor_csv, newline="", encoding="utf-8") as f:
        first = f.readline()
        try:
            t_start = float(json.loads(first[1:])["t_start"]) if first.startswith("#") else None
        except (ValueError, KeyError, TypeError):
            t_start = None
        rows = list(csv.DictReader(f))
    kept: list[dict[str, str]] = []
    total = 0
    for row in rows:
        try:
            total += int(parse_episode(row)["l"])
        except (KeyError, TypeError, ValueError):
            break  # a torn last row
        if total > steps:
            break
        kept.append({k: v for k, v in row.items() if k is not None})
    return t_start, kept, len(rows)


PROGRESS_STEP = "time/total_timesteps"
"""The column of SB3's ``logs/progress.csv`` that gives each dump's environment step."""


def progress_rows_by(progress_csv: Path, steps: int) -> tuple[list[str], list[list[str]], int]:
    """The rows of an SB3 ``logs/progress.csv`` dumped by environment step ``steps``.

    For ``--resume`` from the checkpoint at ``steps``: SB3's CSV logger opens the file anew
    (mode ``w+``), so the trainer writes these back first (:func:`write_progress_back`). A row
    is kept while its :data:`PROGRESS_STEP` is at most ``steps``; a torn last row (a run
    killed while writing it) and the rows after it are left out.

    Returns:
        ``(header, rows, n_rows)``: the column names, the kept rows as written (text), and how
        many rows the file held in all; ``([], [], 0)`` with no file or no step column.
    """
    import csv

    if not progress_csv.is_file():
        return [], [], 0
    with open(progress_csv, newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    if not table or PROGRESS_STEP not in table[0]:
        return [], [], max(len(table) - 1, 0)
    header, rows = table[0], table[1:]
    col = header.index(PROGRESS_STEP)
    kept: list[list[str]] = []
    for row in rows:
        try:
            if len(row) != len(header) or float(row[col]) > steps:
                break
        except ValueError:
            break
        kept.append(row)
    return header, kept, len(rows)


def write_progress_back(csv_format: Any, header: list[str], rows: list[list[str]]) -> None:
    """Write ``header`` and ``rows`` (:func:`progress_rows_by`'s) first into the file a new
    SB3 ``CSVOutputFormat`` just opened; the new run's dumps follow under the same columns
    (SB3 adds a column for a key it has not seen and pads the earlier rows)."""
    import csv

    if not header:
        return
    csv_format.keys = list(header)
    writer = csv.writer(csv_format.file, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    csv_format.file.flush()


def parse_episode(row: dict[str, str]) -> dict[str, Any]:
    """A ``monitor.csv`` row as SB3's ``info["episode"]`` holds it: ``{"r": float, "l": int,
    "t": float}`` and ``is_success`` (a bool, where recorded; ``True``/``False`` or
    ``1.0``/``0.0`` in the file).

    Raises:
        ValueError, KeyError, TypeError: on a row that is not one (a torn line).
    """
    ep: dict[str, Any] = {"r": float(row["r"]), "l": int(row["l"]), "t": float(row["t"])}
    success = row.get("is_success")
    if success not in (None, ""):
        ep["is_success"] = success == "True" or (success != "False" and float(success) > 0)
    return ep
