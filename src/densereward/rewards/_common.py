"""Helpers shared by the reward functions: completion text, problem text, groups, lengths."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["completion_texts", "prompt_texts", "check_lengths", "group_slices"]


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
        ValueError: naming the column and both lengths.
    """
    n = len(completions)
    for name, col in columns.items():
        if col is not None and len(col) != n:
            raise ValueError(
                f"length mismatch: {len(col)} values in {name!r} but {n} completions; a reward "
                "function needs exactly one value per completion"
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
