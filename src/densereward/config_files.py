"""Config files: YAML loading, dotted ``key=value`` overrides and typed dataclass sections.

The machinery every command shares (``train grpo``, ``train sac``, ``compare``, ``serve``,
``score``, ``eval-verifier``, ``eval-progress``, ``distill``): :func:`load_yaml` reads a file,
:func:`apply_overrides` applies the command line's overrides (:func:`add_override_arguments`,
:func:`overrides_from`), and :func:`from_dict` builds a section's dataclass, refusing unknown
keys with the closest valid names and coercing values to the fields' types. The verifier's own
settings (:class:`~densereward.config.VerifierConfig`) live in :mod:`densereward.config`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .backend_options import DEFAULT_BACKEND, options_class
from .errors import ConfigError, DenseRewardError
from .sections import field_names, unknown_key_hints

__all__ = [
    "from_dict",
    "load_yaml",
    "apply_overrides",
    "parse_override",
    "add_override_arguments",
    "overrides_from",
    "parse_command_line",
]


def _coerce(tp: Any, value: Any, name: str) -> Any:
    """Coerce a YAML/CLI value to a dataclass field type (shallow, for common types)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if value is None:
        return None
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        for a in non_none:
            try:
                return _coerce(a, value, name)
            except (ConfigError, TypeError, ValueError) as exc:
                error = exc
        if non_none and all(a in (int, float, bool, str) for a in non_none):
            raise error  # ``int | None`` given 10.5, ``str | None`` a mapping: refused, not passed on
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        return from_dict(tp, value, prefix=f"{name}.")
    if tp is bool:
        if isinstance(value, str):
            if value.lower() in ("true", "1", "yes"):
                return True
            if value.lower() in ("false", "0", "no"):
                return False
            raise ConfigError(f"{name}: expected a boolean, got {value!r}")
        return bool(value)
    if tp in (int, float):
        fraction = tp is int and isinstance(value, float) and not value.is_integer()
        if isinstance(value, bool) or fraction:  # int(True) == 1, int(10.5) == 10: never silently
            raise ConfigError(f"{name}: expected {tp.__name__}, got {value!r}")
        try:
            return tp(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}: expected {tp.__name__}, got {value!r}") from None
    if tp is str:
        if isinstance(value, (Mapping, list, tuple)):  # str() would hand on its repr as the text
            kind = "a mapping" if isinstance(value, Mapping) else "a list"
            raise ConfigError(
                f"{name}: expected text, got {kind} {value!r}; put text that holds ': ' or "
                "starts with '- ' in quotes"
            )
        return str(value)
    return value


def from_dict(cls: type, data: Mapping[str, Any] | None, *, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping; unknown keys raise :class:`ConfigError`.

    ``prefix`` (e.g. ``"verifier."``) names the section in messages and coercion errors.
    """
    if data is not None and not isinstance(data, Mapping):
        where = f"section {prefix.rstrip('.')!r}" if prefix else cls.__name__
        raise ConfigError(
            f"{where} must be a mapping of field: value, got {type(data).__name__} {data!r}"
        )
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"section {prefix.rstrip('.')!r}" if prefix else f"the config ({cls.__name__})"
        refuse = getattr(cls, "refuse_unknown_keys", None)
        if refuse is not None:  # a section's own message (VerifierConfig: options that moved)
            refuse(unknown, prefix, names)
        hint = unknown_key_hints(unknown, names)
        raise ConfigError(f"unknown key(s) in {where}: {hint}")
    kwargs = {k: _coerce(hints[k], v, f"{prefix}{k}") for k, v in data.items()}
    return cls(**kwargs)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict (empty file -> ``{}``).

    Raises:
        ConfigError: if the file is missing, is not valid YAML (naming the file, line and
            column) or is not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping, got {type(data).__name__}")
    return data


_YAML11_BOOL_WORDS = {"yes", "no", "on", "off", "y", "n"}


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` into (``['a','b','c']``, the value).

    The value is read as YAML where it is a YAML scalar (``10`` an int, ``1e-6`` a float,
    ``true``/``false``/``null``), flow collection (``{k: v}``, ``[1, 2]``) or quoted text
    (``'...'``, ``"..."``). Any other value stays the text written, stripped of surrounding
    blanks: YAML would read ``Goal: x`` as a mapping, ``- x`` as a list, ``x # y`` as ``x``
    and ``10:30`` as 630, and refuse ``*x``; free text (``env.task``, ``data.system_prompt``)
    holds such things. Text that starts with ``{`` or ``[`` goes in quotes. YAML 1.1's
    ``yes/no/on/off`` stay strings (TRL has ``save_strategy=no``); use ``true``/``false`` for
    booleans.

    Raises:
        ConfigError: without ``=``, or for a value in flow form that is not valid YAML
            (``a=[1, 2``), naming the override and the problem.

    >>> parse_override("verifier.granularity=10")
    (['verifier', 'granularity'], 10)
    >>> parse_override("training.learning_rate=1e-6")
    (['training', 'learning_rate'], 1e-06)
    >>> parse_override("training.save_strategy=no"), parse_override("x.flag=true")
    ((['training', 'save_strategy'], 'no'), (['x', 'flag'], True))
    >>> parse_override("env.task=Goal: reach x >= 0.5")
    (['env', 'task'], 'Goal: reach x >= 0.5')
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key=value (e.g. training.max_steps=5)")
    key, raw = text.split("=", 1)
    value = _override_value(text, raw)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value) if any(c in value for c in "eE.") else value
    return key.strip().split("."), value


_YAML_COMMENT = re.compile(r"(^|\s)#")


def _override_value(text: str, raw: str) -> Any:
    """The value of override ``text`` (its part after ``=``, ``raw``): see :func:`parse_override`."""
    written = raw.strip()
    if written == "" or written.lower() in _YAML11_BOOL_WORDS:
        return written  # 'no' stays a string (e.g. training.save_strategy=no)
    flow, quoted = written[0] in "{[", written[0] in "\"'"
    if not (flow or quoted) and _YAML_COMMENT.search(written):
        return written  # YAML would cut the text at ' #'
    try:
        value = yaml.safe_load(written)
    except yaml.YAMLError as e:
        if not flow:
            return written  # text YAML cannot read (*x, a: b: c, @x, 'a' b) is text
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(
            f"override {text!r}: not valid YAML ({problem}); close the brackets, or put text "
            "that starts with '{' or '[' in quotes"
        ) from None
    if flow or (quoted and isinstance(value, str)):
        return value
    if isinstance(value, (dict, list, str)):
        return written  # block forms: 'Goal: x' is text, not {'Goal': 'x'}; no line folding
    if not quoted and isinstance(value, (int, float)) and not isinstance(value, bool):
        return written if ":" in written else value  # YAML 1.1 sexagesimal: 10:30 is not 630
    return value


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key=value`` overrides (dotted keys) to a nested config dict, in place.

    An override that switches ``verifier.backend`` drops the file's ``verifier.backend_options``
    the new backend does not take (a GRPO file's ``device`` and ``dtype`` under
    ``verifier.backend=openai``), with one warning naming them; options set by an override are
    kept (the config refuses them if the backend does not take them).

    >>> apply_overrides({"a": {"b": 1}}, ["a.b=2", "c=x"])
    {'a': {'b': 2}, 'c': 'x'}
    >>> apply_overrides({"verifier": {"backend_options": {"dtype": "float32"}}},
    ...                 ["verifier.backend=openai", "verifier.backend_options.base_url=http://h/v1"])
    {'verifier': {'backend_options': {'base_url': 'http://h/v1'}, 'backend': 'openai'}}
    """
    switched: dict[int, tuple[dict[str, Any], str]] = {}  # id -> (verifier section, old backend)
    given: set[tuple[int, str]] = set()  # (id of a verifier section, option set by an override)
    for text in overrides:
        keys, value = parse_override(text)
        node, parents = config, [config]
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {text!r}: {k!r} is not a section")
            node = nxt
            parents.append(node)
        if keys[-2:] == ["verifier", "backend"]:
            switched.setdefault(id(node), (node, node.get("backend", DEFAULT_BACKEND)))
        elif keys[-2:] == ["verifier", "backend_options"] and isinstance(value, dict):
            given.update((id(node), k) for k in value)
        elif keys[-3:-1] == ["verifier", "backend_options"]:
            given.add((id(parents[-2]), keys[-1]))
        node[keys[-1]] = value
    for key, (section, old) in switched.items():
        _drop_foreign_options(section, old, {k for i, k in given if i == key})
    return config


def _drop_foreign_options(section: dict[str, Any], old: str, given: set[str]) -> None:
    """Drop the options of ``section["backend_options"]`` that its new backend does not take and
    no override set (they were the file's, for backend ``old``), with one warning."""
    import logging

    new, options = section.get("backend", DEFAULT_BACKEND), section.get("backend_options")
    if new == old or not isinstance(options, dict):
        return
    try:
        takes = set(field_names(options_class(new)))
    except DenseRewardError:  # an unknown backend: the config names it with its did-you-mean
        return
    dropped = [k for k in options if k not in takes and k not in given]
    for k in dropped:
        del options[k]
    if dropped:
        logging.getLogger(__name__).warning(
            "verifier.backend=%s: dropped verifier.backend_options %s of the config (options "
            "of %r that %r does not take)",
            new,
            ", ".join(dropped),
            old,
            new,
        )


def add_override_arguments(parser: Any, example: str) -> None:
    """Add the one override syntax every ``densereward`` command accepts: bare positional
    ``section.field=value`` pairs and ``--set section.field=value ...`` (repeatable); read
    them back with :func:`overrides_from`."""
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help=f"dotted overrides, e.g. {example}"
    )
    parser.add_argument(
        "--set",
        dest="set_overrides",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="the same as positional overrides (repeatable)",
    )


def overrides_from(args: Any) -> list[str]:
    """The overrides of parsed arguments: positional ones first, then ``--set`` ones."""
    return list(getattr(args, "overrides", None) or []) + list(
        getattr(args, "set_overrides", None) or []
    )


_OVERRIDE = re.compile(r"^[A-Za-z_][\w.-]*=")
_OVERRIDE_HINT = "overrides look like section.key=value; use --set for values that start with '-'"


def _lift_overrides_out_of_lists(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[list[str], list[str]]:
    """Take the ``key=value`` tokens that follow a list option's values (``--seeds 0 1
    threshold=0.9``, ``--conditions sparse budget=100``) out of ``argv``: argparse would give
    them to the option (``invalid int value``, ``unknown condition``). ``--set``'s values stay.
    Returns ``(argv without them, them)``; they are overrides, after the others, in order."""
    lists: dict[str, bool] = {}  # option string -> takes a list (nargs + or *), not --set
    current, i = parser, 0
    while current is not None:
        nested = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                word = next((t for t in argv[i:] if t in action.choices), None)
                if word is not None:
                    i = argv.index(word, i) + 1
                    nested = action.choices[word]
            for option in action.option_strings:
                lists[option] = action.nargs in ("+", "*") and action.dest != "set_overrides"
        current = nested
    kept, moved, in_list = [], [], False
    for n, token in enumerate(argv):
        if token == "--":
            kept.extend(argv[n:])
            break
        if token.startswith("-"):
            in_list = lists.get(token, False)
        elif in_list and _OVERRIDE.match(token):
            moved.append(token)
            continue
        kept.append(token)
    return kept, moved


def parse_command_line(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse ``argv`` with ``key=value`` overrides allowed anywhere on the line.

    argparse's positional ``overrides`` (``nargs="*"``) cannot be split by options, so the
    overrides after an option come back unrecognised: those that look like a dotted override
    are appended, in order, to the command's overrides; any other leftover token (or an
    override given to a command that takes none) is argparse's own error, with a hint.
    """
    argv, moved = _lift_overrides_out_of_lists(parser, list(sys.argv[1:] if argv is None else argv))
    args, extras = parser.parse_known_args(argv)
    extras = [*extras, *moved]
    stray = [t for t in extras if not (_OVERRIDE.match(t) and hasattr(args, "overrides"))]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)} ({_OVERRIDE_HINT})")
    if extras:
        args.overrides = list(args.overrides or []) + extras
    return args
