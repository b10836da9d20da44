"""SAC on robot environments with a sparse, dense or verifier-progress reward.

Read top to bottom (CleanRL style): config -> verifier -> environments -> SAC -> logging
and callbacks -> learn -> summary. Also ``densereward train sac --config ...``::

    python trainers/sac.py --config configs/sac_fetchreach_verifier.yaml training.total_timesteps=2000
    python trainers/sac.py --config configs/sac_fetchreach_verifier.yaml --output-dir runs/sac/x --resume

YAML sections map one-to-one onto dataclasses (unknown keys are errors):
``env`` -> :class:`EnvConfig`, ``reward`` -> :class:`densereward.wrappers.ProgressRewardConfig`,
``verifier`` -> :class:`densereward.config.VerifierConfig`, ``training`` -> :class:`TrainingConfig`,
``wandb`` -> :class:`densereward.wandb_config.WandbConfig` (the same section as GRPO's);
``sac`` is passed through to ``stable_baselines3.SAC`` and ``her`` (optional) to
``HerReplayBuffer`` as ``replay_buffer_kwargs``.

A run directory holds ``config.yaml``, ``logs/progress.csv`` (every SB3 key, including
``verifier/*``, ``rollout/*`` and ``eval/*``), ``eval_curve.jsonl`` (success rate of
deterministic evaluation episodes vs environment steps: the learning curve),
``train_curve.jsonl`` (success rate of the training episodes; without ``info["is_success"]``
their mean return of the environment's own reward; each row's ``metric`` says which), ``verifier_dynamics.jsonl``
(``rollout/ep_env_rew_mean`` and the ``verifier/*`` metrics at each episode end),
``training_curves.png`` (all of them against the step, :mod:`densereward.trainers.sac_plots`),
``checkpoints/`` (model + replay buffer + the verifier window's state + the run's wall time
up to it), ``final_model.zip``, ``summary.json`` and the
offline W&B run.

A new run in a directory that a stopped start left (no checkpoint, no ``summary.json``)
replaces that start's :data:`RUN_FILES` (the dry run names them); ``--resume`` drops the rows
of :data:`CURVE_FILES` written after its checkpoint, writes the episodes of ``monitor.csv``
that ended by it and the ``logs/progress.csv`` dumps logged by it back into the files SB3
reopens, and continues SB3's ``rollout/*`` windows and
the training curve's window and ``n_episodes_total`` from them (:func:`_continue_episodes`),
and ``verifier_dynamics.jsonl``'s window and ``auto`` threshold from the checkpoint's
:data:`DYNAMICS_STATE` (:func:`_continue_dynamics`), and ``summary.json``'s wall time from its
:data:`WALL_STATE` (:class:`_RunClock`).
A run stopped while training (Ctrl-C, or SIGTERM in ``densereward train sac``) raises
:class:`densereward.errors.Interrupted` saying what it left; checkpoints are written whole or
not at all.

Evaluation (``training.eval_every``, ``training.eval_episodes``) runs on its own vectorised
environment, built like the training one (same id, ``VecMonitor``, ``VecNormalize`` with the
training statistics frozen) but without the verifier wrapper: its reward is the sparse
success indicator, or the environment's reward when that is the run's (base) reward, and
its seeds are ``training.seed + 10_000 + i``. Its ``eval/mean_reward`` is that reward summed
over an episode (``eval/reward`` and the summary's ``eval_reward`` say which), beside
``eval/success_rate``, the fraction of episodes that end at the goal.

The accept threshold of ``verifier/tpr`` and ``verifier/tnr`` is ``verifier.threshold``: with
``auto``, Youden's J on the final progress of the earlier episodes against their success, as
GRPO and eval-verifier calibrate it (0.5, logged, until a success and a failure were seen;
:class:`densereward.callbacks.VerifierDynamicsCallback`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from densereward.config_files import (
    add_override_arguments,
    apply_overrides,
    load_yaml,
    overrides_from,
    parse_command_line,
)
from densereward.errors import ConfigError, DenseRewardError, Interrupted, command_finished
from densereward.io import (
    atomic_write_json,
    atomic_write_text,
    check_run_dir,
    drop_rows_after,
    read_jsonl,
    replace_earlier_files,
    reuse_words,
    rows_after,
    wandb_run_id,
)

from ..backend_options import loads_model
from ..wandb_config import WandbService, describe_wandb, wandb_environment
from .checks import check_model, check_verifier_server, print_dry_run, verifier_reads_images
from .sac_config import (  # noqa: F401  (re-exported: the config is part of this trainer's API)
    EVAL_REWARD_LABELS,
    EVAL_SEED_OFFSET,
    SECTIONS,
    EnvConfig,
    SACRunConfig,
    TrainingConfig,
    eval_reward_label,
    parse_config,
)
from .sac_envs import (
    build_envs,
    check_reward_kind,
    env_spec,
    episodes_by,
    parse_episode,
    progress_rows_by,
    render_kwargs,
    reward_model_stats,
    write_progress_back,
)
from .sac_envs import eval_reward as _eval_reward

logger = logging.getLogger(__name__)


def _learning_starts_problem(cfg: SACRunConfig) -> str | None:
    """The message when SAC would make no gradient step in the run, else ``None``.

    SB3's SAC trains once ``num_timesteps > learning_starts`` (default 100); with
    ``learning_starts >= total_timesteps`` it only collects random actions.
    """
    import inspect

    starts = cfg.sac.get("learning_starts")
    if starts is None:
        try:
            from stable_baselines3 import SAC
        except ImportError:  # the run itself reports the missing extra
            return None
        starts = inspect.signature(SAC.__init__).parameters["learning_starts"].default
    total = cfg.training.total_timesteps
    if int(starts) < total:
        return None
    return (
        f"sac.learning_starts={starts} >= training.total_timesteps={total}: SAC acts at random "
        f"for its first {starts} environment steps and makes no gradient step in this run, so "
        f"the policy stays untrained; fix: sac.learning_starts={total // 4} (below "
        f"total_timesteps) or training.total_timesteps above {starts}"
    )


def eval_curve_source(cfg: SACRunConfig) -> str:
    """The evaluation curve's ``curve_source``: how its points were measured, in words (the
    training VecNormalize statistics are named only where ``env.normalize_obs`` made one)."""
    tc = cfg.training
    frozen = " with the training VecNormalize statistics frozen" if cfg.env.normalize_obs else ""
    return (
        f"deterministic evaluation: {tc.eval_episodes} episodes every {tc.eval_every} "
        f"environment steps (and at 0 and the end) on a separate environment{frozen}, "
        "no verifier calls"
    )


def _metrics_window_problem(cfg: SACRunConfig) -> str | None:
    """The message when ``training.metrics_window`` can never hold the episodes the verifier's
    rates need (:data:`densereward.callbacks.MIN_EPISODES` of a class; balanced accuracy needs
    that many of both classes at once), else ``None``."""
    from densereward.callbacks import MIN_EPISODES

    window = cfg.training.metrics_window
    if cfg.env.reward != "verifier" or window >= 2 * MIN_EPISODES:
        return None
    if window >= MIN_EPISODES:  # one class fits, both at once do not
        return (
            f"training.metrics_window={window} < {2 * MIN_EPISODES}: "
            f"verifier/balanced_accuracy needs {MIN_EPISODES} successful and {MIN_EPISODES} "
            f"failed episodes in one window, so it can never be defined in this run (null, "
            f"summary.json's undefined says why; verifier/tpr and verifier/tnr can, each on "
            f"its own); fix: training.metrics_window={2 * MIN_EPISODES} or more"
        )
    return (
        f"training.metrics_window={window} < {MIN_EPISODES}: verifier/tpr, verifier/tnr, "
        f"verifier/balanced_accuracy, verifier/voc and verifier/voc_success need "
        f"{MIN_EPISODES} episodes of a class in the window, so they can never be defined in "
        f"this run (null, summary.json's undefined says why); fix: "
        f"training.metrics_window={MIN_EPISODES} or more"
    )


def _continue_episodes(
    model: Any, curve_cb: Any, episodes: list[dict[str, Any]], *, env_return: bool
) -> None:
    """Continue a resumed run's episode windows from the episodes that ended by its checkpoint.

    SB3 saves no ``ep_info_buffer`` / ``ep_success_buffer`` in the model zip, so they (the
    ``rollout/*`` of its log) and the training curve's window would start empty, and the
    curve's ``n_episodes_total`` at zero, at the resume step.

    Args:
        model: the loaded SAC model; its buffers are refilled with the last
            ``stats_window_size`` of ``episodes`` (``learn(reset_num_timesteps=False)`` keeps them).
        curve_cb: the run's :class:`~densereward.callbacks.LearningCurveCallback`.
        episodes: :func:`~densereward.trainers.sac_envs.parse_episode` of the kept
            ``monitor.csv`` rows, oldest first.
        env_return: the monitor's ``r`` is the environment's own reward (no shaping, no
            learned reward), so a curve without ``is_success`` can refill its window of returns;
            otherwise that window starts empty (its count goes on).
    """
    from collections import deque

    size = getattr(model, "_stats_window_size", 100)
    model.ep_info_buffer = deque(episodes[-size:], maxlen=size)
    model.ep_success_buffer = deque(
        [e["is_success"] for e in episodes if "is_success" in e][-size:], maxlen=size
    )
    if curve_cb.success:
        judged = [e for e in episodes if "is_success" in e]  # as the callback counts them
        curve_cb.continue_from((float(e["is_success"]) for e in judged), len(judged))
    else:
        curve_cb.continue_from((e["r"] for e in episodes) if env_return else (), len(episodes))


def _write_back(
    monitor: Any, t_start: float | None, rows: list[dict[str, str]]
) -> list[dict[str, str]]:
    """Write ``rows`` of the stopped run's ``monitor.csv`` first into the file the new
    ``VecMonitor`` (``monitor``) just opened; returns them.

    ``rows`` and ``t_start`` are :func:`~densereward.trainers.sac_envs.episodes_by`'s.

    ``t`` (seconds since the file's ``t_start``) is rebased to the new file's ``t_start``, so
    the kept episodes, which ended before it, have a negative ``t``; without the old
    ``t_start`` it is written as it was.
    """
    writer = getattr(monitor, "results_writer", None)
    if writer is None:  # no monitor file
        return rows
    names = writer.logger.fieldnames
    shift = 0.0 if t_start is None else t_start - monitor.t_start
    for row in rows:
        out = {k: v for k, v in row.items() if k in names}
        out["t"] = round(float(row["t"]) + shift, 6)
        writer.write_row(out)
    return rows


def _verifier_reward(cfg: SACRunConfig) -> str:
    """The verifier reward the agent trains on, in words (``"env reward + verifier shaping"``)."""
    base = {"sparse": "sparse success", "env": "env reward"}.get(cfg.env.base, cfg.env.base)
    a = cfg.reward.alpha
    return {
        "shaping": f"{base} + verifier shaping",
        "progress": "verifier progress",
        "mixture": f"{a:g} {base} + {1 - a:g} verifier progress",
    }[cfg.reward.mode]


ENV_RETURN_LABEL = (
    "the environment's own reward (info['true_reward']: no verifier shaping), summed over a "
    "training episode"
)
"""What ``value`` of ``train_curve.jsonl`` is when the environment reports no success."""


def _plot(cfg: SACRunConfig, run_dir: Path, threshold_source: str, success: bool) -> Path | None:
    """Write ``training_curves.png`` (:func:`~densereward.trainers.sac_plots.plot_sac_run`)."""
    try:
        from .sac_plots import plot_sac_run
    except ImportError:  # matplotlib is not a dependency of SB3
        logger.warning("no training_curves.png: pip install 'densereward[plots]' for matplotlib")
        return None
    verifier = cfg.env.reward == "verifier"
    training = _verifier_reward(cfg)
    return plot_sac_run(
        run_dir,
        eval_reward=eval_reward_label(_eval_reward(cfg)),
        training_reward=training if verifier else None,
        threshold_source=threshold_source if verifier else None,
        title=f"SAC on {cfg.env.id}: reward {training if verifier else cfg.env.reward}",
        success=success,
    )


def _checkpoint_models(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """``(steps, model zip)`` of every checkpoint in ``ckpt_dir``, fewest steps first."""
    found = []
    for p in ckpt_dir.glob("sac_*_steps.zip"):
        m = re.fullmatch(r"sac_(\d+)_steps\.zip", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def _check_run_dir(run_dir: Path, resume: bool, total_timesteps: int | None = None) -> str:
    """:func:`densereward.io.check_run_dir` with SAC's layout (``checkpoints/``, ``summary.json``).

    Raises:
        ConfigError: also for ``--resume`` of a finished run (``summary.json``) whose newest
            checkpoint already holds ``total_timesteps``: it would train nothing and rewrite
            the summary with a zero-step start's counts; the message names the fix (a larger
            ``--total-timesteps``), and for ``--resume`` of a stopped run whose newest
            checkpoint is beyond ``total_timesteps`` (it would train nothing and write a
            summary that marks the stopped run finished at the checkpoint's step).
    """
    found = _checkpoint_models(run_dir / "checkpoints")
    state = check_run_dir(
        run_dir,
        resume=resume,
        checkpoints=[p for _, p in found],
        finished=run_dir / "summary.json",
    )
    if state == "resume" and total_timesteps is not None and (run_dir / "summary.json").is_file():
        steps, model = found[-1]
        if steps >= total_timesteps:
            raise ConfigError(
                f"--resume: {run_dir} holds a finished run (summary.json) whose newest checkpoint "
                f"{model.name} is at step {steps}, and training.total_timesteps={total_timesteps}: "
                f"there is nothing to train; fix: --total-timesteps above {steps} (e.g. "
                f"{2 * steps}) to continue it"
            )
    if state == "resume" and total_timesteps is not None and found[-1][0] > total_timesteps:
        steps, model = found[-1]
        raise ConfigError(
            f"--resume: the newest checkpoint of {run_dir}, {model.name}, is at step {steps}, "
            f"beyond training.total_timesteps={total_timesteps}: there is nothing to train, and "
            f"the run would be marked finished at step {steps}; fix: --total-timesteps {steps} "
            "or more (the budget the stopped run was given, in its config.yaml)"
        )
    return state


def _latest_checkpoint(ckpt_dir: Path) -> tuple[Path, Path | None, Path | None] | None:
    """(model zip, replay buffer pkl or None, VecNormalize pkl or None) of the checkpoint
    with the most steps."""
    found = _checkpoint_models(ckpt_dir)
    if not found:
        return None
    steps, model = found[-1]
    buf = ckpt_dir / f"sac_replay_buffer_{steps}_steps.pkl"
    norm = ckpt_dir / f"sac_vecnormalize_{steps}_steps.pkl"
    return model, (buf if buf.is_file() else None), (norm if norm.is_file() else None)


PROGRESS_CSV = "logs/progress.csv"
"""SB3's CSV log of every dumped key (``time/total_timesteps`` gives each row's step)."""

RUN_FILES = (
    "eval_curve.jsonl",
    "train_curve.jsonl",
    "verifier_dynamics.jsonl",
    "monitor.csv",
    PROGRESS_CSV,
    "training_curves.png",
    "final_model.zip",
    "vecnormalize.pkl",
    "wandb_id.txt",
)
"""The files a run writes in its run directory beside ``config.yaml``, ``checkpoints/`` and
``summary.json``. A new run in a directory that a stopped start left (no checkpoint, no
summary) replaces them, as SB3 replaces its own ``progress.csv`` and ``monitor.csv``: the
append-only curves would otherwise mix the two runs, and ``wandb_id.txt`` would continue the
stopped start's W&B run; that start's W&B run directories (of the id in ``wandb_id.txt``) go
too (:func:`densereward.io.replace_earlier_files`). Other files in the directory are left
alone."""

CURVE_FILES = ("eval_curve.jsonl", "train_curve.jsonl", "verifier_dynamics.jsonl")
"""The append-only files with a ``step`` per row; a resumed run drops their rows written after
its checkpoint (:func:`densereward.io.drop_rows_after`)."""


_NO_BUFFER = (
    "no replay buffer beside it (sac_replay_buffer_<steps>_steps.pkl): SAC continues from an "
    "empty buffer and learns again from new transitions only"
)
"""The words for a checkpoint whose replay buffer is missing (the dry run's and the start's)."""


def _state_text(state: str, run_dir: Path, wandb_dir: Path) -> str:
    """The dry run's words for the run directory: what the run will do with it (``wandb_dir``:
    where W&B writes its runs, ``wandb.dir`` or the run directory)."""
    if state == "new":
        return "created when the run starts"
    if state == "resume":
        which, later = "checkpoint", "the curve rows written after it are dropped"
        if latest := _latest_checkpoint(run_dir / "checkpoints"):
            model, buffer, _ = latest
            steps = _checkpoint_models(run_dir / "checkpoints")[-1][0]
            which = f"checkpoint {model.name} (step {steps}, " + (
                "with its replay buffer)" if buffer else f"{_NO_BUFFER})"
            )
            counts = {name: rows_after(run_dir / name, steps) for name in CURVE_FILES}
            later = (
                "the curve rows written after it are dropped ("
                + ", ".join(f"{name}: {n}" for name, n in counts.items() if n)
                + ")"
                if any(counts.values())
                else "no curve row was written after it: none to drop"
            )
        return (
            f"continues from its newest {which}; {later}, monitor.csv keeps the episodes that ended by it and logs/progress.csv the dumps "
            "logged by it; the training curve's and the verifier's windows continue from it"
        )
    return reuse_words(run_dir, RUN_FILES, wandb_dir=wandb_dir)


def _stopped(exc: BaseException, run_dir: Path, steps: int, cfg: SACRunConfig) -> Interrupted:
    """The :class:`~densereward.errors.Interrupted` of a run stopped while training: what it
    left in ``run_dir`` and how to go on."""
    tc = cfg.training
    found = _checkpoint_models(run_dir / "checkpoints")
    where = f"at step {steps} of {tc.total_timesteps}"
    if found:
        n, model = found[-1]
        return Interrupted.of(
            exc,
            f"{where}; {run_dir} keeps checkpoint {model.name} (step {n}): add --resume to the "
            f"same command (--output-dir {run_dir}) to continue from it (the curve rows written "
            f"after step {n} are dropped then)",
        )
    why = (
        f"before its first checkpoint (training.checkpoint_every={tc.checkpoint_every})"
        if tc.checkpoint_every
        else "with checkpoints off (training.checkpoint_every=0)"
    )
    return Interrupted.of(
        exc,
        f"{where}, {why}: {run_dir} holds nothing to resume from; the same command starts the "
        "run afresh there and replaces its files",
    )


DYNAMICS_STATE = "sac_verifier_dynamics_{steps}_steps.json"
"""The :class:`~densereward.callbacks.VerifierDynamicsCallback` state saved beside each
checkpoint (its window of episodes and ``auto``'s calibration), which ``--resume`` continues."""


def _continue_dynamics(dynamics: Any, ckpt_dir: Path, steps: int) -> None:
    """Continue a resumed run's verifier window from its checkpoint's
    :data:`DYNAMICS_STATE`, or say once that it starts afresh (a checkpoint written before
    the state was saved: the rates resting on the window are null until it fills again)."""
    path = ckpt_dir / DYNAMICS_STATE.format(steps=steps)
    if path.is_file():
        dynamics.load_state_dict(json.loads(path.read_text(encoding="utf-8")))
        logger.info(
            "--resume from step %d: verifier_dynamics.jsonl's window continues from %s "
            "(%d episode(s) in it, %d so far)",
            steps,
            path.name,
            len(dynamics.episodes),
            dynamics.n_episodes,
        )
        return
    from densereward.callbacks import MIN_EPISODES

    logger.warning(
        "--resume from step %d: the checkpoint has no %s (written before densereward saved it), "
        "so verifier_dynamics.jsonl's window of training.metrics_window episodes and the auto "
        "threshold's calibration start afresh: verifier/voc, verifier/tpr and verifier/tnr "
        "stay null until %d new episodes of a class have ended, and its rollout/success_rate "
        "counts only this run's episodes (train_curve.jsonl's window continues)",
        steps,
        path.name,
        MIN_EPISODES,
    )


WALL_STATE = "sac_wall_time_{steps}_steps.json"
"""The run's wall time up to a checkpoint, saved beside it: ``{"seconds", "eval_seconds",
"starts"}`` over every start up to that save, which ``--resume`` adds its own start's to
(:class:`_RunClock`)."""


class _RunClock:
    """The wall time of a run that may span several starts (``--resume``).

    ``before`` is the :data:`WALL_STATE` of the checkpoint this start resumed from (``None``
    for a fresh start, or for a resume from a checkpoint without the file, ``known=False``:
    then the earlier starts' time is unknown and no later checkpoint claims to know it); kept
    as zero seconds over zero starts when ``None``.
    :meth:`start` marks this start's ``t0`` (``time.perf_counter()``); :meth:`state` is the
    record a checkpoint keeps; :meth:`summary` the fields of ``summary.json``.
    """

    def __init__(self, before: dict[str, Any] | None = None, *, known: bool = True) -> None:
        self.before = before or {"seconds": 0.0, "eval_seconds": 0.0, "starts": 0}
        self.known = known
        self.t0 = time.perf_counter()
        self.eval_cb: Any = None  # EvaluationCallback: its seconds are this start's

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def _this_start(self) -> tuple[float, float]:
        eval_s = float(self.eval_cb.seconds) if self.eval_cb is not None else 0.0
        return time.perf_counter() - self.t0, eval_s

    def state(self) -> dict[str, Any] | None:
        """The :data:`WALL_STATE` record up to now, or ``None`` when the earlier starts' time
        is unknown."""
        if not self.known:
            return None
        sec, eval_s = self._this_start()
        b = self.before
        return {
            "seconds": b["seconds"] + sec,
            "eval_seconds": b["eval_seconds"] + eval_s,
            "starts": int(b["starts"]) + 1,
        }

    def summary(
        self, seconds: float, steps_total: int, steps_this_start: int, resumed_from: str | None
    ) -> dict[str, Any]:
        """``summary.json``'s time fields, ``seconds`` (the start's ``t0`` to the end of
        training) being this start's:

        ``seconds`` and ``eval_seconds`` over every start where the checkpoint resumed from
        records the earlier ones (else this start's), ``seconds_this_start``,
        ``eval_seconds_this_start``, ``steps_per_second`` (environment steps per second of
        training, evaluation excluded, over the span ``seconds`` covers), ``starts`` (``None``
        when unknown), ``seconds_covers`` (that span, in words) and, for a resumed run,
        ``resumed_from`` (the checkpoint's model zip)."""
        _, eval_s = self._this_start()
        this = {"seconds_this_start": seconds, "eval_seconds_this_start": eval_s}
        if resumed_from is None:
            total, total_eval, steps, starts = seconds, eval_s, steps_this_start, 1
            covers = "the whole run (one start)"
        elif not self.known:
            total, total_eval, steps, starts = seconds, eval_s, steps_this_start, None
            covers = (
                f"this start only ({steps_this_start} steps): {resumed_from} records no earlier "
                f"wall time (no {WALL_STATE.format(steps='<steps>')}: saved by an earlier "
                "densereward version)"
            )
        else:
            b = self.before
            total = b["seconds"] + seconds
            total_eval = b["eval_seconds"] + eval_s
            steps, starts = steps_total, int(b["starts"]) + 1
            covers = (
                f"{starts} starts: {b['seconds']:.1f} s up to {resumed_from}, then "
                f"{seconds:.1f} s in this start (the time between that checkpoint and the "
                "stop is not counted)"
            )
        train_s = total - total_eval
        out = {
            "seconds": total,
            "eval_seconds": total_eval,
            **this,
            "steps_per_second": steps / train_s if train_s > 0 else float("nan"),
            "starts": starts,
            "seconds_covers": covers,
        }
        if resumed_from is not None:
            out["resumed_from"] = resumed_from
        return out


def _stats_covers(resumed_from: str | None, start: int, end: int) -> str:
    """What ``verifier_stats`` and ``verifier_engine_stats`` count, in words: the verifier's
    (or reward model's) counters live in the process, so after ``--resume`` they cover this
    start's environment steps alone."""
    if resumed_from is None:
        return "the whole run (one start)"
    return (
        f"this start only: environment steps {start}-{end} after resuming from {resumed_from} "
        "(the verifier's counts restart with each start; env_steps and seconds cover the run)"
    )


def _continue_clock(ckpt_dir: Path, steps: int) -> _RunClock:
    """The :class:`_RunClock` of a start resumed at ``steps``: continued from the checkpoint's
    :data:`WALL_STATE`, or (a checkpoint saved before densereward kept it) with the earlier
    starts' time unknown, said once."""
    path = ckpt_dir / WALL_STATE.format(steps=steps)
    if path.is_file():
        return _RunClock(json.loads(path.read_text(encoding="utf-8")))
    logger.warning(
        "--resume from step %d: the checkpoint has no %s (written before densereward saved it), "
        "so summary.json's seconds and steps_per_second cover this start only "
        "(seconds_covers says so)",
        steps,
        path.name,
    )
    return _RunClock(known=False)


def _atomic_checkpoints(
    *, dynamics: Any = None, clock: _RunClock | None = None, **kwargs: Any
) -> Any:
    """SB3's ``CheckpointCallback`` whose files are written whole or not at all.

    Each file goes to a temporary name (``.tmp-<name>``) and is renamed into place, the model
    zip last, so a run stopped while it saves (SIGTERM, Ctrl-C) never leaves a
    ``sac_<steps>_steps.zip`` without its complete replay buffer, statistics and (with
    ``dynamics``, a :class:`~densereward.callbacks.VerifierDynamicsCallback`)
    :data:`DYNAMICS_STATE` and (with ``clock``) :data:`WALL_STATE` for ``--resume`` to load.
    """
    from stable_baselines3.common.callbacks import CheckpointCallback

    class AtomicCheckpointCallback(CheckpointCallback):
        def _on_step(self) -> bool:
            if self.n_calls % self.save_freq:
                return True

            def save(path: str, write: Any) -> None:
                final = Path(path)
                tmp = final.with_name(f".tmp-{final.name}")
                write(str(tmp))
                os.replace(tmp, final)

            norm = self.model.get_vec_normalize_env()
            if self.save_replay_buffer and getattr(self.model, "replay_buffer", None) is not None:
                save(self._checkpoint_path("replay_buffer_", "pkl"), self.model.save_replay_buffer)
            if self.save_vecnormalize and norm is not None:
                save(self._checkpoint_path("vecnormalize_", "pkl"), norm.save)
            if dynamics is not None:  # the callback has seen every episode that ended by now
                path = Path(self.save_path) / DYNAMICS_STATE.format(steps=self.num_timesteps)
                atomic_write_json(path, dynamics.state_dict())
            if clock is not None and (wall := clock.state()) is not None:
                path = Path(self.save_path) / WALL_STATE.format(steps=self.num_timesteps)
                atomic_write_json(path, wall)
            save(self._checkpoint_path(extension="zip"), self.model.save)
            return True

    return AtomicCheckpointCallback(**kwargs)


def check_her(cfg: Any, observation_space: Any) -> None:
    """Refuse ``her:`` on an environment whose observation is not goal-conditioned.

    SB3's ``HerReplayBuffer`` relabels goals, so it needs a ``Dict`` observation with
    ``observation``, ``achieved_goal`` and ``desired_goal`` (the Fetch tasks); on another space
    SB3 fails at the first step with an assertion, after the run has started.

    Raises:
        ConfigError: naming ``her`` and the fix.
    """
    import gymnasium as gym

    goal_keys = {"observation", "achieved_goal", "desired_goal"}
    if isinstance(observation_space, gym.spaces.Dict) and goal_keys <= set(observation_space):
        return
    got = (
        f"a Dict with keys {sorted(observation_space)}"
        if isinstance(observation_space, gym.spaces.Dict)
        else type(observation_space).__name__
    )
    raise ConfigError(
        f"her: HerReplayBuffer needs a goal-conditioned Dict observation (keys {sorted(goal_keys)}), "
        f"but {cfg.env.id} observes {got}: set her: null (no HER) for this environment"
    )


def dry_run(config: dict[str, Any], *, output_dir: Path, resume: bool = False) -> list[str]:
    """Validate a SAC config without training: what ``run`` would check, plus the describer.

    Builds one environment, resets it and has the verifier reward's describer write the
    task and the first step (so a describer that does not fit the environment fails here);
    the verifier is configured but not loaded; the run directory is checked, not created.

    Returns one line per check; a problem the run would hit here starts with ``"!! "``, an
    outcome certain before the run that does not stop it (a ``training.metrics_window`` too
    small for the verifier's rates) with ``"note: "``.

    Raises:
        ConfigError: on an invalid config, an unknown environment id, a describer that does
            not fit, a verifier model that cannot exist, or a run directory the run would refuse.
    """
    import gymnasium as gym

    from densereward import envs

    cfg = parse_config(copy.deepcopy(config))
    state = _check_run_dir(Path(output_dir), resume, cfg.training.total_timesteps)
    spec = env_spec(cfg.env.id)
    lines = [
        f"env: {spec.id} (max_episode_steps {spec.max_episode_steps}), reward {cfg.env.reward}, "
        f"n_envs {cfg.env.n_envs}",
        f"run directory: {output_dir} ({_state_text(state, Path(output_dir), cfg.wandb.dir_for(output_dir))})",
        f"sac: stable_baselines3.SAC arguments ok {sorted(cfg.sac)}",
    ]
    unreachable = None  # an offline name not installed, a Hub id not reachable offline
    lines.append(check_reward_kind(cfg))
    if cfg.env.reward == "verifier":
        describer = envs.default_describer(cfg.env.id, cfg.env.task, name=cfg.env.describer)
        envs.register_robotics()  # MUJOCO_GL=egl on a headless machine, before MuJoCo loads
        if cfg.reward.render_frames:
            from densereward.progress_fn import load_triton_before_gl

            load_triton_before_gl()  # a later triton import would crash after rendering
        env = gym.make(spec.id, **render_kwargs(cfg))  # Id of a "module:Id" env.id
        try:
            obs, _ = env.reset(seed=cfg.training.seed)
            task, text = describer.task(obs), describer.describe([obs], [])
            frame = env.render() if cfg.reward.render_frames else None
        finally:
            env.close()
        lines.append(
            f"describer: {type(describer).__name__} on a real first observation: {task!r} / {text!r}"
        )
        if frame is not None:
            reads, why = verifier_reads_images(cfg.verifier)
            if reads is False:
                raise ConfigError(
                    f"reward.render_frames=true needs a verifier that reads images, but {why}: "
                    "set verifier.model to an image-text-to-text model (e.g. a Qwen2.5-VL "
                    "directory) or serve one (verifier.backend=openai), or set "
                    "reward.render_frames=false"
                )
            lines.append(
                f"frames: {cfg.env.id} renders {'x'.join(map(str, frame.shape))} uint8 "
                f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')}), text beside them: "
                f"{cfg.reward.frames_with_text}; {why}"
            )
        v = cfg.verifier
        local = loads_model(v.backend)  # a path, name or Hub id that must load here
        model, unreachable = check_model(v.model, "verifier.model") if local else (v.model, None)
        model = f"model {v.model!r}" if unreachable else model  # its one line is the !! below
        lines.append(
            f"verifier: VerifierConfig ok (backend {v.backend}, {model}, G={v.granularity}) -- NOT "
            f"loaded; reward.mode {cfg.reward.mode}, score_every {cfg.reward.score_every}"
        )
        server, down = check_verifier_server(v)  # a served verifier: contacted as the run does
        lines += [server] if server else []
        unreachable = unreachable or down
    if cfg.her is not None:  # HER relabels goals: it needs a goal-conditioned Dict observation
        envs.register_robotics()
        env = gym.make(spec.id, **render_kwargs(cfg))
        try:
            check_her(cfg, env.observation_space)
        finally:
            env.close()
        lines.append(f"her: HerReplayBuffer {dict(cfg.her)} on a goal-conditioned observation")
    problems = [_learning_starts_problem(cfg), unreachable]
    lines.append(describe_wandb(cfg.wandb, Path(output_dir)))
    # a window too small for the verifier's rates: they stay null, the run itself goes on
    note = _metrics_window_problem(cfg)
    return lines + ([f"note: {note}"] if note else []) + [f"!! {p}" for p in problems if p]


def run(config: dict[str, Any], *, output_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train SAC with the configured reward; the trainer contract of ``densereward compare``.

    Args:
        config: the YAML config as a dict (sections ``env``, ``reward``, ``verifier``,
            ``sac``, ``her``, ``training``).
        output_dir: the run directory (created if missing).
        resume: continue from the latest checkpoint (model + replay buffer) in
            ``output_dir/checkpoints`` up to ``training.total_timesteps``.

    Returns:
        ``{"run_dir", "curve": [{"step", "value", "metric", ...}], "metric", "curve_source",
        "train_curve", "train_curve_metric", "final", "metrics": {...verifier/* and rollout/* of the last window...},
        "undefined": {metric: why it is null}, "env_steps", "seconds", "eval_seconds",
        "seconds_this_start", "eval_seconds_this_start", "steps_per_second", "starts",
        "seconds_covers", "resumed_from" (resumed runs), "verifier_stats",
        "verifier_stats_covers"}``:
        ``curve`` is the evaluation curve (``metric`` ``"eval/success_rate"``, success rate in
        ``[0, 1]`` of deterministic evaluation episodes) when ``training.eval_every > 0``, else
        the training-episode curve (``"rollout/success_rate"``); ``curve_source`` says which in words;
        ``train_curve`` is the training-episode curve, whose ``train_curve_metric`` (and each
        point's ``metric``) is ``"rollout/success_rate"``, or without ``info["is_success"]``
        ``"rollout/ep_env_rew_mean"``, the mean return of the environment's own reward
        (``info["true_reward"]``, no verifier shaping; each point's ``reward`` says so);
        ``final`` is its last value; ``seconds`` (wall seconds of training, including
        ``eval_seconds``) covers every start of a resumed run whose checkpoint recorded the
        earlier ones (:data:`WALL_STATE`; ``seconds_covers`` says which span, ``starts`` how
        many), ``steps_per_second`` is environment steps per second of training with
        evaluation excluded over that span, and ``verifier_stats`` count this start's calls
        (``verifier_stats_covers`` says so; ``*_this_start`` are its seconds); ``undefined``
        holds, for every null (NaN) in ``metrics``, why it is null with the count it rests on
        (:func:`densereward.callbacks.undefined_reasons`: ``"verifier/voc": "6 episodes with a
        defined VOC in the window (verifier/n_voc_episodes), need 10 ..."``).

    Raises:
        ConfigError: on an invalid config, or ``resume`` without a checkpoint.
        Interrupted: Ctrl-C (or SIGTERM under :func:`densereward.errors.sigterm_interrupts`)
            while training; its ``detail`` names the checkpoint to ``--resume`` from, or says
            there is none.
    """
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.logger import Logger, make_output_format
    from stable_baselines3.common.vec_env import VecNormalize

    from densereward.callbacks import (
        EvaluationCallback,
        LearningCurveCallback,
        ReplayRelabelCallback,
        VerifierDynamicsCallback,
        WandbOutputFormat,
        undefined_reasons,
    )
    from densereward.envs import SUCCESS_KEY
    from densereward.wrappers import verifier_progress_fn

    cfg = parse_config(config)
    run_dir = Path(output_dir)
    tc = cfg.training
    # created below, once the verifier and env id passed
    state = _check_run_dir(run_dir, resume, tc.total_timesteps)
    if tc.torch_threads is not None:
        torch.set_num_threads(tc.torch_threads)
    torch.manual_seed(tc.seed)
    np.random.seed(tc.seed)

    # 1. the verifier (only for the verifier reward)
    verifier = None
    progress_fn = None
    if cfg.env.reward == "verifier":
        from densereward.verifier import Verifier

        verifier = Verifier(cfg.verifier)
        progress_fn = verifier_progress_fn(verifier)
    env_spec(cfg.env.id)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    if state == "reuse":  # a stopped start's curves: this run's are written anew
        replace_earlier_files(run_dir, RUN_FILES, wandb_dir=cfg.wandb.dir_for(run_dir))
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    # 2. the environments: VecMonitor(VecVerifierProgressReward(DummyVecEnv([...]))) (frames
    # rendered for the verifier with reward.render_frames), and the evaluation one, which
    # never renders and never calls the verifier (sac_envs.build_envs)
    sac_kwargs = dict(cfg.sac)
    gamma = float(sac_kwargs.get("gamma", 0.99))  # SB3's default; shaping uses the agent's
    ckpt_dir = run_dir / "checkpoints"
    # --resume: SB3's VecMonitor reopens monitor.csv, so the episodes that ended by the
    # checkpoint are read first and written back into the new file
    found = _checkpoint_models(ckpt_dir) if resume else []
    earlier = episodes_by(run_dir / "monitor.csv", found[-1][0]) if found else (None, [], 0)
    dumps = progress_rows_by(run_dir / PROGRESS_CSV, found[-1][0]) if found else ([], [], 0)
    try:
        venv, eval_venv = build_envs(cfg, progress_fn=progress_fn, gamma=gamma, monitor_dir=run_dir)
        reward_venv = venv  # VecMonitor(...): carries verifier_stats; VecNormalize goes on top
        kept = _write_back(reward_venv, earlier[0], earlier[1])
        # success rates exist when the environment's step info reports is_success (not Pendulum)
        success = SUCCESS_KEY in reward_venv.info_keywords

        # 3. SAC (fresh, or the latest checkpoint and its replay buffer)
        if resume:
            latest = _latest_checkpoint(ckpt_dir)
            if latest is None:
                raise ConfigError(f"--resume: no checkpoint in {ckpt_dir}")
            if cfg.env.normalize_obs:
                if latest[2] is None:
                    raise ConfigError(
                        f"--resume: {latest[0].name} has no VecNormalize statistics beside it "
                        "(env.normalize_obs=true needs sac_vecnormalize_<steps>_steps.pkl)"
                    )
                venv = VecNormalize.load(str(latest[2]), venv)
                venv.training = True
            model = SAC.load(latest[0], env=venv, device=tc.device)
            if latest[1] is not None:
                model.load_replay_buffer(latest[1])
            else:
                logger.warning("--resume from %s: %s", latest[0].name, _NO_BUFFER)
            for name in CURVE_FILES:  # rows a stopped run wrote after its checkpoint
                if dropped := drop_rows_after(run_dir / name, model.num_timesteps):
                    logger.warning(
                        "--resume from step %d: %s: %d row(s) written after the checkpoint "
                        "dropped (this run writes them anew)",
                        model.num_timesteps,
                        name,
                        dropped,
                    )
            if found:
                logger.warning(
                    "--resume from step %d: monitor.csv keeps the %d episode(s) that ended by the "
                    "checkpoint (of %d the earlier start wrote; their t is rebased to the new "
                    "t_start) and this run appends its own, so it holds the whole run",
                    model.num_timesteps,
                    len(kept),
                    earlier[2],
                )
        else:
            if cfg.env.normalize_obs:
                venv = VecNormalize(
                    venv, norm_obs=True, norm_reward=False, clip_obs=cfg.env.clip_obs, gamma=gamma
                )
            if cfg.her is not None:
                check_her(cfg, venv.observation_space)
                sac_kwargs.setdefault("replay_buffer_class", HerReplayBuffer)
                sac_kwargs.setdefault("replay_buffer_kwargs", dict(cfg.her))
            policy = (
                "MultiInputPolicy"
                if isinstance(venv.observation_space, gym.spaces.Dict)
                else "MlpPolicy"
            )
            # SB3's rollout/* (success rate, returns) over the window of the verifier metrics
            sac_kwargs.setdefault("stats_window_size", tc.metrics_window)
            try:
                model = SAC(
                    policy, venv, seed=tc.seed, device=tc.device, verbose=tc.verbose, **sac_kwargs
                )
            except TypeError as e:
                raise ConfigError(
                    f"section 'sac': {e} (keys go to stable_baselines3.SAC)"
                ) from None
    except BaseException:  # refused before training: leave no half-made run directory
        from .sac_envs import drop_unstarted

        drop_unstarted(run_dir, created, verifier)
        raise
    for problem in (_learning_starts_problem(cfg), _metrics_window_problem(cfg)):
        if problem:
            logger.warning(problem)

    # 4. logging: CSV (+ stdout) and W&B (offline by default) through SB3's logger
    formats = [make_output_format("csv", str(run_dir / "logs"))]
    write_progress_back(formats[0], dumps[0], dumps[1])  # --resume: SB3 reopened the file
    if found and dumps[2]:
        logger.warning(
            "--resume from step %d: %s keeps the %d dump(s) logged by the checkpoint (of %d "
            "the earlier start wrote) and this run appends its own",
            model.num_timesteps,
            PROGRESS_CSV,
            len(dumps[1]),
            dumps[2],
        )
    if tc.verbose:
        formats.append(make_output_format("stdout", str(run_dir / "logs")))
    wandb_run, wandb_env = None, contextlib.ExitStack()
    # W&B's service process ending mid-run: one warning, and the run goes on without W&B
    wandb_service = WandbService(run_dir, cfg.wandb.dir_for(run_dir), unit="environment step")
    if wandb_env.enter_context(wandb_environment(cfg.wandb, run_dir)) is not None:
        import wandb

        run_id = wandb_run_id(run_dir, reuse=True)  # a fresh start removed the file
        # project, entity, group, name, tags, mode and dir come from the environment just set
        wandb_run = wandb.init(id=run_id, resume="allow", config=config)
        formats.append(WandbOutputFormat(wandb_run, wandb_service))
    model.set_logger(Logger(str(run_dir / "logs"), formats))

    # 5. callbacks: reward quality (threshold auto: Youden's J of earlier episodes), replay
    # relabelling, learning curve, evaluation, checkpoints
    dynamics = VerifierDynamicsCallback(
        threshold=cfg.verifier.threshold,
        window=tc.metrics_window,
        engine_stats=verifier.stats if verifier is not None else None,
        path=run_dir / "verifier_dynamics.jsonl",
    )
    curve_cb = LearningCurveCallback(
        run_dir / "train_curve.jsonl",
        every=tc.curve_every,
        window=tc.metrics_window,
        success=success,
        reward_label=ENV_RETURN_LABEL,
    )
    if resume:  # SB3's rollout windows, the curve and the verifier's continue
        _continue_episodes(
            model, curve_cb, [parse_episode(r) for r in kept], env_return=cfg.env.reward == "env"
        )
        _continue_dynamics(dynamics, ckpt_dir, model.num_timesteps)
    clock = _continue_clock(ckpt_dir, model.num_timesteps) if resume else _RunClock()
    resumed_from = _latest_checkpoint(ckpt_dir)[0].name if resume else None
    callbacks = [dynamics, curve_cb]
    eval_cb = None
    if eval_venv is not None:
        eval_cb = EvaluationCallback(
            eval_venv,
            run_dir / "eval_curve.jsonl",
            every=tc.eval_every,
            n_episodes=tc.eval_episodes,
            reward_label=eval_reward_label(_eval_reward(cfg)),
            success=success,
        )
        callbacks.append(eval_cb)
        clock.eval_cb = eval_cb
    if cfg.env.reward == "verifier" and cfg.reward.timing == "episode_end":
        callbacks.append(ReplayRelabelCallback())
    if tc.checkpoint_every:
        callbacks.append(
            _atomic_checkpoints(
                dynamics=dynamics,
                clock=clock,
                save_freq=max(tc.checkpoint_every // cfg.env.n_envs, 1),
                save_path=str(ckpt_dir),
                name_prefix="sac",
                save_replay_buffer=True,
                save_vecnormalize=cfg.env.normalize_obs,
            )
        )

    # 6. learn
    start_steps = model.num_timesteps
    remaining = tc.total_timesteps - start_steps
    t0 = time.perf_counter()
    clock.start()
    try:
        if remaining > 0:
            try:
                model.learn(
                    remaining,
                    callback=callbacks,
                    log_interval=tc.log_interval,
                    reset_num_timesteps=not resume,
                )
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in densereward train
                raise _stopped(exc, run_dir, model.num_timesteps, cfg) from None
            dynamics.record()  # the metrics again, so the final log row carries them too
            model.dump_logs()
        seconds = time.perf_counter() - t0
        model.save(run_dir / "final_model.zip")
        if isinstance(venv, VecNormalize):
            venv.save(str(run_dir / "vecnormalize.pkl"))  # needed to run the final policy

        # 7. summary
        def read_curve(name: str) -> list[dict[str, Any]]:
            return list(read_jsonl(run_dir / name)) if (run_dir / name).is_file() else []

        train_curve = read_curve("train_curve.jsonl")
        if eval_cb is not None:
            curve, metric = read_curve("eval_curve.jsonl"), eval_cb.metric
            source = eval_curve_source(cfg)
        else:
            curve, metric = train_curve, curve_cb.metric
            source = (
                f"training episodes: success rate of the last {tc.metrics_window} training "
                "episodes at each point (rolling windows, which overlap)"
            )
        if not success:
            what = (
                "mean reward"
                if eval_cb is not None
                else "mean return of the environment's own reward (no shaping term: one scale "
                "for every reward condition)"
            )
            source = source.replace("success rate", what) + (
                f"; {cfg.env.id} reports no info['is_success'], so no success rate"
            )
        metrics = dynamics.metrics()
        stats = reward_venv.venv.verifier_stats.as_dict() if cfg.env.reward == "verifier" else None
        if cfg.env.reward == "distilled":
            stats = reward_model_stats(reward_venv, steps=model.num_timesteps - start_steps)
        steps = model.num_timesteps - start_steps
        plot = _plot(cfg, run_dir, dynamics.threshold_source, success)
        summary = {
            "run_dir": str(run_dir),
            "curve": curve,
            "metric": metric,
            "curve_source": source,
            "train_curve": train_curve,
            "train_curve_metric": curve_cb.metric,
            "final": curve[-1]["value"] if curve else float("nan"),
            "success_metrics": success,
            "metrics": metrics,
            "undefined": undefined_reasons(metrics, dynamics.min_episodes),
            "env_steps": model.num_timesteps,
            **clock.summary(seconds, model.num_timesteps, steps, resumed_from),
            "eval_reward": eval_reward_label(_eval_reward(cfg)) if eval_cb is not None else None,
            "threshold_source": dynamics.threshold_source if verifier is not None else None,
            "plot": str(plot) if plot is not None else None,
            "verifier_stats": stats,  # distilled: the reward model's calls and seconds
            "verifier_stats_covers": _stats_covers(resumed_from, start_steps, model.num_timesteps)
            if stats is not None
            else None,
            "verifier_engine_stats": verifier.stats.as_dict()
            if verifier is not None and hasattr(verifier, "stats")
            else None,
        }
        atomic_write_json(run_dir / "summary.json", summary)
        if wandb_run is not None:
            summary_values = {k: v for k, v in metrics.items() if v == v}
            wandb_service.call(model.num_timesteps, wandb_run.summary.update, summary_values)
        return summary
    finally:
        venv.close()
        if eval_venv is not None:
            eval_venv.close()
        if wandb_run is not None:  # and reset W&B's process-wide settings for a next run
            wandb_service.finish(wandb_run, step=model.num_timesteps)
        wandb_env.close()  # W&B's environment as it was before this run
        if verifier is not None and hasattr(verifier, "close"):
            verifier.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI flags of ``densereward train sac`` and ``python trainers/sac.py``."""
    parser.add_argument("--config", required=True, help="YAML config (configs/sac_*.yaml)")
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="environment steps (overrides training.total_timesteps)",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="run directory (default: <training.output_dir>/<run_name or timestamp>)",
    )
    parser.add_argument("--seed", type=int, default=None, help="overrides training.seed")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in --output-dir (or in "
        "<training.output_dir>/<training.run_name>)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config, the environment id, the describer on a real first "
        "observation and the run directory; train nothing, create nothing, load no weights",
    )
    add_override_arguments(parser, "reward.score_every=20 sac.learning_rate=1e-3")


def main(args: argparse.Namespace) -> int:
    """Run from parsed CLI arguments; returns the process exit code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    config = load_yaml(args.config)
    apply_overrides(config, overrides_from(args))
    training = config.setdefault("training", {}) or {}
    config["training"] = training
    if args.total_timesteps is not None:
        training["total_timesteps"] = args.total_timesteps
    if args.seed is not None:
        training["seed"] = args.seed
    cfg = parse_config(copy.deepcopy(config))  # fail fast, before creating a directory
    if args.output_dir is not None:
        run_dir = Path(args.output_dir)
    elif args.resume and not cfg.training.run_name:  # the default name is a new timestamp
        raise ConfigError(
            "--resume needs the run directory to continue: --output-dir DIR (the directory the "
            "stop line and the refusal named), or training.run_name (the run is then "
            "<training.output_dir>/<run_name>)"
        )
    else:  # with --resume and training.run_name: the directory the stopped run had
        name = cfg.training.run_name or time.strftime("run-%Y%m%d-%H%M%S")
        run_dir = Path(cfg.training.output_dir) / name
    if args.dry_run:
        return print_dry_run(dry_run(config, output_dir=run_dir, resume=args.resume))
    summary = run(config, output_dir=run_dir, resume=args.resume)
    command_finished()  # its outputs are written: a SIGTERM now lets the summary print
    print(final_line(summary))
    for k, why in summary["undefined"].items():  # a null is never left out without its reason
        print(f"{k}: undefined, {why}")
    if summary["eval_reward"] and summary["curve"]:
        print(evaluation_line(summary))
    print(f"plot: {summary['plot']}")
    return 0


def final_line(summary: dict[str, Any]) -> str:
    """The console's last line of a run (``summary`` of :func:`run`): the run directory, its
    environment steps and rate, the learning curve's final value, then the last window's
    defined metrics, each named once (with evaluation off the curve's metric,
    ``rollout/success_rate`` or ``rollout/ep_env_rew_mean``, is one of them too: the curve's
    final value stands for it)."""
    m = summary["metrics"]
    return (
        f"run_dir={summary['run_dir']} env_steps={summary['env_steps']} "
        f"steps/s={summary['steps_per_second']:.1f} ({wall_words(summary)}) "
        f"{summary['metric']}={summary['final']:.3f}"
        + "".join(
            f" {k}={v:.3f}" for k, v in sorted(m.items()) if v == v and k != summary["metric"]
        )
    )


def wall_words(summary: dict[str, Any]) -> str:
    """The console's words for a run's wall time: ``"in 80 s"``, or after ``--resume``
    ``"in 230 s: 150 s up to sac_300_steps.zip, 80 s in this start"`` (or that the earlier
    starts' time is unknown)."""
    this = f"{summary['seconds_this_start']:.0f} s in this start"
    if "resumed_from" not in summary:
        return f"in {summary['seconds']:.0f} s"
    if summary["starts"] is None:
        return f"{this}; {summary['resumed_from']} records no earlier wall time"
    return (
        f"in {summary['seconds']:.0f} s over {summary['starts']} starts: "
        f"{summary['seconds'] - summary['seconds_this_start']:.0f} s up to "
        f"{summary['resumed_from']}, {this}"
    )


def evaluation_line(summary: dict[str, Any]) -> str:
    """The console line of a run's last evaluation (``summary`` of :func:`run` with an
    evaluation curve): its success rate over how many deterministic episodes, and its mean
    reward, named."""
    from .sac_plots import episodes

    last = summary["curve"][-1]
    n = episodes(int(last["n_episodes"]), "deterministic")
    rate = (
        f"eval/success_rate {last['value']:.3f} (fraction of {n} ending at the goal), "
        if summary["success_metrics"]
        else f"{n} (no success rate: the environment reports no is_success), "
    )
    return (
        f"evaluation at step {last['step']}: {rate}mean_reward "
        f"{last['mean_reward']:.3f} ({summary['eval_reward']} over an episode; not the "
        "verifier's shaped reward)"
    )


def cli_main(argv: list[str] | None = None) -> int:
    """``python trainers/sac.py ...``: parse the flags of :func:`add_arguments` and run :func:`main`."""
    parser = argparse.ArgumentParser(
        prog="python trainers/sac.py", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    args = parse_command_line(parser, argv)
    try:
        return main(args)
    except DenseRewardError as exc:
        print(f"densereward: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli_main())
