"""What ``densereward compare`` needs of a trainer: a :class:`TrainerSpec`.

Each trainer declares its spec beside itself (``SAC_TRAINER`` in
:mod:`~densereward.trainers.sac_spec`, ``GRPO_TRAINER`` in
:mod:`~densereward.trainers.grpo_spec`); :data:`densereward.sample_efficiency.TRAINERS` names
them. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RegistryError

__all__ = ["Keys", "TrainerSpec", "set_key"]

Keys = tuple[str, ...]


@dataclass(frozen=True)
class TrainerSpec:
    """How a comparison drives one trainer: its run functions and the keys it sets per run.

    Example (a trainer of your own; ``densereward.sample_efficiency`` re-exports these)::

        register_trainer("mine", TrainerSpec(run=my_run, dry_run=my_dry_run,
                                             budget_key=("training", "steps")))
    """

    run: Callable[..., Mapping[str, Any]]
    """``run(config, *, output_dir) -> summary``: trains one run from its nested config dict
    (the base config with the condition's overrides, budget and seed set) in the run
    directory ``output_dir`` (a :class:`~pathlib.Path` that does not exist yet). The summary
    has ``"curve": [{"step", "value"}, ...]`` (steps in the budget's unit), ``"metric"`` (the
    curve's name) and optionally ``"final"``, ``"run_dir"``, ``"curve_source"``."""
    dry_run: Callable[..., Sequence[str]]
    """``dry_run(config, *, output_dir) -> lines``: validates a run config without training;
    one line per check, a problem the run would hit starts with ``"!! "``; a line starting
    ``"run directory:"`` is dropped (the directory is a scratch one)."""
    budget_key: Keys
    """Config key of a run's training budget, e.g. ``("training", "total_timesteps")``."""
    seed_key: Keys = ("training", "seed")
    """Config key of a run's seed."""
    x_label: str = "steps"
    """Unit of the budget and of the curves' steps, for the report and the plot."""
    reserved: tuple[Keys, ...] = ()
    """Further keys a condition may not override (e.g. the run directory); the budget and
    seed keys and the ``wandb:`` section are always reserved: every condition gets the same."""
    prepare: Callable[[dict[str, Any]], None] | None = None
    """``prepare(config)``: fits a condition's config to the comparison in place (e.g. drops a
    run directory of its own); ``None`` = as is. The comparison sets the ``wandb:`` section of
    every run itself (same keys for every trainer)."""
    validate: Callable[[dict[str, Any]], None] | None = None
    """``validate(config)``: the checks a run would fail at its start (the trainer's own
    config parser, data files, environment ids), raising ``ConfigError`` / ``DataError``;
    called for every condition before the first run. ``None`` = no check."""
    run_dir_key: Keys | None = None
    """Config key of the run directory, e.g. ``("training", "output_dir")``: each run's
    ``result.json`` records its real directory (``<out>/runs/<condition>/seed<k>/...``) there,
    not the base file's value; ``None`` = the config recorded as built. Reserved like the
    budget key."""

    def __post_init__(self) -> None:
        if not callable(self.run) or not callable(self.dry_run):
            raise RegistryError("TrainerSpec needs callable run and dry_run functions")
        run_dir = (self.run_dir_key,) if self.run_dir_key is not None else ()
        for keys in (self.budget_key, self.seed_key, *self.reserved, *run_dir):
            if not keys or not all(isinstance(k, str) and k for k in keys):
                raise RegistryError(
                    f"TrainerSpec keys must be non-empty tuples of names, got {keys!r}"
                )
        every = [tuple(self.budget_key), tuple(self.seed_key), ("wandb",)]
        every += map(tuple, (*self.reserved, *run_dir))
        object.__setattr__(self, "reserved", tuple(dict.fromkeys(every)))


def set_key(config: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    node = config
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value
