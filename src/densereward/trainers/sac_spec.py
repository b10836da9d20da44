"""``densereward compare``'s spec of the SAC trainer (``TRAINERS["sac"]``), beside it.

:data:`SAC_TRAINER` drives :mod:`densereward.trainers.sac` (budget: environment steps); its functions import
the trainer (and with it SB3) only when called, so naming the spec imports nothing heavy.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .spec import TrainerSpec

__all__ = ["SAC_TRAINER"]


def _compare_run(config: dict[str, Any], *, output_dir: Path) -> dict[str, Any]:
    from . import sac

    return sac.run(config, output_dir=output_dir)


def _compare_dry_run(config: dict[str, Any], *, output_dir: Path) -> list[str]:
    from . import sac

    return sac.dry_run(config, output_dir=output_dir)


def _compare_prepare(config: dict[str, Any]) -> None:
    config.get("training", {}).pop("run_name", None)


def _compare_validate(config: dict[str, Any]) -> None:
    from . import sac

    sac.env_spec(sac.parse_config(copy.deepcopy(config)).env.id)


SAC_TRAINER = TrainerSpec(
    run=_compare_run,
    dry_run=_compare_dry_run,
    budget_key=("training", "total_timesteps"),
    x_label="environment steps",
    reserved=(("training", "output_dir"), ("training", "run_name")),
    run_dir_key=("training", "output_dir"),
    prepare=_compare_prepare,
    validate=_compare_validate,
)
"""``trainer: sac``: :func:`densereward.trainers.sac.run` (budget: environment steps)."""
