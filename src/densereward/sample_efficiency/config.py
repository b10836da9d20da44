"""The comparison's configuration and its registry of trainers.

A trainer is registered as a :class:`TrainerSpec`: its ``run`` and ``dry_run`` functions and
the config keys a comparison sets for every run (budget, seed). The registry
(:data:`TRAINERS`, a :class:`~densereward.registry.Registry`) maps a comparison's
``trainer:`` to a ``"module:attr"`` naming a spec, imported on first use: the two built-in
specs live beside their trainers (``SAC_TRAINER`` in :mod:`densereward.trainers.sac_spec`,
``GRPO_TRAINER`` in :mod:`densereward.trainers.grpo_spec`) and hold small functions that
import :mod:`densereward.trainers.sac` / :mod:`densereward.trainers.grpo` (and with them SB3
or TRL) only when called.
:func:`register_trainer` adds one of your own at run time; a package adds one without
importing densereward through the entry-point group ``densereward.trainers``::

    [project.entry-points."densereward.trainers"]
    mine = "my_pkg.compare:SPEC"        # SPEC = TrainerSpec(run=..., dry_run=..., budget_key=...)
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config_files import apply_overrides, from_dict, load_yaml, parse_override
from ..errors import ConfigError, DataError, RegistryError
from ..io import to_jsonable
from ..registry import Registry, entry_point_group, instances_of
from ..sections import COMMAND_SECTIONS, refuse_other_command, unknown_key_hints
from ..trainers.spec import Keys, TrainerSpec, set_key
from ..wandb_config import WandbConfig

__all__ = [
    "TRAINERS",
    "CompareConfig",
    "CompareWandbConfig",
    "TrainerSpec",
    "add_run_settings",
    "build_run_configs",
    "describe_common",
    "fingerprint",
    "parse_compare_config",
    "register_trainer",
    "split_run_settings",
    "trainer_spec",
]

# --------------------------------------------------------------------------------------------
# Registry of trainers
# --------------------------------------------------------------------------------------------


def _get(config: Mapping[str, Any], keys: Sequence[str]) -> Any:
    node: Any = config
    for k in keys:
        if not isinstance(node, Mapping) or k not in node:
            return None
        node = node[k]
    return node


TRAINERS: Registry[TrainerSpec] = Registry(
    "compare trainer",
    group=entry_point_group("trainers"),
    builtins={  # each trainer's spec lives beside it
        "sac": "densereward.trainers.sac_spec:SAC_TRAINER",
        "grpo": "densereward.trainers.grpo_spec:GRPO_TRAINER",
    },
    check=instances_of(TrainerSpec, "compare trainer"),
)
"""The registry: trainer name (a comparison's ``trainer:``) -> :class:`TrainerSpec`. Add to it
with :func:`register_trainer` or the entry-point group ``densereward.trainers``; a comparison
may also be given a mapping ``{name: TrainerSpec}`` of its own (``trainers=``)."""

Trainers = Mapping[str, TrainerSpec] | Registry[TrainerSpec]
"""What ``trainers=`` takes: :data:`TRAINERS` (the default), another registry or a mapping."""


def register_trainer(name: str, spec: TrainerSpec) -> TrainerSpec:
    """Register ``spec`` under ``name`` (a comparison's ``trainer: name``).

    Args:
        name: a non-empty string.
        spec: the trainer's :class:`TrainerSpec`.

    Returns:
        ``spec``.

    Raises:
        RegistryError: if ``name`` is taken by a different spec (names are never overwritten,
            built-in or not; registering the same spec again is a no-op), or if ``name`` or
            ``spec`` is malformed.
    """
    if not isinstance(name, str) or not name.strip():
        raise RegistryError(f"a trainer name must be a non-empty string, got {name!r}")
    if not isinstance(spec, TrainerSpec):
        raise RegistryError(f"register_trainer needs a TrainerSpec, got {type(spec).__name__}")
    return TRAINERS.register(name, spec)


def trainer_spec(name: str, trainers: Trainers = TRAINERS) -> TrainerSpec:
    """The spec of trainer ``name`` (imports a ``"module:attr"`` entry on first use).

    Args:
        name: a comparison's ``trainer:``.
        trainers: a registry (default :data:`TRAINERS`) or a mapping ``{name: TrainerSpec}``.

    Raises:
        ConfigError: for a name not registered (listing the names, with a did-you-mean), an
            entry that cannot be imported, or one that is not a :class:`TrainerSpec`.
    """
    registry = (
        trainers
        if isinstance(trainers, Registry)
        else Registry("compare trainer", group=None, builtins=dict(trainers))
    )
    try:
        spec = registry.load(name)
    except ConfigError as e:
        raise ConfigError(f"trainer: {e}") from None
    if not isinstance(spec, TrainerSpec):
        raise ConfigError(
            f"trainer {name!r} ({registry.entry(name)!r}) is a {type(spec).__name__}, not a "
            "densereward.sample_efficiency.TrainerSpec"
        )
    return spec


# --------------------------------------------------------------------------------------------
# Comparison config
# --------------------------------------------------------------------------------------------


CompareWandbConfig = WandbConfig
"""The comparison's ``wandb:`` section is the one every command reads (kept importable under
its earlier name)."""


@dataclass(frozen=True)
class CompareConfig:
    """A sparse-vs-dense comparison (YAML ``configs/compare_*.yaml``)."""

    trainer: str
    """The trainer every run goes through, a name in the registry (:data:`TRAINERS`):
    ``sac`` (densereward.trainers.sac), ``grpo`` (densereward.trainers.grpo) or one added
    with :func:`register_trainer`."""
    conditions: dict[str, Any]
    """Condition name -> overrides of the base config: a list of dotted ``key=value`` strings, a
    nested mapping merged into the base, or ``null`` / ``{}`` for the base itself."""
    base: Any = None
    """The train config every condition starts from: a YAML path (relative to the working
    directory or to the comparison config) or an inline mapping."""
    name: str | None = None
    """Name of the comparison (report title, default W&B group); ``None`` = the config file's stem."""
    common: Any = None
    """Overrides applied to every condition before its own (same forms as a condition)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds S; every condition runs every seed (``training.seed``)."""
    budget: int | None = None
    """Training budget of every run: ``training.total_timesteps`` (SAC, environment steps) or
    ``training.max_steps`` (GRPO, optimizer steps); ``None`` = the base config's value."""
    threshold: float | None = None
    """Performance level for steps-to-threshold (e.g. success rate 0.8); ``None`` = not reported.
    Not applied, with the reason in the report, to curves that fell back to another metric
    (SAC's ``eval/mean_reward`` without is_success) unless ``metric`` names that metric."""
    metric: str | None = None
    """Label of the curve metric in the report; ``None`` = the trainer's (SAC: ``eval/success_rate``,
    or ``rollout/success_rate`` without evaluation episodes; GRPO:
    ``verifier/pass_rate``)."""
    output_dir: str | None = None
    """Output directory; ``None`` = ``runs/compare/<name>``."""
    final_window: int = 3
    """Final performance = mean of the last ``final_window`` points of a run's curve."""
    grid_points: int = 51
    """Points of the common step grid on ``[0, budget]`` (curve averaging, bands and AUC)."""
    n_bootstrap: int = 2000
    """Bootstrap replicates of every confidence interval."""
    confidence: float = 0.95
    """Coverage of the confidence intervals."""
    stats_seed: int = 0
    """Seed of the bootstrap (the report is reproducible from the result files)."""
    primary: Literal["auc", "final"] = "auc"
    """Score of the pairwise verdicts: ``auc`` (sample efficiency) or ``final`` (final performance)."""
    keep_checkpoints: bool = False
    """Keep each finished run's checkpoints (``checkpoint-*`` / ``checkpoints`` directories in
    its run directory). Off: they are deleted once the run's ``result.json`` is written (a CPU
    GRPO run's checkpoints took ~1.5 GB; a comparison of nine filled the disk); curves, logs,
    ``result.json`` and the W&B files stay. A run interrupted before it finished keeps its
    checkpoints until it is run again."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """W&B of every run (the keys of ``train grpo`` / ``train sac``'s ``wandb:`` section, which
    this one replaces in the base config): ``group`` ``None`` = the comparison's ``name``; each
    run is named after its run directory (``<condition>-seed<k>``), its job type is its
    condition."""

    @staticmethod
    def refuse_unknown_keys(unknown: list[str], prefix: str, names: set[str]) -> None:
        """:func:`~densereward.config_files.from_dict`'s hook: a section of a run's train config
        (``training``, ``sac``, ``verifier``, ...) given as a comparison key is sent to
        ``common:`` (its closest comparison key, ``trainer`` for ``training``, was no help).

        Raises:
            ConfigError: when ``unknown`` holds one of them (else returns).
        """
        run = [k for k in unknown if k in _RUN_SECTIONS]
        if not run:
            return
        rest = [k for k in unknown if k not in run]
        also = f"; {unknown_key_hints(rest, names)}" if rest else ""
        what = (
            "is a section of each run's train config, not a comparison key: put it"
            if len(run) == 1
            else "are sections of each run's train config, not comparison keys: put them"
        )
        raise ConfigError(
            f"unknown key(s) in the config (CompareConfig): {', '.join(map(repr, run))} {what} "
            f"under common: (every condition) or a condition, or give {run[0]}.FIELD=VALUE on "
            f"the command line{also}"
        )

    def __post_init__(self) -> None:
        if not isinstance(self.trainer, str) or not self.trainer:
            raise ConfigError(f"trainer={self.trainer!r}; use one of {TRAINERS.names()}")
        if self.base is not None and not isinstance(self.base, (str, Mapping)):
            raise ConfigError(
                f"base must be a config path or a mapping, got {type(self.base).__name__}"
            )
        if not isinstance(self.conditions, Mapping) or len(self.conditions) < 2:
            raise ConfigError("conditions must map at least two condition names to overrides")
        for cname, ov in self.conditions.items():
            if (
                not isinstance(cname, str)
                or not cname
                or any(c in cname for c in "/\\ ")
                or cname.startswith(".")
            ):
                raise ConfigError(
                    f"condition name {cname!r} must be a non-empty string without '/', '\\' or spaces"
                )
            _check_override_form(ov, f"conditions.{cname}")
        _check_override_form(self.common, "common")
        seeds = self.seeds if isinstance(self.seeds, (list, tuple)) else None
        if not seeds:
            raise ConfigError(f"seeds must be a non-empty list of integers, got {self.seeds!r}")
        try:
            clean = tuple(int(s) for s in seeds)
        except (TypeError, ValueError):
            raise ConfigError(f"seeds must be integers, got {self.seeds!r}") from None
        if len(set(clean)) != len(clean):
            raise ConfigError(f"seeds must be distinct, got {list(clean)}")
        object.__setattr__(self, "seeds", clean)
        if self.budget is not None and self.budget < 1:
            raise ConfigError(f"budget must be >= 1, got {self.budget}")
        if self.final_window < 1:
            raise ConfigError(f"final_window must be >= 1, got {self.final_window}")
        if self.grid_points < 2:
            raise ConfigError(f"grid_points must be >= 2, got {self.grid_points}")
        if self.n_bootstrap < 100:
            raise ConfigError(f"n_bootstrap must be >= 100, got {self.n_bootstrap}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.primary not in ("auc", "final"):
            raise ConfigError(f"primary={self.primary!r}; use auc | final")


_RUN_SECTIONS = frozenset(
    {*COMMAND_SECTIONS["train grpo"][0], *COMMAND_SECTIONS["train sac"][0]}
    | {"reward", "verifier", "training"}
)
"""Top-level sections of ``train grpo`` and ``train sac`` configs that a comparison does not
have (its ``wandb:`` is its own)."""


def _check_override_form(ov: Any, where: str) -> None:
    if ov is None or isinstance(ov, Mapping):
        return
    if isinstance(ov, (list, tuple)) and all(isinstance(x, str) for x in ov):
        for x in ov:
            parse_override(x)  # raises ConfigError on a malformed entry
        return
    if isinstance(ov, (list, tuple)) and (bad := [x for x in ov if isinstance(x, Mapping)]):
        key, value = next(iter(bad[0].items()), ("key=value", ""))
        raise ConfigError(
            f"{where}: the entry {bad[0]!r} is a YAML mapping, not a key=value string: a value "
            f"with ': ' in it must be quoted, e.g. - \"{key}: {value}\""
        )
    raise ConfigError(f"{where} must be a list of key=value strings or a mapping, got {ov!r}")


def run_wandb(cfg: CompareConfig) -> dict[str, Any]:
    """The ``wandb:`` section every run of ``cfg`` gets: the comparison's own, its group
    defaulting to the comparison's name, no name (each run is named after its run directory).

    >>> cfg = parse_compare_config({"trainer": "sac", "conditions": {"a": [], "b": []}}, name="x")
    >>> run_wandb(cfg)["group"], run_wandb(cfg)["name"]
    ('x', None)
    """
    w = dataclasses.replace(cfg.wandb, group=cfg.wandb.group or cfg.name, name=None)
    return {**dataclasses.asdict(w), "tags": list(w.tags)}


def parse_compare_config(
    config: Mapping[str, Any],
    *,
    name: str | None = None,
    trainers: Trainers = TRAINERS,
) -> CompareConfig:
    """Validate a comparison config mapping into :class:`CompareConfig`.

    Args:
        config: the YAML mapping (see :mod:`densereward.sample_efficiency`).
        name: default comparison name (e.g. the config file's stem) when ``name`` is not set.
        trainers: the registry ``trainer:`` is looked up in (default :data:`TRAINERS`).

    Raises:
        ConfigError: on unknown keys or invalid values, or a trainer not in ``trainers``.
    """
    data = dict(config)
    refuse_other_command(data, "compare")  # a train grpo / train sac file given to compare
    for required in ("trainer", "conditions"):
        if required not in data:
            raise ConfigError(f"comparison config needs {required!r}")
    data["wandb"] = WandbConfig.from_section(data.get("wandb"))
    cfg = from_dict(CompareConfig, data)
    trainer_spec(cfg.trainer, trainers)
    if cfg.name is None:
        cfg = dataclasses.replace(cfg, name=name or "compare")
    return cfg


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = copy.deepcopy(dict(v) if isinstance(v, Mapping) else v)
    return base


def _override_keys(ov: Any) -> list[Keys]:
    if ov is None:
        return []
    if isinstance(ov, Mapping):
        out = []
        for k, v in ov.items():
            if isinstance(v, Mapping) and v:
                out += [(str(k), *sub) for sub in _override_keys(v)]
            else:
                out.append((str(k),))
        return out
    return [tuple(parse_override(x)[0]) for x in ov]


def _related(a: Keys, b: Keys) -> bool:
    """Whether setting key ``a`` and setting key ``b`` touch the same value (one is the other
    or a section above it)."""
    n = min(len(a), len(b))
    return tuple(a[:n]) == tuple(b[:n])


def split_run_settings(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``densereward compare``'s command-line overrides into the comparison's own and the
    run settings.

    A run setting is a dotted ``section.field=value`` whose section is not a
    :class:`CompareConfig` field (``training.eval_every=250``, ``sac.learning_rate=1e-3``); a
    bare key (``threshold=0.9``) or one under a comparison field (``wandb.group=x``,
    ``conditions.sparse=[...]``, ``base.reward.rate=1`` of an inline base mapping) is the
    comparison's.

    Returns:
        ``(comparison overrides, run settings)``, each in the order given.

    Raises:
        ConfigError: for an override without ``=``.

    >>> split_run_settings(["threshold=0.9", "training.eval_every=250", "wandb.group=g"])
    (['threshold=0.9', 'wandb.group=g'], ['training.eval_every=250'])
    """
    own = {f.name for f in dataclasses.fields(CompareConfig)}
    comparison: list[str] = []
    run: list[str] = []
    for text in overrides:
        keys, _ = parse_override(text)
        (run if len(keys) > 1 and keys[0] not in own else comparison).append(text)
    return comparison, run


def add_run_settings(config: dict[str, Any], settings: Sequence[str]) -> dict[str, Any]:
    """Add run settings (``section.field=value`` of the train config) to ``config["common"]``
    after its entries, in place, so they apply to every condition and win over the file's
    ``common``: a list of strings is appended to, a mapping has them applied onto it
    (:func:`~densereward.config_files.apply_overrides`), none becomes the list.

    Returns:
        ``config``.

    Raises:
        ConfigError: when a condition of ``config`` sets a key a setting sets (the same key, or
            a section above or below it), since the condition's own value would win (it is
            applied after ``common``), naming the condition and the fix; or when ``common`` or
            a condition is malformed (as :func:`parse_compare_config` says).
    """
    if not settings:
        return config
    common = config.get("common")
    _check_override_form(common, "common")
    conditions = config.get("conditions")
    for cname, ov in conditions.items() if isinstance(conditions, Mapping) else ():
        _check_override_form(ov, f"conditions.{cname}")
        theirs = _override_keys(ov)
        for text in settings:
            keys = tuple(parse_override(text)[0])
            clash = next((k for k in theirs if _related(keys, k)), None)
            if clash is not None:
                raise ConfigError(
                    f"{text}: condition {cname!r} sets {'.'.join(clash)} itself, which would win "
                    f"over the command line's value; change it in the config's conditions.{cname} "
                    "(or leave the condition out with --conditions)"
                )
    if common is None:
        config["common"] = list(settings)
    elif isinstance(common, Mapping):
        config["common"] = apply_overrides(copy.deepcopy(dict(common)), list(settings))
    else:
        config["common"] = [*common, *settings]
    return config


def describe_common(common: Any, given: Sequence[str] = ()) -> str:
    """The dry run's line of ``common``: every entry in order, ``given`` (the command line's
    run settings, added last by :func:`add_run_settings`) marked ``(command line)``.

    >>> describe_common(["sac.tau=0.01", "training.eval_every=250"], ["training.eval_every=250"])
    'common (every condition, before its own): sac.tau=0.01, training.eval_every=250 (command line)'
    >>> describe_common({"training": {"eval_every": 250}, "sac": {"tau": 0.01}}, ["sac.tau=0.01"])
    'common (every condition, before its own): training.eval_every=250, sac.tau=0.01 (command line)'
    """
    head = "common (every condition, before its own): "
    if not common:
        return head + "none"
    if isinstance(common, Mapping):
        marked = [tuple(parse_override(g)[0]) for g in given]
        entries = []
        for keys in _override_keys(common):
            value = _get(common, keys)
            text = value if isinstance(value, str) else json.dumps(to_jsonable(value))
            mine = any(keys[: len(m)] == m for m in marked)
            entries.append(f"{'.'.join(keys)}={text}" + (" (command line)" if mine else ""))
        return head + ", ".join(entries)
    entries = [str(x) for x in common]
    n_given = len(given) if list(given) == entries[len(entries) - len(given) :] else 0
    for i in range(len(entries) - n_given, len(entries)):
        entries[i] += " (command line)"
    return head + ", ".join(entries)


def _apply(config: dict[str, Any], ov: Any) -> dict[str, Any]:
    if ov is None:
        return config
    if isinstance(ov, Mapping):
        return _deep_merge(config, ov)
    return apply_overrides(config, list(ov))


def _load_base(base: Any, base_dir: Path | None) -> dict[str, Any]:
    if base is None:
        return {}
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base))
    p = Path(base)
    candidates = [p] if p.is_absolute() else [Path.cwd() / p]
    if not p.is_absolute() and base_dir is not None:
        candidates += [base_dir / p, base_dir.parent / p]
    for c in candidates:
        if c.is_file():
            return load_yaml(c)
    raise ConfigError(
        f"base config {base!r} not found (looked in {', '.join(str(c.parent) for c in candidates)})"
    )


def build_run_configs(
    cfg: CompareConfig,
    *,
    base_dir: Path | None = None,
    trainers: Trainers = TRAINERS,
) -> dict[str, dict[str, dict[str, Any]]]:
    """The train config of every run: ``{condition: {f"seed{k}": config}}``.

    Each is the base config with ``common`` and then the condition's overrides applied, the
    budget and the seed set, and W&B grouping filled in (the trainer's ``prepare``), so every
    condition gets the same budget and seeds. The configs are validated by the trainer's
    ``validate`` (its own parser) before any run.

    Args:
        cfg: the comparison.
        base_dir: directory of the comparison config file (a relative ``base`` path is also
            looked up there and in its parent).
        trainers: the registry ``cfg.trainer`` is looked up in (default :data:`TRAINERS`).

    Raises:
        ConfigError: if a condition overrides the budget, the seed or the run directory, or a
            resulting config is invalid for the trainer.
        DataError: if a condition's data would not load (e.g. a missing local file).
    """
    spec = trainer_spec(cfg.trainer, trainers)
    base = _load_base(cfg.base, base_dir)
    _apply(base, copy.deepcopy(cfg.common))
    budget = cfg.budget if cfg.budget is not None else _get(base, spec.budget_key)
    if budget is None:
        raise ConfigError(f"set budget: (or {'.'.join(spec.budget_key)} in the base config)")
    wandb = run_wandb(cfg)
    for keys in _override_keys(cfg.common):  # named as common's (the file's or the command line's)
        if any(_related(keys, r) for r in spec.reserved):
            raise ConfigError(
                f"common: {'.'.join(keys)} is set by the comparison for every run: use its "
                "budget: / seeds: / wandb: / output_dir: (on the command line --budget, --seeds, "
                "wandb.KEY=VALUE, --output-dir)"
            )
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for cname, ov in cfg.conditions.items():
        for keys in _override_keys(ov):
            if any(_related(keys, r) for r in spec.reserved):
                raise ConfigError(
                    f"conditions.{cname}: {'.'.join(keys)} is set by the comparison for every run "
                    "(use the comparison's budget: / seeds: / wandb:); conditions must differ only in "
                    "their reward set-up"
                )
        cond_cfg = _apply(copy.deepcopy(base), copy.deepcopy(ov))
        set_key(cond_cfg, spec.budget_key, int(budget))
        cond_cfg["wandb"] = copy.deepcopy(wandb)  # the comparison's, for every trainer
        if spec.prepare is not None:
            spec.prepare(cond_cfg)
        if spec.validate is not None:
            try:
                spec.validate(cond_cfg)
            except (ConfigError, DataError) as exc:
                raise type(exc)(f"condition {cname!r}: {exc}") from None
        out[cname] = {}
        for seed in cfg.seeds:
            run_cfg = copy.deepcopy(cond_cfg)
            set_key(run_cfg, spec.seed_key, int(seed))
            out[cname][f"seed{seed}"] = run_cfg
    return out


def fingerprint(trainer: str, config: Mapping[str, Any]) -> str:
    """Stable hash of a run's trainer and config (detects a changed config on resume).

    Returns:
        16 hex digits of the SHA-256 of the JSON ``{"trainer", "config"}`` with sorted keys.
    """
    text = json.dumps({"trainer": trainer, "config": to_jsonable(config)}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
