"""``densereward eval-progress``: can a verifier read robot task progress?

Rolls out scripted Fetch episodes that succeed and fail from the same initial states, reads
progress along them with a verifier in one of three read modes, and reports the Value-Order
Correlation on successful episodes, the AUROC of the final read (successful vs failed) and the
rank correlation of progress with the true closeness (:mod:`.core`). Outputs: ``scores.jsonl``
(one row per read), ``metrics.json``, ``report.md``, ``progress.png`` (:mod:`.cli`).

    densereward eval-progress --config configs/eval_progress_fetchreach.yaml --episodes 6 --seed 7 --out runs/ep
"""

from .cli import EXIT_MOST_ABSTAINED, add_arguments, main
from .core import (
    COMPLETE_CRITERION,
    PAIR_CRITERION,
    READ_MODES,
    TEXT_FORMS,
    Episode,
    EvalProgressConfig,
    progress_metrics,
    read_progress,
    rollouts,
)
from .policies import POLICY_KINDS, make_policy

__all__ = [
    "EXIT_MOST_ABSTAINED",
    "add_arguments",
    "main",
    "COMPLETE_CRITERION",
    "PAIR_CRITERION",
    "READ_MODES",
    "TEXT_FORMS",
    "Episode",
    "EvalProgressConfig",
    "progress_metrics",
    "read_progress",
    "rollouts",
    "POLICY_KINDS",
    "make_policy",
]
