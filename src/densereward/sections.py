"""The top-level sections of a config file: unknown keys named with their likely fix, and a
file of another command named as such.

``train grpo``, ``train sac`` and ``compare`` each read YAML of their own shape; a file given
to the wrong command is told which command it belongs to (:func:`other_command`), not picked
apart key by key (``train sac`` given a GRPO file suggested ``verifier.model`` for ``model``).
:mod:`densereward.config` re-exports :func:`check_sections`, :func:`field_names` and
:func:`unknown_key_hints`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

_POSITIVE = re.compile(
    r"(_length|_size|_interval|^num_generations|^num_iterations|_accumulation_steps"
    r"|^steps_per_generation|^total_timesteps)$"
)
"""Integer fields that count something (lengths, sizes, steps per ...): they must be >= 1.
Others with a positive default take 0 or -1 as a setting (SB3's ``learning_starts=0``,
``gradient_steps=-1``, a ``seed``)."""

__all__ = [
    "COMMAND_SECTIONS",
    "check_passthrough_values",
    "check_sections",
    "field_names",
    "other_command",
    "refuse_other_command",
    "unknown_key_hints",
    "unknown_section_hints",
]

COMMAND_SECTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "train grpo": (("model", "data", "heldout"), "configs/grpo_math_cpu.yaml"),
    "train sac": (("env", "sac", "her"), "configs/sac_fetchreach_verifier.yaml"),
    "compare": (
        ("trainer", "conditions", "base", "seeds", "budget"),
        "configs/compare_fetchreach.yaml",
    ),
}
"""Command -> (the top-level keys only its files have, a shipped example). ``reward``,
``verifier``, ``training`` and ``wandb`` are shared."""


def other_command(config: Mapping[str, Any], command: str) -> str | None:
    """The command whose file ``config`` is, when that is not ``command``, else ``None``.

    A file is another command's when it has top-level keys only that command's files have,
    and none of ``command``'s own (a stray key in a file of ``command`` stays a typo).

    >>> other_command({"model": {}, "data": {}, "verifier": {}}, "train sac")
    'train grpo'
    >>> other_command({"env": {}, "model": {}}, "train sac") is None
    True
    """
    if any(k in config for k in COMMAND_SECTIONS.get(command, ((), ""))[0]):
        return None
    for other, (keys, _) in COMMAND_SECTIONS.items():
        if other != command and any(k in config for k in keys):
            return other
    return None


def refuse_other_command(config: Mapping[str, Any], command: str) -> None:
    """Raise when ``config`` is another command's file (:func:`other_command`).

    Raises:
        ConfigError: "this is a `train grpo` config (it has model, data), not a `train sac`
            one: run `densereward train grpo --config FILE`, or give ..."
    """
    other = other_command(config, command)
    if other is None:
        return
    theirs = ", ".join(k for k in COMMAND_SECTIONS[other][0] if k in config)
    raise ConfigError(
        f"this is a `{other}` config (it has {theirs}), not a `{command}` one: run "
        f"`densereward {other} --config FILE`, or give `{command}` a config of its own (e.g. "
        f"{COMMAND_SECTIONS[command][1]})"
    )


def unknown_key_hints(
    unknown: Iterable[str], known: Iterable[str], *, prefix: str = "", sep: str = "; "
) -> str:
    """Quote each unknown key with its closest known key (``difflib``), for error messages.

    >>> unknown_key_hints(["budgte", "zzz"], ["budget", "seeds"])
    "'budgte' (did you mean 'budget'?); 'zzz'"
    >>> unknown_key_hints(["tua"], ["tau", "gamma"], prefix="sac.")
    "'sac.tua' (did you mean 'sac.tau'?)"
    """
    import difflib

    names = sorted(known)
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, names, n=1)
        hint = repr(f"{prefix}{k}")
        hints.append(hint + (f" (did you mean {f'{prefix}{close[0]}'!r}?)" if close else ""))
    return sep.join(hints)


def unknown_section_hints(unknown: Iterable[str], sections: Mapping[str, Iterable[str]]) -> str:
    """Quote each unknown top-level name with a hint: the closest section name, or the
    ``section.field`` it was probably meant as (a bare field name, or a close one).

    >>> secs = {"training": ["learning_rate", "max_steps"], "verifier": ["granularity"]}
    >>> unknown_section_hints(["trainng", "learning_rate", "granularty", "zzz"], secs)
    "'trainng' (did you mean 'training'?); 'learning_rate' (did you mean 'training.learning_rate'?); 'granularty' (did you mean 'verifier.granularity'?); 'zzz'"
    """
    import difflib

    dotted = {f"{s}.{f}": f for s, fs in sections.items() for f in fs}
    hints = []
    for name in unknown:
        exact = sorted(d for d, f in dotted.items() if f == name)
        close = difflib.get_close_matches(name, list(sections), n=1) or exact
        if not close:
            by_field = difflib.get_close_matches(name, sorted(set(dotted.values())), n=1)
            close = sorted(d for d, f in dotted.items() if by_field and f == by_field[0])
        hints.append(repr(name) + (f" (did you mean {close[0]!r}?)" if close else ""))
    return "; ".join(hints)


def field_names(cls: type) -> list[str]:
    """The init field names of dataclass ``cls`` (for :func:`check_sections`)."""
    return [f.name for f in dataclasses.fields(cls) if f.init]


def check_sections(
    config: Mapping[str, Any],
    sections: Mapping[str, Callable[[], Iterable[str]]],
    *,
    command: str | None = None,
) -> None:
    """Reject top-level keys of ``config`` that are not one of ``sections``.

    Args:
        config: The nested config (YAML plus ``section.field=value`` overrides).
        sections: Section name -> a function returning its field names (called only to
            build the error message, so an expensive one, e.g. ``trl.GRPOConfig``'s
            fields, costs nothing on valid configs).
        command: The command reading it (a key of :data:`COMMAND_SECTIONS`, e.g. ``"train
            sac"``): a file of another command is then named as such (:func:`other_command`).

    Raises:
        ConfigError: naming the command a file of another command belongs to, else each
            unknown key with its likely fix: a close section name (``trainng`` ->
            ``training``) or the section of a bare field (``learning_rate`` ->
            ``training.learning_rate``).
    """
    unknown = sorted(set(config) - set(sections))
    if unknown and command is not None:
        refuse_other_command(config, command)
    if unknown:
        hints = unknown_section_hints(unknown, {s: list(f()) for s, f in sections.items()})
        raise ConfigError(
            f"unknown section(s) {hints}; the sections are {', '.join(sections)} "
            "(set a field as section.field=value)"
        )


def _scalar_kinds(annotation: Any) -> set[type]:
    """The ones of ``int``, ``float``, ``str``, ``bool`` a type hint names (in a union too)."""
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    return {a for a in args if a in (int, float, str, bool)}


def check_passthrough_values(
    values: Mapping[str, Any],
    hints: Mapping[str, Any],
    *,
    prefix: str,
    owner: str,
    ranges: Mapping[str, tuple[float | None, float | None]] = {},  # noqa: B006
) -> dict[str, Any]:
    """Check the values of a section passed through to a library class (``training:`` to
    ``trl.GRPOConfig``, ``sac:`` to ``stable_baselines3.SAC``) against its type hints, so that a
    dry run refuses what the run would only fail on minutes later inside the library.

    A field typed ``float`` takes a finite number (a numeric string such as ``"1e-5"``, which
    YAML 1.1 leaves a string, becomes a float; ``nan``, ``inf`` and ``"abc"`` are refused, also
    where the field takes a string too, as SB3's ``ent_coef``); one typed ``int`` (not
    ``float``) takes an integer, >= 1 for the counts :data:`_POSITIVE` names; ``ranges`` bound
    others (``gamma`` in [0, 1]). A field whose hint names other types (a callable, an enum, a
    tuple) and no ``str`` still refuses a string it cannot read as a number; ``None`` and the
    other types (a list, a mapping) pass to the library unchanged.

    Args:
        values: The section's keys and values (already checked to be fields of ``owner``).
        hints: Field name -> type hint (``typing.get_type_hints`` of the class or ``__init__``).
        prefix: The section, for the messages (``"training."``).
        owner: The class the values go to, for the messages (``"trl.GRPOConfig"``).
        ranges: Field name -> inclusive ``(low, high)`` (``None`` = unbounded).

    Returns:
        ``values`` with numeric strings of numeric fields converted.

    Raises:
        ConfigError: one line naming the key, the value and what it must be.

    >>> check_passthrough_values({"lr": "1e-5", "n": 3}, {"lr": float, "n": int},
    ...                          prefix="t.", owner="X")
    {'lr': 1e-05, 'n': 3}
    >>> check_passthrough_values({"lr": "nan"}, {"lr": float}, prefix="t.", owner="X")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: t.lr='nan': X takes a finite number here (got NaN/inf)
    """
    out = dict(values)
    for key, value in values.items():
        if key not in hints or value is None:
            continue
        kinds = _scalar_kinds(hints[key])
        numeric = kinds & {int, float}
        if not numeric:
            continue
        want = "a finite number" if float in kinds else "an integer"
        name = f"{prefix}{key}={value!r}"
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                if str in kinds:
                    continue
                raise ConfigError(f"{name}: {owner} takes {want} here") from None
            if not math.isfinite(number):
                raise ConfigError(f"{name}: {owner} takes {want} here (got NaN/inf)")
            if str in kinds:
                continue
            value = number
        if isinstance(value, bool) and bool not in kinds:
            raise ConfigError(f"{name}: {owner} takes {want} here, not true/false")
        if not isinstance(value, int | float):
            continue  # a list, a mapping: the hint's other types
        if not math.isfinite(value):
            raise ConfigError(f"{name}: {owner} takes {want} here (got NaN/inf)")
        if float not in kinds:
            if value != int(value):
                raise ConfigError(f"{name}: {owner} takes {want} here")
            value = int(value)
            if _POSITIVE.search(key) and value < 1:
                raise ConfigError(f"{name}: {owner} takes an integer >= 1 here")
        low, high = ranges.get(key, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
            raise ConfigError(f"{name}: {owner} takes {want} {bounds} here")
        out[key] = value
    return out
