"""The GRPO run's configuration: the YAML sections, their dataclasses and ``trl.GRPOConfig``.

``resolve_config`` turns the YAML dict into typed parts (``model``, ``data``, ``reward``,
``verifier``, ``training``, ``wandb``, ``heldout``); ``build_grpo_args`` makes the
``GRPOConfig`` (TRL's own dataclass: every field works, unknown keys are errors). The run
itself is :mod:`densereward.trainers.grpo`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densereward.backends.dtype import resolve_dtype
from densereward.config import (
    VerifierConfig,
    check_model_and_dtype,
    check_sections,
    field_names,
    unknown_key_hints,
)
from densereward.config_files import from_dict
from densereward.errors import ConfigError
from densereward.sections import check_passthrough_values
from densereward.wandb_config import WandbConfig, refuse_old_keys

__all__ = [
    "SECTIONS",
    "ModelConfig",
    "WandbConfig",
    "bf16_note",
    "grpo_config_kwargs",
    "resolve_config",
    "build_grpo_args",
    "check_generation",
    "training_device",
    "training_error",
    "policy_dtype",
]

SECTIONS = ("model", "data", "reward", "verifier", "training", "wandb", "heldout")


@dataclass(frozen=True)
class ModelConfig:
    """The policy (YAML section ``model:``)."""

    name: str | None = None
    """Hugging Face id or local path; ``None`` = the embedded SmolLM2-135M-Instruct."""
    dtype: str = "auto"
    """``auto``, ``float32``, ``bfloat16``, ``float16``. ``auto`` is the verifier's rule on the
    training device (:func:`policy_dtype`): bfloat16 where the device multiplies it natively (a
    GPU with native bf16, a CPU with AMX), float32 elsewhere."""
    attn_implementation: str | None = None
    """e.g. ``sdpa`` or ``flash_attention_2``; ``None`` = transformers' default."""
    torch_threads: int | None = None
    """CPU threads for torch (``torch.set_num_threads``); ``None`` = torch's default. On a
    shared or small CPU, 1 avoids OpenMP spin contention (measured 6x faster generation on a
    loaded 2-core machine)."""

    def __post_init__(self) -> None:
        check_model_and_dtype("model.name", self.name, "model.dtype", self.dtype)
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError(f"model.torch_threads must be >= 1 or null, got {self.torch_threads}")


# --------------------------------------------------------------------------------------------
# 1. Configuration
# --------------------------------------------------------------------------------------------


def grpo_config_kwargs(training: dict[str, Any]) -> dict[str, Any]:
    """Check ``training:`` keys against ``trl.GRPOConfig``'s fields, and their values against
    the fields' types (:func:`~densereward.sections.check_passthrough_values`: a float field
    takes a finite number, a length or batch size a positive integer), so that the dry run
    refuses what TRL would only fail on inside the first step (``learning_rate=abc`` was a
    TypeError after two minutes, ``max_completion_length=-5`` a ValueError in generation).

    Raises:
        ConfigError: naming each unknown key and its closest GRPOConfig field, or the first
            value of the wrong type or range.
    """
    import typing

    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    unknown = sorted(set(training) - names)
    if unknown:
        raise ConfigError(
            "unknown trl.GRPOConfig field(s) under training: "
            + unknown_key_hints(unknown, names, sep=", ")
        )
    return check_passthrough_values(
        training,
        typing.get_type_hints(GRPOConfig),
        prefix="training.",
        owner="trl.GRPOConfig",
        ranges={"learning_rate": (0, None)},
    )


def training_device(training: dict[str, Any]) -> str:
    """The device type the Trainer will train on: ``"cpu"`` with ``use_cpu`` or without a GPU,
    else ``"cuda"``."""
    import torch

    return "cpu" if training.get("use_cpu") or not torch.cuda.is_available() else "cuda"


def policy_dtype(requested: str, training: dict[str, Any]) -> str:
    """The dtype the policy loads in (``model.dtype``): a named dtype as given; ``auto`` by the
    one rule of :func:`densereward.backends.dtype.resolve_dtype` on the training device
    (:func:`training_device`), the rule the verifier's ``dtype: auto`` and TRL's bf16 autocast
    (``training.bf16`` unset) follow too."""
    return resolve_dtype(requested, training_device(training))


def bf16_note(parts: dict[str, Any], args: Any) -> str:
    """How ``training.bf16`` was decided, for the dry run: set in the config, or resolved from
    the device the way ``dtype: auto`` is (:func:`densereward.backends.dtype.resolve_dtype`)."""
    if parts["training"].get("bf16") is not None:
        return f"bf16={args.bf16} (training.bf16)"
    device = training_device(parts["training"])
    why = (
        "fp16 set" if args.fp16 else ("native bf16" if args.bf16 else "no native bf16, fp32 faster")
    )
    return f"bf16={args.bf16} (auto: {device}, {why})"


def _section_fields() -> dict[str, Any]:
    """Section -> its field names, for the unknown-section hints (evaluated only on error)."""
    from densereward.data import DataConfig
    from densereward.policy_eval import HeldoutConfig
    from densereward.rewards import RewardConfig

    def grpo_fields() -> list[str]:
        from trl import GRPOConfig

        return field_names(GRPOConfig)

    classes = {"model": ModelConfig, "data": DataConfig, "reward": RewardConfig}
    out: dict[str, Any] = {k: (lambda c=c: field_names(c)) for k, c in classes.items()}
    out["verifier"] = lambda: field_names(VerifierConfig)
    out["training"] = grpo_fields
    out["wandb"] = lambda: field_names(WandbConfig)
    out["heldout"] = lambda: field_names(HeldoutConfig)
    return out


def resolve_config(config: dict[str, Any]) -> dict[str, Any]:
    """Parse every section into its dataclass (errors early, before any weights load).

    Returns:
        ``{"model", "data", "reward", "verifier", "wandb": dataclass, "training": dict}``.

    Raises:
        ConfigError / DataError: for unknown sections or keys and invalid values.
    """
    from densereward.data import DataConfig
    from densereward.policy_eval import HeldoutConfig
    from densereward.rewards import RewardConfig
    from densereward.rewards._common import check_prompt_settings

    check_sections(config, _section_fields(), command="train grpo")
    refuse_old_keys(config)
    parts = {
        "model": from_dict(ModelConfig, config.get("model"), prefix="model."),
        "data": from_dict(DataConfig, config.get("data"), prefix="data."),
        "reward": from_dict(RewardConfig, config.get("reward"), prefix="reward."),
        "verifier": from_dict(VerifierConfig, config.get("verifier"), prefix="verifier."),
        "wandb": WandbConfig.from_section(config.get("wandb")),
        "heldout": from_dict(HeldoutConfig, config.get("heldout"), prefix="heldout."),
        "training": grpo_config_kwargs(dict(config.get("training") or {})),
    }
    check_prompt_settings(parts["reward"], parts["verifier"])
    return parts


_WARNED_SCALE: set[str] = set()


def _scale_rewards(kind: str, kw: dict[str, Any]) -> None:
    """Set ``scale_rewards`` for the library's verifier reward kinds; warn on a user-set ``group``.

    A kind whose spec says ``continuous`` (:class:`~densereward.rewards.kinds.RewardKind`) runs
    with ``"none"`` unless ``training.scale_rewards`` is set
    (:func:`~densereward.rewards.kinds.default_scale_rewards`).
    ``"group"`` with a continuous judge divides each group's rewards by its own spread: in a
    group where every completion is wrong the judge's small differences become unit-size
    advantages and the weight that bounds the judge cancels; that is warned about once, with
    the reason (issue 36).
    """
    from densereward.rewards.kinds import default_scale_rewards, reward_kind

    if not reward_kind(kind).continuous:
        return
    if kw.get("scale_rewards") is None:
        kw["scale_rewards"] = default_scale_rewards(kind)
    elif kw["scale_rewards"] == "group" and kind not in _WARNED_SCALE:
        _WARNED_SCALE.add(kind)
        import logging

        logging.getLogger("densereward.trainers.grpo").warning(
            "training.scale_rewards=group with reward.type=%s: TRL divides each group's rewards by "
            "that group's spread, so in a group where every completion is equally correct the "
            "judge's small differences become advantages as large as a correct answer's, and the "
            "weight that bounds the judge cancels (the advantage audit logs it as "
            "verifier/advantage/wrong_up_share). The library runs verifier rewards with "
            "scale_rewards=none (Dr. GRPO); drop training.scale_rewards to use it",
            kind,
        )


def build_grpo_args(parts: dict[str, Any], run_dir: Path, *, cpu_check: bool = False):
    """Build ``trl.GRPOConfig`` from ``training:`` plus what this script decides.

    ``output_dir`` is the run directory, ``run_name`` the W&B name, ``reward_weights`` come
    from ``reward.weights`` for the mixed reward, ``model_init_kwargs`` from ``model:``.
    With ``cpu_check`` (a dry run on a machine without a GPU) ``use_cpu=True`` is added so
    transformers' bf16 device check passes; everything else is validated as on the GPU.
    """
    import torch
    from trl import GRPOConfig

    kw = dict(parts["training"])
    kw["output_dir"] = str(run_dir)
    kw.setdefault("run_name", parts["wandb"].name or run_dir.name)
    reporters = kw.get("report_to") or []  # "wandb"/"all" were refused (wandb_config)
    reporters = [
        r for r in ([reporters] if isinstance(reporters, str) else reporters) if r != "none"
    ]
    kw["report_to"] = reporters + ["wandb"] if parts["wandb"].enabled else reporters or "none"
    if parts["reward"].reward_weights is not None:  # mixed, seed_recipe
        if kw.get("reward_weights") is not None:
            raise ConfigError(
                f"set either reward.weights or training.reward_weights for the {parts['reward'].type} "
                "reward, not both"
            )
        kw["reward_weights"] = parts["reward"].reward_weights
    kind = parts["reward"].kind
    _scale_rewards(parts["reward"].type, kw)
    model_init = dict(kw.get("model_init_kwargs") or {})
    model_init.setdefault("dtype", policy_dtype(parts["model"].dtype, kw))
    if parts["model"].attn_implementation:
        model_init.setdefault("attn_implementation", parts["model"].attn_implementation)
    kw["model_init_kwargs"] = model_init
    if kw.get("bf16") is None:  # TRL's default (bf16 on) would autocast where bf16 is slower
        kw["bf16"] = not kw.get("fp16") and resolve_dtype("auto", training_device(kw)) == "bfloat16"
    if cpu_check and not torch.cuda.is_available():
        kw["use_cpu"] = True
    try:
        args = GRPOConfig(**kw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"trl.GRPOConfig rejected the training section: {exc}") from exc
    check_generation(args)
    if kind.check_training is not None:  # the kind's own checks (gated: the aggregation)
        kind.check_training(parts["reward"], args)
    if kind.needs_groups:
        per_proc = args.per_device_train_batch_size * args.steps_per_generation
        if per_proc % args.num_generations:
            raise ConfigError(
                f"reward.type={parts['reward'].type} ranks the num_generations completions of a prompt together, so each "
                f"process needs whole groups: per_device_train_batch_size * steps_per_generation ({per_proc}) "
                f"must be a multiple of num_generations ({args.num_generations})"
            )
    return args


_SAMPLERS = (  # GenerationMixin._get_logits_processor's rule: which processor each setting makes
    ("temperature", "TemperatureLogitsWarper", lambda v: v is not None and v != 1.0),
    ("top_k", "TopKLogitsWarper", lambda v: v is not None and v != 0),
    ("top_p", "TopPLogitsWarper", lambda v: v is not None and v < 1.0),
    ("min_p", "MinPLogitsWarper", lambda v: v is not None),
    (
        "repetition_penalty",
        "RepetitionPenaltyLogitsProcessor",
        lambda v: v is not None and v != 1.0,
    ),
)


def check_generation(args: Any) -> None:
    """Check the generation settings of a built ``trl.GRPOConfig`` as transformers will at the
    first generation, so that the dry run and the run's start refuse them, naming the key.

    The settings go into ``transformers.GenerationConfig`` as TRL's GRPOTrainer builds it
    (``max_completion_length``, ``temperature``, ``top_p``, ``top_k``, ``min_p``,
    ``repetition_penalty``, ``cache_implementation``, then ``generation_kwargs`` over them),
    which is validated (``validate(strict=True)``); then each logits processor that
    transformers' ``generate`` would build from them is built (their constructors check the
    values: ``temperature=-1`` loaded both models and ended the first step in a ValueError).
    With ``use_vllm`` the settings go to vLLM's ``SamplingParams`` instead (other rules, e.g.
    ``temperature=0`` is greedy there): vLLM checks them when it generates.

    Raises:
        ConfigError: naming ``training.<field>`` (or ``training.generation_kwargs.<key>``).
    """
    if getattr(args, "use_vllm", False):
        return
    from transformers import GenerationConfig
    from transformers.generation import logits_process

    given = dict(args.generation_kwargs or {})
    kw = {
        "max_new_tokens": args.max_completion_length,
        "do_sample": True,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p,
        "repetition_penalty": args.repetition_penalty,
        "cache_implementation": args.cache_implementation,
        **given,
    }

    def key(name: str) -> str:
        if name in given:
            return f"training.generation_kwargs.{name}"
        return "training." + ("max_completion_length" if name == "max_new_tokens" else name)

    try:
        gen = GenerationConfig(**kw, disable_compile=True)
        gen.validate(strict=True)
    except (ValueError, TypeError) as exc:
        named = [k for k in kw if re.search(rf"\b{re.escape(k)}\b", str(exc))]
        where = ", ".join(key(k) for k in named) or "training (generation settings)"
        raise ConfigError(
            f"{where}: transformers' GenerationConfig refuses it: {exc}".replace("\n", " ")
        ) from None
    if not gen.do_sample:
        return
    for name, processor, builds in _SAMPLERS:
        value = getattr(gen, name, None)
        if not builds(value):
            continue
        try:
            getattr(logits_process, processor)(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"{key(name)}={value!r}: {exc} (transformers' {processor} refuses it at the "
                "first generation)"
            ) from None


def training_error(exc: BaseException, training: dict[str, Any]) -> ConfigError | None:
    """A ``ValueError`` that TRL or transformers raised while the trainer started, as a
    :class:`ConfigError` naming the ``training.*`` setting its message names, or ``None`` when
    it names none of the settings the config gave (then it is not attributable to the config
    and is reported as what it is, a bug).

    >>> str(training_error(ValueError("`top_p` must be > 0"), {"top_p": -1.0}))
    'training.top_p=-1.0: trl / transformers refused it when the trainer started: `top_p` must be > 0'
    >>> training_error(ValueError("index out of range"), {"top_p": -1.0}) is None
    True
    """
    if not isinstance(exc, ValueError):
        return None
    text = str(exc)
    named = [k for k in training if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", text)]
    if not named:
        return None
    settings = ", ".join(f"training.{k}={training[k]!r}" for k in named)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return ConfigError(
        f"{settings}: trl / transformers refused it when the trainer started: {first}"
    )
