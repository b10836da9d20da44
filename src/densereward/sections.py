"""The top-level sections of a config file and their keys: unknown names quoted with their
likely fix (a close name, or the section of a bare field name).

Moved out of :mod:`densereward.config` (which re-exports :func:`check_sections`,
:func:`field_names` and :func:`unknown_key_hints`), so both stay under 600 lines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["check_sections", "field_names", "unknown_key_hints", "unknown_section_hints"]


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
    config: Mapping[str, Any], sections: Mapping[str, Callable[[], Iterable[str]]]
) -> None:
    """Reject top-level keys of ``config`` that are not one of ``sections``.

    Args:
        config: The nested config (YAML plus ``section.field=value`` overrides).
        sections: Section name -> a function returning its field names (called only to
            build the error message, so an expensive one, e.g. ``trl.GRPOConfig``'s
            fields, costs nothing on valid configs).

    Raises:
        ConfigError: naming each unknown key with its likely fix: a close section name
            (``trainng`` -> ``training``) or the section of a bare field
            (``learning_rate`` -> ``training.learning_rate``).
    """
    unknown = sorted(set(config) - set(sections))
    if unknown:
        hints = unknown_section_hints(unknown, {s: list(f()) for s, f in sections.items()})
        raise ConfigError(
            f"unknown section(s) {hints}; the sections are {', '.join(sections)} "
            "(set a field as section.field=value)"
        )
