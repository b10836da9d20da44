"""Helpers shared by the reward functions: completion text, problem text, groups, lengths."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError, DataError

__all__ = [
    "completion_texts",
    "prompt_texts",
    "check_lengths",
    "group_slices",
    "check_verifier_options",
    "check_group_options",
    "check_weights",
    "check_trl",
    "TRL_MIN_VERSION",
]

TRL_MIN_VERSION = (1, 6)
"""The oldest TRL whose ``GRPOTrainer`` leaves a completion on which every reward function
returned ``None`` out of its group's mean and std and gives it advantage 0 (huggingface/trl#5902,
in 1.6.0). Older releases ``nansum`` that row to a reward of 0, which counts in the group's
baseline as if the completion had earned 0."""


MAX_REWARD = 1e6
"""A bound on one reward function's magnitude that :func:`check_weights` keeps the weighted
sum finite under (the built-in rewards are in ``[0, 1]``, the gated one in ``[0, w_s + w_j]``)."""


def check_weights(weights: Sequence[float], key: str) -> None:
    """Refuse reward weights that are not finite or whose weighted sum could overflow.

    The sum ``sum_i w_i r_i`` stays finite for rewards up to :data:`MAX_REWARD` in magnitude
    when ``sum_i |w_i| * MAX_REWARD`` is finite; a server would otherwise start and then fail to
    serialise every affected answer.

    Raises:
        ConfigError: naming ``key`` and the weights.

    >>> check_weights([1.0, 0.1], "reward.weights")
    >>> check_weights([1.0, float("inf")], "reward.weights")
    Traceback (most recent call last):
    densereward.errors.ConfigError: reward.weights must be finite numbers, got [1.0, inf]
    """
    w = [float(x) for x in weights]
    if not all(math.isfinite(x) for x in w):
        raise ConfigError(f"{key} must be finite numbers, got {w}")
    if not math.isfinite(sum(abs(x) for x in w) * MAX_REWARD):
        raise ConfigError(
            f"{key} {w} overflow: the weighted sum of rewards up to {MAX_REWARD:g} in magnitude "
            "is not a finite number; use weights of a sensible size"
        )


def _message_text(content: Any) -> str | None:
    """Text of a message ``content`` (a string, or a list of ``{"type": "text", "text": ...}`` parts).

    Returns ``None`` for anything else (e.g. ``content=None``): not a text the verifier can score.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return None


def completion_texts(completions: Sequence[Any]) -> list[str | None]:
    """Plain text of each completion, for conversational and standard formats.

    Conversational completions are lists of message dicts (TRL gives one assistant message;
    with tools there may be several); their assistant contents are joined. Standard ones are
    strings. Anything that is not text (``None``, numbers, a message whose content is not
    text) becomes ``None``, which the verifier engine turns into a counted abstention and the
    math checker into ``None`` (never a silent score of the stringified value).

    Args:
        completions: ``(n,)`` completions as TRL passes them.

    Returns:
        ``(n,)`` strings or ``None``.

    >>> completion_texts([[{"role": "assistant", "content": "x"}], "y", None, 7])
    ['x', 'y', None, None]
    """
    out: list[str | None] = []
    for c in completions:
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, dict):
            out.append(_message_text(c.get("content")))
        elif isinstance(c, Sequence):
            msgs = [m for m in c if isinstance(m, dict) and m.get("role") != "tool"]
            parts = [_message_text(m.get("content")) for m in msgs]
            if not msgs or any(p is None for p in parts):
                out.append(None)
            else:
                out.append("\n".join(p for p in parts if p))
        else:
            out.append(None)
    return out


def prompt_texts(prompts: Sequence[Any]) -> list[str]:
    """The problem text of each prompt: the last user message (conversational) or the string.

    >>> prompt_texts([[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], "p"])
    ['q', 'p']
    """
    out = []
    for p in prompts:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, Sequence):
            users = [m for m in p if isinstance(m, dict) and m.get("role") == "user"]
            out.append((_message_text(users[-1].get("content")) or "") if users else "")
        else:
            out.append("" if p is None else str(p))
    return out


def check_lengths(*, completions: Sequence[Any], **columns: Sequence[Any] | None) -> None:
    """Raise if any per-completion column's length differs from ``len(completions)``.

    Raises:
        DataError: naming the column and both lengths.
    """
    n = len(completions)
    for name, col in columns.items():
        if col is not None and len(col) != n:
            raise DataError(
                f"length mismatch: {len(col)} values in {name!r} but {n} completions; a reward "
                "function needs exactly one value per completion"
            )


def check_trl(trainer_state: Any) -> None:
    """Refuse to reward for a TRL that would count an abstention as a reward of 0.

    Every reward function here returns ``None`` where it cannot score (a Math-Verify timeout, a
    verifier that abstained), trusting the trainer to leave a completion that no reward could
    score out of its group's statistics. Called with the ``trainer_state`` TRL passes; outside a
    trainer (``None``) there is nothing to check.

    Raises:
        ImportError: under a TRL older than :data:`TRL_MIN_VERSION`, naming the upgrade.

    >>> check_trl(None)
    """
    if trainer_state is None:
        return
    trl = sys.modules.get("trl")
    version = str(getattr(trl, "__version__", "")) if trl is not None else ""
    numbers = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if numbers and numbers < TRL_MIN_VERSION:
        need = ".".join(map(str, TRL_MIN_VERSION))
        raise ImportError(
            f"densereward's reward functions need trl>={need} (installed: {version}): older "
            "GRPOTrainers count a completion on which every reward function returned None (a "
            "Math-Verify timeout, a verifier abstention) as a reward of 0 in its group's mean and "
            f"std. pip install -U 'trl>={need}'"
        )


def group_slices(prompts: Sequence[Any], num_generations: int | None = None) -> list[slice]:
    """Slices of consecutive completions that answer the same prompt (GRPO groups).

    TRL's ``RepeatSampler`` puts the ``num_generations`` completions of one prompt next to
    each other. A run of equal prompts longer than ``num_generations`` (the same prompt
    drawn twice) is cut into chunks of ``num_generations``.

    Args:
        prompts: ``(n,)`` prompts.
        num_generations: Group size, or ``None`` to use runs of equal prompts as they are.

    Returns:
        Slices covering ``range(n)`` in order.

    >>> group_slices(["a", "a", "b", "b", "b", "b"], 2)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 6, None)]
    """
    keys = [
        p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str) for p in prompts
    ]
    slices: list[slice] = []
    start = 0
    for _, run in itertools.groupby(keys):
        length = len(list(run))
        step = num_generations if num_generations and num_generations > 0 else length
        for s in range(start, start + length, step):
            slices.append(slice(s, min(s + step, start + length)))
        start += length
    return slices


def check_prompt_settings(reward: Any, verifier: Any) -> None:
    """Refuse a reward and a verifier configuration that contradict each other on the prompt.

    ``reward.reference_prompt=answer_match`` grades the extracted final answer against the
    reference under its own criterion; ``verifier.criteria`` beside it used to switch the prompt
    to the anchored one without a word (issue 28 item 7).

    Args:
        reward: a :class:`~densereward.rewards.RewardConfig`.
        verifier: a :class:`~densereward.config.VerifierConfig`.

    Raises:
        ConfigError: naming both fields and the two ways out.
    """
    uses_verifier = reward.kind.uses_verifier or reward.track
    if (
        uses_verifier
        and reward.reference_guided
        and reward.reference_prompt in ("answer_match", "process")
        and verifier.criteria is not None
    ):
        raise ConfigError(
            f"reward.reference_prompt={reward.reference_prompt} reads with its own criterion (the "
            "final answer against the reference, or progress along the steps), but "
            f"verifier.criteria={verifier.criteria!r} is set: drop "
            "verifier.criteria, or set reward.reference_prompt=anchored to grade the full "
            "solution on those criteria"
        )


def check_verifier_options(
    *,
    reference_guided: bool,
    reference_prompt: str,
    injection_penalty: float | None,
    guard_prompt: bool,
    verifier_input: str,
    prefix: str = "",
) -> None:
    """Validate what the dense / group verifier reward shows and how it is defended.

    The one check of these options, run by :class:`~densereward.rewards.RewardConfig` (YAML
    ``reward:``, ``prefix="reward."``) and by the reward classes themselves (built directly).

    Args:
        reference_guided: show the verifier the reference answer.
        reference_prompt: ``"anchored"``, ``"answer_match"`` or ``"process"``.
        injection_penalty: in ``[0, 1]``, or ``None`` (no pre-filter).
        guard_prompt: end the criterion with the manipulation warning; needs the response in
            the prompt, so not with a reference-guided ``answer_match`` prompt.
        verifier_input: ``"final_answer"`` or ``"full"``.
        prefix: prepended to the field names in the messages.

    Raises:
        ConfigError: naming the field and the fix.
    """
    if reference_prompt not in ("anchored", "answer_match", "process"):
        raise ConfigError(
            f"{prefix}reference_prompt={reference_prompt!r}; use anchored | answer_match | process"
        )
    if guard_prompt and reference_guided and reference_prompt == "answer_match":
        raise ConfigError(
            f"{prefix}guard_prompt needs the response in the verifier prompt (answer_match shows "
            f"only the extracted final answer): set {prefix}reference_prompt=anchored or turn "
            f"{prefix}reference_guided off"
        )
    if injection_penalty is not None and not 0.0 <= injection_penalty <= 1.0:
        raise ConfigError(
            f"{prefix}injection_penalty must be in [0, 1] (or null to turn the pre-filter off), "
            f"got {injection_penalty}"
        )
    if verifier_input not in ("final_answer", "full"):
        raise ConfigError(f"{prefix}verifier_input={verifier_input!r}; use final_answer | full")


def check_group_options(
    *, method: str, pivots: int, prefix: str = "", method_field: str = "method"
) -> None:
    """Validate the group reward's comparison schedule (``RewardConfig`` and the reward class).

    Args:
        method: ``"ppt"`` or ``"round_robin"``.
        pivots: PPT pivots per candidate, ``>= 1``.
        prefix: prepended to the field names in the messages (``"reward."``).
        method_field: the name of the method field (``group_method`` in ``RewardConfig``).

    Raises:
        ConfigError: for a method other than ``ppt`` / ``round_robin`` or ``pivots < 1``.
    """
    if method not in ("ppt", "round_robin"):
        raise ConfigError(f"{prefix}{method_field}={method!r}; use ppt | round_robin")
    if pivots < 1:
        raise ConfigError(f"{prefix}pivots must be >= 1, got {pivots}")
