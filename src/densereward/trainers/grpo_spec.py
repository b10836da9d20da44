"""``densereward compare``'s spec of the GRPO trainer (``TRAINERS["grpo"]``), beside it.

:data:`GRPO_TRAINER` drives :mod:`densereward.trainers.grpo` (budget: optimizer steps); its functions import
the trainer (and with it TRL) only when called, so naming the spec imports nothing heavy.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .spec import TrainerSpec

__all__ = ["GRPO_TRAINER"]


def _compare_run(config: dict[str, Any], *, output_dir: Path) -> dict[str, Any]:
    from . import grpo

    return grpo.run(config, output_dir=output_dir)


def _compare_dry_run(config: dict[str, Any], *, output_dir: Path) -> list[str]:
    from . import grpo

    return grpo.dry_run(config, output_dir=output_dir)


def _compare_prepare(config: dict[str, Any]) -> None:
    config.get("training", {}).pop("output_dir", None)


def _compare_validate(config: dict[str, Any]) -> None:
    from ..data import check_source
    from . import grpo

    check_source(grpo.resolve_config(copy.deepcopy(config))["data"])


GRPO_TRAINER = TrainerSpec(
    run=_compare_run,
    dry_run=_compare_dry_run,
    budget_key=("training", "max_steps"),
    x_label="GRPO steps",
    reserved=(("training", "output_dir"),),
    run_dir_key=("training", "output_dir"),
    prepare=_compare_prepare,
    validate=_compare_validate,
)
"""``trainer: grpo``: :func:`densereward.trainers.grpo.run` (budget: optimizer steps)."""
