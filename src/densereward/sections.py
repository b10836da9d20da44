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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = [
    "COMMAND_SECTIONS",
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
``verifier`` and ``training`` are shared; ``wandb`` is in GRPO and comparison files."""


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
