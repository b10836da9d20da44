"""GRPO with verifier rewards (TRL 1.16): one readable launch script.

Read it top to bottom: config -> data -> verifier -> reward functions -> GRPOConfig ->
run directory and W&B -> GRPOTrainer -> train -> reward-quality plot.

Usage::

    densereward train grpo --config configs/grpo_math_cpu.yaml \\
        --data ../shared/data/math500/test.jsonl --max-steps 5 --output-dir runs/demo
    python trainers/grpo.py --config configs/grpo_math_cpu.yaml reward.type=group training.max_steps=5
    accelerate launch trainers/grpo.py --config configs/grpo_math_qwen3_8b.yaml   # multi-GPU
    densereward train grpo --config configs/grpo_math_qwen3_8b.yaml --dry-run     # validate anywhere

YAML sections: ``model`` (policy), ``data`` (:class:`densereward.data.DataConfig`), ``reward``
(:class:`densereward.rewards.RewardConfig`), ``verifier``
(:class:`densereward.config.VerifierConfig`), ``training`` (passed verbatim to
``trl.GRPOConfig``: every field works, unknown keys are errors), ``wandb``
(:class:`densereward.wandb_config.WandbConfig`, the same section as SAC's and a comparison's).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    check_run_dir,
    drop_rows_after,
    get_api_key,
    read_jsonl,
    redact,
    replace_earlier_files,
    reuse_words,
    rows_after,
    wandb_run_id,
)
from densereward.verifier import VerifierFactory
from densereward.wandb_config import (
    WandbService,
    describe_wandb,
    restored_environ,
    wandb_environment,
)

from .checks import check_models, check_verifier_server, name_base_model, print_dry_run
from .grpo_config import (  # noqa: F401  (re-exported: the config is part of this trainer's API)
    SECTIONS,
    ModelConfig,
    WandbConfig,
    bf16_note,
    build_grpo_args,
    grpo_config_kwargs,
    policy_dtype,
    resolve_config,
    training_device,
    training_error,
)
from .grpo_heldout import HELDOUT_OFF, HeldoutEvaluator

logger = logging.getLogger("densereward.trainers.grpo")

# --------------------------------------------------------------------------------------------
# 2. Run
# --------------------------------------------------------------------------------------------


def _is_main_process() -> bool:
    """Rank 0 of a multi-process launch (``torchrun``, ``accelerate launch`` set ``RANK``), or a
    single process. Only the main process creates the run directory and writes its files."""
    return int(os.environ.get("RANK", "0")) == 0


_CHECKPOINT = re.compile(r"checkpoint-(\d+)")  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


def _checkpoints(run_dir: Path) -> list[Path]:
    """The Trainer's ``checkpoint-<step>`` directories in ``run_dir``, oldest first."""
    found = [
        p for p in run_dir.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.fullmatch(p.name)
    ]
    return sorted(found, key=lambda p: int(_CHECKPOINT.fullmatch(p.name).group(1)))


_OPTIMIZER_STATE = ("optimizer.pt", "optimizer.bin")  # transformers.trainer.OPTIMIZER_NAME(_BIN)
_SCHEDULER_STATE = "scheduler.pt"  # transformers.trainer.SCHEDULER_NAME
KEEP_OPTIMIZER_STATE = "training.save_only_model: false keeps them"
"""The fix a weights-only checkpoint's notes name (checkpoints about 3x the policy's size)."""
LOST_BY_WEIGHTS_ONLY = (
    "the optimizer state (Adam's moments) and the random-number state (rng_state.pth: "
    "completion sampling) start afresh"
)
"""What a resume from a weights-only checkpoint cannot restore: transformers saves
``optimizer.pt``, ``scheduler.pt`` and ``rng_state.pth`` only without ``save_only_model``."""


def _weights_only(ckpt: Path) -> bool:
    """Whether a ``checkpoint-<step>`` holds the policy's weights (``*.safetensors`` / ``*.bin``)
    but no optimizer or no scheduler state (one saved with ``training.save_only_model: true``,
    as ``make demo``'s): transformers' resume from it loads the weights and the step, and
    skips the optimizer and the scheduler without a word."""
    files = [p for p in ckpt.iterdir() if p.is_file()]
    has_weights = any(
        p.suffix in (".safetensors", ".bin") and p.name not in _OPTIMIZER_STATE for p in files
    )
    has_optimizer = any((ckpt / name).is_file() for name in _OPTIMIZER_STATE) or any(
        p.is_dir() and "optimizer" in p.name
        for p in ckpt.iterdir()  # FSDP: optimizer_0/
    )
    return has_weights and not (has_optimizer and (ckpt / _SCHEDULER_STATE).is_file())


def _step_of(ckpt: Path) -> int:
    return int(_CHECKPOINT.fullmatch(ckpt.name).group(1))


def _continue_schedule(scheduler: Any, step: int, lr: float | None = None) -> None:
    """Step a learning-rate schedule built at step 0 on to ``step`` (no optimizer step between:
    torch's warnings about that order are for training loops, not for this catch-up), and give
    the optimizer the schedule's rate at its step: a schedule loaded from ``scheduler.pt`` and
    rebuilt for another ``max_steps`` (transformers keeps the step, not the schedule's
    functions) left the optimizer at the rate the checkpoint's schedule ended on, so the first
    resumed step trained at it (0 after a linear decay) and only the next on the new schedule.
    With ``lr`` (the run's ``training.learning_rate``), a step-following schedule peaks at it:
    a ``scheduler.pt`` restores the peak the checkpoint was trained with over the configured
    one (:func:`_lr_change`).
    A ``ReduceLROnPlateau`` schedule follows an evaluation metric, not the step: left as it is."""
    import warnings

    from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau

    if scheduler is None or isinstance(scheduler, ReduceLROnPlateau):
        return
    if lr is not None and isinstance(scheduler, LambdaLR):
        scheduler.base_lrs = [float(lr) for _ in scheduler.base_lrs]
        for group in scheduler.optimizer.param_groups:
            group["initial_lr"] = float(lr)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"(Detected call of `lr_scheduler\.step\(\)`|Seems like `optimizer)"
        )
        while scheduler.last_epoch < step:
            scheduler.step()
    if isinstance(scheduler, LambdaLR):  # transformers' step-following schedules
        rates = [
            base * rate(scheduler.last_epoch)
            for base, rate in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
        ]
        for group, lr in zip(scheduler.optimizer.param_groups, rates, strict=True):
            group["lr"] = lr
        scheduler._last_lr = rates


def _lr_schedule(args: Any, max_steps: int, lr: float | None = None) -> Any:
    """``rate(k)``: the learning rate after ``k`` optimizer steps (the rate step ``k + 1`` trains
    at) of the schedule transformers builds from ``args`` (``lr_scheduler_type``, its warmup and
    kwargs, ``learning_rate``) for ``max_steps`` steps; ``None`` for a schedule that does not
    follow the step (``reduce_lr_on_plateau``)."""
    import torch
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import get_scheduler

    peak = args.learning_rate if lr is None else lr  # lr: a checkpoint's scheduler.pt's
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    scheduler = get_scheduler(
        args.lr_scheduler_type,
        optimizer=optimizer,
        num_warmup_steps=args.get_warmup_steps(max_steps),
        num_training_steps=max_steps,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    if not isinstance(scheduler, LambdaLR):
        return None
    base, rate = scheduler.base_lrs[0], scheduler.lr_lambdas[0]
    return lambda k: base * rate(k)


def _restored_lr(ckpt: Path) -> float | None:
    """The peak learning rate ``ckpt``'s ``scheduler.pt`` holds (its ``base_lrs``), which
    transformers restores over the configured one; ``None`` without the file (a weights-only
    checkpoint) or for a schedule without ``base_lrs``."""
    path = ckpt / "scheduler.pt"
    if not path.is_file():
        return None
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - an unreadable file is transformers' to report at load
        return None
    base = state.get("base_lrs") if isinstance(state, dict) else None
    return float(base[0]) if base else None


def _lr_change(ckpt: Path, args: Any, *, first_step: bool = True) -> str | None:
    """What a resume from ``ckpt`` with another ``training.learning_rate`` than the one its
    ``scheduler.pt`` was built with does, in words (the run applies the configured one:
    transformers alone would keep the checkpoint's and ignore the setting); ``None`` when they
    agree, or without ``scheduler.pt``. ``first_step``: name the first resumed step's rate."""
    import math

    before = _restored_lr(ckpt)
    now = float(args.learning_rate)
    if before is None or math.isclose(before, now, rel_tol=1e-9, abs_tol=0.0):
        return None
    schedule = (
        _lr_schedule(args, int(args.max_steps)) if first_step and args.max_steps > 0 else None
    )
    step = _step_of(ckpt)
    first = f": step {step + 1} trains at {schedule(step):.3g}" if schedule is not None else ""
    return (
        f"peaking at training.learning_rate={now:.3g}{first} ({ckpt.name}'s scheduler.pt "
        f"holds {before:.3g}, which transformers alone would restore over the setting)"
    )


def _schedule_change(ckpt: Path, args: Any) -> str | None:
    """What a resume from ``ckpt`` changes in the learning-rate schedule, in words: another
    ``max_steps`` (:func:`_respread`) and/or another ``training.learning_rate``
    (:func:`_lr_change`); ``None`` when neither changed."""
    respread = _respread(ckpt, args)
    parts = [x for x in (respread, _lr_change(ckpt, args, first_step=not respread)) if x]
    return ", ".join(parts) or None


def _respread(ckpt: Path, args: Any) -> str | None:
    """What a resume from ``ckpt`` with another ``max_steps`` (``args.max_steps``) than the one
    it was trained with (its ``trainer_state.json``) does to the learning-rate schedule, in
    words: transformers builds the schedule for the new total, so it is re-spread over it (the
    rate of step ``k`` is the new schedule's), with the rate of the first resumed step beside
    the one the checkpoint's schedule gives there. ``None`` for the same ``max_steps``, an
    unknown one, a schedule that does not follow the step, or one the change leaves alike."""
    state = ckpt / _TRAINER_STATE
    now = int(args.max_steps)
    if not state.is_file() or now <= 0:
        return None
    import json

    before = json.loads(state.read_text(encoding="utf-8")).get("max_steps")
    if not before or int(before) == now:
        return None
    step, before = _step_of(ckpt), int(before)
    new, old = _lr_schedule(args, now), _lr_schedule(args, before, _restored_lr(ckpt))
    if new is None or all(new(k) == old(k) for k in range(step, now)):
        return None
    kind = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    return (
        f"re-spread over max_steps={now} ({ckpt.name} was trained with max_steps={before}): "
        f"step {step + 1} trains at learning rate {new(step):.3g}, the {kind} schedule's rate "
        f"over {now} steps at step {step} (over the checkpoint's {before} steps: {old(step):.3g})"
    )


class _ContinueSchedule:
    """transformers' resume from a checkpoint without ``scheduler.pt`` restores the step but
    builds the learning-rate schedule at step 0: the resumed steps' rate jumped back to its
    peak (``make demo``: 6e-06 at step 5, 3e-05 at step 6). At the start of training, after the
    schedule is built and the step restored, this steps the schedule on to the restored step,
    as the saved schedule would have been (:func:`_continue_schedule`; with another
    ``max_steps``, the first resumed step trains on the re-spread schedule too)."""

    def __new__(cls, lr: float | None = None):
        from transformers import TrainerCallback

        class _Cb(TrainerCallback):
            def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
                _continue_schedule(lr_scheduler, int(state.global_step), lr)

        return _Cb()


WALL_FILE = "wall_time.json"
"""``checkpoint-<step>/wall_time.json``: ``{"wall_s", "starts"}``, the run's wall time (s) up to
that save over all its starts, and how many starts that is; a run resumed from the checkpoint
adds its own start's time to it (``result.json``'s ``wall_s``)."""


def _wall_before(ckpt: Path | None) -> dict[str, Any] | None:
    """The wall time a resumed run spent up to ``ckpt``: ``{"wall_s", "starts"}`` of its
    :data:`WALL_FILE`; ``None`` for a fresh start or a checkpoint without one (saved before
    densereward kept it, or by a start stopped mid-save)."""
    path = ckpt / WALL_FILE if ckpt is not None else None
    if path is None or not path.is_file():
        return None
    import json

    kept = json.loads(path.read_text(encoding="utf-8"))
    return {"wall_s": float(kept["wall_s"]), "starts": int(kept["starts"])}


class _WallClock:
    """Writes :data:`WALL_FILE` into each checkpoint the Trainer saves: the wall time from this
    start's ``t0`` (``time.monotonic()``) plus ``before`` (the time up to the checkpoint the start
    resumed from), so that a later ``--resume`` reports the whole run's time, not its own start's
    alone. Only the main process writes, and nothing is written when ``known`` is false (a
    start resumed from a checkpoint without the file: the earlier starts' time is unknown, so
    no later checkpoint claims it)."""

    def __new__(cls, t0: float, before: dict[str, Any] | None, *, known: bool = True):
        from transformers import TrainerCallback

        earlier, starts = (before["wall_s"], before["starts"] + 1) if before else (0.0, 1)

        class _Cb(TrainerCallback):
            def on_save(self, args, state, control, **kwargs):
                ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if known and state.is_world_process_zero and ckpt.is_dir():
                    wall = round(earlier + time.monotonic() - t0, 1)
                    atomic_write_json(ckpt / WALL_FILE, {"wall_s": wall, "starts": starts})

        return _Cb()


def _wall_fields(this_start: float, ckpt: Path | None, before: dict[str, Any] | None) -> dict:
    """``result.json``'s wall-time fields: ``wall_s`` (the run's, over all starts where the
    checkpoint resumed from records the earlier ones), ``wall_s_this_start``, ``starts``,
    ``wall_s_covers`` (what ``wall_s`` covers, in words) and, for a resumed run,
    ``resumed_from`` (the checkpoint's name)."""
    this_start = round(this_start, 1)
    if ckpt is None:
        return {
            "wall_s": this_start,
            "wall_s_this_start": this_start,
            "starts": 1,
            "wall_s_covers": "the whole run (one start)",
        }
    if before is None:
        return {
            "wall_s": this_start,
            "wall_s_this_start": this_start,
            "starts": None,
            "wall_s_covers": f"this start only: {ckpt.name} records no earlier wall time "
            f"(no {WALL_FILE}: saved by an earlier densereward version or stopped mid-save)",
            "resumed_from": ckpt.name,
        }
    starts = before["starts"] + 1
    return {
        "wall_s": round(before["wall_s"] + this_start, 1),
        "wall_s_this_start": this_start,
        "starts": starts,
        "wall_s_covers": f"{starts} starts: {before['wall_s']:.1f} s up to {ckpt.name}, then "
        f"{this_start:.1f} s in this start",
        "resumed_from": ckpt.name,
    }


def _run_dir(parts: dict[str, Any], output_dir: str | Path | None, resume: str | None) -> Path:
    """The run directory, checked but not created (:func:`densereward.io.check_run_dir`): the
    caller creates it once the data, the verifier and TRL's config have passed, so a start that
    fails on them leaves nothing behind; a directory with no checkpoint is reused."""
    if resume and resume != "latest":
        ckpt = Path(resume)
        if not (ckpt.is_dir() and _CHECKPOINT.fullmatch(ckpt.name)):
            raise ConfigError(
                f"--resume {resume}: not a checkpoint-<step> directory. Choices: --resume alone "
                "continues from the newest checkpoint of --output-dir, --resume <run>/checkpoint-<step> "
                "from that one"
            )
        _refuse_finished_resume(ckpt.resolve().parent, parts, resume)
        return ckpt.resolve().parent  # .../<run_dir>/checkpoint-N
    if not _is_main_process():  # the main process creates it; the others only need its path
        if output_dir is None and parts["wandb"].name is None:
            raise ConfigError(
                "several training processes need one run directory: pass --output-dir (or wandb.name)"
            )
        return Path(output_dir if output_dir is not None else Path("runs") / parts["wandb"].name)
    if output_dir is not None:
        p = Path(output_dir)
    else:
        p = Path("runs") / (parts["wandb"].name or time.strftime("grpo-%Y%m%d-%H%M%S"))
    state = check_run_dir(
        p, resume=bool(resume), checkpoints=_checkpoints(p), finished=p / "result.json"
    )
    if state == "reuse":
        logger.info("reusing run directory %s: it holds no checkpoint and no result", p)
    if state == "resume":
        _refuse_finished_resume(p, parts, resume)
    return p


def _refuse_finished_resume(run_dir: Path, parts: dict[str, Any], resume: str | None) -> None:
    """Refuse ``--resume`` of a finished run (``result.json``) whose checkpoint already holds
    ``training.max_steps``: transformers would train nothing and the run would rewrite its
    result with a zero-step start's; and of a stopped run whose checkpoint is at or beyond
    ``training.max_steps``: transformers checks the budget only after a step, so it would
    train one step past it (measured: checkpoint-2 with ``max_steps`` 1 or 2 trained step 3)
    and mark the run finished there.

    Raises:
        ConfigError: naming the checkpoint's step and the fix (a larger ``--max-steps``).
    """
    max_steps = (parts.get("training") or {}).get("max_steps")
    if not isinstance(max_steps, int) or max_steps <= 0:
        return
    ckpt = _resume_checkpoint(run_dir, resume)
    if ckpt is None:
        return
    if not (run_dir / "result.json").is_file():
        step = _step_of(ckpt)
        if step >= max_steps:
            raise ConfigError(
                f"--resume: {ckpt.name} of {run_dir} is at step {step}, "
                f"{'at' if step == max_steps else 'beyond'} training.max_steps={max_steps}: "
                "its budget is spent, yet transformers would train one more step (to step "
                f"{step + 1}) and mark the run finished there; fix: --max-steps above {step} "
                "to train on (the stopped run's budget is in its config.json)"
            )
        return
    if _step_of(ckpt) >= max_steps:
        raise ConfigError(
            f"--resume: {run_dir} holds a finished run (result.json) whose checkpoint "
            f"{ckpt.name} is at step {_step_of(ckpt)}, and training.max_steps={max_steps}: there "
            f"is nothing to train; fix: --max-steps above {_step_of(ckpt)} (e.g. "
            f"{_step_of(ckpt) + max_steps}) to continue it"
        )


RUN_FILES = ("reward_quality.jsonl", "reward_quality.png", "wandb_id.txt")
"""The files a run appends to, draws or keeps its W&B id in, in its run directory. A new run in
a directory that a stopped start left (no checkpoint, no ``result.json``) replaces them, and
that start's W&B run directories (of the id in ``wandb_id.txt``): the stopped start's rows
would mix with this run's steps, and ``wandb sync`` would upload its run beside this one."""


_TRAINER_STATE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME


def _missing(ckpt: Path) -> list[str]:
    """The files of a complete save that ``ckpt`` lacks (``[]``: complete): transformers'
    ``trainer_state.json`` and the reward-quality tracker's state, which the
    :class:`~densereward.rewards.RewardQualityCallback` every GRPO run adds writes after
    transformers' save. A run stopped mid-save leaves a checkpoint without them."""
    from densereward.rewards.tracking import STATE_FILE

    return [name for name in (_TRAINER_STATE, STATE_FILE) if not (ckpt / name).is_file()]


def _newest_complete(run_dir: Path) -> tuple[Path | None, Path | None]:
    """``(chosen, skipped)``: the checkpoint ``--resume`` continues from (the newest complete
    one; the newest one when none is complete; ``None`` when none) and the newest incomplete
    checkpoint newer than it (``None`` when there is none)."""
    found = _checkpoints(run_dir)
    if not found:
        return None, None
    complete = [p for p in found if not _missing(p)]
    chosen = complete[-1] if complete else found[-1]
    newer = [p for p in found if _step_of(p) > _step_of(chosen)]
    return chosen, (newer[-1] if newer else None)


def _completeness(chosen: Path, skipped: Path | None) -> str:
    """The words after the chosen checkpoint's name: why it and not a newer one, or that it is
    itself incomplete (``""`` for the newest checkpoint, complete)."""
    if skipped is not None:
        return (
            f", the newest complete checkpoint ({skipped.name} is incomplete: no "
            f"{', '.join(_missing(skipped))}: stopped mid-save)"
        )
    if missing := _missing(chosen):
        return (
            f", which is incomplete (no {', '.join(missing)}: stopped mid-save; no complete "
            "checkpoint to use instead)"
        )
    return ""


def _resume_checkpoint(run_dir: Path, resume: str | None) -> Path | None:
    """The checkpoint a resumed run continues from (``None`` for a new run or none found):
    the one ``resume`` names, or for ``"latest"`` the newest complete one
    (:func:`_newest_complete`)."""
    if not resume:
        return None
    if resume != "latest":
        return Path(resume)
    return _newest_complete(run_dir)[0]


def _run_dir_state(
    run_dir: Path, resume: str | None, wandb_dir: Path | None = None, args: Any = None
) -> str:
    """What the run does with its (checked) run directory, in the dry run's words
    (``wandb_dir``: where W&B writes its runs; default the run directory; ``args``: the run's
    ``GRPOConfig``, whose ``max_steps`` and ``learning_rate`` a resume may change:
    :func:`_schedule_change`)."""
    ckpt = _resume_checkpoint(run_dir, resume)
    if ckpt is not None:
        respread = _schedule_change(ckpt, args) if args is not None else None
        schedule = f"the learning-rate schedule continues from step {_step_of(ckpt)}" + (
            f", {respread}" if respread else ""
        )
        weights_only = (
            f", weights only: {schedule}, {LOST_BY_WEIGHTS_ONLY}; {KEEP_OPTIMIZER_STATE}"
            if _weights_only(ckpt)
            else (f"; {schedule}" if respread else "")
        )
        completeness = _completeness(*_newest_complete(run_dir)) if resume == "latest" else ""
        n = rows_after(run_dir / "reward_quality.jsonl", _step_of(ckpt))
        later = (
            f"; the {n} row{'s' if n > 1 else ''} written after it (reward_quality.jsonl) "
            f"{'are' if n > 1 else 'is'} dropped"
            if n
            else "; no row was written after it (reward_quality.jsonl): none to drop"
            if (run_dir / "reward_quality.jsonl").is_file()
            else ""  # a run that tracks no reward quality (reward.track: false) writes none
        )
        return f"continues from {ckpt.name}{completeness}{weights_only}{later}"
    if not (run_dir.is_dir() and any(run_dir.iterdir())):
        return "created when the run starts"
    return reuse_words(run_dir, RUN_FILES, wandb_dir=wandb_dir)


@contextlib.contextmanager
def _wandb_run_id(run_dir: Path, resume: str | None, main_process: bool) -> Iterator[None]:
    """Give transformers' ``WandbCallback`` (which calls ``wandb.init`` without an id) the run's
    W&B id through ``WANDB_RUN_ID`` / ``WANDB_RESUME=allow``: a new id, written to
    ``<run_dir>/wandb_id.txt``, at a fresh start; the file's id on ``--resume``, so a resumed
    run continues its one W&B run, as SAC's does. Only the main process logs to W&B."""
    with restored_environ(("WANDB_RUN_ID", "WANDB_RESUME")):
        if main_process:
            run_id = wandb_run_id(run_dir, reuse=bool(resume))
            os.environ["WANDB_RUN_ID"], os.environ["WANDB_RESUME"] = run_id, "allow"
        yield


def _create_run_dir(run_dir: Path, resume: str | None, wandb_dir: Path | None = None) -> None:
    """Create the checked run directory. A fresh start replaces the :data:`RUN_FILES` left by
    an earlier start that never reached a checkpoint (they would mix with this run's steps) and
    its W&B runs under ``wandb_dir`` (default the run directory); a
    resumed run drops the reward-quality rows its stopped predecessor wrote after the
    checkpoint (the resumed run writes those steps again). Each is said once in the log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = _resume_checkpoint(run_dir, resume)
    if ckpt is not None:
        step = _step_of(ckpt)
        if resume == "latest" and (skipped := _newest_complete(run_dir)[1]) is not None:
            logger.warning(
                "--resume: %s is incomplete (no %s: stopped mid-save); continuing from %s, the "
                "newest complete checkpoint",
                skipped.name,
                ", ".join(_missing(skipped)),
                ckpt.name,
            )
        if dropped := drop_rows_after(run_dir / "reward_quality.jsonl", step):
            logger.warning(
                "--resume from %s: reward_quality.jsonl: %d row(s) written after it dropped "
                "(this run writes those steps again)",
                ckpt.name,
                dropped,
            )
    elif not resume:
        replace_earlier_files(run_dir, RUN_FILES, wandb_dir=wandb_dir)


def _stopped(exc: BaseException, run_dir: Path, step: int, max_steps: int) -> Interrupted:
    """The :class:`~densereward.errors.Interrupted` of a run stopped while training: what it
    left in ``run_dir`` and how to go on."""
    chosen, skipped = _newest_complete(run_dir)
    where = f"at step {step} of {max_steps}"
    if chosen is not None:
        return Interrupted.of(
            exc,
            f"{where}; {run_dir} keeps {chosen.name}{_completeness(chosen, skipped)}: add "
            f"--resume to the same command (--output-dir {run_dir}) to continue from "
            f"{chosen.name if skipped else 'it'}"
            + (
                " (the reward-quality rows written after it are dropped then)"
                if (run_dir / "reward_quality.jsonl").is_file()
                else ""
            ),
        )
    return Interrupted.of(
        exc,
        f"{where}, before its first checkpoint (training.save_steps): {run_dir} holds nothing "
        "to resume from; the same command starts the run afresh there and replaces its files",
    )


def _drop_unstarted(run_dir: Path, created: bool, trainer: Any) -> None:
    """Remove the run directory this start created when it failed before a training step (a
    policy that does not load, TRL refusing its arguments): docs/configuration.md promises
    that a failed start leaves none behind."""
    steps = int(trainer.state.global_step) if trainer is not None else 0
    if created and steps == 0 and not _checkpoints(run_dir):
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)


def _dtype_note(parts: dict[str, Any]) -> str:
    """``dtype float32``, or ``dtype auto: float32 on cpu`` (resolved as the run resolves it)."""
    requested, training = parts["model"].dtype, parts["training"]
    if requested != "auto":
        return f"dtype {requested}"
    return f"dtype auto: {policy_dtype(requested, training)} on {training_device(training)}"


def run(
    config: dict[str, Any],
    *,
    output_dir: Path | str | None = None,
    dry_run: bool = False,
    resume: str | None = None,
) -> dict[str, Any]:
    """Train (or dry-run) GRPO with the configured reward; the trainer contract of ``densereward compare``.

    Args:
        config: The nested config (YAML sections, overrides applied).
        output_dir: The run directory (created; must be new unless ``resume``); default:
            ``training.output_dir`` or ``runs/<wandb.name or timestamp>``.
        dry_run: Build and validate everything except model weights and data downloads.
        resume: ``"latest"`` (newest checkpoint in the run directory) or a checkpoint path.
            From a weights-only checkpoint (``training.save_only_model: true``) the
            learning-rate schedule continues from its step and the optimizer and
            random-number states start afresh, with one warning. With another
            ``training.max_steps`` than the checkpoint's run had, the schedule is re-spread
            over the new total (the rate of step ``k`` is the new schedule's, from the first
            resumed step on), with one warning that names the first resumed step's rate.

    Returns:
        ``{"run_dir", "curve": [{"step", "value"}], "metric": "verifier/pass_rate", "final",
        "wall_s", "wall_s_this_start", "starts", "wall_s_covers", "steps", "heldout",
        "verifier_reads"}`` (``wall_s``: seconds over all the run's starts, up to the checkpoint a
        resumed run continued from (``checkpoint-<step>/wall_time.json``) plus this start's
        ``wall_s_this_start``; ``wall_s_covers`` says which, and a resumed run adds
        ``resumed_from``, the checkpoint's name; ``heldout`` is ``null`` without a
        ``heldout:`` section, with ``"heldout_reason"`` saying so; the curve is the policy's Math-Verify
        pass rate on each step's training batch; ``verifier_reads`` how many completions the
        verifier reward read, with a warning when it read almost none: :func:`verifier_reads`); with ``heldout.every_steps`` set the curve is the held-out
        pass rate instead (steps 0, k, 2k, ..., last; ``metric`` ``heldout/pass_rate_greedy``
        or ``_sampled``) and the training-batch curve is ``"train_curve"``;
        for a dry run ``{"dry_run": True, "checks": [...]}``.

    Raises:
        ConfigError, DataError: on an invalid configuration or unloadable data.
    """
    from densereward._quiet import tied_weights_notice_dropped, trl_vllm_notice_once

    trl_vllm_notice_once()  # TRL warns about the vLLM version at five imports: once here
    config = copy.deepcopy(config)
    parts = resolve_config(config)
    training = parts["training"]
    output_dir = output_dir if output_dir is not None else training.pop("output_dir", None)
    training.pop("output_dir", None)

    if dry_run:
        return _dry_run(parts, config, output_dir, resume)

    import torch
    from trl import GRPOTrainer

    from densereward.backends.models import resolve_model
    from densereward.data import load_tasks
    from densereward.rewards import RewardQualityTracker, build_reward_funcs
    from densereward.rewards.trl_callback import RewardQualityCallback

    t0 = time.monotonic()
    run_dir = _run_dir(parts, output_dir, resume)  # checked; created below, once all passed
    args = build_grpo_args(parts, run_dir)  # TRL's config and the generation settings first
    builds = _builds_verifier(parts)  # else verifier.model is never loaded: not checked
    check_models(parts["model"].name, parts["verifier"] if builds else None, refuse_problems=True)
    key_env = getattr(parts["verifier"].options, "api_key_env", None)
    secrets = [(get_api_key(key_env) if key_env else None) or ""]
    main_process = _is_main_process()

    # Data: conversational prompts plus problem / answer / level columns for the reward funcs.
    dataset = load_tasks(parts["data"])

    # Reward functions. The verifier is built now, before the policy loads, so an unreachable
    # verifier server fails the run here (naming the URL), not inside the first training step.
    # Every process scores its share and the tracker gathers them; only the main one writes.
    tracker = RewardQualityTracker(
        run_dir if main_process else None,
        threshold=parts["verifier"].threshold,
        window=parts["reward"].track_window,
    )
    # a picklable recipe (TRL's async rollout worker ships reward functions to a spawned
    # process; a closure would not go): built here to fail early, pickled as the recipe
    verifier = VerifierFactory(parts["verifier"])
    if builds:
        verifier = verifier()
    reward_funcs, _ = build_reward_funcs(
        parts["reward"],
        verifier,
        tracker=tracker,
        num_generations=args.num_generations,
        scale_rewards=args.scale_rewards,
    )
    created = main_process and not run_dir.exists()
    if main_process:  # keys never live in configs; masked anyway
        _create_run_dir(run_dir, resume, parts["wandb"].dir_for(run_dir))
        atomic_write_json(run_dir / "config.json", redact(config, secrets))

    # W&B (offline without a key) and the policy.
    trainer, wandb_env = None, contextlib.ExitStack()
    # W&B's service process ending mid-run: one warning, and the run goes on without W&B
    wandb_service = WandbService(run_dir, parts["wandb"].dir_for(run_dir))
    try:
        if wandb_env.enter_context(wandb_environment(parts["wandb"], run_dir)) is not None:
            wandb_env.enter_context(_wandb_run_id(run_dir, resume, main_process))
        policy = resolve_model(parts["model"].name, field="model.name")
        if parts["model"].torch_threads:
            torch.set_num_threads(parts["model"].torch_threads)
        torch.manual_seed(args.seed)
        try:
            trainer = GRPOTrainer(
                model=policy, reward_funcs=reward_funcs, args=args, train_dataset=dataset
            )
        except ValueError as exc:  # one that names a training.* setting is the config's
            if (error := training_error(exc, parts["training"])) is None:
                raise
            raise error from exc
        _guard_wandb_callbacks(trainer, wandb_service)
        trainer.add_callback(_ConfigToWandb(redact(config, secrets), wandb_service))
        name_base_model(trainer, parts["model"].name)  # the model card names the embedded model
        trainer.add_callback(RewardQualityCallback(tracker))  # writes the plot when training ends
        heldout = HeldoutEvaluator(parts["heldout"], args, dataset["problem"], trainer)
        if (every_k := heldout.callback()) is not None:  # heldout.every_steps: a held-out curve
            trainer.add_callback(every_k)
        heldout.evaluate("before", 0)  # the initial policy, before any step (or checkpoint) loads
        ckpt = _resume_checkpoint(run_dir, resume)  # for "latest": the newest complete one
        wall_before = _wall_before(ckpt)  # the time up to it, which this start's adds to
        trainer.add_callback(_WallClock(t0, wall_before, known=ckpt is None or bool(wall_before)))
        checkpoint = str(ckpt) if ckpt is not None else (True if resume == "latest" else resume)
        # another max_steps or learning_rate than the checkpoint's
        respread = _schedule_change(ckpt, args) if ckpt is not None else None
        if ckpt is not None and (_weights_only(ckpt) or respread):
            trainer.add_callback(_ContinueSchedule(args.learning_rate))
        if ckpt is not None and _weights_only(ckpt) and main_process:
            logger.warning(
                "%s holds weights only (no optimizer.pt or scheduler.pt: it was saved with "
                "training.save_only_model: true): the resume continues the learning-rate "
                "schedule from step %d%s, but %s. Fix: %s (checkpoints about 3x larger)",
                ckpt,
                _step_of(ckpt),
                f", {respread}" if respread else "",
                LOST_BY_WEIGHTS_ONLY,
                KEEP_OPTIMIZER_STATE,
            )
        elif respread and main_process:
            logger.warning(
                "--resume from %s: the learning-rate schedule continues from step %d, %s",
                ckpt,
                _step_of(ckpt),
                respread,
            )
        try:
            with tied_weights_notice_dropped(trainer.model):  # a tied lm_head is no missing key
                trainer.train(resume_from_checkpoint=checkpoint)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in densereward train
            # kept even before step 1 ended: its rows and W&B run began, the stop line says
            # what it left, and the same command replaces its files (as SAC's does)
            step = int(trainer.state.global_step)
            stopped = _stopped(exc, run_dir, step, int(trainer.state.max_steps))
            raise (stopped if main_process else exc) from None
        trainer.save_state()
        heldout.evaluate("after", int(trainer.state.global_step))
    except Interrupted as exc:
        if not exc.detail:  # stopped before training began: nothing of it to keep
            _drop_unstarted(run_dir, created, trainer)
        raise
    except BaseException:
        _drop_unstarted(run_dir, created, trainer)
        raise
    finally:
        for f in reward_funcs:
            if hasattr(f, "close"):
                f.close()
        if (
            reward_funcs
            and hasattr(reward_funcs[0], "checker")
            and reward_funcs[0].checker is not None
        ):
            reward_funcs[0].checker.close()
        _finish_wandb(wandb_service, int(trainer.state.global_step) if trainer is not None else 0)
        wandb_env.close()

    plot = tracker.plot_path if tracker.plot_path and tracker.plot_path.is_file() else None
    records = _records(run_dir)  # reward_quality.jsonl, read once for the curve and the counts
    rows = run_dir / "reward_quality.jsonl"
    kind = parts["reward"].kind
    curve, metric = _curve(
        records, trainer, kind.checks_answer and not kind.continuous, _completions_per_log(args)
    )
    train_curve = None
    summary = heldout.summary(run_dir, write=main_process)
    if summary is not None and parts["heldout"].every_steps:  # the held-out curve is the run's
        metric = f"heldout/pass_rate_{heldout.curve[-1]['mode']}"
        n_problems = summary.get("n_problems")
        curve, train_curve = (
            [
                {
                    "step": r["step"],
                    "value": r["value"],
                    **({"n_problems": int(n_problems)} if n_problems else {}),
                }
                for r in heldout.curve
            ],
            curve,
        )
    result = {
        "run_dir": str(run_dir),
        "metric": metric,
        "curve": curve,
        "final": curve[-1]["value"] if curve else float("nan"),
        "final_rests_on": _final_rests_on(records, metric, curve, summary),
        "steps": int(trainer.state.global_step),
        **_wall_fields(time.monotonic() - t0, ckpt, wall_before),
        # only the main process writes the file; the others report none
        "reward_quality": str(rows) if main_process and rows.is_file() else None,
        **(
            {"reward_quality_reason": _untracked(parts, metric)}
            if main_process and not rows.is_file()
            else {}
        ),
        "plot": str(plot) if plot else None,
        "heldout": summary,
        **({"heldout_reason": HELDOUT_OFF} if summary is None else {}),
        "verifier_reads": _verifier_reads(records, parts, args.max_completion_length),
    }
    if train_curve is not None:
        result["train_curve"] = train_curve
    if main_process:
        atomic_write_json(run_dir / "result.json", result)
    return result


def _untracked(parts: dict[str, Any], metric: str) -> str:
    """Why a run wrote no ``reward_quality.jsonl`` (``result.json``'s ``reward_quality_reason``
    beside ``"reward_quality": null``), and what its curve (``metric``) is then."""
    if not parts["reward"].track and not parts["reward"].kind.uses_verifier:
        curve = (
            "the curve (verifier/pass_rate) is TRL's mean 0/1 reward per step, the Math-Verify "
            "pass rate of the training completions"
            if metric == "verifier/pass_rate"
            else f"the curve is TRL's mean reward per step ({metric})"
        )
        return (
            "off: reward.track: false and the reward reads no verifier, so the verifier's "
            f"reward-quality metrics (TPR, TNR, AUROC, ...) were not measured; {curve}; "
            "reward.track: true measures them"
        )
    return "no training step wrote a row"


def _completions_per_log(args: Any) -> int | None:
    """The completions behind each value TRL logs when it logs every step
    (``logging_steps`` 1): ``per_device_train_batch_size * gradient_accumulation_steps *
    world_size`` (one generation batch per optimizer step); ``None`` otherwise."""
    if getattr(args, "logging_steps", None) != 1:
        return None
    return int(args.per_device_train_batch_size * args.gradient_accumulation_steps) * int(
        getattr(args, "world_size", 1) or 1
    )


def _no_verifier(parts: dict[str, Any]) -> str:
    """Why a run builds no verifier (:func:`_builds_verifier` is False), in a dry run's words."""
    reward = parts["reward"]
    if reward.judge == "process_oracle":
        return "reward.judge=process_oracle reads no model"
    return f"reward.type={reward.type} reads no verifier and reward.track: false"


def _builds_verifier(parts: dict[str, Any]) -> bool:
    """Whether the run builds the verifier at its start (the oracle judge reads no model; a
    sparse reward reads it only to track reward quality)."""
    reward = parts["reward"]
    return reward.judge != "process_oracle" and (reward.kind.uses_verifier or reward.track)


MIN_READ_SHARE = 0.1
"""Below this share of completions read by the verifier over a run, the summary warns."""


def verifier_reads(
    run_dir: Path, parts: dict[str, Any], max_completion_length: int | None = None
) -> dict[str, Any] | None:
    """How many of the run's completions the verifier reward read, from ``reward_quality.jsonl``
    (``verifier/n_read`` and ``verifier/n_unread`` of every step), with a warning when it read
    none or fewer than :data:`MIN_READ_SHARE` of them.

    A completion the verifier did not read (no final answer, an empty response) gets a fixed
    reward, so a run whose verifier read nothing trained on a constant judge: the README's quick
    start with the 135M policy read 0 of 20 completions, logged loss 0 and exited 0 with one
    warning at step 1.

    Returns:
        ``{"n_read", "n", "warning"}`` (``warning`` ``None`` when enough were read), or ``None``
        for a reward that reads no verifier or a run with no counts.
    """
    return _verifier_reads(_records(run_dir), parts, max_completion_length)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ``reward_quality.jsonl`` records (none when it has no such file)."""
    path = run_dir / "reward_quality.jsonl"
    return list(read_jsonl(path)) if path.is_file() else []


def _verifier_reads(
    records: list[dict[str, Any]], parts: dict[str, Any], max_completion_length: int | None
) -> dict[str, Any] | None:
    """:func:`verifier_reads` of the records already read."""
    reward = parts["reward"]
    if not reward.kind.uses_verifier or not records:
        return None
    rows = [r for r in records if "verifier/n_read" in r]
    n_read = int(sum(r.get("verifier/n_read") or 0 for r in rows))
    n = n_read + int(sum(r.get("verifier/n_unread") or 0 for r in rows))
    if not n:
        return None
    warning = None
    if n_read < MIN_READ_SHARE * n:
        what = (
            "its judge term was constant: only the Math-Verify answer check trained the policy"
            if reward.kind.checks_answer
            else "it was constant: the policy trained on nothing"
        )
        if n_read:
            what = f"the judge term rested on those few ({n_read / n:.0%})"
        warning = (
            f"the {reward.type} reward's verifier read {n_read} of {n} completions over the run "
            f"(an unread one had no final answer or was empty: verifier/n_unread): {what}. Fix: "
            f"raise training.max_completion_length (now {max_completion_length}) so that answers are not cut "
            "off, use a stronger policy (model.name), or check the answer format (the system "
            "prompt, reward.answer_format)"
        )
    return {"n_read": n_read, "n": n, "warning": warning}


def _final_rests_on(
    records: list[dict[str, Any]],
    metric: str,
    curve: list[dict[str, Any]],
    heldout: dict[str, Any] | None,
) -> str | None:
    """What the run's ``final`` value is computed from, e.g. ``"16 completions of step 5"`` or
    ``"50 held-out problems"`` (``None`` when the records do not say)."""
    if not curve:
        return None
    if metric.startswith("heldout/"):
        n = (heldout or {}).get("n_problems")
        return f"{n} held-out problems" if n else None
    step = curve[-1]["step"]
    n = sum(r.get("verifier/n") or 0 for r in records if r.get("step") == step)
    n = n or curve[-1].get("n_completions") or 0  # untracked: the completions TRL logged over
    return f"{n:.0f} completions of step {step}" if n else None


def _curve(
    records: list[dict[str, Any]], trainer: Any, zero_one: bool, per_log: int | None = None
) -> tuple[list[dict[str, Any]], str]:
    """``(curve, metric)``: the ``verifier/pass_rate`` curve, each point with
    ``n_completions`` (the completions it is the pass rate of) where the records count them
    (``densereward compare`` reports what a final value rests on). Without a tracked pass rate
    (``reward.track: false`` and a reward that reads no verifier), TRL's mean reward per step:
    the pass rate for a 0/1 Math-Verify reward (``zero_one``: ``sparse``), else
    ``train/reward``, each point with ``per_log`` completions when given
    (:func:`_completions_per_log`)."""
    by_step: dict[int, list[float]] = {}
    n_by_step: dict[int, float] = {}
    for r in records:
        if r.get("verifier/pass_rate") is not None:
            by_step.setdefault(int(r["step"]), []).append(r["verifier/pass_rate"])
            n_by_step[int(r["step"])] = n_by_step.get(int(r["step"]), 0.0) + float(
                r.get("verifier/n") or 0.0
            )
    if by_step:
        return [
            {
                "step": s,
                "value": sum(v) / len(v),
                **({"n_completions": int(n_by_step[s])} if n_by_step.get(s) else {}),
            }
            for s, v in sorted(by_step.items())
        ], "verifier/pass_rate"
    return [
        {
            "step": int(h["step"]),
            "value": h["reward"],
            **({"n_completions": per_log} if per_log else {}),
        }
        for h in trainer.state.log_history
        if "reward" in h
    ], ("verifier/pass_rate" if zero_one else "train/reward")


def _finish_wandb(service: WandbService, step: int) -> None:
    """Finish W&B's current run, if any, and reset W&B's process-wide settings, so a next run
    in this process (densereward compare, tests) reads its own WANDB_DIR / mode instead of this
    run's; after W&B's service ended (``service.lost_at``) only the reset, quietly."""
    try:
        import wandb  # noqa: F401 - without W&B there is nothing to finish
    except ImportError:
        return
    service.finish(None, step=step)


class _GuardedCallback:
    """A W&B ``TrainerCallback`` (transformers' ``WandbCallback``) whose events go through
    ``service`` (:class:`~densereward.wandb_config.WandbService`): once W&B's service process
    has ended, an event's ``ConnectionError`` is said once and the later events are skipped,
    instead of ending the training. Other attributes are the callback's own."""

    def __init__(self, callback: Any, service: WandbService) -> None:
        self.callback = callback
        self.service = service

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.callback, name)
        if not (name.startswith("on_") and callable(attr)):
            return attr

        def event(args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            done = self.service.call(int(state.global_step), attr, args, state, control, **kwargs)
            if name == "on_train_begin" and done:
                import wandb

                if wandb.run is not None:  # the callback started it: TRL's wandb.log goes too
                    self.service.guard_log(lambda: state.global_step)

        return event


def _guard_wandb_callbacks(trainer: Any, service: WandbService) -> None:
    """Route the events of ``trainer``'s W&B callback (``report_to`` with ``wandb``) through
    ``service``, so a run goes on without W&B when W&B's service process ends."""
    from transformers.integrations import WandbCallback

    callbacks = trainer.callback_handler.callbacks
    for i, callback in enumerate(callbacks):
        if isinstance(callback, WandbCallback):
            callbacks[i] = _GuardedCallback(callback, service)


class _ConfigToWandb:
    """Adds the (redacted) densereward config to the W&B run beside TRL's GRPOConfig."""

    def __new__(cls, config: dict[str, Any], service: WandbService):
        from transformers import TrainerCallback

        class _Cb(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                try:
                    import wandb

                    if wandb.run is not None:
                        update = wandb.config.update
                        step = int(state.global_step)
                        service.call(step, update, {"densereward": config}, allow_val_change=True)
                except ImportError:
                    pass

        return _Cb()


def _prompt_note(data: Any) -> str:
    """What the dry run's data line adds of ``data.system_prompt``: nothing for the default,
    else the user's own text as used (``; system prompt '...'``) or ``; no system prompt``."""
    from densereward.data import SYSTEM_PROMPT

    if data.system_prompt == SYSTEM_PROMPT:
        return ""
    if not data.system_prompt:  # null or empty: to_conversational sends none
        return f"; no system prompt (data.system_prompt: {data.system_prompt!r})"
    return f"; system prompt {data.system_prompt!r} (data.system_prompt)"


def _dry_run(
    parts: dict[str, Any], config: dict[str, Any], output_dir: Any, resume: str | None
) -> dict[str, Any]:
    """Validate the whole config without model weights or downloads; report what was checked.

    Local data is loaded (a missing file is an error); a Hub data id is not downloaded, and
    with ``HF_HUB_OFFLINE`` set one missing from the local cache is reported under
    ``problems``; a Hub model id is looked up in the local cache and, when it is not there,
    reported under ``problems`` if the Hub does not answer (:func:`.checks.check_model`); the
    run directory is checked as the run would check it, and not created.
    """
    import tempfile

    from densereward.data import check_source
    from densereward.rewards import RewardQualityTracker, build_reward_funcs

    data_line, data_problem = check_source(parts["data"])
    builds = _builds_verifier(parts)  # else no verifier model is loaded, checked or contacted
    (policy_line, *verifier_line), model_problems = check_models(
        parts["model"].name, parts["verifier"] if builds else None
    )
    server_line, server_problem = (
        check_verifier_server(parts["verifier"]) if builds else (None, None)
    )  # a served verifier is contacted as the run's start contacts it
    run_dir = _run_dir(parts, output_dir, resume)
    with tempfile.TemporaryDirectory() as tmp:
        args = build_grpo_args(parts, Path(tmp) / "dry-run", cpu_check=True)
        funcs, weights = build_reward_funcs(
            parts["reward"],
            VerifierFactory(parts["verifier"]),
            tracker=RewardQualityTracker(None),
            num_generations=args.num_generations,
            scale_rewards=args.scale_rewards,
        )
    state = _run_dir_state(run_dir, resume, parts["wandb"].dir_for(run_dir), args)
    checks = [
        *([f"{policy_line} ({_dtype_note(parts)}) -- weights NOT loaded"] if policy_line else []),
        *([data_line + _prompt_note(parts["data"])] if data_line else []),  # else its !! line
        f"run directory: {run_dir} ({state})",
        f"verifier: VerifierConfig ok (backend {parts['verifier'].backend}, G={parts['verifier'].granularity}, "
        f"K={parts['verifier'].n_repeats}, style {parts['verifier'].style}, "
        f"batch_size {parts['verifier'].batch_size}, options {parts['verifier'].options})"
        if builds
        else f"verifier: not used ({_no_verifier(parts)}): no verifier model is loaded or checked",
        *[x for x in verifier_line if x],  # one with a problem: only its !! line
        *([server_line] if server_line else []),
    ]
    checks.append(
        f"training: trl.GRPOConfig ok (use_vllm={args.use_vllm}, vllm_mode={args.vllm_mode}, {bf16_note(parts, args)}, "
        f"num_generations={args.num_generations}, per_device_train_batch_size={args.per_device_train_batch_size}, "
        f"max_completion_length={args.max_completion_length}, max_steps={args.max_steps}, report_to={args.report_to}, "
        f"scale_rewards={args.scale_rewards}"
        + (
            " (set by densereward for a verifier reward)"
            if "scale_rewards" not in parts["training"] and args.scale_rewards == "none"
            else ""
        )
        + ")"
    )
    checks.append(describe_wandb(parts["wandb"], run_dir))
    checks.append(
        f"reward: {parts['reward'].type} -> reward_funcs {[f.__name__ for f in funcs]}"
        + (f", reward_weights {weights}" if weights else "")
        + (f", options {parts['reward'].options}" if parts["reward"].options is not None else "")
    )
    if args.use_vllm:
        import importlib.util

        checks.append(
            "vllm: "
            + (
                "importable"
                if importlib.util.find_spec("vllm")
                else "NOT installed (needed on the GPU machine)"
            )
        )
    problems = [p for p in (data_problem, *model_problems, server_problem) if p]
    return {"dry_run": True, "checks": checks, "problems": problems, "config": redact(config)}


# --------------------------------------------------------------------------------------------
# 3. Command line
# --------------------------------------------------------------------------------------------

EPILOG = """\
examples:
  densereward train grpo --config configs/grpo_math_cpu.yaml \\
      --data ../shared/data/math500/test.jsonl --max-steps 5 --output-dir runs/demo
  densereward train grpo --config configs/grpo_math_cpu.yaml --reward group --max-steps 5 \\
      --output-dir runs/demo-group verifier.granularity=10 training.learning_rate=1e-6
  densereward train grpo --config configs/grpo_math_qwen3_8b.yaml --dry-run
  densereward train grpo --config configs/grpo_math_cpu.yaml --output-dir runs/demo --resume

Overrides are dotted key=value pairs over the YAML sections model, data, reward, verifier,
training (any trl.GRPOConfig field) and wandb. --data/--max-steps/--output-dir/--reward are
shortcuts for data.path, training.max_steps, training.output_dir (the run directory, which
must not exist yet unless --resume) and reward.type. W&B runs offline when no API key is set;
its files, checkpoints, reward_quality.jsonl and reward_quality.png all go in the run directory.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the GRPO launcher's arguments to ``parser`` (used by ``densereward train grpo``)."""
    parser.description = (
        "GRPO (TRL) with sparse Math-Verify, dense verifier, group or mixed rewards."
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--config", required=True, help="YAML config, e.g. configs/grpo_math_cpu.yaml"
    )
    add_override_arguments(parser, "training.max_steps=5 verifier.granularity=10")
    parser.add_argument(
        "--data",
        metavar="PATH_OR_HUB_ID",
        help="data.path: MATH/GSM8K JSONL, a Hub id, or reasoning_gym",
    )
    parser.add_argument("--max-steps", type=int, metavar="N", help="training.max_steps")
    parser.add_argument(
        "--output-dir", metavar="DIR", help="the run directory (training.output_dir)"
    )
    from densereward.rewards.kinds import GRPO_REWARDS

    parser.add_argument("--reward", choices=GRPO_REWARDS.names(), help="reward.type")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the whole config (GRPOConfig, VerifierConfig, reward functions) "
        "without loading weights or downloading anything",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        default=None,
        metavar="CHECKPOINT",
        help="continue from the newest checkpoint of --output-dir, or from CHECKPOINT",
    )


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Load the YAML and apply the overrides and shortcut flags (flags win)."""
    config = load_yaml(args.config)
    apply_overrides(config, overrides_from(args))

    def sections(name: str) -> dict[str, Any]:
        if not isinstance(config.get(name), dict):
            config[name] = {}
        return config[name]

    if args.data:
        data = sections("data")
        kind_key = (
            "path"
            if args.data.endswith((".jsonl", ".json")) or Path(args.data).exists()
            else "source"
        )
        data.pop("path" if kind_key == "source" else "source", None)
        data[kind_key] = args.data
    if args.max_steps is not None:
        sections("training")["max_steps"] = args.max_steps
    if args.output_dir:
        sections("training")["output_dir"] = args.output_dir
    if args.reward:
        sections("reward")["type"] = args.reward
        # weights belong to the kinds that take them (mixed, gated, seed_recipe); a YAML's
        # weights for another kind's shape are dropped with the kind they were written for
        w = config["reward"].get("weights")
        takes = {"mixed": 2, "gated": 2, "seed_recipe": 3}.get(args.reward)
        if w is not None and (takes is None or len(w) != takes):
            config["reward"].pop("weights")
            logger.warning(
                "--reward %s: the config's reward.weights %s do not fit it (it takes %s); dropped",
                args.reward,
                w,
                f"{takes} weights" if takes else "none",
            )
    return config


def dry_run(config: dict[str, Any], *, output_dir: Path, resume: str | None = None) -> list[str]:
    """The dry-run checks of ``run(config, dry_run=True)`` as lines (``densereward compare
    --dry-run``); a problem the run would hit although the config is valid starts ``"!! "``."""
    result = run(config, output_dir=output_dir, dry_run=True, resume=resume)
    return list(result["checks"]) + ["!! " + p for p in result["problems"]]


def main(args: argparse.Namespace) -> int:
    """CLI entry: run (or dry-run) and print a summary; returns the exit code."""
    import json

    from densereward._quiet import configure_logging

    configure_logging(logging.INFO)  # the CLI's format; huggingface_hub's warnings print once
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        config = config_from_args(args)
        result = run(config, dry_run=args.dry_run, resume=args.resume)
    except DenseRewardError as exc:
        print(f"densereward: error: {exc}", file=sys.stderr)
        return 2
    if result.get("dry_run"):
        return print_dry_run(result["checks"], result["problems"])
    command_finished()  # its outputs are written: a SIGTERM now lets the summary print
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}, indent=2))
    run_dir = Path(result["run_dir"])
    wandb_runs = (
        sorted(str(p) for p in (run_dir / "wandb").glob("*run-*"))
        if (run_dir / "wandb").is_dir()
        else []
    )
    print(f"\nGRPO run finished in {_finished_in(result)}. Results are in {run_dir}/:")
    reason = result.get("reward_quality_reason")
    off = f"none ({reason.split(', so ')[0]})" if reason else "none"
    print(f"  reward-quality metrics (verifier/* per step): {result.get('reward_quality') or off}")
    print(f"  reward-quality dynamics plot:                 {result.get('plot') or off}")
    table = f"{run_dir}/completions/, " if (run_dir / "completions").is_dir() else ""
    label = ("completions table, " if table else "") + "config, result:"
    print(f"  {label:<46}{table}config.json, result.json")
    heldout = (
        f"{run_dir}/heldout.json"
        if result.get("heldout") is not None
        else "off (no heldout: section in the config; docs/grpo.md)"
    )
    print(f"  {'held-out pass rate (before/after):':<46}{heldout}")
    checkpoints = _checkpoints(run_dir)
    weights_only = (
        f" (weights only: a resume restarts the optimizer and random-number states; "
        f"{KEEP_OPTIMIZER_STATE})"
        if checkpoints and _weights_only(checkpoints[-1])  # the one --resume continues from
        else ""
    )
    print(
        f"  checkpoints (resume with --resume):           {', '.join(str(p) for p in checkpoints) or 'none'}{weights_only}"
    )
    print(
        f"  W&B run (offline: `wandb sync <dir>`):        {', '.join(wandb_runs) or 'not logged'}"
    )
    warning = (result.get("verifier_reads") or {}).get("warning")
    if warning:  # loud, last: a run that trained on a constant reward still exits 0
        print(f"\n!! WARNING: {warning}")
    return 0


def _finished_in(result: dict[str, Any]) -> str:
    """The summary's wall time: ``"177 s"``, or after ``--resume`` ``"218 s (41 s in this
    start, resumed from checkpoint-5)"`` (:func:`_wall_fields`)."""
    wall = f"{result.get('wall_s', float('nan')):.0f} s"
    if not result.get("resumed_from"):
        return wall
    if result.get("starts") is None:  # the checkpoint records no earlier time
        return (
            f"{wall} in this start, resumed from {result['resumed_from']}, which records no "
            f"earlier wall time (no {WALL_FILE})"
        )
    return f"{wall} ({result['wall_s_this_start']:.0f} s in this start, resumed from {result['resumed_from']})"


def cli_main(argv: list[str] | None = None) -> int:
    """``python trainers/grpo.py ...``: parse the flags of :func:`add_arguments` and run :func:`main`."""
    parser = argparse.ArgumentParser(prog="python trainers/grpo.py")
    add_arguments(parser)
    return main(parse_command_line(parser, argv))


if __name__ == "__main__":
    sys.exit(cli_main())
